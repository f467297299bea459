/* fs_plock.c - POSIX record locks and flock() on the backing files, see fs.h
 *
 * Lock order: fs->plock_mutex is a leaf, never held across a syscall.
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

#include "fs.h"

/* A POSIX lock belongs to a process (the kernel's lock owner) and covers
 * all its open files of an inode; closing any of them drops them all, and
 * a child closing an inherited fd drops only the child's. They are
 * forwarded as open file description locks on the backing file (so that
 * other hosts and local processes see them), on one description per
 * (inode, owner): an fd the daemon opens for that owner and closes when the
 * owner flushes the file, which releases exactly that owner's locks. */
struct plock_owner {
	struct plock_owner *next;
	dev_t dev;
	ino_t ino;
	uint64_t owner;
	int fd;
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

/* The description of OWNER's locks on the file open as FD, with a
 * reference; created when CREATE. Returns 0, -ENOENT (none and not
 * CREATE) or -errno. */
static int plock_get(struct tlfs *fs, int fd, uint64_t owner, bool create,
		     struct plock_owner **out)
{
	struct plock_owner *o, *found;
	struct stat st;
	char proc[64];
	int ofd;

	if (fstat(fd, &st) == -1)
		return -errno;
	pthread_mutex_lock(&fs->plock_mutex);
	o = plock_find_locked(fs, st.st_dev, st.st_ino, owner);
	if (o)
		o->refs++;
	pthread_mutex_unlock(&fs->plock_mutex);
	if (o || !create) {
		*out = o;
		return o ? 0 : -ENOENT;
	}
	/* read-write whatever FD allows: the kernel has checked the mode of
	 * the caller's own file against the lock type already */
	proc_name(fd, proc);
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
	pthread_mutex_lock(&fs->plock_mutex);
	found = plock_find_locked(fs, st.st_dev, st.st_ino, owner);
	if (found) {
		found->refs++;
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

/* Drops every lock OWNER holds on the file open as FD (its close). */
void plock_drop_owner(struct tlfs *fs, int fd, uint64_t owner)
{
	struct plock_owner **pp, *o = NULL;
	struct stat st;

	if (!__atomic_load_n(&fs->plocks, __ATOMIC_ACQUIRE) || fstat(fd, &st) == -1)
		return;
	pthread_mutex_lock(&fs->plock_mutex);
	for (pp = &fs->plocks; *pp; pp = &(*pp)->next) {
		if ((*pp)->owner == owner && (*pp)->ino == st.st_ino && (*pp)->dev == st.st_dev) {
			o = *pp;
			*pp = o->next;
			break;
		}
	}
	pthread_mutex_unlock(&fs->plock_mutex);
	plock_put(fs, o);
}

static int posix_lock(struct tlfs *fs, struct fuse_file_info *fi, int cmd, struct flock *lk)
{
	struct plock_owner *o = NULL;
	int ofd_cmd, fd, res;

	if (fi->fh & (CTL_TAG | DIR_TAG))
		return -EBADF;
	ofd_cmd = cmd == F_GETLK ? F_OFD_GETLK : cmd == F_SETLK ? F_OFD_SETLK : F_OFD_SETLKW;
	/* an owner without a description holds nothing: test against all
	 * (the caller's own fd holds no lock), and unlocking is a no-op */
	creds_daemon(fs);
	res = plock_get(fs, (int)fi->fh, fi->lock_owner, cmd != F_GETLK && lk->l_type != F_UNLCK,
			&o);
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
		lk->l_pid = -1; /* the holder may be on another host */
	plock_put(fs, o);
	return res;
}

void ll_getlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock)
{
	int res = posix_lock(req_fs(req), fi, F_GETLK, lock);

	if (res)
		fuse_reply_err(req, -res);
	else
		fuse_reply_lock(req, lock);
}

void ll_setlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock,
		     int sleep)
{
	fuse_reply_err(req, -posix_lock(req_fs(req), fi, sleep ? F_SETLKW : F_SETLK, lock));
}

void ll_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op)
{
	if (fi->fh & (CTL_TAG | DIR_TAG)) {
		fuse_reply_err(req, EBADF);
		return;
	}
	fuse_reply_err(req, flock((int)fi->fh, op) == -1 ? errno : 0);
}
