/* fs_rename.c - rename() in tree locks: ll_rename() and entry locks
 *
 *   keys  = keys_of(parent, name), keys_of(newparent, newname)  fs_keys.h
 *           [+ keys_below(from): the document strategy]
 *   hold  = lockmgr_hold_rename(keys)      the plan in the form the store
 *                                          takes; all or nothing, bounded
 *                                          wait; the hold log
 *   check = keys_still_valid(keys), else ENOENT
 *   renameat2() by the directories' fds
 *   lockmgr_unhold(hold)                   on every path, before the answer
 *
 * What a key is and how it is found (this host's view, the check against
 * the shared storage's once the locks are held) is fs_keys.h's; which
 * rename flags the backing refuses, renameflags.h's. With
 * lock_scope=namespace the operations that create or remove a name take
 * the entry's hold too (rename_lock_entry()).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fs/fs.h"
#include "fs/fs_keys.h"
#include "lock/lockmgr.h"
#include "base/log.h"
#include "fs/renameflags.h"
#include "base/tlclock.h"

/* IN as the key functions take it. This function can't fail. */
static struct keys_dir key_dir(struct ll_inode *in)
{
	struct keys_dir d = {.fd = in->fd, .dev = in->dev, .ino = in->ino, .memo = &in->key_memo};

	return d;
}

/* Takes the entry plan of NAME in PARENT when lock_scope=namespace. */
int rename_lock_entry(struct tlfs *fs, fuse_req_t req, struct ll_inode *parent, const char *name,
	       struct op_lock *l)
{
	struct keys_dir dir = key_dir(parent);
	struct keys_buf key;
	int err;

	l->hold.plan = NULL;
	if (fs->cfg->lock_scope != TL_SCOPE_NAMESPACE || fs->cfg->lock_strategy == TL_STRATEGY_NONE)
		return 0;
	creds_daemon(fs);
	err = keys_of(&fs->keys, &dir, name, &key, NULL);
	if (err)
		return err;
	err = lockmgr_hold_entry(&fs->mgr, fs->cfg->lock_strategy, key.s,
				 (uint32_t)fuse_req_ctx(req)->pid, &l->hold);
	keys_buf_free(&key);
	return err;
}

void rename_unlock_entry(struct tlfs *fs, struct op_lock *l)
{
	if (!l->hold.plan)
		return;
	creds_daemon(fs);
	lockmgr_unhold(&fs->mgr, &l->hold, 0);
}

void ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	       const char *newname, unsigned int flags)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *p1 = inode_get(fs, parent), *p2 = inode_get(fs, newparent);
	struct keys_dir d1 = key_dir(p1), d2 = key_dir(p2);
	struct keys_list below = {0};
	struct tl_hold hold;
	struct keys_buf kfrom, kto; /* not cleared: only .s is read before set */
	const char *from = NULL, *to = NULL;
	size_t dlen, nlocks;
	int64_t t0 = tl_mono_us(); /* for the metrics and the debug line */
	uint64_t gen = keys_generation(&fs->keys);
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
	if (renameflags_refused(&fs->rename_flags, p1->dev, flags)) {
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
		res = keys_of(&fs->keys, &d1, name, &kfrom, &dlen);
		if (!res)
			res = keys_sibling(kfrom.s, dlen, newname, &kto);
	} else if (keys_thread_at(&d2)) {
		/* the working directory is still where the last key left it:
		 * that key first, so that the two keys take one fchdir() (a
		 * thread that renames back and forth between two directories
		 * then moves once per rename, not twice) */
		res = keys_of(&fs->keys, &d2, newname, &kto, NULL);
		if (!res)
			res = keys_of(&fs->keys, &d1, name, &kfrom, NULL);
	} else {
		res = keys_of(&fs->keys, &d1, name, &kfrom, NULL);
		if (!res)
			res = keys_of(&fs->keys, &d2, newname, &kto, NULL);
	}
	if (res)
		goto out_free_keys;
	from = kfrom.s;
	to = kto.s;
	if (fs->cfg->lock_strategy == TL_STRATEGY_DOCUMENT) {
		res = keys_below(&fs->keys, from, &below);
		if (res)
			goto out_free_keys;
	}
	/* the keys outlive the hold: they are freed after its release */
	res = lockmgr_hold_rename(&fs->mgr, fs->cfg->lock_strategy, from, to, flags,
				  (const char *const *)below.v, below.n,
				  (uint32_t)fuse_req_ctx(req)->pid, &hold);
	if (res)
		goto out_free_keys;
	if (fs->cfg->rename_delay_ms) {
		struct timespec ts = {.tv_sec = fs->cfg->rename_delay_ms / 1000,
				      .tv_nsec = (long)(fs->cfg->rename_delay_ms % 1000) * 1000000};

		nanosleep(&ts, NULL);
	}
	/* The locks are on the paths the names had when we asked. If a rename
	 * we waited for moved one of them, the path the caller named is gone:
	 * that is the guide's ENOENT, and renaming by the directory fds now
	 * would act on a path nobody locked. */
	if (!keys_still_valid(&fs->keys, gen, &d1, from, &d2, to)) {
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
		keys_renamed(&fs->keys, from, to);
	renameflags_learn(&fs->rename_flags, p1->dev, flags, res, from, to);

out_release_locks:
	creds_daemon(fs);
	nlocks = hold.plan->n;
	/* released before the answer, also with the mem store, where it
	 * takes some 150 ns: a caller that goes on at once (on a busy CPU, it
	 * runs as soon as it is answered) would otherwise find its next
	 * rename of the same names, or below a directory it just moved,
	 * waiting for this one's release (measured: directory renames back
	 * and forth on one CPU, 0.55-0.89 of lock_strategy=none that way,
	 * 0.78-0.97 this way) */
	lockmgr_unhold(&fs->mgr, &hold, res);
	tl_log(LOG_DEBUG, "rename '%s' -> '%s': %zu locks in %" PRId64 " ms: %s", from, to, nlocks,
	       (tl_mono_us() - t0) / 1000, res ? strerror(-res) : "ok");
out_free_keys:
	keys_list_free(&below);
	keys_buf_free(&kfrom);
	keys_buf_free(&kto);
	lockmgr_count_rename(&fs->mgr, res, tl_mono_us() - t0);
	if (req)
		fuse_reply_err(req, -res);
}
