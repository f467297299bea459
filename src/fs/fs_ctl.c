/* fs_ctl.c - the hidden control entry ".treelockfs/", see fs.h
 *
 * ".treelockfs" at the root is never listed, cannot be created, removed or
 * renamed, and holds files rendered when opened: "stats" (the lock
 * manager's counters), "metrics" (the same and more, in Prometheus's text
 * format, metrics.h), "locks" (the locks the store holds, one per line,
 * only those the reader may look up, delegations marked as such),
 * "options" (the options the mount was started with, one per line, as
 * given: what a remount compares its
 * options with; root may write "name=value" lines to it to change
 * lock_timeout or log_level while mounted, as a remount does) and
 * "backing" (the directories the mount is served from, mountchain.h:
 * device and inode numbers, which other mounts read to refuse serving each
 * other). Their inodes are static,
 * without fd; their handles carry CTL_TAG.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/escape.h"
#include "fs/fs.h"
#include "lock/lockplan.h"
#include "base/metrics.h"
#include "base/log.h"
#include "base/path.h"

/* fs->given_options; a leaf lock, never held across a syscall */
static pthread_mutex_t options_mutex = PTHREAD_MUTEX_INITIALIZER;

#define TL_STR_(x) #x
#define TL_STR(x) TL_STR_(x)

/* Longest write to .treelockfs/options. */
#define CTL_WRITE_MAX 4096

struct ctl_buf {
	char *data;
	size_t len;
};

/* True when the caller (whose credentials this thread has) may learn
 * KEY: it may list every directory from the backing root to KEY's parent
 * (read and search permission), which is what finding the name natively
 * takes; a name in a directory the caller may only search (0711) is not
 * shown, as readdir would not show it. KEY is decoded first: a store
 * lists keys as their text ("bytes:/..." for names that are not UTF-8,
 * path_key_text()), and every form is judged by the entry it names.
 * "global" names no entry and is shown; any other key that is not a path
 * (a hashed id without its path, a text no key has), a key too long to
 * check, or one whose directory is gone, is not. */
static bool ctl_key_visible(struct tlfs *fs, const char *key)
{
	char *raw = NULL, *slash, *p;
	bool ok;

	if (creds_are_root())
		return true;
	if (path_key_from_text(key, &raw) != 0)
		return false;
	if (raw[0] != '/') {
		ok = strcmp(raw, "global") == 0;
		goto out;
	}
	ok = faccessat(fs->backing_fd, ".", R_OK | X_OK, AT_EACCESS) == 0;
	slash = strrchr(raw, '/');
	for (p = strchr(raw + 1, '/'); ok && p && p <= slash; p = strchr(p + 1, '/')) {
		*p = '\0';
		ok = faccessat(fs->backing_fd, raw + 1, R_OK | X_OK, AT_EACCESS) == 0;
		*p = '/';
	}
out:
	free(raw);
	return ok;
}

int ctl_render_metrics(void *arg, FILE *f)
{
	struct tlfs *fs = arg;
	struct tl_store_metrics sm;
	struct tl_deleg_counters dc;
	struct tl_metrics_src src = {
		.mountpoint = fs->mountpoint ? fs->mountpoint : "",
		.owner = fs->cfg->owner ? fs->cfg->owner : "",
		.store = lockmgr_store_name(&fs->mgr),
		.strategy = lockplan_strategy_name(fs->cfg->lock_strategy),
		.lock_timeout = fs->cfg->lock_timeout,
		.start_time_ms = fs->start_ms,
		.stats = lockmgr_stats(&fs->mgr),
		.store_m = &sm,
	};

	src.data.file_lock_waiters = plockwait_count(&fs->waits);
	inode_fd_counts(fs, &src.data.inode_fds, &src.data.inode_prunes);
	/* a build or mount without passthrough shows no passthrough counters */
	if (fs->pt != PT_OFF) {
		src.data.passthrough_opens = &fs->pt_opens;
		src.data.passthrough_fallbacks = &fs->pt_fallbacks;
	}
	lockmgr_store_metrics(&fs->mgr, &sm);
	if (lockmgr_deleg_counters(&fs->mgr, &dc))
		src.deleg = &dc;
	return metrics_format(f, &src);
}

static int ctl_render_stats(struct tlfs *fs, fuse_req_t req, FILE *f)
{
	uint64_t fds, prunes;
	char buf[2048];

	(void)req;
	fprintf(f, "lock_store %s\nlock_strategy %s\n", lockmgr_store_name(&fs->mgr),
		lockplan_strategy_name(fs->cfg->lock_strategy));
	lockmgr_format_stats(&fs->mgr, buf, sizeof(buf));
	fputs(buf, f);
	fprintf(f,
		"passthrough %s\npassthrough_opens %" PRIu64 "\npassthrough_fallbacks %" PRIu64
		"\npassthrough_backing_ids %" PRIu64 "\n",
		fs->pt == PT_IN_USE ? "in_use" : fs->pt == PT_UNAVAILABLE ? "unavailable" : "off",
		stats_get(&fs->pt_opens), stats_get(&fs->pt_fallbacks), stats_get(&fs->pt_ids));
	/* forwarded flock()/fcntl() locks that wait now (fs_plock.c) */
	fprintf(f, "file_lock_waits %u\n", plockwait_count(&fs->waits));
	inode_fd_counts(fs, &fds, &prunes);
	fprintf(f, "inode_fds %" PRIu64 "\ninode_prunes %" PRIu64 "\n", fds, prunes);
	return 0;
}

static int ctl_render_metrics_file(struct tlfs *fs, fuse_req_t req, FILE *f)
{
	(void)req;
	return ctl_render_metrics(fs, f);
}

static int ctl_render_options(struct tlfs *fs, fuse_req_t req, FILE *f)
{
	(void)req;
	pthread_mutex_lock(&options_mutex);
	fputs(fs->given_options ? fs->given_options : "", f);
	pthread_mutex_unlock(&options_mutex);
	return 0;
}

static int ctl_render_backing(struct tlfs *fs, fuse_req_t req, FILE *f)
{
	(void)req;
	fputs(fs->backing_chain ? fs->backing_chain : "", f);
	return 0;
}

/* Only the keys the requesting user may look up (ctl_key_visible(),
 * checked with REQ's credentials); the store is asked as the daemon. */
static int ctl_render_locks(struct tlfs *fs, fuse_req_t req, FILE *f)
{
	struct tl_lock_info *v = NULL;
	size_t n = 0, i;
	int err;

	creds_daemon(fs);
	err = lockmgr_list(&fs->mgr, "/", &v, &n);
	if (!err)
		err = creds_enter(fs, req);
	if (err) {
		fprintf(f, "error %s\n", strerror(-err));
		goto out_free_list;
	}
	fputs("# mode count age_ms waiters holder delegation key\n", f);
	for (i = 0; i < n; i++) {
		if (!ctl_key_visible(fs, v[i].key))
			continue;
		fprintf(f, "%s %u %" PRId64 " %u %s ", v[i].mode == TL_EXCLUSIVE ? "exclusive" : "shared",
			v[i].count, v[i].age_ms, v[i].waiters, v[i].holders ? v[i].holders : "-");
		/* a delegated directory; this mount's own say how they serve */
		if (!v[i].delegation)
			fputs("- ", f);
		else if (v[i].deleg_state)
			fprintf(f, "delegation:%s,users=%d,served=%" PRId64 " ", v[i].deleg_state,
				v[i].users, v[i].served);
		else
			fputs("delegation ", f);
		/* one lock, one line of text */
		escape_fputs(v[i].key, f);
		fputc('\n', f);
	}
out_free_list:
	lockmgr_free_list(v, n);
	return 0;
}

static void ctl_write_options(struct tlfs *fs, fuse_req_t req, struct fuse_bufvec *buf);

/* What a control file lets do, in ctl_files[].flags. */
enum {
	/* root and the daemon's user may write it (ctl_files[].write) */
	CTL_F_WRITABLE = 1u << 0,
	/* shows what the caller may see, judged with the caller's
	 * credentials: a non-root daemon cannot judge other users', so only
	 * its own user and root may read it */
	CTL_F_PER_CALLER = 1u << 1,
};

/* The control entry: one row per inode, by enum ctl_kind, for every place
 * that needs them (lookup, attributes, readdir, open, write). The inodes
 * are static, without fd; the kernel knows them by the nodeids
 * CTL_ID_BASE + kind, below TLFS_FIRST_ID. */
static struct ctl_file {
	const char *name;
	struct ll_inode inode;
	unsigned int flags;       /* CTL_F_* */
	/* writes the file's text to F when it is opened. Returns 0 or -errno */
	int (*render)(struct tlfs *fs, fuse_req_t req, FILE *f);
	/* takes a write (CTL_F_WRITABLE only) and replies to REQ */
	void (*write)(struct tlfs *fs, fuse_req_t req, struct fuse_bufvec *buf);
} ctl_files[] = {
	[CTL_DIR] = {TLFS_CTL_NAME, {.fd = -1, .type = S_IFDIR, .ctl = CTL_DIR}, 0, NULL, NULL},
	[CTL_STATS] = {"stats", {.fd = -1, .type = S_IFREG, .ctl = CTL_STATS}, 0,
		       ctl_render_stats, NULL},
	[CTL_LOCKS] = {"locks", {.fd = -1, .type = S_IFREG, .ctl = CTL_LOCKS}, CTL_F_PER_CALLER,
		       ctl_render_locks, NULL},
	[CTL_METRICS] = {"metrics", {.fd = -1, .type = S_IFREG, .ctl = CTL_METRICS}, 0,
			 ctl_render_metrics_file, NULL},
	[CTL_OPTIONS] = {"options", {.fd = -1, .type = S_IFREG, .ctl = CTL_OPTIONS},
			 CTL_F_WRITABLE, ctl_render_options, ctl_write_options},
	[CTL_BACKING] = {"backing", {.fd = -1, .type = S_IFREG, .ctl = CTL_BACKING}, 0,
			 ctl_render_backing, NULL},
};

#define CTL_NFILES (sizeof(ctl_files) / sizeof(ctl_files[0]))
#define CTL_ID_BASE 2

_Static_assert(CTL_ID_BASE + CTL_NFILES <= TLFS_FIRST_ID, "control nodeids overlap inodes'");

struct ll_inode *ctl_inode_of(fuse_ino_t id)
{
	return id >= CTL_ID_BASE + CTL_DIR && id < CTL_ID_BASE + CTL_NFILES ? &ctl_files[id - CTL_ID_BASE].inode
								   : NULL;
}

fuse_ino_t ctl_inode_id(const struct ll_inode *in)
{
	return CTL_ID_BASE + (fuse_ino_t)in->ctl;
}

/* The files of the directory: ctl_files[CTL_FIRST_FILE .. CTL_NFILES - 1]. */
#define CTL_FIRST_FILE (CTL_DIR + 1)

/* Renders control file K into a new buffer. */
static int ctl_render(struct tlfs *fs, fuse_req_t req, enum ctl_kind k, struct ctl_buf **out)
{
	struct ctl_buf *b = calloc(1, sizeof(*b));
	FILE *f;
	int err;

	if (!b)
		return -ENOMEM;
	f = open_memstream(&b->data, &b->len);
	if (!f) {
		free(b);
		return -ENOMEM;
	}
	err = ctl_files[k].render(fs, req, f);
	if (fclose(f) != 0 && !err)
		err = -ENOMEM;
	if (err) {
		free(b->data);
		free(b);
		return err;
	}
	*out = b;
	return 0;
}

void ctl_stat(enum ctl_kind kind, struct stat *st)
{
	struct timespec now;

	memset(st, 0, sizeof(*st));
	clock_gettime(CLOCK_REALTIME, &now);
	st->st_ino = (ino_t)(UINT64_C(0xfffffffffffff000) + (uint64_t)kind);
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_atim = st->st_mtim = st->st_ctim = now;
	st->st_blksize = 4096;
	if (kind == CTL_DIR) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | (ctl_files[kind].flags & CTL_F_WRITABLE ? 0644 : 0444);
		st->st_nlink = 1;
	}
}

bool ctl_is_name(struct tlfs *fs, struct ll_inode *parent, const char *name)
{
	return (parent == fs->root && strcmp(name, TLFS_CTL_NAME) == 0) || parent->ctl;
}

int ctl_create_err(struct tlfs *fs, struct ll_inode *parent, const char *name)
{
	struct fuse_entry_param e;

	return ctl_lookup(fs, parent, name, &e) == 0 ? -EEXIST : -EPERM;
}

int ctl_lookup(struct tlfs *fs, struct ll_inode *parent, const char *name,
	       struct fuse_entry_param *e)
{
	size_t k = CTL_DIR;

	memset(e, 0, sizeof(*e));
	if (parent->ctl) {
		if (parent->ctl != CTL_DIR)
			return -ENOENT;
		for (k = CTL_FIRST_FILE; k < CTL_NFILES; k++)
			if (strcmp(name, ctl_files[k].name) == 0)
				break;
		if (k == CTL_NFILES)
			return -ENOENT;
	} else {
		e->attr_timeout = fs->cfg->attr_timeout;
		e->entry_timeout = fs->cfg->entry_timeout;
	}
	ctl_stat((enum ctl_kind)k, &e->attr);
	e->ino = CTL_ID_BASE + (fuse_ino_t)k;
	return 0;
}

void ctl_open(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, struct fuse_file_info *fi)
{
	const struct ctl_file *file = &ctl_files[in->ctl];
	struct ctl_buf *b;
	bool own;
	int res;

	if (in->ctl == CTL_DIR) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	own = fuse_req_ctx(req)->uid == 0 || fuse_req_ctx(req)->uid == geteuid();
	if ((fi->flags & O_ACCMODE) != O_RDONLY && (!(file->flags & CTL_F_WRITABLE) || !own)) {
		fuse_reply_err(req, EACCES);
		return;
	}
	/* a non-root daemon cannot check other users' permissions */
	if ((file->flags & CTL_F_PER_CALLER) && !fs->switch_creds && !own) {
		fuse_reply_err(req, EACCES);
		return;
	}
	creds_daemon(fs);
	res = ctl_render(fs, req, in->ctl, &b);
	creds_daemon(fs);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)b | CTL_TAG;
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

void ctl_read(fuse_req_t req, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct ctl_buf *b = (struct ctl_buf *)(uintptr_t)(fi->fh & ~CTL_TAG);
	size_t n = 0;

	if ((size_t)off < b->len)
		n = b->len - (size_t)off < size ? b->len - (size_t)off : size;
	fuse_reply_buf(req, n ? b->data + off : NULL, n);
}

/* The option LINE (LEN bytes) names: its length up to '=' or the end. */
static size_t opt_name_len(const char *line, size_t len)
{
	const char *eq = memchr(line, '=', len);

	return eq ? (size_t)(eq - line) : len;
}

/* True when option line LINE (LEN bytes, no newline) is one of LIST's. */
static bool opts_have(const char *list, const char *line, size_t len)
{
	const char *p = list;

	while (p && *p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);

		if (n == len && memcmp(p, line, len) == 0)
			return true;
		p = nl ? nl + 1 : NULL;
	}
	return false;
}

/* LIST with the line of LINE's option replaced by LINE (or LINE added),
 * in a new string, or NULL when out of memory. */
static char *opts_set(const char *list, const char *line, size_t len)
{
	size_t name = opt_name_len(line, len), total = strlen(list);
	char *out = malloc(total + len + 2), *o = out;
	const char *p = list;
	bool done = false;

	if (!out)
		return NULL;
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);

		if (!done && opt_name_len(p, n) == name && memcmp(p, line, name) == 0) {
			memcpy(o, line, len);
			o += len;
			done = true;
		} else {
			memcpy(o, p, n);
			o += n;
		}
		*o++ = '\n';
		p += n + (nl ? 1 : 0);
	}
	if (!done) {
		memcpy(o, line, len);
		o += len;
		*o++ = '\n';
	}
	*o = '\0';
	return out;
}

/* What option line LINE (LEN bytes, no newline) changes: into *TIMEOUT or
 * *LEVEL. Returns 0, 1 for a line that repeats the mount's option, or
 * -EINVAL with *WHY saying what is wrong. */
static int ctl_parse_change(struct tlfs *fs, const char *line, size_t len, double *timeout,
			    int *level, const char **why)
{
	char val[64];
	size_t name = opt_name_len(line, len);

	/* one line is one option: checked before it is compared with any */
	if (escape_has_control(line, len)) {
		*why = "a control character in the line";
		return -EINVAL;
	}
	if (opts_have(fs->given_options, line, len))
		return 1;
	if (name == len || name == 0) {
		*why = "expected name=value";
		return -EINVAL;
	}
	if (!(name == 12 && memcmp(line, "lock_timeout", 12) == 0) &&
	    !(name == 9 && memcmp(line, "log_level", 9) == 0)) {
		*why = "only lock_timeout and log_level change while mounted";
		return -EINVAL;
	}
	if (name == 12) {
		*why = "expected decimal seconds from " TL_STR(TL_LOCK_TIMEOUT_MIN) " to "
		       TL_STR(TL_LOCK_TIMEOUT_MAX);
		if (len - name - 1 >= sizeof(val))
			return -EINVAL;
		memcpy(val, line + name + 1, len - name - 1);
		val[len - name - 1] = '\0';
		return config_scan_seconds(val, TL_LOCK_TIMEOUT_MIN, TL_LOCK_TIMEOUT_MAX, timeout);
	}
	*why = "expected err, warning, notice, info or debug";
	if (len - name - 1 >= sizeof(val))
		return -EINVAL;
	memcpy(val, line + name + 1, len - name - 1);
	val[len - name - 1] = '\0';
	*level = tl_log_parse_level(val);
	return *level < 0 ? -EINVAL : 0;
}

void ctl_write(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, struct fuse_bufvec *buf)
{
	if (!ctl_files[in->ctl].write) {
		fuse_reply_err(req, EBADF);
		return;
	}
	ctl_files[in->ctl].write(fs, req, buf);
}

/* options: "name=value" lines change lock_timeout or log_level, all or
 * none (fs.h, ctl_write()); a NUL byte, a control character in a line,
 * a line that is no "name=value" (unless it repeats one of the mount's
 * options) or a write of no line at all is EINVAL, logged with why. */
static void ctl_write_options(struct tlfs *fs, fuse_req_t req, struct fuse_bufvec *buf)
{
	size_t size = fuse_buf_size(buf);
	struct fuse_bufvec mem = FUSE_BUFVEC_INIT(size);
	double timeout = -1;
	int level = -1, res = 0;
	char *text, *p, *next, *bad = NULL, *nul;
	const char *why = NULL;
	size_t lines = 0;
	bool changed = false;
	ssize_t got;

	if (size > CTL_WRITE_MAX) {
		fuse_reply_err(req, EFBIG);
		return;
	}
	text = calloc(1, size + 1);
	if (!text) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	mem.buf[0].mem = text;
	got = fuse_buf_copy(&mem, buf, 0);
	if (got < 0) {
		free(text);
		fuse_reply_err(req, (int)-got);
		return;
	}
	/* the text is lines: a NUL would end it early, unseen */
	nul = memchr(text, '\0', (size_t)got);
	if (nul) {
		tl_log(LOG_WARNING, "cannot change options while mounted: a NUL byte at byte %zu "
				    "of the write; expected name=value lines",
		       (size_t)(nul - text));
		free(text);
		fuse_reply_err(req, EINVAL);
		return;
	}
	/* check every line first: all or nothing */
	pthread_mutex_lock(&options_mutex);
	for (p = text; !res && *p; p = next) {
		size_t n = strcspn(p, "\n");

		next = p + n + (p[n] ? 1 : 0);
		if (n == 0)
			continue;
		lines++;
		if (ctl_parse_change(fs, p, n, &timeout, &level, &why) < 0) {
			p[n] = '\0'; /* named in the log below */
			bad = p;
			res = -EINVAL;
		}
	}
	if (!res && !lines) {
		why = "expected name=value lines";
		res = -EINVAL;
	}
	for (p = text; !res && *p; p = next) {
		size_t n = strcspn(p, "\n");
		char *list;

		next = p + n + (p[n] ? 1 : 0);
		if (!n || opts_have(fs->given_options, p, n))
			continue;
		list = opts_set(fs->given_options, p, n);
		if (!list) {
			res = -ENOMEM;
			break;
		}
		free(fs->given_options);
		fs->given_options = list;
		changed = true;
	}
	pthread_mutex_unlock(&options_mutex);
	if (bad)
		tl_log(LOG_WARNING, "cannot change '%s' while mounted: %s", bad, why);
	else if (res == -EINVAL)
		tl_log(LOG_WARNING, "cannot change options while mounted: %s", why);
	for (p = text; changed && *p; p++)
		if (*p == '\n')
			*p = ' ';
	if (changed)
		tl_log(LOG_NOTICE, "changed while mounted: %s", text);
	if (!res && timeout > 0)
		lockmgr_set_timeout(&fs->mgr, timeout);
	if (!res && level >= 0)
		tl_log_set_level(level);
	free(text);
	if (res)
		fuse_reply_err(req, -res);
	else
		fuse_reply_write(req, (size_t)got);
}

void ctl_release(struct fuse_file_info *fi)
{
	struct ctl_buf *b = (struct ctl_buf *)(uintptr_t)(fi->fh & ~CTL_TAG);

	free(b->data);
	free(b);
}

size_t ctl_readdir(fuse_req_t req, char *buf, size_t rem, off_t offset)
{
	size_t used = 0;
	off_t i;

	/* ".", "..", then the files, in ctl_files[] order; offset i + 1
	 * follows entry i */
	for (i = offset; i < (off_t)(2 + CTL_NFILES - CTL_FIRST_FILE); i++) {
		size_t k = i < 2 ? CTL_DIR : CTL_FIRST_FILE + (size_t)(i - 2);
		struct stat st;
		size_t n;

		ctl_stat((enum ctl_kind)k, &st);
		n = fuse_add_direntry(req, buf + used, rem - used,
				      i == 0 ? "." : i == 1 ? ".." : ctl_files[k].name, &st, i + 1);
		if (n > rem - used)
			break;
		used += n;
	}
	return used;
}
