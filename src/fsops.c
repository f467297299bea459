/* fsops.c - passthrough operations and the locked rename, see fsops.h
 *
 * Conventions (libfuse example/passthrough.c): convert at the libc
 * boundary only, "res = call(); if (res == -1) return -errno;". Paths from
 * libfuse are absolute within the mount; path_rel() makes them relative to
 * the backing fd. With nullpath_ok, operations on open files use fi->fh and
 * may get a NULL path (the file was unlinked while open, hard_remove).
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "fsops.h"
#include "lockplan.h"
#include "log.h"
#include "path.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* Handles of control files and of directories are pointers tagged with
 * one of these bits (user-space pointers on Linux never have them); every
 * other handle is the backing fd. */
#define CTL_TAG (UINT64_C(1) << 63)
#define DIR_TAG (UINT64_C(1) << 62)
#define IS_FD(fi) ((fi) && !((fi)->fh & (CTL_TAG | DIR_TAG)))

static struct tlfs *fs_get(void)
{
	return fuse_get_context()->private_data;
}

/* ---- credentials ------------------------------------------------------ */

/* The credentials this thread acts with now; switching is skipped when the
 * next request is from the same process and user. */
static __thread struct {
	bool set;
	pid_t pid;
	uid_t uid;
	gid_t gid;
} thread_creds;

/* Acts as UID/GID with the groups of PID from here on, on this thread only
 * (the raw setgroups syscall is per thread; glibc's would change them all).
 * Returns 0 or -errno. */
static int creds_switch(pid_t pid, uid_t uid, gid_t gid, bool with_groups)
{
	gid_t groups[256];
	int n = 0;

	if (thread_creds.set && thread_creds.pid == pid && thread_creds.uid == uid &&
	    thread_creds.gid == gid)
		return 0;
	setfsuid(0);
	if (with_groups && uid != 0) {
		n = fuse_getgroups((int)(sizeof(groups) / sizeof(groups[0])), groups);
		if (n < 0)
			n = 0; /* the caller is gone or /proc hidden: primary group only */
		if (n > (int)(sizeof(groups) / sizeof(groups[0])))
			n = (int)(sizeof(groups) / sizeof(groups[0]));
	}
	if (syscall(SYS_setgroups, n, groups) == -1)
		return -errno;
	setfsgid(gid);
	setfsuid(uid);
	thread_creds.set = true;
	thread_creds.pid = pid;
	thread_creds.uid = uid;
	thread_creds.gid = gid;
	return 0;
}

/* Acts as the requesting user, when we serve other users as root. */
static int creds_enter(struct tlfs *fs)
{
	struct fuse_context *c;

	if (!fs->switch_creds)
		return 0;
	c = fuse_get_context();
	return creds_switch(c->pid, c->uid, c->gid, true);
}

/* Back to the daemon's own (root) credentials, for lock store work. */
static void creds_daemon(struct tlfs *fs)
{
	if (fs->switch_creds)
		creds_switch(0, 0, 0, false);
}

/* ---- control entry ----------------------------------------------------- */

enum ctl_kind { CTL_NONE, CTL_DIR, CTL_STATS, CTL_LOCKS, CTL_UNKNOWN };

static enum ctl_kind ctl_kind(const char *path)
{
	static const char dir[] = "/" TLFS_CTL_NAME;

	if (!path || strncmp(path, dir, sizeof(dir) - 1) != 0)
		return CTL_NONE;
	path += sizeof(dir) - 1;
	if (*path == '\0')
		return CTL_DIR;
	if (strcmp(path, "/stats") == 0)
		return CTL_STATS;
	if (strcmp(path, "/locks") == 0)
		return CTL_LOCKS;
	return *path == '/' ? CTL_UNKNOWN : CTL_NONE;
}

struct ctl_buf {
	char *data;
	size_t len;
};

/* Appends KEY with newlines, backslashes and other control bytes escaped. */
static void ctl_put_key(FILE *f, const char *key)
{
	for (; *key; key++) {
		unsigned char c = (unsigned char)*key;

		if (c == '\\')
			fputs("\\\\", f);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
}

static int ctl_render(struct tlfs *fs, enum ctl_kind kind, struct ctl_buf **out)
{
	struct ctl_buf *b = calloc(1, sizeof(*b));
	FILE *f;

	if (!b)
		return -ENOMEM;
	f = open_memstream(&b->data, &b->len);
	if (!f) {
		free(b);
		return -ENOMEM;
	}
	if (kind == CTL_STATS) {
		char buf[2048];
		uint64_t req = fs->store->ops->requests ? fs->store->ops->requests(fs->store) : 0;

		fprintf(f, "lock_store %s\nlock_strategy %s\n", fs->store->ops->name,
			lockplan_strategy_name(fs->cfg->lock_strategy));
		stats_format(&fs->mgr.stats, req, buf, sizeof(buf));
		fputs(buf, f);
	} else {
		struct tl_lock_info *v = NULL;
		size_t n = 0, i;
		int err = fs->store->ops->list(fs->store, "/", &v, &n);

		if (err) {
			fprintf(f, "error %s\n", strerror(-err));
		} else {
			fputs("# mode count age_ms waiters holder key\n", f);
			for (i = 0; i < n; i++) {
				fprintf(f, "%s %u %" PRId64 " %u %s ",
					v[i].mode == TL_EXCLUSIVE ? "exclusive" : "shared",
					v[i].count, v[i].age_ms, v[i].waiters,
					v[i].holders ? v[i].holders : "-");
				ctl_put_key(f, v[i].key);
				fputc('\n', f);
			}
		}
		lockstore_free_list(v, n);
	}
	fclose(f);
	*out = b;
	return 0;
}

static void ctl_stat(enum ctl_kind kind, struct stat *st)
{
	struct timespec now;

	memset(st, 0, sizeof(*st));
	clock_gettime(CLOCK_REALTIME, &now);
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_atim = st->st_mtim = st->st_ctim = now;
	if (kind == CTL_DIR) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = 0; /* generated on open; read with direct_io */
	}
}

/* ---- locking around namespace operations ------------------------------- */

struct op_lock {
	struct tl_plan *plan;
	struct tl_holder holder;
};

/* Takes the entry plan of PATH when lock_scope=namespace. */
static int entry_lock(struct tlfs *fs, const char *path, struct op_lock *l)
{
	int err;

	l->plan = NULL;
	if (fs->cfg->lock_scope != TL_SCOPE_NAMESPACE)
		return 0;
	err = lockplan_entry(fs->cfg->lock_strategy, path, &l->plan);
	if (err)
		return err == -EINVAL ? -ENAMETOOLONG : err;
	creds_daemon(fs);
	err = lockmgr_acquire(&fs->mgr, l->plan, (uint32_t)fuse_get_context()->pid, &l->holder);
	if (err) {
		lockplan_free(l->plan);
		l->plan = NULL;
	}
	return err;
}

static void entry_unlock(struct tlfs *fs, struct op_lock *l)
{
	if (!l->plan)
		return;
	creds_daemon(fs);
	lockmgr_release(&fs->mgr, l->plan, &l->holder);
	lockplan_free(l->plan);
	l->plan = NULL;
}

/* ---- passthrough ------------------------------------------------------- */

static void *tlfs_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	struct tlfs *fs = fs_get();
	int err;

	cfg->use_ino = 1;
	cfg->nullpath_ok = 1;
	cfg->hard_remove = 1;
	cfg->entry_timeout = fs->cfg->entry_timeout;
	cfg->attr_timeout = fs->cfg->attr_timeout;
	cfg->negative_timeout = fs->cfg->negative_timeout;
	/* keep the page cache across opens only while mtime and size agree,
	 * so a change made by another host is seen on the next open */
	cfg->auto_cache = 1;
	conn->want |= conn->capable & (FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE);
	conn->want |= conn->capable & FUSE_CAP_PARALLEL_DIROPS;
	if (fs->store->ops->start) {
		err = fs->store->ops->start(fs->store);
		if (err)
			tl_log(LOG_ERR, "cannot start the %s lock store: %s", fs->store->ops->name,
			       strerror(-err));
	}
	tl_log(LOG_INFO, "mounted with lock_store=%s lock_strategy=%s lock_scope=%s",
	       fs->store->ops->name, lockplan_strategy_name(fs->cfg->lock_strategy),
	       fs->cfg->lock_scope == TL_SCOPE_NAMESPACE ? "namespace" : "rename");
	return fs;
}

static int tlfs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	enum ctl_kind k;
	int res;

	if (IS_FD(fi)) {
		res = fstat((int)fi->fh, st);
		return res == -1 ? -errno : 0;
	}
	k = ctl_kind(path);
	if (k == CTL_DIR || k == CTL_STATS || k == CTL_LOCKS) {
		ctl_stat(k, st);
		return 0;
	}
	if (k != CTL_NONE)
		return -ENOENT;
	res = creds_enter(fs);
	if (res)
		return res;
	res = fstatat(fs->backing_fd, path_rel(path), st, AT_SYMLINK_NOFOLLOW);
	return res == -1 ? -errno : 0;
}

static int tlfs_access(const char *path, int mask)
{
	struct tlfs *fs = fs_get();
	int res;

	if (ctl_kind(path) != CTL_NONE)
		return (mask & W_OK) ? -EACCES : 0;
	res = creds_enter(fs);
	if (res)
		return res;
	res = faccessat(fs->backing_fd, path_rel(path), mask, AT_EACCESS);
	return res == -1 ? -errno : 0;
}

static int tlfs_readlink(const char *path, char *buf, size_t size)
{
	struct tlfs *fs = fs_get();
	ssize_t res;
	int err = creds_enter(fs);

	if (err)
		return err;
	res = readlinkat(fs->backing_fd, path_rel(path), buf, size - 1);
	if (res == -1)
		return -errno;
	buf[res] = '\0';
	return 0;
}

struct tl_dir {
	DIR *dp;
	struct dirent *entry;
	off_t offset;
	bool root;
	bool ctl;
};

static int tlfs_opendir(const char *path, struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	struct tl_dir *d;
	enum ctl_kind k = ctl_kind(path);
	int fd, err;

	if (k != CTL_NONE && k != CTL_DIR)
		return k == CTL_UNKNOWN ? -ENOENT : -ENOTDIR;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	if (k == CTL_DIR) {
		d->ctl = true;
		fi->fh = (uint64_t)(uintptr_t)d | DIR_TAG;
		return 0;
	}
	err = creds_enter(fs);
	if (err)
		goto out_free;
	fd = openat(fs->backing_fd, path_rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd == -1) {
		err = -errno;
		goto out_free;
	}
	d->dp = fdopendir(fd);
	if (!d->dp) {
		err = -errno;
		close(fd);
		goto out_free;
	}
	d->root = strcmp(path, "/") == 0;
	fi->fh = (uint64_t)(uintptr_t)d | DIR_TAG;
	return 0;

out_free:
	free(d);
	return err;
}

static int tlfs_readdir(const char *path, void *buf, fuse_fill_dir_t filler, off_t offset,
			struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	struct tl_dir *d = (struct tl_dir *)(uintptr_t)(fi->fh & ~DIR_TAG);

	if (d->ctl) {
		static const char *const names[] = {".", "..", "stats", "locks"};
		off_t i;

		for (i = offset; i < 4; i++)
			if (filler(buf, names[i], NULL, i + 1, 0))
				break;
		return 0;
	}
	if (offset != d->offset) {
		seekdir(d->dp, offset);
		d->entry = NULL;
		d->offset = offset;
	}
	for (;;) {
		struct stat st;
		off_t next;

		if (!d->entry) {
			errno = 0;
			d->entry = readdir(d->dp);
			if (!d->entry) {
				if (errno)
					return -errno;
				break;
			}
		}
		next = telldir(d->dp);
		if (d->root && strcmp(d->entry->d_name, TLFS_CTL_NAME) == 0) {
			d->entry = NULL;
			d->offset = next;
			continue;
		}
		memset(&st, 0, sizeof(st));
		st.st_ino = d->entry->d_ino;
		st.st_mode = (mode_t)DTTOIF(d->entry->d_type);
		if (filler(buf, d->entry->d_name, &st, next, 0))
			break;
		d->entry = NULL;
		d->offset = next;
	}
	return 0;
}

static int tlfs_releasedir(const char *path, struct fuse_file_info *fi)
{
	struct tl_dir *d = (struct tl_dir *)(uintptr_t)(fi->fh & ~DIR_TAG);

	if (d->dp)
		closedir(d->dp);
	free(d);
	return 0;
}

static int tlfs_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
	struct tl_dir *d = (struct tl_dir *)(uintptr_t)(fi->fh & ~DIR_TAG);
	int res;

	if (d->ctl)
		return 0;
	res = datasync ? fdatasync(dirfd(d->dp)) : fsync(dirfd(d->dp));
	return res == -1 ? -errno : 0;
}

/* Refuses to create or remove the control entry's names. */
static int ctl_guard(const char *path, int err_exists)
{
	enum ctl_kind k = ctl_kind(path);

	if (k == CTL_NONE)
		return 0;
	if (k == CTL_DIR || k == CTL_STATS || k == CTL_LOCKS)
		return err_exists;
	return -EPERM;
}

static int tlfs_mknod(const char *path, mode_t mode, dev_t rdev)
{
	struct tlfs *fs = fs_get();
	struct op_lock l;
	int res;

	res = ctl_guard(path, -EEXIST);
	if (res)
		return res;
	res = entry_lock(fs, path, &l);
	if (res)
		return res;
	res = creds_enter(fs);
	if (!res) {
		if (S_ISFIFO(mode))
			res = mkfifoat(fs->backing_fd, path_rel(path), mode);
		else
			res = mknodat(fs->backing_fd, path_rel(path), mode, rdev);
		res = res == -1 ? -errno : 0;
	}
	entry_unlock(fs, &l);
	return res;
}

static int tlfs_mkdir(const char *path, mode_t mode)
{
	struct tlfs *fs = fs_get();
	struct op_lock l;
	int res;

	res = ctl_guard(path, -EEXIST);
	if (res)
		return res;
	res = entry_lock(fs, path, &l);
	if (res)
		return res;
	res = creds_enter(fs);
	if (!res)
		res = mkdirat(fs->backing_fd, path_rel(path), mode) == -1 ? -errno : 0;
	entry_unlock(fs, &l);
	return res;
}

static int tlfs_unlink(const char *path)
{
	struct tlfs *fs = fs_get();
	struct op_lock l;
	int res;

	res = ctl_guard(path, -EPERM);
	if (res)
		return res;
	res = entry_lock(fs, path, &l);
	if (res)
		return res;
	res = creds_enter(fs);
	if (!res)
		res = unlinkat(fs->backing_fd, path_rel(path), 0) == -1 ? -errno : 0;
	entry_unlock(fs, &l);
	return res;
}

static int tlfs_rmdir(const char *path)
{
	struct tlfs *fs = fs_get();
	struct op_lock l;
	int res;

	res = ctl_guard(path, -EPERM);
	if (res)
		return res;
	res = entry_lock(fs, path, &l);
	if (res)
		return res;
	res = creds_enter(fs);
	if (!res)
		res = unlinkat(fs->backing_fd, path_rel(path), AT_REMOVEDIR) == -1 ? -errno : 0;
	entry_unlock(fs, &l);
	return res;
}

static int tlfs_symlink(const char *target, const char *path)
{
	struct tlfs *fs = fs_get();
	struct op_lock l;
	int res;

	res = ctl_guard(path, -EEXIST);
	if (res)
		return res;
	res = entry_lock(fs, path, &l);
	if (res)
		return res;
	res = creds_enter(fs);
	if (!res)
		res = symlinkat(target, fs->backing_fd, path_rel(path)) == -1 ? -errno : 0;
	entry_unlock(fs, &l);
	return res;
}

static int tlfs_link(const char *from, const char *to)
{
	struct tlfs *fs = fs_get();
	struct op_lock l;
	int res;

	res = ctl_guard(from, -EPERM);
	if (!res)
		res = ctl_guard(to, -EEXIST);
	if (res)
		return res;
	res = entry_lock(fs, to, &l);
	if (res)
		return res;
	res = creds_enter(fs);
	if (!res)
		res = linkat(fs->backing_fd, path_rel(from), fs->backing_fd, path_rel(to), 0) == -1
			      ? -errno
			      : 0;
	entry_unlock(fs, &l);
	return res;
}

/* ---- rename --------------------------------------------------------------- */

struct key_list {
	char **v;
	size_t n, cap;
};

static int key_list_add(struct key_list *l, char *key)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		char **v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = key;
	return 0;
}

static void key_list_free(struct key_list *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

/* Collects the key of every entry below the directory KEY (document
 * strategy), breadth first without recursion. A non-directory has none. */
static int walk_below(struct tlfs *fs, const char *key, struct key_list *out)
{
	size_t next = 0;
	int err = 0;
	char *first = strdup(key);

	if (!first)
		return -ENOMEM;
	/* the queue is OUT itself; the start key is removed at the end */
	err = key_list_add(out, first);
	if (err) {
		free(first);
		return err;
	}
	while (!err && next < out->n) {
		const char *dirkey = out->v[next++];
		struct dirent *e;
		DIR *dp;
		int fd;

		fd = openat(fs->backing_fd, path_rel(dirkey),
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd == -1)
			continue; /* not a directory, or gone: nothing below */
		dp = fdopendir(fd);
		if (!dp) {
			close(fd);
			continue;
		}
		while ((e = readdir(dp)) != NULL) {
			char *child;

			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			if (asprintf(&child, "%s/%s", dirkey, e->d_name) < 0) {
				err = -ENOMEM;
				break;
			}
			err = key_list_add(out, child);
			if (err) {
				free(child);
				break;
			}
		}
		closedir(dp);
	}
	free(out->v[0]);
	memmove(out->v, out->v + 1, (out->n - 1) * sizeof(out->v[0]));
	out->n--;
	return err;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int tlfs_rename(const char *from, const char *to, unsigned int flags)
{
	struct tlfs *fs = fs_get();
	struct key_list below = {0};
	struct tl_plan *plan = NULL;
	struct tl_holder holder;
	int64_t t0 = mono_ms();
	int res;

	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))
		return -EINVAL;
	res = ctl_guard(from, -EPERM);
	if (!res)
		res = ctl_guard(to, -EPERM);
	if (res)
		return res;
	if (fs->cfg->lock_strategy == TL_STRATEGY_DOCUMENT) {
		res = creds_enter(fs);
		if (!res)
			res = walk_below(fs, from, &below);
		if (res)
			goto out_free_below;
	}
	res = lockplan_rename(fs->cfg->lock_strategy, from, to, flags,
			      (const char *const *)below.v, below.n, &plan);
	if (res) {
		if (res == -EINVAL)
			res = -ENAMETOOLONG; /* a key of PATH_MAX bytes or more */
		goto out_free_below;
	}
	creds_daemon(fs);
	res = lockmgr_acquire(&fs->mgr, plan, (uint32_t)fuse_get_context()->pid, &holder);
	if (res)
		goto out_free_plan;
	if (fs->cfg->rename_delay_ms) {
		struct timespec ts = {.tv_sec = fs->cfg->rename_delay_ms / 1000,
				      .tv_nsec = (long)(fs->cfg->rename_delay_ms % 1000) * 1000000};

		nanosleep(&ts, NULL);
	}
	if (!lockmgr_lease_fresh(&fs->mgr)) {
		stats_add(&fs->mgr.stats.fenced, 1);
		tl_log(LOG_ERR, "rename '%s' -> '%s' refused: this mount's lease is no longer fresh",
		       from, to);
		res = -ENOLCK;
		goto out_release_locks;
	}
	res = creds_enter(fs);
	if (res)
		goto out_release_locks;
#ifdef HAVE_RENAMEAT2
	res = renameat2(fs->backing_fd, path_rel(from), fs->backing_fd, path_rel(to), flags);
#else
	res = (int)syscall(SYS_renameat2, fs->backing_fd, path_rel(from), fs->backing_fd,
			   path_rel(to), flags);
#endif
	res = res == -1 ? -errno : 0;

out_release_locks:
	creds_daemon(fs);
	lockmgr_release(&fs->mgr, plan, &holder);
	tl_log(LOG_DEBUG, "rename '%s' -> '%s': %zu locks in %" PRId64 " ms: %s", from, to, plan->n,
	       mono_ms() - t0, res ? strerror(-res) : "ok");
out_free_plan:
	lockplan_free(plan);
out_free_below:
	key_list_free(&below);
	return res;
}

/* ---- attributes ---------------------------------------------------------- */

static int tlfs_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	int res = creds_enter(fs);

	if (res)
		return res;
	if (IS_FD(fi))
		res = fchmod((int)fi->fh, mode);
	else if (ctl_kind(path) != CTL_NONE)
		return -EPERM;
	else
		res = fchmodat(fs->backing_fd, path_rel(path), mode, 0);
	return res == -1 ? -errno : 0;
}

static int tlfs_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	int res = creds_enter(fs);

	if (res)
		return res;
	if (IS_FD(fi))
		res = fchown((int)fi->fh, uid, gid);
	else if (ctl_kind(path) != CTL_NONE)
		return -EPERM;
	else
		res = fchownat(fs->backing_fd, path_rel(path), uid, gid, AT_SYMLINK_NOFOLLOW);
	return res == -1 ? -errno : 0;
}

/* Runs truncate() on PATH through an O_PATH fd: there is no truncateat(),
 * and opening for writing would block on a FIFO or change atime rules. */
static int tlfs_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	char proc[64];
	int res, fd;

	res = creds_enter(fs);
	if (res)
		return res;
	if (IS_FD(fi)) {
		res = ftruncate((int)fi->fh, size);
		return res == -1 ? -errno : 0;
	}
	if (ctl_kind(path) != CTL_NONE)
		return -EPERM;
	fd = openat(fs->backing_fd, path_rel(path), O_PATH | O_CLOEXEC);
	if (fd == -1)
		return -errno;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	res = truncate(proc, size);
	res = res == -1 ? -errno : 0;
	close(fd);
	return res;
}

static int tlfs_utimens(const char *path, const struct timespec ts[2], struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	int res = creds_enter(fs);

	if (res)
		return res;
	if (IS_FD(fi))
		res = futimens((int)fi->fh, ts);
	else if (ctl_kind(path) != CTL_NONE)
		return -EPERM;
	else
		res = utimensat(fs->backing_fd, path_rel(path), ts, AT_SYMLINK_NOFOLLOW);
	return res == -1 ? -errno : 0;
}

/* ---- files --------------------------------------------------------------- */

static int tlfs_open(const char *path, struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	enum ctl_kind k = ctl_kind(path);
	int fd, res;

	if (k != CTL_NONE) {
		struct ctl_buf *b;

		if (k != CTL_STATS && k != CTL_LOCKS)
			return k == CTL_DIR ? -EISDIR : -ENOENT;
		if ((fi->flags & O_ACCMODE) != O_RDONLY)
			return -EACCES;
		creds_daemon(fs);
		res = ctl_render(fs, k, &b);
		if (res)
			return res;
		fi->fh = (uint64_t)(uintptr_t)b | CTL_TAG;
		fi->direct_io = 1;
		return 0;
	}
	res = creds_enter(fs);
	if (res)
		return res;
	fd = openat(fs->backing_fd, path_rel(path), fi->flags | O_CLOEXEC);
	if (fd == -1)
		return -errno;
	fi->fh = (uint64_t)fd;
	return 0;
}

static int tlfs_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	struct op_lock l;
	int fd, res;

	res = ctl_guard(path, -EEXIST);
	if (res)
		return res;
	res = entry_lock(fs, path, &l);
	if (res)
		return res;
	res = creds_enter(fs);
	if (!res) {
		fd = openat(fs->backing_fd, path_rel(path), fi->flags | O_CREAT | O_CLOEXEC, mode);
		if (fd == -1)
			res = -errno;
		else
			fi->fh = (uint64_t)fd;
	}
	entry_unlock(fs, &l);
	return res;
}

static int tlfs_read_buf(const char *path, struct fuse_bufvec **bufp, size_t size, off_t off,
			 struct fuse_file_info *fi)
{
	struct fuse_bufvec *src;

	if (fi->fh & CTL_TAG) {
		struct ctl_buf *b = (struct ctl_buf *)(uintptr_t)(fi->fh & ~CTL_TAG);
		size_t n = 0;

		src = malloc(sizeof(*src));
		if (!src)
			return -ENOMEM;
		*src = FUSE_BUFVEC_INIT(0);
		if ((size_t)off < b->len) {
			n = b->len - (size_t)off < size ? b->len - (size_t)off : size;
			src->buf[0].mem = malloc(n ? n : 1);
			if (!src->buf[0].mem) {
				free(src);
				return -ENOMEM;
			}
			memcpy(src->buf[0].mem, b->data + off, n);
		}
		src->buf[0].size = n;
		*bufp = src;
		return 0;
	}
	src = malloc(sizeof(*src));
	if (!src)
		return -ENOMEM;
	*src = FUSE_BUFVEC_INIT(size);
	src->buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	src->buf[0].fd = (int)fi->fh;
	src->buf[0].pos = off;
	*bufp = src;
	return 0;
}

static int tlfs_write_buf(const char *path, struct fuse_bufvec *buf, off_t off,
			  struct fuse_file_info *fi)
{
	struct fuse_bufvec dst = FUSE_BUFVEC_INIT(fuse_buf_size(buf));

	if (fi->fh & CTL_TAG)
		return -EBADF;
	dst.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	dst.buf[0].fd = (int)fi->fh;
	dst.buf[0].pos = off;
	return (int)fuse_buf_copy(&dst, buf, FUSE_BUF_SPLICE_NONBLOCK);
}

static int tlfs_statfs(const char *path, struct statvfs *st)
{
	struct tlfs *fs = fs_get();

	return fstatvfs(fs->backing_fd, st) == -1 ? -errno : 0;
}

static int tlfs_flush(const char *path, struct fuse_file_info *fi)
{
	int fd;

	if (fi->fh & CTL_TAG)
		return 0;
	/* close a duplicate so that close-time semantics of the backing
	 * filesystem (NFS write-back, POSIX lock release) happen now */
	fd = dup((int)fi->fh);
	if (fd == -1)
		return -errno;
	return close(fd) == -1 ? -errno : 0;
}

static int tlfs_release(const char *path, struct fuse_file_info *fi)
{
	if (fi->fh & CTL_TAG) {
		struct ctl_buf *b = (struct ctl_buf *)(uintptr_t)(fi->fh & ~CTL_TAG);

		free(b->data);
		free(b);
		return 0;
	}
	close((int)fi->fh);
	return 0;
}

static int tlfs_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	int res;

	if (fi->fh & CTL_TAG)
		return 0;
	res = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);
	return res == -1 ? -errno : 0;
}

static int tlfs_fallocate(const char *path, int mode, off_t off, off_t len,
			  struct fuse_file_info *fi)
{
	if (fi->fh & CTL_TAG)
		return -EBADF;
	return fallocate((int)fi->fh, mode, off, len) == -1 ? -errno : 0;
}

static ssize_t tlfs_copy_file_range(const char *path_in, struct fuse_file_info *fi_in,
				    off_t off_in, const char *path_out,
				    struct fuse_file_info *fi_out, off_t off_out, size_t len,
				    int flags)
{
	ssize_t res;

	if ((fi_in->fh & CTL_TAG) || (fi_out->fh & CTL_TAG))
		return -EXDEV; /* the kernel falls back to read and write */
	res = copy_file_range((int)fi_in->fh, &off_in, (int)fi_out->fh, &off_out, len,
			      (unsigned)flags);
	return res == -1 ? -errno : res;
}

static off_t tlfs_lseek(const char *path, off_t off, int whence, struct fuse_file_info *fi)
{
	off_t res;

	if (fi->fh & CTL_TAG)
		return -ESPIPE;
	res = lseek((int)fi->fh, off, whence);
	return res == -1 ? -errno : res;
}

static int tlfs_flock(const char *path, struct fuse_file_info *fi, int op)
{
	if (fi->fh & CTL_TAG)
		return -EBADF;
	return flock((int)fi->fh, op) == -1 ? -errno : 0;
}

/* POSIX record locks are forwarded as open file description locks on the
 * backing file, so that other hosts' locks on a shared backing tree are
 * seen: a lock belongs to an open() of the file rather than to a process. */
static int tlfs_lock(const char *path, struct fuse_file_info *fi, int cmd, struct flock *lk)
{
	int ofd_cmd;

	if (fi->fh & CTL_TAG)
		return -EBADF;
	switch (cmd) {
	case F_GETLK:
		ofd_cmd = F_OFD_GETLK;
		break;
	case F_SETLK:
		ofd_cmd = F_OFD_SETLK;
		break;
	case F_SETLKW:
		ofd_cmd = F_OFD_SETLKW;
		break;
	default:
		return -EINVAL;
	}
	lk->l_pid = 0;
	if (fcntl((int)fi->fh, ofd_cmd, lk) == -1)
		return -errno;
	if (cmd == F_GETLK && lk->l_type != F_UNLCK)
		lk->l_pid = -1; /* the holder is not a process here */
	return 0;
}

/* ---- extended attributes -------------------------------------------------- */

/* Opens PATH as an O_PATH fd and names it through /proc, which the *xattr
 * calls follow to the file itself (passthrough_ll does the same). */
static int xattr_open(struct tlfs *fs, const char *path, char proc[64])
{
	int fd, res;

	res = creds_enter(fs);
	if (res)
		return res;
	fd = openat(fs->backing_fd, path_rel(path), O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1)
		return -errno;
	snprintf(proc, 64, "/proc/self/fd/%d", fd);
	return fd;
}

static int tlfs_setxattr(const char *path, const char *name, const char *value, size_t size,
			 int flags)
{
	char proc[64];
	int fd, res;

	if (ctl_kind(path) != CTL_NONE)
		return -EPERM;
	fd = xattr_open(fs_get(), path, proc);
	if (fd < 0)
		return fd;
	res = setxattr(proc, name, value, size, flags);
	res = res == -1 ? -errno : 0;
	close(fd);
	return res;
}

static int tlfs_getxattr(const char *path, const char *name, char *value, size_t size)
{
	char proc[64];
	ssize_t res;
	int fd;

	if (ctl_kind(path) != CTL_NONE)
		return -ENODATA;
	fd = xattr_open(fs_get(), path, proc);
	if (fd < 0)
		return fd;
	res = getxattr(proc, name, value, size);
	res = res == -1 ? -errno : res;
	close(fd);
	return (int)res;
}

static int tlfs_listxattr(const char *path, char *list, size_t size)
{
	char proc[64];
	ssize_t res;
	int fd;

	if (ctl_kind(path) != CTL_NONE)
		return 0;
	fd = xattr_open(fs_get(), path, proc);
	if (fd < 0)
		return fd;
	res = listxattr(proc, list, size);
	res = res == -1 ? -errno : res;
	close(fd);
	return (int)res;
}

static int tlfs_removexattr(const char *path, const char *name)
{
	char proc[64];
	int fd, res;

	if (ctl_kind(path) != CTL_NONE)
		return -EPERM;
	fd = xattr_open(fs_get(), path, proc);
	if (fd < 0)
		return fd;
	res = removexattr(proc, name);
	res = res == -1 ? -errno : 0;
	close(fd);
	return res;
}

static void tlfs_destroy(void *private_data)
{
	struct tlfs *fs = private_data;

	tl_log(LOG_INFO, "unmounting: %" PRIu64 " renames, %" PRIu64 " conflicts, %" PRIu64
			 " timeouts",
	       stats_get(&fs->mgr.stats.renames), stats_get(&fs->mgr.stats.conflicts),
	       stats_get(&fs->mgr.stats.timeouts));
}

const struct fuse_operations tlfs_ops = {
	.init = tlfs_init,
	.destroy = tlfs_destroy,
	.getattr = tlfs_getattr,
	.access = tlfs_access,
	.readlink = tlfs_readlink,
	.opendir = tlfs_opendir,
	.readdir = tlfs_readdir,
	.releasedir = tlfs_releasedir,
	.fsyncdir = tlfs_fsyncdir,
	.mknod = tlfs_mknod,
	.mkdir = tlfs_mkdir,
	.symlink = tlfs_symlink,
	.unlink = tlfs_unlink,
	.rmdir = tlfs_rmdir,
	.rename = tlfs_rename,
	.link = tlfs_link,
	.chmod = tlfs_chmod,
	.chown = tlfs_chown,
	.truncate = tlfs_truncate,
	.utimens = tlfs_utimens,
	.open = tlfs_open,
	.create = tlfs_create,
	.read_buf = tlfs_read_buf,
	.write_buf = tlfs_write_buf,
	.statfs = tlfs_statfs,
	.flush = tlfs_flush,
	.release = tlfs_release,
	.fsync = tlfs_fsync,
	.fallocate = tlfs_fallocate,
	.copy_file_range = tlfs_copy_file_range,
	.lseek = tlfs_lseek,
	.flock = tlfs_flock,
	.lock = tlfs_lock,
	.setxattr = tlfs_setxattr,
	.getxattr = tlfs_getxattr,
	.listxattr = tlfs_listxattr,
	.removexattr = tlfs_removexattr,
};
