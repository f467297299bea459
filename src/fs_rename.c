/* fs_rename.c - rename() in tree locks: lock keys, plans, ll_rename()
 *
 *   keys  = key_of(parent, name), key_of(newparent, newname)
 *   plan  = lockplan_rename(strategy, from, to, flags [, entries below]),
 *           or with the tree strategy and a store that compares tree
 *           plans by their endpoints (the mem store), the endpoints alone
 *   hold  = lockmgr_acquire(plan)              all or nothing, bounded wait
 *   check = the keys still name what the fds hold, else ENOENT
 *   renameat2() by the directories' fds
 *   lockmgr_release(plan)                      on every path, before the
 *                                              answer
 *
 * A key is the path of an entry below the backing root, of any length: the
 * parent's path as the kernel names it (getcwd() after fchdir() to its fd,
 * in a working directory of the thread's own, else one readlink() of
 * /proc/self/fd/N) when that fits in a page, else found by walking up
 * through ".." to the backing root; one lookup serves both keys when both
 * names are in one directory. That is this host's view. Once the
 * locks are held, when the store reports other writers possible
 * (TL_CAP_OTHER_WRITERS), the check looks each key's parent up again from
 * the backing root, which asks the shared storage (a cached entry that
 * expired is revalidated), and refuses with ENOENT unless it reaches the
 * very directory the rename acts on. Without other writers only a rename
 * through this mount that completed meanwhile can have moved a key, and
 * then this host's view of each directory's path compares. With lock_scope=namespace
 * the operations that create or remove a name take the entry's plan too
 * (entry_lock()).
 */
#include <config.h>

#include <dirent.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "fs.h"
#include "lockplan.h"
#include "log.h"
#include "path.h"
#include "tlclock.h"

/* The path of directory DIR below the backing root, without readlink():
 * from DIR up through "..", finding each directory's name in its parent
 * by st_dev/st_ino, until the backing root. Used when the kernel cannot
 * name DIR in one readlink() (deeper than a page), and to tell a
 * directory really named "x (deleted)" from a removed one. Writes a new
 * string ("" for the root, else "/a/b") to *OUT. Returns 0, -ENOENT (DIR
 * was removed, is outside the backing tree or moved while we looked),
 * -ENOMEM, or another -errno of openat()/readdir(). */
static int path_by_walk(struct tlfs *fs, struct ll_inode *dir, char **out)
{
	char *rel = NULL, *tmp;
	size_t len = 0;
	struct stat st;
	int cur, err = 0;

	*out = NULL;
	cur = fcntl(dir->fd, F_DUPFD_CLOEXEC, 0);
	if (cur == -1)
		return -errno;
	if (fstat(cur, &st) == -1) {
		err = -errno;
		goto out_close;
	}
	while (st.st_dev != fs->root->dev || st.st_ino != fs->root->ino) {
		struct stat pst, cst;
		struct dirent *d;
		DIR *dp;
		int parent, rd;
		size_t nlen = 0;
		bool found = false;

		/* ".." of a removed directory is ENOENT */
		parent = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (parent == -1) {
			err = -errno;
			goto out_close;
		}
		if (fstat(parent, &pst) == -1) {
			err = -errno;
			close(parent);
			goto out_close;
		}
		if (pst.st_dev == st.st_dev && pst.st_ino == st.st_ino) {
			close(parent);
			err = -ENOENT; /* reached "/": not below the backing root */
			goto out_close;
		}
		rd = fcntl(parent, F_DUPFD_CLOEXEC, 0);
		dp = rd == -1 ? NULL : fdopendir(rd);
		if (!dp) {
			err = -errno;
			if (rd != -1)
				close(rd);
			close(parent);
			goto out_close;
		}
		/* d_ino names the child unless it is a mount point: confirm with
		 * fstatat(), which also sees through d_ino on such entries */
		while (!found && (d = readdir(dp)) != NULL) {
			if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0 ||
			    (d->d_type != DT_DIR && d->d_type != DT_UNKNOWN))
				continue;
			if (d->d_ino != st.st_ino && st.st_dev == pst.st_dev)
				continue;
			if (fstatat(parent, d->d_name, &cst, AT_SYMLINK_NOFOLLOW) == 0 &&
			    cst.st_dev == st.st_dev && cst.st_ino == st.st_ino) {
				found = true;
				nlen = strlen(d->d_name);
				err = -ENOMEM;
				tmp = malloc(nlen + 1 + len + 1);
				if (tmp) {
					tmp[0] = '/';
					memcpy(tmp + 1, d->d_name, nlen);
					if (len)
						memcpy(tmp + 1 + nlen, rel, len);
					tmp[1 + nlen + len] = '\0';
					free(rel);
					rel = tmp;
					len += 1 + nlen;
					err = 0;
				}
			}
		}
		closedir(dp);
		close(cur);
		cur = parent;
		if (!found && !err)
			err = -ENOENT; /* renamed away while we looked */
		if (err)
			goto out_close;
		st = pst;
	}
	if (!rel)
		rel = strdup("");
	err = rel ? 0 : -ENOMEM;
	*out = rel;
	rel = NULL;
out_close:
	free(rel);
	close(cur);
	return err;
}

/* Opens the directory at the first LEN bytes of KEY from the backing root,
 * one component at a time with O_NOFOLLOW, as O_PATH (so each lookup is
 * the kernel's own, which revalidates a cached entry that expired, and no
 * symlink is followed). Returns the fd or -errno (-ENOENT, -ENOTDIR,
 * -ELOOP for a symlink, ...). */
static int open_key_dir(struct tlfs *fs, const char *key, size_t len)
{
	char name[NAME_MAX + 1];
	size_t i = 1;
	int fd = fcntl(fs->backing_fd, F_DUPFD_CLOEXEC, 0);

	if (fd == -1)
		return -errno;
	while (i < len) {
		size_t j = i;
		int next;

		while (j < len && key[j] != '/')
			j++;
		if (j - i > NAME_MAX) {
			close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(name, key + i, j - i);
		name[j - i] = '\0';
		next = openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		if (next == -1)
			return -errno;
		fd = next;
		i = j + 1;
	}
	return fd;
}

/* True when the directory at the first LEN bytes of KEY, looked up now
 * from the backing root, is DIR itself (same st_dev and st_ino). */
static bool key_reaches(struct tlfs *fs, const char *key, size_t len, struct ll_inode *dir)
{
	struct stat st;
	int fd = open_key_dir(fs, key, len);
	bool same;

	if (fd < 0)
		return false;
	same = fstat(fd, &st) == 0 && st.st_dev == dir->dev && st.st_ino == dir->ino;
	close(fd);
	return same;
}

/* this thread's working directory (dir_getcwd()) */
static __thread int own_cwd; /* 1: unshared; -1: cannot (don't move) */
static __thread bool at;     /* the working directory stays at: */
static __thread dev_t at_dev;
static __thread ino_t at_ino;

/* True when this thread's working directory stayed at DIR (fs->cwd_stays)
 * after its last key: DIR's key then needs no fchdir(). */
static bool dir_is_cwd(const struct ll_inode *dir)
{
	return at && own_cwd > 0 && at_dev == dir->dev && at_ino == dir->ino;
}

/* DIR's path as the kernel names it, by getcwd() instead of a readlink()
 * in /proc (whose lookup costs several times more): this thread's working
 * directory moves to DIR, and back to fs->cwd_fd unless fs->cwd_stays
 * (then the next key in the same directory needs no move: getcwd() only).
 * Each thread first takes a working directory of its own
 * (unshare(CLONE_FS)), so no other thread ever sees it move. A removed
 * directory is ENOENT, not a name with " (deleted)". Returns the length
 * written to BUF (PATH_MAX + 1 bytes), or -1 when this way cannot tell
 * (deeper than PATH_MAX, removed, not searchable, outside this root):
 * readlink() then does. */
static ssize_t dir_getcwd(struct tlfs *fs, struct ll_inode *dir, char *buf)
{
	ssize_t n = -1;

	if (fs->cwd_fd < 0)
		return -1;
	if (!own_cwd)
		own_cwd = unshare(CLONE_FS) == 0 ? 1 : -1;
	if (own_cwd < 0)
		return -1;
	/* the working directory holds its inode: one with the same st_dev and
	 * st_ino is that very directory */
	if (!at || at_dev != dir->dev || at_ino != dir->ino) {
		if (fchdir(dir->fd) == -1)
			return -1;
		at = fs->cwd_stays;
		at_dev = dir->dev;
		at_ino = dir->ino;
	}
	if (getcwd(buf, PATH_MAX) != NULL)
		n = (ssize_t)strlen(buf);
	if (!fs->cwd_stays && fchdir(fs->cwd_fd) == -1)
		own_cwd = -1; /* stays in DIR; this thread uses readlink() from now on */
	return n;
}

/* The path of DIR below the backing root as this host sees it now, by
 * dir_getcwd() or else one readlink() of its fd, into BUF (PATH_MAX + 1
 * bytes): sets *REL to it ("" for the root, else "/a/b", inside BUF) and
 * returns its length. A readlink() name that ends in " (deleted)" (a
 * removed directory, or one really named so: only a lookup tells) sets
 * *SUSPECT. Returns -1 when the kernel cannot name DIR in PATH_MAX bytes
 * (deeper than a page), -2 when DIR is outside the backing tree. */
static ssize_t dir_path_fast(struct tlfs *fs, struct ll_inode *dir, char *buf, const char **rel,
			     bool *suspect)
{
	static const char deleted[] = " (deleted)";
	const size_t dlen = sizeof(deleted) - 1;
	char proc[64];
	size_t rootlen = strlen(fs->root_path);
	ssize_t n;

	*suspect = false;
	if (dir == fs->root) {
		*rel = "";
		return 0;
	}
	n = dir_getcwd(fs, dir, buf);
	if (n < 0) {
		proc_name(dir->fd, proc);
		n = readlink(proc, buf, PATH_MAX);
		if (n < 0 || n >= PATH_MAX)
			return -1; /* ENAMETOOLONG: deeper than a page */
		buf[n] = '\0';
		*suspect = (size_t)n >= dlen && memcmp(buf + n - dlen, deleted, dlen) == 0;
	}
	if (strncmp(buf, fs->root_path, rootlen) != 0 ||
	    (buf[rootlen] != '/' && buf[rootlen] != '\0'))
		return -2; /* moved out of the backing tree */
	*rel = buf + rootlen;
	return n - (ssize_t)rootlen;
}

/* A key, in STACK when it fits (a directory the kernel names in one
 * page and a name of up to NAME_MAX bytes always do), else allocated:
 * a rename's keys then cost no allocation. */
struct key_buf {
	char *s;                              /* the key, NUL-terminated */
	char stack[PATH_MAX + 1 + NAME_MAX + 1];
};

static void key_buf_free(struct key_buf *k)
{
	if (k->s != k->stack)
		free(k->s);
	k->s = NULL;
}

/* Makes OUT->s room for LEN bytes and EXTRA more: OUT->stack when that
 * fits, else a new allocation. Returns 0 or -ENOMEM. */
static int key_buf_room(struct key_buf *out, size_t len, size_t extra)
{
	if (len + 1 + extra <= sizeof(out->stack)) {
		out->s = out->stack;
		return 0;
	}
	out->s = malloc(len + 1 + extra);
	return out->s ? 0 : -ENOMEM;
}

/* True when the directory path P (its first LEN bytes) is K or below K. */
static bool at_or_below(const char *k, const char *p, size_t len)
{
	size_t kl = strlen(k);

	return kl <= len && memcmp(k, p, kl) == 0 && (kl == len || p[kl] == '/');
}

/* True when a rename through this mount that succeeded after generation
 * GEN, up to NOW, may have moved the directory whose path is the first
 * LEN bytes of P: it renamed (or exchanged) that directory or one of its
 * ancestors. Only such a rename changes a directory's path. Also true when
 * that cannot be told: more than TLFS_RECENT renames since, or keys too
 * long to keep. Call with fs->recent_mutex held. */
static bool recent_moved_locked(struct tlfs *fs, uint64_t gen, uint64_t now, const char *p,
				size_t len)
{
	uint64_t g;

	if (now - gen > TLFS_RECENT)
		return true;
	for (g = gen + 1; g <= now; g++) {
		const struct recent_rename *r = &fs->recent[g % TLFS_RECENT];

		if (r->gen != g || r->unknown || at_or_below(r->from, p, len) ||
		    at_or_below(r->to, p, len))
			return true;
	}
	return false;
}

/* True when a rename through this mount that succeeded after generation
 * GEN may have moved the directory of key FROM or of key TO
 * (recent_moved_locked()); the others leave the keys as they were
 * computed. */
static bool recent_may_move(struct tlfs *fs, uint64_t gen, const char *from, const char *to)
{
	size_t fp = path_parent_len(from, strlen(from)), tp = path_parent_len(to, strlen(to));
	bool may;
	uint64_t now;

	pthread_mutex_lock(&fs->recent_mutex);
	now = __atomic_load_n(&fs->rename_gen, __ATOMIC_RELAXED);
	may = recent_moved_locked(fs, gen, now, from, fp) ||
	      recent_moved_locked(fs, gen, now, to, tp);
	pthread_mutex_unlock(&fs->recent_mutex);
	return may;
}

/* With no other writers (lock_store=mem) and entry_timeout above 0, a
 * directory's path is remembered on its inode once a key found it: while
 * no rename through this mount moved the directory or an ancestor (the
 * renames in fs->recent since tell), and for entry_timeout at most, its
 * next key costs neither getcwd() nor fchdir(). Only renames through this
 * mount are locked at all (BUGS in treelockfs(1)); one made directly on
 * the backing shows in the keys within entry_timeout, as it shows in the
 * names the kernel caches for the mount. */
static bool dir_path_memo_on(struct tlfs *fs, struct ll_inode *dir)
{
	return dir != fs->root && fs->cfg->entry_timeout > 0 &&
	       !lockmgr_other_writers_possible(&fs->mgr);
}

/* DIR's remembered path into OUT->stack, with room for EXTRA more bytes
 * after it: sets *LEN and returns true, or false when there is none to
 * trust. */
static bool dir_path_recall(struct tlfs *fs, struct ll_inode *dir, size_t extra,
			    struct key_buf *out, size_t *len)
{
	int64_t now = tl_mono_us();
	bool hit = false;
	uint64_t g;

	pthread_mutex_lock(&fs->recent_mutex);
	if (dir->key_path && now < dir->key_until_us &&
	    dir->key_len + 1 + extra <= sizeof(out->stack)) {
		g = __atomic_load_n(&fs->rename_gen, __ATOMIC_RELAXED);
		if (g == dir->key_gen ||
		    !recent_moved_locked(fs, dir->key_gen, g, dir->key_path, dir->key_len)) {
			dir->key_gen = g; /* right up to G: the next check starts there */
			out->s = out->stack;
			memcpy(out->s, dir->key_path, dir->key_len + 1);
			*len = dir->key_len;
			hit = true;
		}
	}
	pthread_mutex_unlock(&fs->recent_mutex);
	return hit;
}

/* Remembers P (LEN bytes), DIR's path as found after rename_gen was GEN:
 * the renames noted since are checked against it when it is recalled. */
static void dir_path_remember(struct tlfs *fs, struct ll_inode *dir, uint64_t gen, const char *p,
			      size_t len)
{
	char *copy = malloc(len + 1), *old;

	if (!copy)
		return; /* the next key finds it again */
	memcpy(copy, p, len + 1);
	pthread_mutex_lock(&fs->recent_mutex);
	old = dir->key_path;
	dir->key_path = copy;
	dir->key_len = len;
	dir->key_gen = gen;
	dir->key_until_us = tl_mono_us() + (int64_t)(fs->cfg->entry_timeout * 1e6);
	pthread_mutex_unlock(&fs->recent_mutex);
	free(old);
}

/* The path of DIR below the backing root ("" for the root, else "/a/b")
 * into OUT (*LEN bytes), with room for EXTRA more bytes after it: the
 * remembered one when it can be trusted (dir_path_memo_on()), else one
 * getcwd() or readlink() (dir_path_fast()); when that
 * cannot tell, or gives a name ending in " (deleted)" that a lookup does
 * not confirm, path_by_walk() finds it. Returns 0, -ENOENT (removed or
 * outside the backing tree), -ENOMEM; OUT->s is NULL but on success. */
static int dir_path(struct tlfs *fs, struct ll_inode *dir, size_t extra, struct key_buf *out,
		    size_t *len)
{
	char *walked, *p;
	const char *rel;
	bool suspect;
	bool memo = dir_path_memo_on(fs, dir);
	uint64_t gen = 0;
	ssize_t n;
	int err;

	if (memo) {
		if (dir_path_recall(fs, dir, extra, out, len))
			return 0;
		gen = __atomic_load_n(&fs->rename_gen, __ATOMIC_ACQUIRE);
	}
	/* the kernel's name lands in OUT->stack (PATH_MAX + 1 bytes at least) */
	n = dir_path_fast(fs, dir, out->stack, &rel, &suspect);
	out->s = NULL;
	if (n == -2)
		return -ENOENT;
	if (n >= 0 && (!suspect || key_reaches(fs, rel, (size_t)n, dir))) {
		err = key_buf_room(out, (size_t)n, extra);
		if (err)
			return err;
		memmove(out->s, rel, (size_t)n + 1); /* REL may be inside OUT->stack */
		*len = (size_t)n;
		if (memo)
			dir_path_remember(fs, dir, gen, out->s, *len);
		return 0;
	}
	err = path_by_walk(fs, dir, &walked);
	if (err)
		return err;
	*len = strlen(walked);
	p = realloc(walked, *len + 1 + extra);
	if (!p) {
		free(walked);
		return -ENOMEM;
	}
	out->s = p;
	return 0;
}

/* True when DIR's path as this host sees it now (dir_path_fast()) is the
 * first LEN bytes of KEY; when one readlink() cannot tell, when the key
 * still reaches DIR from the backing root (key_reaches()). */
static bool dir_path_is(struct tlfs *fs, struct ll_inode *dir, const char *key, size_t len)
{
	char buf[PATH_MAX + 1];
	const char *rel;
	bool suspect;
	ssize_t n = dir_path_fast(fs, dir, buf, &rel, &suspect);

	if (n == -2)
		return false;
	if (n < 0 || suspect)
		return key_reaches(fs, key, len, dir);
	if (n == 0)
		return len <= 1; /* the root: keys "/name" */
	return (size_t)n == len && memcmp(rel, key, len) == 0;
}

/* Appends "/NAME" to the LEN bytes of directory path P (allocated with
 * room for it) and NUL-terminates; NAME NULL makes the directory's own
 * key ("/" for the root). */
static void key_finish(char *p, size_t len, const char *name, size_t nlen)
{
	if (!name) {
		if (len == 0)
			memcpy(p, "/", 2);
		return;
	}
	p[len] = '/';
	memcpy(p + len + 1, name, nlen + 1);
}

/* The key of NAME in directory DIR (or of DIR itself when NAME is NULL):
 * the directory's current path below the backing root (dir_path()) and
 * NAME, of any length. Writes it to OUT (free with key_buf_free()) and the
 * length of its directory part to *DLEN (when not NULL). Returns 0,
 * -ENOENT (the directory is gone or outside the backing tree), -ENOMEM. */
static int key_of(struct tlfs *fs, struct ll_inode *dir, const char *name, struct key_buf *out,
		  size_t *dlen)
{
	size_t nlen = name ? strlen(name) : 0, len;
	int err;

	err = dir_path(fs, dir, nlen + 1, out, &len);
	if (err)
		return err;
	key_finish(out->s, len, name, nlen);
	if (dlen)
		*dlen = len;
	return 0;
}

/* The key of NAME in the directory whose path is the first DLEN bytes of
 * KEY (another key of that directory), into OUT. Returns 0 or -ENOMEM. */
static int key_sibling(const char *key, size_t dlen, const char *name, struct key_buf *out)
{
	size_t nlen = strlen(name);
	int err = key_buf_room(out, dlen, nlen + 1);

	if (err)
		return err;
	memcpy(out->s, key, dlen);
	key_finish(out->s, dlen, name, nlen);
	return 0;
}

/* Takes the entry plan of NAME in PARENT when lock_scope=namespace. */
int entry_lock(struct tlfs *fs, fuse_req_t req, struct ll_inode *parent, const char *name,
		      struct op_lock *l)
{
	struct key_buf key;
	int err;

	l->plan = NULL;
	if (fs->cfg->lock_scope != TL_SCOPE_NAMESPACE || fs->cfg->lock_strategy == TL_STRATEGY_NONE)
		return 0;
	creds_daemon(fs);
	err = key_of(fs, parent, name, &key, NULL);
	if (err)
		return err;
	err = lockplan_entry(fs->cfg->lock_strategy, key.s, &l->plan);
	key_buf_free(&key);
	if (err)
		return err;
	err = lockmgr_acquire(&fs->mgr, l->plan, (uint32_t)fuse_req_ctx(req)->pid, &l->holder);
	if (err) {
		lockplan_free(l->plan);
		l->plan = NULL;
	}
	return err;
}

void entry_unlock(struct tlfs *fs, struct op_lock *l)
{
	if (!l->plan)
		return;
	creds_daemon(fs);
	lockmgr_release(&fs->mgr, l->plan, &l->holder);
	lockplan_free(l->plan);
	l->plan = NULL;
}

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
	int err;
	char *first = strdup(key);

	if (!first)
		return -ENOMEM;
	err = key_list_add(out, first); /* the queue is OUT; the start goes at the end */
	if (err) {
		free(first);
		return err;
	}
	while (!err && next < out->n) {
		const char *dirkey = out->v[next++];
		struct dirent *d;
		DIR *dp;
		int fd;

		fd = openat(fs->backing_fd, path_rel(dirkey),
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd == -1 && errno == ENAMETOOLONG) {
			/* deeper than one syscall's path: one component at a time */
			int pfd = open_key_dir(fs, dirkey, strlen(dirkey));

			if (pfd >= 0) {
				fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
				close(pfd);
			}
		}
		if (fd == -1)
			continue;
		dp = fdopendir(fd);
		if (!dp) {
			close(fd);
			continue;
		}
		while ((d = readdir(dp)) != NULL) {
			char *child;

			if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
				continue;
			if (asprintf(&child, "%s/%s", dirkey, d->d_name) < 0) {
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

/* True when KEY, the key of an entry of DIR, still names an entry of DIR.
 * When the store reports other writers possible, as the shared storage
 * sees it now: its parent, looked up again from the backing root
 * component by component, is DIR itself. A readlink() of DIR's fd would
 * not do: it is this host's cached view, which another host's rename of
 * an ancestor leaves as it was. Without other writers this host's view is
 * the storage's, and one readlink() tells (dir_path_is()). */
static bool key_still(struct tlfs *fs, struct ll_inode *dir, const char *key)
{
	size_t plen = path_parent_len(key, strlen(key));

	if (!lockmgr_other_writers_possible(&fs->mgr))
		return dir_path_is(fs, dir, key, plen);
	return key_reaches(fs, key, plen, dir);
}

/* Notes the rename FROM -> TO, which just succeeded through this mount,
 * and counts it in fs->rename_gen. */
static void recent_note(struct tlfs *fs, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to);
	struct recent_rename *r;
	uint64_t g;

	pthread_mutex_lock(&fs->recent_mutex);
	g = __atomic_load_n(&fs->rename_gen, __ATOMIC_RELAXED) + 1;
	r = &fs->recent[g % TLFS_RECENT];
	r->gen = g;
	r->unknown = fl >= sizeof(r->from) || tl >= sizeof(r->to);
	if (!r->unknown) {
		memcpy(r->from, from, fl + 1);
		memcpy(r->to, to, tl + 1);
	}
	__atomic_store_n(&fs->rename_gen, g, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&fs->recent_mutex);
}

/* The slot of fs->flag_refused_on for rename FLAGS (one of them set). */
static unsigned int flag_slot(unsigned int flags)
{
	return (flags & RENAME_EXCHANGE) ? 1 : 0;
}

/* True when the filesystem of DIR already refused FLAGS with EINVAL: the
 * rename is refused the same way without taking locks for nothing (mv
 * tries RENAME_NOREPLACE first and falls back on EINVAL). */
static bool flag_refused(struct tlfs *fs, struct ll_inode *dir, unsigned int flags)
{
	return flags && __atomic_load_n(&fs->flag_refused_on[flag_slot(flags)],
					 __ATOMIC_RELAXED) == (uint64_t)dir->dev + 1;
}

/* A hash of the rename FROM -> TO in directory DIR's filesystem
 * (FNV-1a), never 0. This function can't fail. */
static uint64_t flag_suspect_hash(struct ll_inode *dir, const char *from, const char *to)
{
	uint64_t h = 14695981039346656037ULL ^ (uint64_t)dir->dev;
	const char *s;

	for (s = from; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	h = (h ^ 0xff) * 1099511628211ULL; /* no byte of a key */
	for (s = to; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h ? h : 1;
}

/* Notes that DIR's filesystem refuses the flag of slot SLOT. */
static void flag_refuse(struct tlfs *fs, struct ll_inode *dir, unsigned int slot)
{
	__atomic_store_n(&fs->flag_refused_on[slot], (uint64_t)dir->dev + 1, __ATOMIC_RELAXED);
	tl_log(LOG_INFO, "the backing refuses %s: such renames are refused before locking",
	       slot ? "RENAME_EXCHANGE" : "RENAME_NOREPLACE");
}

/* After renameat2() FROM -> TO in DIR's filesystem gave RES with FLAGS.
 * EINVAL with RENAME_EXCHANGE, both names existing, is the filesystem
 * refusing the flag unless one path is inside the other. EINVAL with
 * RENAME_NOREPLACE may also be a name the filesystem does not allow or a
 * directory into its own subtree: it is a suspect only, until the same
 * rename without flags succeeds (as mv retries). From then on the flag
 * is refused before locking. */
static void flag_learn(struct tlfs *fs, struct ll_inode *dir, unsigned int flags, int res,
		       const char *from, const char *to)
{
	if ((flags & RENAME_EXCHANGE) && res == -EINVAL) {
		if (!path_is_ancestor(from, to) && !path_is_ancestor(to, from))
			flag_refuse(fs, dir, 1);
		return;
	}
	if (flags && res == -EINVAL) {
		__atomic_store_n(&fs->flag_suspect, flag_suspect_hash(dir, from, to),
				 __ATOMIC_RELAXED);
		return;
	}
	if (flags || res || !__atomic_load_n(&fs->flag_suspect, __ATOMIC_RELAXED))
		return;
	if (__atomic_load_n(&fs->flag_suspect, __ATOMIC_RELAXED) ==
	    flag_suspect_hash(dir, from, to)) {
		__atomic_store_n(&fs->flag_suspect, 0, __ATOMIC_RELAXED);
		flag_refuse(fs, dir, 0);
	}
}

/* hold_log=FILE: appends one line to the file, in one write(2) so that
 * lines of concurrent renames do not mix. Fields are separated by tabs;
 * paths escape bytes below 0x21, 0x7f and '\\' as \\xHH:
 *   MONO_NS acquire PID HOLDER FROM TO MODE:KEY...  (MODE S or X), when
 *           the store granted the plan
 *   MONO_NS release PID HOLDER ERRNO   just before the locks are released
 *           (ERRNO 0: the rename was done)
 * MONO_NS is CLOCK_MONOTONIC in nanoseconds: one clock for every mount of
 * the machine, so holds of mounts in other network namespaces compare. */
static void hold_log_put(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c <= 0x20 || c == 0x7f || c == '\\') {
			char e[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};

			buf_add(b, e, 4);
		} else {
			buf_add(b, s, 1);
		}
	}
}

static void hold_log(struct tlfs *fs, const struct tl_plan *plan, const struct tl_holder *h,
		     bool acquire, int res)
{
	struct tl_plan *full = NULL;
	struct timespec ts;
	struct buf b;
	char head[160];
	size_t i;

	if (fs->hold_log_fd == -1)
		return;
	if (acquire && !plan->items) {
		/* an endpoint plan: its keys, written out */
		if (lockplan_tree_full(plan, &full)) {
			tl_log(LOG_WARNING, "cannot write hold_log: %s", strerror(ENOMEM));
			return;
		}
		plan = full;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	buf_init(&b, 0);
	snprintf(head, sizeof(head), "%lld%09ld\t%s\t%d\t", (long long)ts.tv_sec, ts.tv_nsec,
		 acquire ? "acquire" : "release", (int)getpid());
	buf_add(&b, head, strlen(head));
	hold_log_put(&b, h->id);
	if (acquire) {
		buf_add(&b, "\t", 1);
		hold_log_put(&b, plan->from);
		buf_add(&b, "\t", 1);
		hold_log_put(&b, plan->to ? plan->to : "");
		for (i = 0; i < plan->n; i++) {
			buf_add(&b, plan->items[i].mode == TL_EXCLUSIVE ? "\tX:" : "\tS:", 3);
			hold_log_put(&b, plan->items[i].key);
		}
	} else {
		snprintf(head, sizeof(head), "\t%d", -res);
		buf_add(&b, head, strlen(head));
	}
	buf_add(&b, "\n", 1);
	if (!b.err && write(fs->hold_log_fd, b.data, b.len) != (ssize_t)b.len)
		tl_log(LOG_WARNING, "cannot write hold_log: %s", strerror(errno));
	buf_free(&b);
	lockplan_free(full);
}

void ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *p1 = ino_get(fs, parent), *p2 = ino_get(fs, newparent);
	struct key_list below = {0};
	struct tl_plan *plan = NULL, ends;
	struct tl_holder holder;
	struct key_buf kfrom, kto; /* not cleared: only .s is read before set */
	const char *from = NULL, *to = NULL;
	size_t dlen;
	int64_t t0 = tl_mono_us(); /* for the metrics and the debug line */
	uint64_t gen = __atomic_load_n(&fs->rename_gen, __ATOMIC_ACQUIRE);
	int res;

	kfrom.s = kto.s = NULL;
	if ((flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) ||
	    ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))) {
		lockmgr_count_rename(&fs->mgr, -EINVAL, tl_mono_us() - t0);
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (ctl_is_name(fs, p1, name) || ctl_is_name(fs, p2, newname)) {
		lockmgr_count_rename(&fs->mgr, -EPERM, tl_mono_us() - t0);
		fuse_reply_err(req, EPERM);
		return;
	}
	if (flag_refused(fs, p1, flags)) {
		lockmgr_count_unlocked(&fs->mgr, false);
		lockmgr_count_rename(&fs->mgr, -EINVAL, tl_mono_us() - t0);
		fuse_reply_err(req, EINVAL);
		return;
	}
	creds_daemon(fs);
	if (fs->cfg->lock_strategy == TL_STRATEGY_NONE) {
		/* no locks, no keys: the baseline the others are measured by */
		res = creds_enter(fs, req);
		if (!res && renameat2(p1->fd, name, p2->fd, newname, flags) == -1)
			res = -errno;
		lockmgr_count_unlocked(&fs->mgr, true);
		lockmgr_count_rename(&fs->mgr, res, tl_mono_us() - t0);
		fuse_reply_err(req, -res);
		return;
	}
	if (p2 == p1) { /* one directory: one lookup of its path serves both keys */
		res = key_of(fs, p1, name, &kfrom, &dlen);
		if (!res)
			res = key_sibling(kfrom.s, dlen, newname, &kto);
	} else if (dir_is_cwd(p2)) {
		/* the working directory is still where the last key left it:
		 * that key first, so that the two keys take one fchdir() (a
		 * thread that renames back and forth between two directories
		 * then moves once per rename, not twice) */
		res = key_of(fs, p2, newname, &kto, NULL);
		if (!res)
			res = key_of(fs, p1, name, &kfrom, NULL);
	} else {
		res = key_of(fs, p1, name, &kfrom, NULL);
		if (!res)
			res = key_of(fs, p2, newname, &kto, NULL);
	}
	if (res)
		goto out_free_keys;
	from = kfrom.s;
	to = kto.s;
	if (fs->cfg->lock_strategy == TL_STRATEGY_DOCUMENT) {
		res = walk_below(fs, from, &below);
		if (res)
			goto out_free_keys;
	}
	if (fs->cfg->lock_strategy == TL_STRATEGY_TREE && lockmgr_takes_endpoint_plans(&fs->mgr)) {
		/* the keys outlive the plan: they are freed after the release */
		res = lockplan_rename_endpoints(from, to, flags, &ends);
		plan = res ? NULL : &ends;
	} else {
		res = lockplan_rename(fs->cfg->lock_strategy, from, to, flags,
				      (const char *const *)below.v, below.n, &plan);
	}
	if (res)
		goto out_free_keys;
	res = lockmgr_acquire(&fs->mgr, plan, (uint32_t)fuse_req_ctx(req)->pid, &holder);
	if (res)
		goto out_free_plan;
	hold_log(fs, plan, &holder, true, 0);
	if (fs->cfg->rename_delay_ms) {
		struct timespec ts = {.tv_sec = fs->cfg->rename_delay_ms / 1000,
				      .tv_nsec = (long)(fs->cfg->rename_delay_ms % 1000) * 1000000};

		nanosleep(&ts, NULL);
	}
	/* The locks are on the paths the names had when we asked. If a rename
	 * we waited for moved one of them, the path the caller named is gone:
	 * that is the guide's ENOENT, and renaming by the directory fds now
	 * would act on a path nobody locked. When the store has no other
	 * writers only renames through this mount can have moved them: none
	 * did when the generation is unchanged, or when none of those that
	 * completed since renamed one of the keys' directories or their
	 * ancestors (recent_may_move()). One parent's check serves both keys
	 * when the directories are one inode: the two keys then share their
	 * parent part. */
	if ((lockmgr_other_writers_possible(&fs->mgr) ||
	     (__atomic_load_n(&fs->rename_gen, __ATOMIC_ACQUIRE) != gen &&
	      recent_may_move(fs, gen, from, to))) &&
	    (!key_still(fs, p1, from) || (p2 != p1 && !key_still(fs, p2, to)))) {
		tl_log(LOG_INFO, "rename '%s' -> '%s': moved while it waited", from, to);
		res = -ENOENT;
		goto out_release_locks;
	}
	res = creds_enter(fs, req);
	if (res)
		goto out_release_locks;
	/* Last, right before the rename: whatever ran since the locks were
	 * granted (the checks above walk the backing, and this process may be
	 * stopped anywhere) counts against the lease. What the rename itself
	 * takes is the window BUGS describes. */
	res = lockmgr_check_lease(&fs->mgr);
	if (res) {
		tl_log(LOG_ERR, "rename '%s' -> '%s' refused: this mount's lease is no longer fresh",
		       from, to);
		goto out_release_locks;
	}
	/* by the directories' fds: a directory moved by another host since the
	 * kernel resolved the names is still the one the kernel meant */
	res = renameat2(p1->fd, name, p2->fd, newname, flags);
	res = res == -1 ? -errno : 0;
	if (!res)
		recent_note(fs, from, to);
	flag_learn(fs, p1, flags, res, from, to);

out_release_locks:
	creds_daemon(fs);
	hold_log(fs, plan, &holder, false, res);
	/* released before the answer, also with the mem store, where it
	 * takes some 150 ns: a caller that goes on at once (on a busy CPU, it
	 * runs as soon as it is answered) would otherwise find its next
	 * rename of the same names, or below a directory it just moved,
	 * waiting for this one's release (measured: directory renames back
	 * and forth on one CPU, 0.55-0.89 of lock_strategy=none that way,
	 * 0.78-0.97 this way) */
	lockmgr_release(&fs->mgr, plan, &holder);
	tl_log(LOG_DEBUG, "rename '%s' -> '%s': %zu locks in %" PRId64 " ms: %s", from, to, plan->n,
	       (tl_mono_us() - t0) / 1000, res ? strerror(-res) : "ok");
out_free_plan:
	if (plan != &ends)
		lockplan_free(plan);
out_free_keys:
	key_list_free(&below);
	key_buf_free(&kfrom);
	key_buf_free(&kto);
	lockmgr_count_rename(&fs->mgr, res, tl_mono_us() - t0);
	if (req)
		fuse_reply_err(req, -res);
}
