/* fs_plock.c - POSIX record locks and flock() on the backing files, see fs.h
 *
 * A lock that is free is taken on the request's thread. One that must wait
 * (flock() without LOCK_NB, F_SETLKW) waits on a thread of its own
 * (plockwait.h) and is answered from there when granted, when the caller is
 * interrupted (FUSE_INTERRUPT: the wait ends with EINTR) or when its file
 * is released; the request thread goes back to serving others. The bounds
 * lock_waiters and lock_waiters_per_user refuse more waits with ENOLCK.
 *
 * Lock order: fs->plock_mutex is a leaf, never held across a syscall;
 * fs->waits.mutex is another leaf, never held together with it.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs.h"
#include "fs/plockwait.h"

/* A POSIX lock belongs to a process (the kernel's lock owner) and covers
 * all its open files of an inode; closing any of them drops them all, and
 * a child closing an inherited fd drops only the child's. They are
 * forwarded as open file description locks on the backing file (so that
 * other hosts and local processes see them), on one description per
 * (inode, owner): an fd the daemon opens for that owner and closes when the
 * owner flushes the file, which releases exactly that owner's locks.
 *
 * An open file description lock (F_OFD_SETLK) taken through the mount
 * reaches us the same way, its owner being the caller's open file. No
 * flush names that owner; the release of the file's handle ends it: each
 * description remembers the handle it was last used through, and
 * plock_release_fh() drops those of the handle. A process's own owner
 * flushes before any handle it used can be released, so this only ever
 * finds what the flushes cannot. */
struct plock_owner {
	struct plock_owner *next;
	dev_t dev;
	ino_t ino;
	uint64_t owner;
	int fd;
	uint64_t fh;             /* the handle last used; protected by plock_mutex */
	unsigned int waits;      /* lock waits on fd; protected by plock_mutex */
	unsigned int refs;       /* the table's, plus one per user */
};


static void plock_put(struct tlfs *fs, struct plock_owner *o)
{
	bool last;

	if (!o)
		return;
	pthread_mutex_lock(&fs->plock_mutex);
	last = --o->refs == 0;
	pthread_mutex_unlock(&fs->plock_mutex);
	if (last) {
		close(o->fd);
		free(o);
	}
}

static struct plock_owner *plock_find_locked(struct tlfs *fs, dev_t dev, ino_t ino,
					     uint64_t owner)
{
	struct plock_owner *o;

	for (o = fs->plocks; o; o = o->next)
		if (o->owner == owner && o->ino == ino && o->dev == dev)
			return o;
	return NULL;
}

/* The description of OWNER's locks on the file open as handle FH, with a
 * reference; created when CREATE. Returns 0, -ENOENT (none and not
 * CREATE) or -errno. */
static int plock_get(struct tlfs *fs, uint64_t fh, uint64_t owner, bool create,
		     struct plock_owner **out)
{
	int fd = (int)fh;
	struct plock_owner *o, *found;
	struct stat st;
	char proc[64];
	int ofd;

	if (fstat(fd, &st) == -1)
		return -errno;
	pthread_mutex_lock(&fs->plock_mutex);
	o = plock_find_locked(fs, st.st_dev, st.st_ino, owner);
	if (o) {
		o->refs++;
		o->fh = fh;
	}
	pthread_mutex_unlock(&fs->plock_mutex);
	if (o || !create) {
		*out = o;
		return o ? 0 : -ENOENT;
	}
	/* read-write whatever FD allows: the kernel has checked the mode of
	 * the caller's own file against the lock type already */
	tlfs_proc_path(fd, proc);
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
	o->fh = fh;
	o->refs = 2;
	pthread_mutex_lock(&fs->plock_mutex);
	found = plock_find_locked(fs, st.st_dev, st.st_ino, owner);
	if (found) {
		found->refs++;
		found->fh = fh;
	} else {
		o->next = fs->plocks;
		fs->plocks = o;
	}
	pthread_mutex_unlock(&fs->plock_mutex);
	if (found) {
		close(ofd);
		free(o);
		o = found;
	}
	*out = o;
	return 0;
}

/* Drops every lock OWNER holds on the file open as FD (its close). A
 * description a lock wait still uses stays (the wait goes on, as a
 * process's other thread keeps waiting when one closes the file); its
 * locks are dropped all the same. */
void plock_drop_owner(struct tlfs *fs, int fd, uint64_t owner)
{
	struct flock all = {.l_type = F_UNLCK, .l_whence = SEEK_SET};
	struct plock_owner **pp, *o = NULL;
	struct stat st;
	bool keep = false;

	if (!__atomic_load_n(&fs->plocks, __ATOMIC_ACQUIRE) || fstat(fd, &st) == -1)
		return;
	pthread_mutex_lock(&fs->plock_mutex);
	for (pp = &fs->plocks; *pp; pp = &(*pp)->next) {
		if ((*pp)->owner == owner && (*pp)->ino == st.st_ino && (*pp)->dev == st.st_dev) {
			o = *pp;
			keep = o->waits > 0;
			if (keep)
				o->refs++;
			else
				*pp = o->next;
			break;
		}
	}
	pthread_mutex_unlock(&fs->plock_mutex);
	if (keep)
		fcntl(o->fd, F_OFD_SETLK, &all);
	plock_put(fs, o);
}

void plock_release_fh(struct tlfs *fs, uint64_t fh)
{
	struct plock_owner **pp, *o, *gone = NULL;

	/* a wait through FH would use FH itself (flock) or one of the
	 * descriptions dropped below */
	plockwait_cancel_tag(&fs->waits, fh, EBADF);
	if (!__atomic_load_n(&fs->plocks, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&fs->plock_mutex);
	pp = &fs->plocks;
	while (*pp) {
		o = *pp;
		if (o->fh == fh && o->waits == 0) {
			*pp = o->next;
			o->next = gone;
			gone = o;
		} else {
			pp = &o->next;
		}
	}
	pthread_mutex_unlock(&fs->plock_mutex);
	while (gone) {
		o = gone;
		gone = o->next;
		plock_put(fs, o); /* the table's: closing it releases its locks */
	}
}

/* ---- waits ------------------------------------------------------------------------------ */

/* A lock request that waits: what its end needs to answer it. */
struct plock_wait {
	struct tlfs *fs;
	fuse_req_t req;
	struct plock_owner *o;   /* a reference, for F_SETLKW; NULL for flock */
};

/* plockwait's done(): answers the request. */
static void wait_done(int res, void *arg)
{
	struct plock_wait *pw = arg;

	if (pw->o) {
		pthread_mutex_lock(&pw->fs->plock_mutex);
		pw->o->waits--;
		pthread_mutex_unlock(&pw->fs->plock_mutex);
		plock_put(pw->fs, pw->o);
	}
	fuse_reply_err(pw->req, -res);
	free(pw);
}

/* libfuse's interrupt callback (FUSE_INTERRUPT of REQ): DATA is the fs,
 * which outlives every request; the wait is found by its request. */
static void wait_interrupted(fuse_req_t req, void *data)
{
	struct tlfs *fs = data;

	plockwait_cancel_key(&fs->waits, req, EINTR);
}

/* Waits for the lock of P on a thread of its own and answers REQ from
 * there; answers at once when the wait cannot be made (ENOLCK for the
 * bounds). Takes over the reference of O (NULL for flock). */
static void wait_start(struct tlfs *fs, fuse_req_t req, struct fuse_file_info *fi,
		       struct plockwait_params *p, struct plock_owner *o)
{
	struct plock_wait *pw;
	struct plockwait *w;
	int err = -ENOMEM;

	pw = calloc(1, sizeof(*pw));
	if (!pw)
		goto out_reply;
	pw->fs = fs;
	pw->req = req;
	pw->o = o;
	p->uid = fuse_req_ctx(req)->uid;
	p->tag = fi->fh;
	p->key = req;
	p->done = wait_done;
	p->arg = pw;
	err = plockwait_prepare(&fs->waits, p, &w);
	if (err)
		goto out_free;
	if (o) {
		pthread_mutex_lock(&fs->plock_mutex);
		o->waits++;
		pthread_mutex_unlock(&fs->plock_mutex);
	}
	/* an interrupt that came already cancels the prepared wait now */
	fuse_req_interrupt_func(req, wait_interrupted, fs);
	err = plockwait_run(&fs->waits, w);
	if (!err)
		return; /* REQ is the wait's now */
	if (o) {
		pthread_mutex_lock(&fs->plock_mutex);
		o->waits--;
		pthread_mutex_unlock(&fs->plock_mutex);
	}
out_free:
	free(pw);
out_reply:
	plock_put(fs, o);
	fuse_reply_err(req, -err);
}

/* ---- operations ------------------------------------------------------------------------- */

/* The description of the locks of FI's lock owner on the file open as FI
 * (plock_get(), as the daemon: the description is the daemon's own), into
 * *OUT (NULL for none); created when CREATE. Returns 0, -EBADF for a
 * control file or a directory, -ENOENT (none and not CREATE) or -errno. */
static int plock_of_fi(struct tlfs *fs, struct fuse_file_info *fi, bool create,
		       struct plock_owner **out)
{
	*out = NULL;
	if (fi->fh & (CTL_TAG | DIR_TAG))
		return -EBADF;
	creds_daemon(fs);
	return plock_get(fs, fi->fh, fi->lock_owner, create, out);
}

void ll_getlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock)
{
	struct tlfs *fs = req_fs(req);
	struct plock_owner *o;
	int res;

	/* an owner without a description holds nothing: test against all
	 * (the caller's own fd holds no lock) */
	res = plock_of_fi(fs, fi, false, &o);
	if (res && res != -ENOENT) {
		fuse_reply_err(req, -res);
		return;
	}
	lock->l_pid = 0;
	res = fcntl(o ? o->fd : (int)fi->fh, F_OFD_GETLK, lock) == -1 ? -errno : 0;
	plock_put(fs, o);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	if (lock->l_type != F_UNLCK)
		lock->l_pid = -1; /* the holder may be on another host */
	fuse_reply_lock(req, lock);
}

void ll_setlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock,
	      int sleep)
{
	struct tlfs *fs = req_fs(req);
	struct plock_owner *o;
	int res;

	res = plock_of_fi(fs, fi, lock->l_type != F_UNLCK, &o);
	if (res) {
		/* unlocking with no description: it holds nothing */
		fuse_reply_err(req, res == -ENOENT ? 0 : -res);
		return;
	}
	lock->l_pid = 0;
	res = fcntl(o->fd, F_OFD_SETLK, lock) == -1 ? -errno : 0;
	if (sleep && (res == -EAGAIN || res == -EACCES)) {
		struct plockwait_params p = {.kind = PLOCKWAIT_OFD, .fd = o->fd, .lk = *lock};

		wait_start(fs, req, fi, &p, o);
		return;
	}
	plock_put(fs, o);
	fuse_reply_err(req, -res);
}

void ll_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op)
{
	int res;

	if (fi->fh & (CTL_TAG | DIR_TAG)) {
		fuse_reply_err(req, EBADF);
		return;
	}
	res = flock((int)fi->fh, op | LOCK_NB) == -1 ? -errno : 0;
	if (res == -EWOULDBLOCK && !(op & LOCK_NB)) {
		struct plockwait_params p = {.kind = PLOCKWAIT_FLOCK, .fd = (int)fi->fh,
					    .flock_op = op};

		wait_start(req_fs(req), req, fi, &p, NULL);
		return;
	}
	fuse_reply_err(req, -res);
}
