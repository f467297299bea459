/* fs_rename.c - rename() in tree locks: lock keys, plans, ll_rename()
 *
 *   keys  = key_of(parent, name), key_of(newparent, newname)
 *   plan  = lockplan_rename(strategy, from, to, flags [, entries below])
 *   hold  = lockmgr_acquire(plan)              all or nothing, bounded wait
 *   check = the keys still name what the fds hold, else ENOENT
 *   renameat2() by the directories' fds
 *   lockmgr_release(plan)                      on every path
 *
 * A key is the path of an entry below the backing root as the kernel
 * resolves the parent's fd now (/proc/self/fd/N), which follows renames
 * made by anyone. With lock_scope=namespace the operations that create or
 * remove a name take the entry's plan too (entry_lock()).
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "lockplan.h"
#include "log.h"
#include "path.h"
#include "tlclock.h"

/* The key of NAME in directory DIR (or of DIR itself when NAME is NULL):
 * the directory's current path below the backing root, as the kernel
 * resolves its fd. Writes a new string to *OUT. Returns 0, -ENOENT (the
 * directory is gone or outside the backing tree), -ENAMETOOLONG, -ENOMEM. */
static int key_of(struct tlfs *fs, struct ll_inode *dir, const char *name, char **out)
{
	char proc[64], buf[PATH_MAX + 1], *key;
	size_t rootlen = strlen(fs->root_path), len;
	ssize_t n;
	const char *rel;

	*out = NULL;
	if (dir == fs->root) {
		rel = "";
	} else {
		proc_name(dir->fd, proc);
		n = readlink(proc, buf, PATH_MAX);
		if (n < 0 || n >= PATH_MAX)
			return n < 0 ? -ENOENT : -ENAMETOOLONG;
		buf[n] = '\0';
		if (n > 10 && strcmp(buf + n - 10, " (deleted)") == 0)
			return -ENOENT;
		if (strncmp(buf, fs->root_path, rootlen) != 0 ||
		    (buf[rootlen] != '/' && buf[rootlen] != '\0'))
			return -ENOENT; /* moved out of the backing tree */
		rel = buf + rootlen;
	}
	len = strlen(rel) + (name ? strlen(name) + 1 : 0) + 2;
	if (len >= PATH_MAX)
		return -ENAMETOOLONG;
	key = malloc(len);
	if (!key)
		return -ENOMEM;
	if (name)
		snprintf(key, len, "%s/%s", rel, name);
	else
		snprintf(key, len, "%s", *rel ? rel : "/");
	*out = key;
	return 0;
}

/* Takes the entry plan of NAME in PARENT when lock_scope=namespace. */
int entry_lock(struct tlfs *fs, fuse_req_t req, struct ll_inode *parent, const char *name,
		      struct op_lock *l)
{
	char *key;
	int err;

	l->plan = NULL;
	if (fs->cfg->lock_scope != TL_SCOPE_NAMESPACE || fs->cfg->lock_strategy == TL_STRATEGY_NONE)
		return 0;
	creds_daemon(fs);
	err = key_of(fs, parent, name, &key);
	if (err)
		return err;
	err = lockplan_entry(fs->cfg->lock_strategy, key, &l->plan);
	free(key);
	if (err)
		return err == -EINVAL ? -ENAMETOOLONG : err;
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

/* True when NAME in DIR still has the key KEY: no rename (here or on
 * another host) moved one of its directories since KEY was computed. */
static bool key_still(struct tlfs *fs, struct ll_inode *dir, const char *name, const char *key)
{
	char *now = NULL;
	bool same = key_of(fs, dir, name, &now) == 0 && strcmp(now, key) == 0;

	free(now);
	return same;
}

void ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *p1 = ino_get(fs, parent), *p2 = ino_get(fs, newparent);
	struct key_list below = {0};
	struct tl_plan *plan = NULL;
	struct tl_holder holder;
	char *from = NULL, *to = NULL;
	int64_t t0 = tl_log_level >= LOG_DEBUG ? tl_mono_ms() : 0; /* for the debug line only */
	uint64_t gen = __atomic_load_n(&fs->rename_gen, __ATOMIC_ACQUIRE);
	int res;

	if ((flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) ||
	    ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (ctl_is_name(fs, p1, name) || ctl_is_name(fs, p2, newname)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	creds_daemon(fs);
	if (fs->cfg->lock_strategy == TL_STRATEGY_NONE) {
		/* no locks, no keys: the baseline the others are measured by */
		res = creds_enter(fs, req);
		if (!res && renameat2(p1->fd, name, p2->fd, newname, flags) == -1)
			res = -errno;
		lockmgr_count_unlocked(&fs->mgr, true);
		fuse_reply_err(req, -res);
		return;
	}
	res = key_of(fs, p1, name, &from);
	if (!res)
		res = key_of(fs, p2, newname, &to);
	if (res)
		goto out_free_keys;
	if (fs->cfg->lock_strategy == TL_STRATEGY_DOCUMENT) {
		res = walk_below(fs, from, &below);
		if (res)
			goto out_free_keys;
	}
	res = lockplan_rename(fs->cfg->lock_strategy, from, to, flags,
			      (const char *const *)below.v, below.n, &plan);
	if (res) {
		if (res == -EINVAL)
			res = -ENAMETOOLONG; /* a key of PATH_MAX bytes or more */
		goto out_free_keys;
	}
	res = lockmgr_acquire(&fs->mgr, plan, (uint32_t)fuse_req_ctx(req)->pid, &holder);
	if (res)
		goto out_free_plan;
	if (fs->cfg->rename_delay_ms) {
		struct timespec ts = {.tv_sec = fs->cfg->rename_delay_ms / 1000,
				      .tv_nsec = (long)(fs->cfg->rename_delay_ms % 1000) * 1000000};

		nanosleep(&ts, NULL);
	}
	res = lockmgr_check_lease(&fs->mgr);
	if (res) {
		tl_log(LOG_ERR, "rename '%s' -> '%s' refused: this mount's lease is no longer fresh",
		       from, to);
		goto out_release_locks;
	}
	/* The locks are on the paths the names had when we asked. If a rename
	 * we waited for moved one of them, the path the caller named is gone:
	 * that is the guide's ENOENT, and renaming by the directory fds now
	 * would act on a path nobody locked. When the store has no other
	 * writers only renames through this mount can have moved them, and
	 * none completed since the keys were computed when the generation is
	 * unchanged. */
	if ((lockmgr_other_writers_possible(&fs->mgr) ||
	     __atomic_load_n(&fs->rename_gen, __ATOMIC_ACQUIRE) != gen) &&
	    (!key_still(fs, p1, name, from) || !key_still(fs, p2, newname, to))) {
		tl_log(LOG_INFO, "rename '%s' -> '%s': moved while it waited", from, to);
		res = -ENOENT;
		goto out_release_locks;
	}
	res = creds_enter(fs, req);
	if (res)
		goto out_release_locks;
	/* by the directories' fds: a directory moved by another host since the
	 * kernel resolved the names is still the one the kernel meant */
	res = renameat2(p1->fd, name, p2->fd, newname, flags);
	res = res == -1 ? -errno : 0;
	if (!res)
		__atomic_add_fetch(&fs->rename_gen, 1, __ATOMIC_RELEASE);

out_release_locks:
	creds_daemon(fs);
	lockmgr_release(&fs->mgr, plan, &holder);
	tl_log(LOG_DEBUG, "rename '%s' -> '%s': %zu locks in %" PRId64 " ms: %s", from, to, plan->n,
	       tl_mono_ms() - t0, res ? strerror(-res) : "ok");
out_free_plan:
	lockplan_free(plan);
out_free_keys:
	key_list_free(&below);
	free(from);
	free(to);
	fuse_reply_err(req, -res);
}
