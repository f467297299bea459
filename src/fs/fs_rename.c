/* fs_rename.c - rename() in tree locks: ll_rename() and entry locks
 *
 * ll_rename() drives a rename through these steps, one function each:
 *
 *   refuse rename_refusal()  bad flags, control names, flags the backing
 *                            refuses: before any key
 *   keys   rename_keys()     keys_of(parent, name), keys_of(newparent,
 *                            newname) [+ keys_below(from): the document
 *                            strategy]                        fs_keys.h
 *   hold   rename_hold()     lockmgr_hold_rename(keys): the plan in the
 *                            form the store takes; all or nothing,
 *                            bounded wait; the hold log
 *   check  rename_check()    keys_still_valid(keys), else ENOENT; the
 *                            caller's credentials; the lease still fresh
 *   rename rename_act()      renameat2() by the directories' fds
 *   unhold rename_unhold()   lockmgr_unhold(hold): on every path after a
 *                            hold, before the answer
 *
 * (lock_strategy=none: rename_unlocked(), without keys or locks.)
 *
 * What a key is and how it is found (this host's view, the check against
 * the shared storage's once the locks are held) is fs_keys.h's; which
 * rename flags the backing refuses, renameflags.h's. With
 * lock_scope=namespace the operations that create or remove a name take
 * the entry's hold too (rename_lock_entry()).
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

/* One rename on its way through the steps of ll_rename(): what they
 * share. The keys outlive the hold: they are freed after its release. */
struct rename_op {
	struct tlfs *fs;
	fuse_req_t req;
	struct ll_inode *p1, *p2;  /* the directories, by the kernel's nodeids */
	const char *name, *newname;
	unsigned int flags;
	struct keys_dir d1, d2;
	struct keys_buf kfrom, kto; /* only .s is read before set */
	struct keys_list below;    /* the document strategy */
	struct tl_hold hold;       /* set by rename_hold() */
	int64_t t0;                /* for the metrics and the debug line */
	uint64_t gen;              /* keys_generation() before the keys */
};

/* refuse: -EINVAL or -EPERM for a rename refused before any key, else 0. */
static int rename_refusal(struct rename_op *r)
{
	unsigned int flags = r->flags;

	if ((flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) ||
	    ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)))
		return -EINVAL;
	if (ctl_is_name(r->fs, r->p1, r->name) || ctl_is_name(r->fs, r->p2, r->newname))
		return -EPERM;
	if (renameflags_refused(&r->fs->rename_flags, r->p1->dev, flags)) {
		lockmgr_count_unlocked(&r->fs->mgr, false);
		return -EINVAL;
	}
	return 0;
}

static int rename_keys(struct rename_op *r);

/* fs index: tells the lock manager what rename R (done) moved: a
 * directory (either, exchanged) moves the documents below it, and holds
 * R's locks until they moved. This function can't fail. */
static void rename_note(struct rename_op *r)
{
	struct stat st;
	bool tree;

	if (!lockmgr_indexing(&r->fs->mgr))
		return;
	creds_daemon(r->fs);
	tree = fstatat(r->p2->fd, r->newname, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       S_ISDIR(st.st_mode);
	if (!tree && (r->flags & RENAME_EXCHANGE))
		tree = fstatat(r->p1->fd, r->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		       S_ISDIR(st.st_mode);
	lockmgr_note_rename(&r->fs->mgr, r->hold.plan ? &r->hold : NULL, r->kfrom.s, r->kto.s,
			    tree);
	index_note_parent(r->fs, r->kfrom.s);
	index_note_parent(r->fs, r->kto.s);
}

/* lock_strategy=none, the baseline: renames as the caller, no keys, no locks; 0 or -errno. */
static int rename_unlocked(struct rename_op *r)
{
	bool keys = lockmgr_indexing(&r->fs->mgr) && rename_keys(r) == 0;
	int res = creds_enter(r->fs, r->req);

	if (!res && renameat2(r->p1->fd, r->name, r->p2->fd, r->newname, r->flags) == -1)
		res = -errno;
	if (!res && keys)
		rename_note(r); /* the fs index's keys: looked up before, unlocked */
	lockmgr_count_unlocked(&r->fs->mgr, true);
	return res;
}

/* keys: both names' keys, and the document strategy's below the source; 0 or -errno. */
static int rename_keys(struct rename_op *r)
{
	struct keys *k = &r->fs->keys;
	size_t dlen;
	int res;

	if (r->p2 == r->p1) { /* one directory: one lookup of its path serves both keys */
		res = keys_of(k, &r->d1, r->name, &r->kfrom, &dlen);
		if (!res)
			res = keys_sibling(r->kfrom.s, dlen, r->newname, &r->kto);
	} else if (keys_thread_at(&r->d2)) {
		/* the working directory is still where the last key left it:
		 * that key first, so that the two keys take one fchdir() (a
		 * thread that renames back and forth between two directories
		 * then moves once per rename, not twice) */
		res = keys_of(k, &r->d2, r->newname, &r->kto, NULL);
		if (!res)
			res = keys_of(k, &r->d1, r->name, &r->kfrom, NULL);
	} else {
		res = keys_of(k, &r->d1, r->name, &r->kfrom, NULL);
		if (!res)
			res = keys_of(k, &r->d2, r->newname, &r->kto, NULL);
	}
	if (!res && r->fs->cfg->lock_strategy == TL_STRATEGY_DOCUMENT)
		res = keys_below(k, r->kfrom.s, &r->below);
	return res;
}

/* hold: takes the keys' plan into r->hold, then keeps it rename_delay_ms; 0 or -errno. */
static int rename_hold(struct rename_op *r)
{
	const struct tl_config *cfg = r->fs->cfg;
	int res;

	res = lockmgr_hold_rename(&r->fs->mgr, cfg->lock_strategy, r->kfrom.s, r->kto.s, r->flags,
				  (const char *const *)r->below.v, r->below.n,
				  (uint32_t)fuse_req_ctx(r->req)->pid, &r->hold);
	if (!res && cfg->rename_delay_ms) {
		struct timespec ts = {.tv_sec = cfg->rename_delay_ms / 1000,
				      .tv_nsec = (long)(cfg->rename_delay_ms % 1000) * 1000000};

		nanosleep(&ts, NULL);
	}
	return res;
}

/* check: names where their locks are (else -ENOENT), caller's creds, lease fresh; 0 or -errno. */
static int rename_check(struct rename_op *r)
{
	const char *from = r->kfrom.s, *to = r->kto.s;
	int res;

	/* The locks are on the paths the names had when we asked. If a rename
	 * we waited for moved one of them, the path the caller named is gone:
	 * that is the guide's ENOENT, and renaming by the directory fds now
	 * would act on a path nobody locked. */
	if (!keys_still_valid(&r->fs->keys, r->gen, &r->d1, from, &r->d2, to)) {
		tl_log(LOG_INFO, "rename '%s' -> '%s': moved while it waited", from, to);
		return -ENOENT;
	}
	res = creds_enter(r->fs, r->req);
	if (res)
		return res;
	/* Last, right before the rename: whatever ran since the locks were
	 * granted (the checks above walk the backing, and this process may be
	 * stopped anywhere) counts against the lease. What the rename itself
	 * takes is the window BUGS describes. */
	res = lockmgr_check_lease(&r->fs->mgr);
	if (res)
		tl_log(LOG_ERR, "rename '%s' -> '%s' refused: this mount's lease is no longer fresh",
		       from, to);
	return res;
}

/* rename: renameat2() by the directories' fds, noted for keys and flags; 0 or -errno. */
static int rename_act(struct rename_op *r)
{
	struct tlfs *fs = r->fs;
	int res;

	/* by the directories' fds: a directory moved by another host since the
	 * kernel resolved the names is still the one the kernel meant */
	res = renameat2(r->p1->fd, r->name, r->p2->fd, r->newname, r->flags);
	res = res == -1 ? -errno : 0;
	if (!res)
		keys_renamed(&fs->keys, r->kfrom.s, r->kto.s);
	renameflags_learn(&fs->rename_flags, r->p1->dev, r->flags, res, r->kfrom.s, r->kto.s);
	return res;
}

/* unhold: releases r->hold as the daemon, with result RES, and logs it. Can't fail. */
static void rename_unhold(struct rename_op *r, int res)
{
	size_t nlocks = r->hold.plan->n;

	creds_daemon(r->fs);
	/* released before the answer, also with the mem store, where it
	 * takes some 150 ns: a caller that goes on at once (on a busy CPU, it
	 * runs as soon as it is answered) would otherwise find its next
	 * rename of the same names, or below a directory it just moved,
	 * waiting for this one's release (measured: directory renames back
	 * and forth on one CPU, 0.55-0.89 of lock_strategy=none that way,
	 * 0.78-0.97 this way) */
	lockmgr_unhold(&r->fs->mgr, &r->hold, res);
	tl_log(LOG_DEBUG, "rename '%s' -> '%s': %zu locks in %" PRId64 " ms: %s", r->kfrom.s,
	       r->kto.s, nlocks, (tl_mono_us() - r->t0) / 1000, res ? strerror(-res) : "ok");
}

void ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	       const char *newname, unsigned int flags)
{
	struct tlfs *fs = req_fs(req);
	struct rename_op r = {.fs = fs, .req = req, .p1 = inode_get(fs, parent),
			      .p2 = inode_get(fs, newparent), .name = name, .newname = newname,
			      .flags = flags, .t0 = tl_mono_us(),
			      .gen = keys_generation(&fs->keys)};
	int res;

	r.d1 = key_dir(r.p1);
	r.d2 = key_dir(r.p2);
	res = rename_refusal(&r);
	if (res)
		goto out_count;
	creds_daemon(fs);
	if (fs->cfg->lock_strategy == TL_STRATEGY_NONE) {
		res = rename_unlocked(&r);
		goto out_free_keys;
	}
	res = rename_keys(&r);
	if (res)
		goto out_free_keys;
	res = rename_hold(&r);
	if (res)
		goto out_free_keys;
	res = rename_check(&r);
	if (!res)
		res = rename_act(&r);
	if (!res)
		rename_note(&r);
	rename_unhold(&r, res);
out_free_keys:
	keys_list_free(&r.below);
	keys_buf_free(&r.kfrom);
	keys_buf_free(&r.kto);
out_count:
	lockmgr_count_rename(&fs->mgr, res, tl_mono_us() - r.t0);
	fuse_reply_err(req, -res);
}
