/* ctl_mount.c - a treelockfs mount as treelockctl's fs-index commands find
 * it: its options, its backing directory, its fs index, and the walk of
 * its tree
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_opt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/escape.h"
#include "base/log.h"
#include "base/mountchain.h"
#include "base/path.h"
#include "config/config.h"
#include "ctl/ctl_i.h"
#include "es/es_fsctl.h"
#include "es/es_store.h"

#define TREELOCKFS_FSTYPE "fuse.treelockfs"

int64_t ctl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

const char *ctl_rel(const char *key)
{
	return path_rel(key);
}

/* The source (fsname) of the last treelockfs mount at REAL, or NULL. */
static char *mount_source(const char *real)
{
	char *line = NULL, *res = NULL;
	size_t cap = 0;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return NULL;
	while (getline(&line, &cap, f) > 0) {
		char *dash = strstr(line, " - "), *save = NULL, *mnt, *type, *src;
		int i;

		if (!dash)
			continue;
		*dash = '\0';
		mnt = strtok_r(line, " ", &save);
		for (i = 0; i < 4 && mnt; i++)
			mnt = strtok_r(NULL, " ", &save);
		save = NULL;
		type = strtok_r(dash + 3, " ", &save);
		src = strtok_r(NULL, " \n", &save);
		if (!mnt || !type || !src || strcmp(mountchain_unescape(mnt), real) != 0 ||
		    strcmp(type, TREELOCKFS_FSTYPE) != 0)
			continue;
		free(res);
		res = strdup(mountchain_unescape(src));
	}
	free(line);
	fclose(f);
	return res;
}

/* Reads the file NAME of .treelockfs below ROOTFD whole, or NULL. */
static char *read_ctl_file(int rootfd, const char *name)
{
	char path[64], chunk[4096];
	struct buf b = BUF_INIT;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), ".treelockfs/%s", name);
	fd = openat(rootfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1)
		return NULL;
	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		buf_add(&b, chunk, (size_t)n);
	close(fd);
	buf_add(&b, "", 0);
	if (n < 0) {
		buf_free(&b);
		return NULL;
	}
	if (!b.data)
		return strdup("");
	return buf_detach(&b, NULL);
}

/* The backing directory of M when its device and inode are those the
 * mount shows as the first line of its chain and the caller may read it:
 * its O_PATH fd, or -1. */
static int backing_fd(struct ctl_mount *m)
{
	char *chain = read_ctl_file(m->rootfd, "backing");
	unsigned int maj, min;
	unsigned long long ino;
	struct stat st;
	int fd;

	if (!chain || !m->backing || m->backing[0] != '/' ||
	    sscanf(chain, "%u:%u %llu", &maj, &min, &ino) != 3) {
		free(chain);
		return -1;
	}
	free(chain);
	fd = open(m->backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd == -1)
		return -1;
	if (fstat(fd, &st) != 0 || major(st.st_dev) != maj || minor(st.st_dev) != min ||
	    st.st_ino != ino || faccessat(fd, ".", R_OK | X_OK, AT_EACCESS) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Parses the mount's options (one a line, as given) and then the store
 * options of the command line into M->cfg. Returns 0 or CTL_EXIT_USAGE
 * (printed). */
static int parse_options(struct ctl_mount *m, const char *opts, char **store_args,
			 size_t nstore)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	const char *p = opts, *e;
	int rc = CTL_EXIT_USAGE, err = 0;
	size_t i;

	if (config_init(&m->cfg)) {
		fprintf(stderr, "treelockctl: out of memory\n");
		return CTL_EXIT_USAGE;
	}
	m->cfg_ready = true;
	err |= fuse_opt_add_arg(&args, "treelockctl");
	for (; *p; p = *e ? e + 1 : e) {
		char *line, *esc;

		e = strchrnul(p, '\n');
		if (e == p)
			continue;
		line = strndup(p, (size_t)(e - p));
		esc = line ? config_opt_escape(line) : NULL;
		err |= !esc || fuse_opt_add_arg(&args, "-o") || fuse_opt_add_arg(&args, esc);
		free(line);
		free(esc);
	}
	for (i = 0; i < nstore; i++)
		err |= fuse_opt_add_arg(&args, store_args[i]);
	if (err || config_parse(&m->cfg, &args, true))
		goto out_oom;
	/* the store is es when an URL is given, whatever the default */
	if (es_store_configured(&m->cfg) && m->cfg.lock_store_s &&
	    strcmp(m->cfg.lock_store_s, "mem") == 0) {
		free(m->cfg.lock_store_s);
		m->cfg.lock_store_s = strdup("es");
		if (!m->cfg.lock_store_s)
			goto out_oom;
	}
	err = config_validate(&m->cfg);
	if (!err)
		err = config_load_secrets(&m->cfg);
	if (err || m->cfg.errors) {
		const char *q = m->cfg.errors ? m->cfg.errors : "invalid options\n";

		while (*q) {
			const char *nl = strchrnul(q, '\n');

			fprintf(stderr, "treelockctl: %.*s\n", (int)(nl - q), q);
			q = *nl ? nl + 1 : nl;
		}
		goto out;
	}
	if (!es_store_configured(&m->cfg)) {
		fprintf(stderr, "treelockctl: the mount at '%s' has no Elasticsearch store (es_url): "
				"the fs index lives there\n", m->shown);
		goto out;
	}
	rc = 0;
	goto out;
out_oom:
	fprintf(stderr, "treelockctl: out of memory\n");
out:
	fuse_opt_free_args(&args);
	return rc;
}

/* ctl_mount_open() but for its cleanup on failure. */
static int mount_open(const char *mountpoint, const char *index, char **store_args, size_t nstore,
		      struct ctl_mount *m)
{
	struct mountchain_mount mc;
	char real[PATH_MAX], *opts = NULL, *fsindex = NULL, why[160] = "";
	struct stat st;
	size_t len;
	int err, rc = CTL_EXIT_USAGE;

	memset(m, 0, sizeof(*m));
	m->rootfd = m->treefd = -1;
	len = strlen(mountpoint);
	while (len > 1 && mountpoint[len - 1] == '/')
		len--;
	m->shown = strndup(mountpoint, len);
	if (!m->shown || !realpath(mountpoint, real)) {
		fprintf(stderr, "treelockctl: cannot use '%s': %s\n", mountpoint, strerror(errno));
		return CTL_EXIT_USAGE;
	}
	m->real = strdup(real);
	err = mountchain_mount_find(real, &mc);
	if (err)
		snprintf(why, sizeof(why), "nothing is mounted there");
	else if (strcmp(mc.fstype, TREELOCKFS_FSTYPE) != 0)
		snprintf(why, sizeof(why), "the mount there is of type '%s'", mc.fstype);
	else if (!mc.whole)
		snprintf(why, sizeof(why), "a bind mount of a directory below the root of one");
	if (why[0]) {
		fprintf(stderr, "treelockctl: '%s' is not a treelockfs mount (%s)\n", mountpoint, why);
		return CTL_EXIT_USAGE;
	}
	m->rootfd = open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (m->rootfd == -1 || fstat(m->rootfd, &st) != 0 || st.st_dev != mc.dev) {
		fprintf(stderr, "treelockctl: '%s' is not a treelockfs mount (the mount there is "
				"hidden by another one)\n", mountpoint);
		return CTL_EXIT_USAGE;
	}
	opts = read_ctl_file(m->rootfd, "options");
	if (!opts) {
		fprintf(stderr, "treelockctl: cannot read the options of the mount at '%s': %s\n",
			mountpoint, strerror(errno));
		return CTL_EXIT_USAGE;
	}
	rc = parse_options(m, opts, store_args, nstore);
	if (rc)
		goto out;
	/* --index NAME, else the mount's fs_index (from its options or
	 * its config file) */
	fsindex = index ? strdup(index) : m->cfg.fs_index ? strdup(m->cfg.fs_index) : NULL;
	if (!fsindex) {
		fprintf(stderr, "treelockctl: the mount at '%s' has no fs index (fs_index=NAME): "
				"name one with --index NAME\n", mountpoint);
		rc = CTL_EXIT_USAGE;
		goto out;
	}
	err = es_fsctl_open(&m->cfg, fsindex, &m->fs);
	if (err) {
		fprintf(stderr, "treelockctl: cannot open fs index '%s': %s\n", fsindex,
			strerror(-err));
		rc = err == -EINVAL ? CTL_EXIT_USAGE : CTL_EXIT_STORE;
		goto out;
	}
	m->backing = mount_source(real);
	m->treefd = backing_fd(m);
	m->via_backing = m->treefd != -1;
	if (!m->via_backing)
		m->treefd = dup(m->rootfd);
	rc = 0;
out:
	free(opts);
	free(fsindex);
	return rc;
}

int ctl_mount_open(const char *mountpoint, const char *index, char **store_args, size_t nstore,
		   struct ctl_mount *m)
{
	int rc = mount_open(mountpoint, index, store_args, nstore, m);

	if (rc)
		ctl_mount_close(m);
	return rc;
}

void ctl_mount_close(struct ctl_mount *m)
{
	es_fsctl_close(m->fs);
	if (m->cfg_ready)
		config_free(&m->cfg);
	if (m->rootfd != -1)
		close(m->rootfd);
	if (m->treefd != -1)
		close(m->treefd);
	free(m->backing);
	free(m->real);
	free(m->shown);
	memset(m, 0, sizeof(*m));
	m->rootfd = m->treefd = -1;
}

char *ctl_raw_path(const struct ctl_mount *m, const char *key)
{
	char *s = NULL;

	if (strcmp(key, "/") == 0)
		return strdup(m->shown);
	return asprintf(&s, "%s%s", strcmp(m->shown, "/") == 0 ? "" : m->shown, key) < 0 ? NULL
											 : s;
}

char *ctl_shown_path(const struct ctl_mount *m, const char *key)
{
	char *raw = ctl_raw_path(m, key), *out;
	size_t size;

	if (!raw)
		return NULL;
	size = 4 * strlen(raw) + 1;
	out = malloc(size);
	if (out)
		escape_text(out, size, raw);
	free(raw);
	return out;
}

void ctl_print_path(const struct ctl_mount *m, const char *key, FILE *f)
{
	char *raw = ctl_raw_path(m, key);

	if (raw)
		escape_fputs(raw, f);
	else
		fputs("(out of memory)", f);
	free(raw);
}

/* ---- the walk ---- */

struct walk {
	struct ctl_mount *m;
	ctl_walk_fn fn;
	void *arg;
	size_t *unreadable;
	struct buf key;
};

/* Walks directory DFD (an open fd of the directory whose key is in
 * W->key), depth first. */
static int walk_dir(struct walk *w, int dfd)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	size_t base = w->key.len;
	int rc = 0;

	if (!d) {
		close(dfd);
		return -errno;
	}
	while (!rc && (de = readdir(d)) != NULL) {
		struct stat st;
		int64_t at;
		const char *n = de->d_name;

		if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])))
			continue;
		/* the mount's control entry is none of the tree's */
		if (base == 0 && strcmp(n, ".treelockfs") == 0)
			continue;
		w->key.len = base;
		buf_add(&w->key, "/", 1);
		buf_adds(&w->key, n);
		if (w->key.err)
			return -ENOMEM;
		at = ctl_now_ns();
		if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue; /* gone meanwhile */
		rc = w->fn(w->arg, w->key.data, &st, at);
		if (rc || !S_ISDIR(st.st_mode))
			continue;
		{
			int sub = openat(dirfd(d), n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub == -1) {
				if (errno != ENOENT && errno != ENOTDIR) {
					if (w->unreadable)
						(*w->unreadable)++;
					fprintf(stderr, "treelockctl: cannot read directory '");
					escape_fputs(w->key.data, stderr);
					fprintf(stderr, "': %s\n", strerror(errno));
				}
				continue;
			}
			rc = walk_dir(w, sub);
			if (rc == -EACCES || rc == -ENOENT)
				rc = 0;
		}
	}
	w->key.len = base;
	if (w->key.data)
		w->key.data[base] = '\0';
	closedir(d);
	return rc;
}

int ctl_walk(struct ctl_mount *m, const char *key, ctl_walk_fn fn, void *arg,
	     size_t *unreadable)
{
	struct walk w = {m, fn, arg, unreadable, BUF_INIT};
	struct stat st;
	int64_t at = ctl_now_ns();
	int rc, dfd;

	if (fstatat(m->treefd, ctl_rel(key), &st, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0)
		return -errno;
	rc = fn(arg, key, &st, at);
	if (rc || !S_ISDIR(st.st_mode))
		return rc;
	dfd = openat(m->treefd, ctl_rel(key), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd == -1)
		return -errno;
	if (strcmp(key, "/") != 0)
		buf_adds(&w.key, key);
	else
		buf_add(&w.key, "", 0);
	if (w.key.err)
		return -ENOMEM;
	rc = walk_dir(&w, dfd);
	buf_free(&w.key);
	return rc;
}
