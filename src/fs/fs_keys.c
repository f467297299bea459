/* fs_keys.c - lock keys: where an entry of the backing tree is now, see
 * fs_keys.h
 *
 *   keys_of(dir, name)     memo? --hit--> path
 *                            \--> getcwd (own cwd) | readlink /proc/self/fd
 *                                   \-- deeper than a page, or a suspect
 *                                        " (deleted)" --> walk up ".."
 *   keys_still_valid()     other writers --> look each parent up again
 *                          else renames noted since --> this host's view
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs_keys.h"
#include "base/path.h"
#include "base/tlclock.h"

static bool is_root(const struct keys *k, const struct keys_dir *dir)
{
	return dir->dev == k->root_dev && dir->ino == k->root_ino;
}

/* "/proc/self/fd/FD" into BUF: the file itself, through the magic link. */
static void fd_link_name(int fd, char buf[64])
{
	snprintf(buf, 64, "/proc/self/fd/%d", fd);
}

/* The path of directory DIR below the backing root, without readlink():
 * from DIR up through "..", finding each directory's name in its parent
 * by st_dev/st_ino, until the backing root. Used when the kernel cannot
 * name DIR in one readlink() (deeper than a page), and to tell a
 * directory really named "x (deleted)" from a removed one. Writes a new
 * string ("" for the root, else "/a/b") to *OUT. Returns 0, -ENOENT (DIR
 * was removed, is outside the backing tree or moved while we looked),
 * -ENOMEM, or another -errno of openat()/readdir(). */
static int path_by_walk(struct keys *k, const struct keys_dir *dir, char **out)
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
	while (st.st_dev != k->root_dev || st.st_ino != k->root_ino) {
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
static int open_key_dir(struct keys *k, const char *key, size_t len)
{
	char name[NAME_MAX + 1];
	size_t i = 1;
	int fd = fcntl(k->backing_fd, F_DUPFD_CLOEXEC, 0);

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
static bool key_reaches(struct keys *k, const char *key, size_t len, const struct keys_dir *dir)
{
	struct stat st;
	int fd = open_key_dir(k, key, len);
	bool same;

	if (fd < 0)
		return false;
	same = fstat(fd, &st) == 0 && st.st_dev == dir->dev && st.st_ino == dir->ino;
	close(fd);
	return same;
}

int keys_init(struct keys *k, int backing_fd, bool other_writers, double memo_ttl_s)
{
	char proc[64], buf[PATH_MAX + 1];
	struct stat st;
	ssize_t n;

	memset(k, 0, sizeof(*k));
	k->backing_fd = backing_fd;
	k->home_fd = -1;
	k->other_writers = other_writers;
	k->memo_ttl_us = memo_ttl_s > 0 ? (int64_t)(memo_ttl_s * 1e6) : 0;
	pthread_mutex_init(&k->mutex, NULL);
	if (fstat(backing_fd, &st) == -1)
		return -errno;
	k->root_dev = st.st_dev;
	k->root_ino = st.st_ino;
	fd_link_name(backing_fd, proc);
	n = readlink(proc, buf, sizeof(buf) - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	if (strcmp(buf, "/") == 0)
		buf[0] = '\0'; /* keys are then the paths themselves */
	k->root_path = strdup(buf);
	return k->root_path ? 0 : -ENOMEM;
}

void keys_destroy(struct keys *k)
{
	if (!k->root_path)
		return; /* zeroed, or keys_init() failed: nothing was kept */
	if (k->home_fd >= 0)
		close(k->home_fd);
	k->home_fd = -1;
	free(k->root_path);
	k->root_path = NULL;
}

void keys_set_home(struct keys *k, int home_fd, bool leave)
{
	k->home_fd = home_fd;
	k->home_leave = leave;
}

/* This thread's working directory, as dir_getcwd() moves it. */
static __thread int cwd_own;        /* 0: not asked yet; 1: a working
				     * directory of its own (unshare(CLONE_FS));
				     * -1: cannot have one (never moved) */
static __thread bool cwd_parked;    /* it stayed in a directory after the
				     * last key (keys->home_leave), namely: */
static __thread dev_t cwd_parked_dev;
static __thread ino_t cwd_parked_ino;

bool keys_thread_at(const struct keys_dir *dir)
{
	return cwd_parked && cwd_own > 0 && cwd_parked_dev == dir->dev &&
	       cwd_parked_ino == dir->ino;
}

/* DIR's path as the kernel names it, by getcwd() instead of a readlink()
 * in /proc (whose lookup costs several times more): this thread's working
 * directory moves to DIR, and back to k->home_fd unless k->home_leave
 * (then the next key in the same directory needs no move: getcwd() only).
 * Each thread first takes a working directory of its own
 * (unshare(CLONE_FS)), so no other thread ever sees it move. A removed
 * directory is ENOENT, not a name with " (deleted)". Returns the length
 * written to BUF (PATH_MAX + 1 bytes), or -1 when this way cannot tell
 * (deeper than PATH_MAX, removed, not searchable, outside this root):
 * readlink() then does. */
static ssize_t dir_getcwd(struct keys *k, const struct keys_dir *dir, char *buf)
{
	ssize_t n = -1;

	if (k->home_fd < 0)
		return -1;
	if (!cwd_own)
		cwd_own = unshare(CLONE_FS) == 0 ? 1 : -1;
	if (cwd_own < 0)
		return -1;
	/* the working directory holds its inode: one with the same st_dev and
	 * st_ino is that very directory */
	if (!cwd_parked || cwd_parked_dev != dir->dev || cwd_parked_ino != dir->ino) {
		if (fchdir(dir->fd) == -1)
			return -1;
		cwd_parked = k->home_leave;
		cwd_parked_dev = dir->dev;
		cwd_parked_ino = dir->ino;
	}
	if (getcwd(buf, PATH_MAX) != NULL)
		n = (ssize_t)strlen(buf);
	if (!k->home_leave && fchdir(k->home_fd) == -1)
		cwd_own = -1; /* stays in DIR; this thread uses readlink() from now on */
	return n;
}

/* The path of DIR below the backing root as this host sees it now, by
 * dir_getcwd() or else one readlink() of its fd, into BUF (PATH_MAX + 1
 * bytes): sets *REL to it ("" for the root, else "/a/b", inside BUF) and
 * returns its length. A readlink() name that ends in " (deleted)" (a
 * removed directory, or one really named so: only a lookup tells) sets
 * *SUSPECT. Returns -1 when the kernel cannot name DIR in PATH_MAX bytes
 * (deeper than a page), -2 when DIR is outside the backing tree. */
static ssize_t dir_path_fast(struct keys *k, const struct keys_dir *dir, char *buf,
			     const char **rel, bool *suspect)
{
	static const char deleted[] = " (deleted)";
	const size_t dlen = sizeof(deleted) - 1;
	char proc[64];
	size_t rootlen = strlen(k->root_path);
	ssize_t n;

	*suspect = false;
	if (is_root(k, dir)) {
		*rel = "";
		return 0;
	}
	n = dir_getcwd(k, dir, buf);
	if (n < 0) {
		fd_link_name(dir->fd, proc);
		n = readlink(proc, buf, PATH_MAX);
		if (n < 0 || n >= PATH_MAX)
			return -1; /* ENAMETOOLONG: deeper than a page */
		buf[n] = '\0';
		*suspect = (size_t)n >= dlen && memcmp(buf + n - dlen, deleted, dlen) == 0;
	}
	if (strncmp(buf, k->root_path, rootlen) != 0 ||
	    (buf[rootlen] != '/' && buf[rootlen] != '\0'))
		return -2; /* moved out of the backing tree */
	*rel = buf + rootlen;
	return n - (ssize_t)rootlen;
}

/* keys_buf: see fs_keys.h */
void keys_buf_free(struct keys_buf *b)
{
	if (b->s != b->stack)
		free(b->s);
	b->s = NULL;
}

/* Makes OUT->s room for LEN bytes and EXTRA more: OUT->stack when that
 * fits, else a new allocation. Returns 0 or -ENOMEM. */
static int key_buf_room(struct keys_buf *out, size_t len, size_t extra)
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
 * that cannot be told: more than KEYS_RECENT renames since, or keys too
 * long to keep. Call with k->mutex held. */
static bool recent_moved_locked(struct keys *k, uint64_t gen, uint64_t now, const char *p,
				size_t len)
{
	uint64_t g;

	if (now - gen > KEYS_RECENT)
		return true;
	for (g = gen + 1; g <= now; g++) {
		const struct keys_rename *r = &k->recent[g % KEYS_RECENT];

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
static bool recent_may_move(struct keys *k, uint64_t gen, const char *from, const char *to)
{
	size_t fp = path_parent_len(from, strlen(from)), tp = path_parent_len(to, strlen(to));
	bool may;
	uint64_t now;

	pthread_mutex_lock(&k->mutex);
	now = __atomic_load_n(&k->gen, __ATOMIC_RELAXED);
	may = recent_moved_locked(k, gen, now, from, fp) ||
	      recent_moved_locked(k, gen, now, to, tp);
	pthread_mutex_unlock(&k->mutex);
	return may;
}

/* With no other writers and a memo_ttl above 0 (the mount's
 * entry_timeout), a directory's path is remembered on its memo once a key
 * found it: while no rename through this mount moved the directory or an
 * ancestor (the renames in k->recent since tell), and for memo_ttl at
 * most, its next key costs neither getcwd() nor fchdir(). Only renames
 * through this mount are locked at all (BUGS in treelockfs(1)); one made
 * directly on the backing shows in the keys within memo_ttl, as it shows
 * in the names the kernel caches for the mount. */
static bool dir_path_memo_on(struct keys *k, const struct keys_dir *dir)
{
	return dir->memo && !is_root(k, dir) && k->memo_ttl_us > 0 && !k->other_writers;
}

/* DIR's remembered path into OUT->stack, with room for EXTRA more bytes
 * after it: sets *LEN and returns true, or false when there is none to
 * trust. */
static bool dir_path_recall(struct keys *k, const struct keys_dir *dir, size_t extra,
			    struct keys_buf *out, size_t *len)
{
	int64_t now = tl_mono_us();
	bool hit = false;
	uint64_t g;

	pthread_mutex_lock(&k->mutex);
	if (dir->memo->path && now < dir->memo->until_us &&
	    dir->memo->len + 1 + extra <= sizeof(out->stack)) {
		g = __atomic_load_n(&k->gen, __ATOMIC_RELAXED);
		if (g == dir->memo->gen ||
		    !recent_moved_locked(k, dir->memo->gen, g, dir->memo->path, dir->memo->len)) {
			dir->memo->gen = g; /* right up to G: the next check starts there */
			out->s = out->stack;
			memcpy(out->s, dir->memo->path, dir->memo->len + 1);
			*len = dir->memo->len;
			hit = true;
		}
	}
	pthread_mutex_unlock(&k->mutex);
	return hit;
}

/* Remembers P (LEN bytes), DIR's path as found after k->gen was GEN:
 * the renames noted since are checked against it when it is recalled. */
static void dir_path_remember(struct keys *k, const struct keys_dir *dir, uint64_t gen,
			      const char *p, size_t len)
{
	char *copy = malloc(len + 1), *old;

	if (!copy)
		return; /* the next key finds it again */
	memcpy(copy, p, len + 1);
	pthread_mutex_lock(&k->mutex);
	old = dir->memo->path;
	dir->memo->path = copy;
	dir->memo->len = len;
	dir->memo->gen = gen;
	dir->memo->until_us = tl_mono_us() + k->memo_ttl_us;
	pthread_mutex_unlock(&k->mutex);
	free(old);
}

/* The path of DIR below the backing root ("" for the root, else "/a/b")
 * into OUT (*LEN bytes), with room for EXTRA more bytes after it: the
 * remembered one when it can be trusted (dir_path_memo_on()), else one
 * getcwd() or readlink() (dir_path_fast()); when that
 * cannot tell, or gives a name ending in " (deleted)" that a lookup does
 * not confirm, path_by_walk() finds it. Returns 0, -ENOENT (removed or
 * outside the backing tree), -ENOMEM; OUT->s is NULL but on success. */
static int dir_path(struct keys *k, const struct keys_dir *dir, size_t extra, struct keys_buf *out,
		    size_t *len)
{
	char *walked, *p;
	const char *rel;
	bool suspect;
	bool memo = dir_path_memo_on(k, dir);
	uint64_t gen = 0;
	ssize_t n;
	int err;

	if (memo) {
		if (dir_path_recall(k, dir, extra, out, len))
			return 0;
		gen = __atomic_load_n(&k->gen, __ATOMIC_ACQUIRE);
	}
	/* the kernel's name lands in OUT->stack (PATH_MAX + 1 bytes at least) */
	n = dir_path_fast(k, dir, out->stack, &rel, &suspect);
	out->s = NULL;
	if (n == -2)
		return -ENOENT;
	if (n >= 0 && (!suspect || key_reaches(k, rel, (size_t)n, dir))) {
		err = key_buf_room(out, (size_t)n, extra);
		if (err)
			return err;
		memmove(out->s, rel, (size_t)n + 1); /* REL may be inside OUT->stack */
		*len = (size_t)n;
		if (memo)
			dir_path_remember(k, dir, gen, out->s, *len);
		return 0;
	}
	err = path_by_walk(k, dir, &walked);
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
static bool dir_path_is(struct keys *k, const struct keys_dir *dir, const char *key, size_t len)
{
	char buf[PATH_MAX + 1];
	const char *rel;
	bool suspect;
	ssize_t n = dir_path_fast(k, dir, buf, &rel, &suspect);

	if (n == -2)
		return false;
	if (n < 0 || suspect)
		return key_reaches(k, key, len, dir);
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

/* The directory's current path below the backing root (dir_path()) and
 * NAME. */
int keys_of(struct keys *k, const struct keys_dir *dir, const char *name, struct keys_buf *out,
	    size_t *dlen)
{
	size_t nlen = name ? strlen(name) : 0, len;
	int err;

	err = dir_path(k, dir, nlen + 1, out, &len);
	if (err)
		return err;
	key_finish(out->s, len, name, nlen);
	if (dlen)
		*dlen = len;
	return 0;
}

int keys_sibling(const char *key, size_t dlen, const char *name, struct keys_buf *out)
{
	size_t nlen = strlen(name);
	int err = key_buf_room(out, dlen, nlen + 1);

	if (err)
		return err;
	memcpy(out->s, key, dlen);
	key_finish(out->s, dlen, name, nlen);
	return 0;
}

static int key_list_add(struct keys_list *l, char *key)
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

void keys_list_free(struct keys_list *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

void keys_memo_forget(struct keys *k, struct keys_memo *memo)
{
	char *old;

	pthread_mutex_lock(&k->mutex);
	old = memo->path;
	memo->path = NULL;
	pthread_mutex_unlock(&k->mutex);
	free(old);
}

void keys_memo_free(struct keys_memo *memo)
{
	free(memo->path);
	memo->path = NULL;
}

/* Breadth first without recursion: OUT is the queue. */
int keys_below(struct keys *k, const char *key, struct keys_list *out)
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

		fd = openat(k->backing_fd, path_rel(dirkey),
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd == -1 && errno == ENAMETOOLONG) {
			/* deeper than one syscall's path: one component at a time */
			int pfd = open_key_dir(k, dirkey, strlen(dirkey));

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
 * With other writers, as the shared storage sees it now: its parent,
 * looked up again from the backing root component by component, is DIR
 * itself. A readlink() of DIR's fd would
 * not do: it is this host's cached view, which another host's rename of
 * an ancestor leaves as it was. Without other writers this host's view is
 * the storage's, and one readlink() tells (dir_path_is()). */
static bool key_still(struct keys *k, const struct keys_dir *dir, const char *key)
{
	size_t plen = path_parent_len(key, strlen(key));

	if (!k->other_writers)
		return dir_path_is(k, dir, key, plen);
	return key_reaches(k, key, plen, dir);
}

uint64_t keys_generation(struct keys *k)
{
	return __atomic_load_n(&k->gen, __ATOMIC_ACQUIRE);
}

/* The locks are on the paths the names had when the keys were made. If a
 * rename that was waited for moved one of them, the path the caller named
 * is gone (the guide's ENOENT). Without other writers only renames
 * through this mount can have moved them: none did when the generation is
 * unchanged, or when none of those noted since renamed one of the keys'
 * directories or their ancestors (recent_may_move()). */
bool keys_still_valid(struct keys *k, uint64_t gen, const struct keys_dir *from_dir,
		      const char *from, const struct keys_dir *to_dir, const char *to)
{
	bool one_dir = from_dir->dev == to_dir->dev && from_dir->ino == to_dir->ino;

	if (!k->other_writers &&
	    (keys_generation(k) == gen || !recent_may_move(k, gen, from, to)))
		return true;
	return key_still(k, from_dir, from) && (one_dir || key_still(k, to_dir, to));
}

void keys_renamed(struct keys *k, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to);
	struct keys_rename *r;
	uint64_t g;

	pthread_mutex_lock(&k->mutex);
	g = __atomic_load_n(&k->gen, __ATOMIC_RELAXED) + 1;
	r = &k->recent[g % KEYS_RECENT];
	r->gen = g;
	r->unknown = fl >= sizeof(r->from) || tl >= sizeof(r->to);
	if (!r->unknown) {
		memcpy(r->from, from, fl + 1);
		memcpy(r->to, to, tl + 1);
	}
	__atomic_store_n(&k->gen, g, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&k->mutex);
}

