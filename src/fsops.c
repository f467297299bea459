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
#include <pthread.h>
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
#include "stats.h"

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

/* Length of the valid UTF-8 sequence at S (2 to 4), or 0. */
static size_t utf8_seq_len(const unsigned char *s)
{
	size_t n, i;
	uint32_t cp;

	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* Appends KEY as one line of valid UTF-8: backslashes doubled, control
 * bytes and bytes that are not UTF-8 written as \xNN. */
static void ctl_put_key(FILE *f, const char *key)
{
	const unsigned char *k = (const unsigned char *)key;

	while (*k) {
		size_t n;

		if (*k == '\\') {
			fputs("\\\\", f);
			k++;
		} else if (*k < 0x20 || *k == 0x7f) {
			fprintf(f, "\\x%02x", *k++);
		} else if (*k < 0x80) {
			fputc(*k++, f);
		} else {
			n = utf8_seq_len(k);
			if (n) {
				fwrite(k, 1, n, f);
				k += n;
			} else {
				fprintf(f, "\\x%02x", *k++);
			}
		}
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

/* ---- lookups during a rename ----------------------------------------- */

/* While a rename holds its locks, a lookup of its source or target, or of
 * a name below them, waits for it as under the guide's tree locks (shared
 * on the ancestors of what one reads), and then sees the result: the old
 * path is gone (ENOENT). Lookups below a directory being renamed are
 * already held back by libfuse and the kernel; this covers the names
 * themselves, which the kernel revalidates without the directory lock.
 * The wait is bounded by lock_timeout (EBUSY, logged). */
struct inflight {
	struct inflight *next;
	const char *from;
	const char *to;
};

static struct {
	pthread_mutex_t mutex;
	pthread_cond_t cond;     /* broadcast when a rename ends */
	struct inflight *list;   /* protected by mutex */
	unsigned long count;     /* atomic; read without the mutex */
} inflight_tab = {.mutex = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* True when PATH is TOP or below it. */
static bool path_within(const char *path, const char *top)
{
	size_t n = strlen(top);

	return strncmp(path, top, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static void inflight_add(struct inflight *r)
{
	pthread_mutex_lock(&inflight_tab.mutex);
	r->next = inflight_tab.list;
	inflight_tab.list = r;
	__atomic_add_fetch(&inflight_tab.count, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&inflight_tab.mutex);
}

static void inflight_remove(struct inflight *r)
{
	struct inflight **pp;

	pthread_mutex_lock(&inflight_tab.mutex);
	for (pp = &inflight_tab.list; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			__atomic_sub_fetch(&inflight_tab.count, 1, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_cond_broadcast(&inflight_tab.cond);
	pthread_mutex_unlock(&inflight_tab.mutex);
}

static const struct inflight *inflight_find_locked(const char *path)
{
	const struct inflight *r;

	for (r = inflight_tab.list; r; r = r->next)
		if (path_within(path, r->from) || path_within(path, r->to))
			return r;
	return NULL;
}

/* Waits until no rename in progress touches PATH. Returns 0, or -EBUSY
 * after lock_timeout. */
static int inflight_wait(struct tlfs *fs, const char *path)
{
	const struct inflight *r;
	struct timespec t0, dl, now;
	int64_t waited_us;
	char from[256], to[256];
	int res = 0;

	if (!__atomic_load_n(&inflight_tab.count, __ATOMIC_ACQUIRE))
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	dl = t0;
	dl.tv_sec += (time_t)fs->cfg->lock_timeout;
	dl.tv_nsec += (long)((fs->cfg->lock_timeout - (double)(time_t)fs->cfg->lock_timeout) * 1e9);
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&inflight_tab.mutex);
	r = inflight_find_locked(path);
	if (!r)
		goto out_unlock;
	stats_add(&fs->mgr.stats.waits, 1);
	while (r) {
		if (pthread_cond_clockwait(&inflight_tab.cond, &inflight_tab.mutex, CLOCK_MONOTONIC,
					   &dl) == ETIMEDOUT) {
			r = inflight_find_locked(path);
			if (r) {
				snprintf(from, sizeof(from), "%s", r->from);
				snprintf(to, sizeof(to), "%s", r->to);
				res = -EBUSY;
			}
			break;
		}
		r = inflight_find_locked(path);
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	waited_us = (int64_t)(now.tv_sec - t0.tv_sec) * 1000000 + (now.tv_nsec - t0.tv_nsec) / 1000;
	stats_record_wait(&fs->mgr.stats, (uint64_t)waited_us);
	if (res) {
		stats_add(&fs->mgr.stats.timeouts, 1);
		tl_log(LOG_WARNING,
		       "lookup of '%s' timed out after %" PRId64 " ms: rename '%s' -> '%s' holds it",
		       path, waited_us / 1000, from, to);
	}
out_unlock:
	pthread_mutex_unlock(&inflight_tab.mutex);
	return res;
}

/* ---- unlinked files that are still open ------------------------------- */

/* With hard_remove off, libfuse keeps the node of a file that is unlinked
 * while open, under a new name ".fuse_hidden<node><counter>" in the same
 * directory, so that fstat() and the last release still find a path (with
 * hard_remove, fstat of such a file fails with ESTALE). We do not create
 * that name in the backing tree: the rename to it removes the file's name
 * for real (as an unlink would, with the caller's rights) and keeps an
 * O_PATH fd on the file under the hidden name; operations on the hidden
 * path are served through that fd, and its unlink closes it. So nothing
 * shows in directories, rmdir of the parent works and other hosts see a
 * plain unlink. */
#define HIDDEN_PREFIX ".fuse_hidden"

struct hidden {
	struct hidden *next;
	char *path;
	int fd;                  /* O_PATH on the unlinked file */
	unsigned int refs;       /* the table's, plus one per user */
};

static struct {
	pthread_mutex_t mutex;
	struct hidden *list;     /* protected by mutex */
	unsigned long count;     /* atomic; read without the mutex */
} hidden_tab = {.mutex = PTHREAD_MUTEX_INITIALIZER};

/* libfuse's hidden names are HIDDEN_PREFIX and 16 lowercase hex digits;
 * such a name is reserved on a treelockfs mount. */
static bool is_hidden_name(const char *path)
{
	const char *base = path ? strrchr(path, '/') : NULL;
	size_t i;

	if (!base || strncmp(base + 1, HIDDEN_PREFIX, sizeof(HIDDEN_PREFIX) - 1) != 0)
		return false;
	base += sizeof(HIDDEN_PREFIX);
	for (i = 0; i < 16; i++)
		if (!base[i] || !strchr("0123456789abcdef", base[i]))
			return false;
	return base[16] == '\0';
}

/* libfuse checks that a hidden name is free (getattr, ENOENT) right
 * before it renames to it, on the same thread: the rename that follows
 * such a check is taken as a hide. */
static __thread char *hide_probe;

static void hide_probe_set(const char *path)
{
	free(hide_probe);
	hide_probe = path && is_hidden_name(path) ? strdup(path) : NULL;
}

/* The entry of the hidden PATH with a reference for the caller, or NULL. */
static struct hidden *hidden_get(const char *path)
{
	struct hidden *h;

	if (!path || !__atomic_load_n(&hidden_tab.count, __ATOMIC_ACQUIRE) ||
	    !is_hidden_name(path))
		return NULL;
	pthread_mutex_lock(&hidden_tab.mutex);
	for (h = hidden_tab.list; h; h = h->next)
		if (strcmp(h->path, path) == 0)
			break;
	if (h)
		h->refs++;
	pthread_mutex_unlock(&hidden_tab.mutex);
	return h;
}

/* Drops a reference; the last one closes the fd. Accepts NULL. */
static void hidden_put(struct hidden *h)
{
	bool last;

	if (!h)
		return;
	pthread_mutex_lock(&hidden_tab.mutex);
	last = --h->refs == 0;
	pthread_mutex_unlock(&hidden_tab.mutex);
	if (!last)
		return;
	close(h->fd);
	free(h->path);
	free(h);
}

/* Removes PATH from the table (its unlink). Returns 0 or -ENOENT. */
static int hidden_remove(const char *path)
{
	struct hidden **pp, *h = NULL;

	pthread_mutex_lock(&hidden_tab.mutex);
	for (pp = &hidden_tab.list; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->path, path) == 0) {
			h = *pp;
			*pp = h->next;
			__atomic_sub_fetch(&hidden_tab.count, 1, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&hidden_tab.mutex);
	if (!h)
		return -ENOENT;
	hidden_put(h);
	return 0;
}

/* Follows a rename of FROM to TO (or their exchange) in the hidden paths
 * below them, as libfuse does in its nodes. */
static void hidden_renamed(const char *from, const char *to, bool exchange)
{
	struct hidden *h;

	if (!__atomic_load_n(&hidden_tab.count, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&hidden_tab.mutex);
	for (h = hidden_tab.list; h; h = h->next) {
		const char *old = NULL, *new = NULL;
		char *p;

		if (path_within(h->path, from) && strcmp(h->path, from) != 0) {
			old = from;
			new = to;
		} else if (exchange && path_within(h->path, to) && strcmp(h->path, to) != 0) {
			old = to;
			new = from;
		}
		if (!old || asprintf(&p, "%s%s", new, h->path + strlen(old)) < 0)
			continue;
		free(h->path);
		h->path = p;
	}
	pthread_mutex_unlock(&hidden_tab.mutex);
}

/* The /proc name of a hidden file's fd, which open(), chmod(), truncate()
 * and the *xattr() calls follow to the file itself. */
static void hidden_proc(const struct hidden *h, char proc[64])
{
	snprintf(proc, 64, "/proc/self/fd/%d", h->fd);
}

/* ---- hard links ------------------------------------------------------- */

/* libfuse's high-level API gives each name its own node, so the kernel
 * caches the attributes of two hard links separately: after link(), or a
 * chmod() through one name, the other would show a stale link count, mode
 * or ctime for attr_timeout. We remember the names seen of files with
 * more than one link and invalidate the others' cached attributes after a
 * change through one of them. The table is a bounded cache: when full it
 * is emptied, which only costs staleness within attr_timeout. */
#define LINKS_MAX 4096

struct link_name {
	struct link_name *next;
	dev_t dev;
	ino_t ino;
	char *path;
};

static struct {
	pthread_mutex_t mutex;
	struct link_name *list;  /* protected by mutex */
	unsigned long count;     /* atomic; read without the mutex */
} links_tab = {.mutex = PTHREAD_MUTEX_INITIALIZER};

static bool links_any(void)
{
	return __atomic_load_n(&links_tab.count, __ATOMIC_ACQUIRE) != 0;
}

static void links_clear_locked(void)
{
	struct link_name *l, *next;

	for (l = links_tab.list; l; l = next) {
		next = l->next;
		free(l->path);
		free(l);
	}
	links_tab.list = NULL;
	__atomic_store_n(&links_tab.count, 0, __ATOMIC_RELEASE);
}

/* Notes PATH as a name of ST when ST has several links. */
static void links_note(const char *path, const struct stat *st)
{
	struct link_name *l;

	if (!path || S_ISDIR(st->st_mode) || st->st_nlink < 2)
		return;
	pthread_mutex_lock(&links_tab.mutex);
	for (l = links_tab.list; l; l = l->next)
		if (l->ino == st->st_ino && l->dev == st->st_dev && strcmp(l->path, path) == 0)
			goto out;
	if (links_tab.count >= LINKS_MAX)
		links_clear_locked();
	l = malloc(sizeof(*l));
	if (!l)
		goto out;
	l->path = strdup(path);
	if (!l->path) {
		free(l);
		goto out;
	}
	l->dev = st->st_dev;
	l->ino = st->st_ino;
	l->next = links_tab.list;
	links_tab.list = l;
	__atomic_add_fetch(&links_tab.count, 1, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&links_tab.mutex);
}

/* Forgets the name PATH. */
static void links_forget(const char *path)
{
	struct link_name **pp = &links_tab.list, *l;

	if (!links_any())
		return;
	pthread_mutex_lock(&links_tab.mutex);
	while ((l = *pp) != NULL) {
		if (strcmp(l->path, path) == 0) {
			*pp = l->next;
			free(l->path);
			free(l);
			__atomic_sub_fetch(&links_tab.count, 1, __ATOMIC_RELEASE);
		} else {
			pp = &l->next;
		}
	}
	pthread_mutex_unlock(&links_tab.mutex);
}

/* Drops the kernel's cached attributes of every other known name of the
 * file DEV:INO than EXCEPT. The paths are copied out first: the
 * invalidation writes to /dev/fuse, which is not done under our mutex. */
static void links_invalidate(dev_t dev, ino_t ino, const char *except)
{
	char *paths[16];
	size_t n = 0, i;
	struct link_name *l;
	struct fuse *fuse = fuse_get_context()->fuse;

	if (!links_any())
		return;
	pthread_mutex_lock(&links_tab.mutex);
	for (l = links_tab.list; l && n < sizeof(paths) / sizeof(paths[0]); l = l->next) {
		if (l->ino != ino || l->dev != dev || (except && strcmp(l->path, except) == 0))
			continue;
		paths[n] = strdup(l->path);
		if (paths[n])
			n++;
	}
	pthread_mutex_unlock(&links_tab.mutex);
	for (i = 0; i < n; i++) {
		if (fuse_invalidate_path(fuse, paths[i]) == -ENOENT)
			links_forget(paths[i]);
		free(paths[i]);
	}
}

/* After a change of the file at PATH (or open as FD when >= 0): refreshes
 * the other names' attributes when it has several links. */
static void links_changed(struct tlfs *fs, const char *path, int fd)
{
	struct stat st;
	int res;

	if (!links_any())
		return;
	if (fd >= 0)
		res = fstat(fd, &st);
	else if (path)
		res = fstatat(fs->backing_fd, path_rel(path), &st, AT_SYMLINK_NOFOLLOW);
	else
		return;
	if (res == 0 && !S_ISDIR(st.st_mode))
		links_invalidate(st.st_dev, st.st_ino, path);
}

/* ---- POSIX record locks ------------------------------------------------- */

/* A POSIX lock belongs to a process (the kernel's lock owner) and covers
 * all its open files of an inode; closing any of them drops them all, and
 * a child closing an inherited fd drops only the child's. We forward them
 * as open file description locks on the backing file (so that other hosts
 * and local processes see them), on one description per (inode, owner):
 * an fd the daemon opens for that owner and closes when the owner flushes
 * the file, which releases exactly that owner's locks. */
struct lk_owner {
	struct lk_owner *next;
	dev_t dev;
	ino_t ino;
	uint64_t owner;
	int fd;
	unsigned int refs;       /* the table's, plus one per user */
};

static struct {
	pthread_mutex_t mutex;
	struct lk_owner *list;   /* protected by mutex */
} lk_tab = {.mutex = PTHREAD_MUTEX_INITIALIZER};

static void lk_put(struct lk_owner *o)
{
	bool last;

	if (!o)
		return;
	pthread_mutex_lock(&lk_tab.mutex);
	last = --o->refs == 0;
	pthread_mutex_unlock(&lk_tab.mutex);
	if (last) {
		close(o->fd);
		free(o);
	}
}

static struct lk_owner *lk_find_locked(dev_t dev, ino_t ino, uint64_t owner)
{
	struct lk_owner *o;

	for (o = lk_tab.list; o; o = o->next)
		if (o->owner == owner && o->ino == ino && o->dev == dev)
			return o;
	return NULL;
}

/* The description of OWNER's locks on the file open as FD, with a
 * reference; created when CREATE. Returns 0, -ENOENT (none and not
 * CREATE) or -errno. */
static int lk_get(int fd, uint64_t owner, bool create, struct lk_owner **out)
{
	struct lk_owner *o, *found;
	struct stat st;
	char proc[64];
	int ofd;

	if (fstat(fd, &st) == -1)
		return -errno;
	pthread_mutex_lock(&lk_tab.mutex);
	o = lk_find_locked(st.st_dev, st.st_ino, owner);
	if (o)
		o->refs++;
	pthread_mutex_unlock(&lk_tab.mutex);
	if (o || !create) {
		*out = o;
		return o ? 0 : -ENOENT;
	}
	/* read-write whatever FD allows: the kernel has checked the mode of
	 * the caller's own file against the lock type already */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	ofd = open(proc, O_RDWR | O_CLOEXEC | O_NOCTTY);
	if (ofd == -1)
		ofd = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (ofd == -1)
		ofd = open(proc, O_WRONLY | O_CLOEXEC | O_NOCTTY);
	if (ofd == -1)
		return -errno;
	o = calloc(1, sizeof(*o));
	if (!o) {
		close(ofd);
		return -ENOMEM;
	}
	o->dev = st.st_dev;
	o->ino = st.st_ino;
	o->owner = owner;
	o->fd = ofd;
	o->refs = 2;
	pthread_mutex_lock(&lk_tab.mutex);
	found = lk_find_locked(st.st_dev, st.st_ino, owner);
	if (found) {
		found->refs++;
	} else {
		o->next = lk_tab.list;
		lk_tab.list = o;
	}
	pthread_mutex_unlock(&lk_tab.mutex);
	if (found) {
		close(ofd);
		free(o);
		o = found;
	}
	*out = o;
	return 0;
}

/* Drops every lock OWNER holds on the file open as FD (its close). */
static void lk_drop_owner(int fd, uint64_t owner)
{
	struct lk_owner **pp, *o = NULL;
	struct stat st;

	if (!__atomic_load_n(&lk_tab.list, __ATOMIC_ACQUIRE) || fstat(fd, &st) == -1)
		return;
	pthread_mutex_lock(&lk_tab.mutex);
	for (pp = &lk_tab.list; *pp; pp = &(*pp)->next) {
		if ((*pp)->owner == owner && (*pp)->ino == st.st_ino && (*pp)->dev == st.st_dev) {
			o = *pp;
			*pp = o->next;
			break;
		}
	}
	pthread_mutex_unlock(&lk_tab.mutex);
	lk_put(o);
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
	/* an unlinked open file keeps a (hidden) path, so that fstat() works;
	 * see "unlinked files that are still open" */
	cfg->hard_remove = 0;
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
	struct hidden *h;
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
	h = hidden_get(path);
	if (h) {
		res = fstat(h->fd, st) == -1 ? -errno : 0;
		hidden_put(h);
		return res;
	}
	res = inflight_wait(fs, path);
	if (res)
		return res;
	res = creds_enter(fs);
	if (res)
		return res;
	res = fstatat(fs->backing_fd, path_rel(path), st, AT_SYMLINK_NOFOLLOW);
	if (res == -1) {
		res = -errno;
		if (res == -ENOENT)
			hide_probe_set(path);
		return res;
	}
	links_note(path, st);
	return 0;
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

/* ---- namespace operations ------------------------------------------------ */

/* The operations that create or remove one name. They share one shape:
 * refuse the control entry's names, take the entry's locks (lock_scope=
 * namespace), act as the caller, make the one syscall, release. */
enum ns_op { NS_MKNOD, NS_MKDIR, NS_UNLINK, NS_RMDIR, NS_SYMLINK, NS_LINK, NS_CREATE };

struct ns_req {
	enum ns_op op;
	const char *path;           /* the name created or removed (link: the new one) */
	const char *other;          /* symlink: its target; link: the existing name */
	mode_t mode;                /* mknod, mkdir, create */
	dev_t rdev;                 /* mknod */
	struct fuse_file_info *fi;  /* create: gets the fd */
	struct stat st;             /* unlink: the file, when it had several links */
	bool linked;                /* unlink: ST is valid */
};

/* The syscall of R, as the caller and under its locks. Returns 0 or -errno. */
static int ns_syscall(struct tlfs *fs, struct ns_req *r)
{
	const char *rel = path_rel(r->path);
	int res, fd;

	switch (r->op) {
	case NS_MKNOD:
		if (S_ISFIFO(r->mode))
			res = mkfifoat(fs->backing_fd, rel, r->mode);
		else
			res = mknodat(fs->backing_fd, rel, r->mode, r->rdev);
		break;
	case NS_MKDIR:
		res = mkdirat(fs->backing_fd, rel, r->mode);
		break;
	case NS_UNLINK:
		if (links_any())
			r->linked = fstatat(fs->backing_fd, rel, &r->st, AT_SYMLINK_NOFOLLOW) == 0 &&
				    r->st.st_nlink > 1;
		res = unlinkat(fs->backing_fd, rel, 0);
		break;
	case NS_RMDIR:
		res = unlinkat(fs->backing_fd, rel, AT_REMOVEDIR);
		break;
	case NS_SYMLINK:
		res = symlinkat(r->other, fs->backing_fd, rel);
		break;
	case NS_LINK:
		res = linkat(fs->backing_fd, path_rel(r->other), fs->backing_fd, rel, 0);
		break;
	case NS_CREATE:
		fd = openat(fs->backing_fd, rel, r->fi->flags | O_CREAT | O_CLOEXEC, r->mode);
		if (fd == -1)
			return -errno;
		r->fi->fh = (uint64_t)fd;
		return 0;
	default:
		return -ENOSYS;
	}
	return res == -1 ? -errno : 0;
}

/* Runs R: guard, entry lock, caller's credentials, syscall, unlock.
 * Returns 0 or -errno; the locks are released on every path. */
static int ns_run(struct tlfs *fs, struct ns_req *r)
{
	bool removes = r->op == NS_UNLINK || r->op == NS_RMDIR;
	struct op_lock l;
	int res = 0;

	if (r->op == NS_LINK)
		res = ctl_guard(r->other, -EPERM);
	if (!res)
		res = ctl_guard(r->path, removes ? -EPERM : -EEXIST);
	if (res)
		return res;
	res = entry_lock(fs, r->path, &l);
	if (res)
		return res;
	res = creds_enter(fs);
	if (!res)
		res = ns_syscall(fs, r);
	entry_unlock(fs, &l);
	return res;
}

static int tlfs_mknod(const char *path, mode_t mode, dev_t rdev)
{
	struct ns_req r = {.op = NS_MKNOD, .path = path, .mode = mode, .rdev = rdev};

	return ns_run(fs_get(), &r);
}

static int tlfs_mkdir(const char *path, mode_t mode)
{
	struct ns_req r = {.op = NS_MKDIR, .path = path, .mode = mode};

	return ns_run(fs_get(), &r);
}

static int tlfs_unlink(const char *path)
{
	struct ns_req r = {.op = NS_UNLINK, .path = path};
	int res;

	if (ctl_kind(path) == CTL_NONE && hidden_remove(path) == 0)
		return 0; /* the last close of an unlinked file */
	res = ns_run(fs_get(), &r);
	if (!res && r.linked) {
		links_forget(path);
		links_invalidate(r.st.st_dev, r.st.st_ino, NULL);
	}
	return res;
}

static int tlfs_rmdir(const char *path)
{
	struct ns_req r = {.op = NS_RMDIR, .path = path};

	return ns_run(fs_get(), &r);
}

static int tlfs_symlink(const char *target, const char *path)
{
	struct ns_req r = {.op = NS_SYMLINK, .path = path, .other = target};

	return ns_run(fs_get(), &r);
}

static int tlfs_link(const char *from, const char *to)
{
	struct tlfs *fs = fs_get();
	struct ns_req r = {.op = NS_LINK, .path = to, .other = from};
	struct stat st;
	int res;

	res = ns_run(fs, &r);
	if (!res && fstatat(fs->backing_fd, path_rel(to), &st, AT_SYMLINK_NOFOLLOW) == 0) {
		/* FROM's node has its own cached link count and ctime */
		links_note(from, &st);
		links_note(to, &st);
		links_invalidate(st.st_dev, st.st_ino, to);
	}
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

/* libfuse hides FROM, which is open, as TO instead of unlinking it (or
 * before renaming over it): remove the name for real, keep the file. */
static int rename_hide(struct tlfs *fs, const char *from, const char *to)
{
	struct hidden *h;
	struct op_lock l;
	struct stat st;
	int res;

	res = -ENOMEM;
	h = calloc(1, sizeof(*h));
	if (!h)
		goto out;
	h->path = strdup(to);
	if (!h->path)
		goto out_free;
	h->refs = 1;
	res = entry_lock(fs, from, &l);
	if (res)
		goto out_free;
	res = creds_enter(fs);
	if (res)
		goto out_unlock;
	h->fd = openat(fs->backing_fd, path_rel(from), O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (h->fd == -1) {
		res = -errno;
		goto out_unlock;
	}
	if (unlinkat(fs->backing_fd, path_rel(from), 0) == -1) {
		res = -errno;
		close(h->fd);
		goto out_unlock;
	}
	pthread_mutex_lock(&hidden_tab.mutex);
	h->next = hidden_tab.list;
	hidden_tab.list = h;
	__atomic_add_fetch(&hidden_tab.count, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&hidden_tab.mutex);
	entry_unlock(fs, &l);
	if (links_any() && fstat(h->fd, &st) == 0) {
		links_forget(from);
		links_invalidate(st.st_dev, st.st_ino, NULL);
	}
	return 0;

out_unlock:
	entry_unlock(fs, &l);
out_free:
	free(h->path);
	free(h);
out:
	return res;
}

static int tlfs_rename(const char *from, const char *to, unsigned int flags)
{
	struct tlfs *fs = fs_get();
	struct key_list below = {0};
	struct tl_plan *plan = NULL;
	struct tl_holder holder;
	/* the clock is read for the debug line only */
	int64_t t0 = tl_log_level >= LOG_DEBUG ? mono_ms() : 0;
	struct inflight busy = {.from = from, .to = to};
	struct stat st;
	bool linked = false;
	int res;

	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))
		return -EINVAL;
	if (!flags && hide_probe && strcmp(hide_probe, to) == 0 && ctl_kind(from) == CTL_NONE) {
		hide_probe_set(NULL);
		return rename_hide(fs, from, to);
	}
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
	if (plan->n)
		inflight_add(&busy);
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
	if (links_any() && fstatat(fs->backing_fd, path_rel(from), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    !S_ISDIR(st.st_mode) && st.st_nlink > 1)
		linked = true;
#ifdef HAVE_RENAMEAT2
	res = renameat2(fs->backing_fd, path_rel(from), fs->backing_fd, path_rel(to), flags);
#else
	res = (int)syscall(SYS_renameat2, fs->backing_fd, path_rel(from), fs->backing_fd,
			   path_rel(to), flags);
#endif
	res = res == -1 ? -errno : 0;

out_release_locks:
	if (plan->n)
		inflight_remove(&busy);
	creds_daemon(fs);
	lockmgr_release(&fs->mgr, plan, &holder);
	tl_log(LOG_DEBUG, "rename '%s' -> '%s': %zu locks in %" PRId64 " ms: %s", from, to, plan->n,
	       mono_ms() - t0, res ? strerror(-res) : "ok");
out_free_plan:
	lockplan_free(plan);
out_free_below:
	key_list_free(&below);
	if (!res && linked) {
		links_forget(from);
		links_invalidate(st.st_dev, st.st_ino, NULL);
	}
	if (!res)
		hidden_renamed(from, to, flags & RENAME_EXCHANGE);
	return res;
}

/* ---- attributes ---------------------------------------------------------- */

/* True when MODE only clears set-user-ID / set-group-ID bits of the file
 * open as FD (or at PATH). The kernel asks for exactly that, in the name
 * of a writer that does not own the file, before a write or truncate (it
 * leaves killing the bits to the filesystem and has checked the write
 * permission itself). */
static bool chmod_kills_priv_only(struct tlfs *fs, const char *path, int fd, mode_t mode)
{
	struct stat st;
	mode_t old, priv = S_ISUID | S_ISGID;
	int res;

	if (fd >= 0)
		res = fstat(fd, &st);
	else
		res = fstatat(fs->backing_fd, path_rel(path), &st, AT_SYMLINK_NOFOLLOW);
	if (res == -1 || !S_ISREG(st.st_mode))
		return false;
	old = st.st_mode & 07777;
	mode &= 07777;
	return (old & ~priv) == (mode & ~priv) && (mode & priv & ~old) == 0 && mode != old;
}

static int tlfs_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	int fd = IS_FD(fi) ? (int)fi->fh : -1;
	struct hidden *h = NULL;
	char proc[64];
	int res;

	if (fd < 0 && ctl_kind(path) != CTL_NONE)
		return -EPERM;
	if (fd < 0) {
		h = hidden_get(path);
		if (h)
			fd = h->fd;
	}
	res = creds_enter(fs);
	if (res)
		goto out;
	for (;;) {
		if (h) {
			hidden_proc(h, proc);
			res = chmod(proc, mode);
		} else if (fd >= 0) {
			res = fchmod(fd, mode);
		} else {
			res = fchmodat(fs->backing_fd, path_rel(path), mode, 0);
		}
		res = res == -1 ? -errno : 0;
		if (res != -EPERM || !fs->switch_creds || thread_creds.uid == 0 ||
		    !chmod_kills_priv_only(fs, path, fd, mode))
			break;
		creds_daemon(fs);
	}
	if (!res)
		links_changed(fs, path, fd);
out:
	hidden_put(h);
	return res;
}

static int tlfs_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	int fd = IS_FD(fi) ? (int)fi->fh : -1;
	struct hidden *h = NULL;
	int res;

	if (fd < 0 && ctl_kind(path) != CTL_NONE)
		return -EPERM;
	if (fd < 0) {
		h = hidden_get(path);
		if (h)
			fd = h->fd;
	}
	res = creds_enter(fs);
	if (res)
		goto out;
	if (h)
		res = fchownat(fd, "", uid, gid, AT_EMPTY_PATH);
	else if (fd >= 0)
		res = fchown(fd, uid, gid);
	else
		res = fchownat(fs->backing_fd, path_rel(path), uid, gid, AT_SYMLINK_NOFOLLOW);
	res = res == -1 ? -errno : 0;
	if (!res)
		links_changed(fs, path, fd);
out:
	hidden_put(h);
	return res;
}

/* Runs truncate() on PATH through an O_PATH fd: there is no truncateat(),
 * and opening for writing would block on a FIFO or change atime rules. */
static int tlfs_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	struct hidden *h = NULL;
	char proc[64];
	int res, fd;

	res = creds_enter(fs);
	if (res)
		return res;
	if (IS_FD(fi)) {
		res = ftruncate((int)fi->fh, size);
		res = res == -1 ? -errno : 0;
		if (!res)
			links_changed(fs, path, (int)fi->fh);
		return res;
	}
	if (ctl_kind(path) != CTL_NONE)
		return -EPERM;
	h = hidden_get(path);
	if (h) {
		hidden_proc(h, proc);
		res = truncate(proc, size) == -1 ? -errno : 0;
		hidden_put(h);
		return res;
	}
	fd = openat(fs->backing_fd, path_rel(path), O_PATH | O_CLOEXEC);
	if (fd == -1)
		return -errno;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	res = truncate(proc, size);
	res = res == -1 ? -errno : 0;
	if (!res)
		links_changed(fs, path, fd);
	close(fd);
	return res;
}

static int tlfs_utimens(const char *path, const struct timespec ts[2], struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	struct hidden *h = NULL;
	char proc[64];
	int res;

	if (!IS_FD(fi) && ctl_kind(path) != CTL_NONE)
		return -EPERM;
	res = creds_enter(fs);
	if (res)
		return res;
	if (IS_FD(fi)) {
		res = futimens((int)fi->fh, ts);
	} else {
		h = hidden_get(path);
		if (h) {
			hidden_proc(h, proc);
			res = utimensat(AT_FDCWD, proc, ts, 0);
		} else {
			res = utimensat(fs->backing_fd, path_rel(path), ts, AT_SYMLINK_NOFOLLOW);
		}
	}
	res = res == -1 ? -errno : 0;
	if (!res)
		links_changed(fs, path, IS_FD(fi) ? (int)fi->fh : (h ? h->fd : -1));
	hidden_put(h);
	return res;
}

/* ---- files --------------------------------------------------------------- */

static int tlfs_open(const char *path, struct fuse_file_info *fi)
{
	struct tlfs *fs = fs_get();
	enum ctl_kind k = ctl_kind(path);
	struct hidden *h;
	char proc[64];
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
	h = hidden_get(path);
	if (h) {
		/* opened again through /proc/PID/fd of a client */
		hidden_proc(h, proc);
		fd = open(proc, (fi->flags & ~(O_CREAT | O_EXCL | O_NOFOLLOW)) | O_CLOEXEC);
		hidden_put(h);
	} else {
		fd = openat(fs->backing_fd, path_rel(path), fi->flags | O_CLOEXEC);
	}
	if (fd == -1)
		return -errno;
	fi->fh = (uint64_t)fd;
	return 0;
}

static int tlfs_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	struct ns_req r = {.op = NS_CREATE, .path = path, .mode = mode, .fi = fi};

	return ns_run(fs_get(), &r);
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
	/* as the daemon: the kernel has asked us to clear set-user-ID bits
	 * where a write must, and the write itself must not (CAP_FSETID) */
	creds_daemon(fs_get());
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
	/* a close by the owner drops all its POSIX locks on the file */
	lk_drop_owner((int)fi->fh, fi->lock_owner);
	/* close a duplicate so that close-time semantics of the backing
	 * filesystem (NFS write-back) happen now */
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
	creds_daemon(fs_get()); /* as for write_buf */
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
	creds_daemon(fs_get()); /* as for write_buf */
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

/* POSIX record locks of fi->lock_owner, as open file description locks
 * on that owner's description of the backing file (see "POSIX record
 * locks"). F_GETLK reports l_pid -1: the holder may be on another host. */
static int tlfs_lock(const char *path, struct fuse_file_info *fi, int cmd, struct flock *lk)
{
	struct lk_owner *o = NULL;
	int ofd_cmd, fd, res;

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
	/* an owner without a description holds nothing: test against all
	 * (the caller's own fd holds no lock), and unlocking is a no-op; the
	 * description is opened as the daemon, whatever this thread did last */
	creds_daemon(fs_get());
	res = lk_get((int)fi->fh, fi->lock_owner, cmd != F_GETLK && lk->l_type != F_UNLCK, &o);
	if (res == -ENOENT)
		res = 0;
	if (res)
		return res;
	if (!o && cmd != F_GETLK)
		return 0;
	fd = o ? o->fd : (int)fi->fh;
	lk->l_pid = 0;
	res = fcntl(fd, ofd_cmd, lk) == -1 ? -errno : 0;
	if (!res && cmd == F_GETLK && lk->l_type != F_UNLCK)
		lk->l_pid = -1;
	lk_put(o);
	return res;
}

/* ---- extended attributes -------------------------------------------------- */

/* Opens PATH as an O_PATH fd and names it through /proc, which the *xattr
 * calls follow to the file itself (passthrough_ll does the same). */
static int xattr_open(struct tlfs *fs, const char *path, char proc[64])
{
	int fd, res;

	struct hidden *h;

	res = creds_enter(fs);
	if (res)
		return res;
	h = hidden_get(path);
	if (h) {
		hidden_proc(h, proc);
		fd = open(proc, O_PATH | O_CLOEXEC);
		hidden_put(h);
	} else {
		fd = openat(fs->backing_fd, path_rel(path), O_PATH | O_NOFOLLOW | O_CLOEXEC);
	}
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
	if (!res)
		links_changed(fs_get(), path, fd);
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
	if (!res)
		links_changed(fs_get(), path, fd);
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
