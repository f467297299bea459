/* fs_names.c - the names of the tree: looking them up (lookup, forget),
 * creating them (mknod, mkdir, symlink, link, create) and removing them
 * (unlink, rmdir), see fs.h
 *
 * Each name an operation gives the kernel comes with a lookup reference
 * to its inode (fs_inode.c); one the kernel never gets is dropped here.
 * The operations that create or remove a name take its entry lock first
 * (lock_scope=namespace, rename_lock_entry()); rename has fs_rename.c.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs.h"
#include "base/log.h"
#include "base/mountchain.h"

/* ---- entries ------------------------------------------------------------- */

/* Whether NAME in PARENT, a directory on device ST->st_dev, leads back into
 * this mount: it is this mount (a bind mount of it inside BACKING), or a
 * FUSE mount whose chain names this mount's device (mountchain.h). Then
 * every lookup through it would re-enter this mount, and the first rename
 * through it would wait on itself for good. Crossing into a mount is
 * rare, so its chain is read each time. This function can't fail: what
 * cannot be read does not loop. */
static bool lookup_loops(struct tlfs *fs, struct ll_inode *parent, const char *name,
			 const struct stat *st)
{
	char *chain = NULL;
	bool loops;
	int fd;

	if (fs->own_dev == 0)
		return false;
	if (st->st_dev == fs->own_dev)
		return true;
	if (!S_ISDIR(st->st_mode) || st->st_dev == parent->dev)
		return false;
	fd = openat(parent->fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1)
		return false;
	loops = mountchain_of_mount(fd, &chain) == 0 && mountchain_has_dev(chain, fs->own_dev);
	free(chain);
	close(fd);
	return loops;
}

/* The tail every new entry shares: stats the O_PATH descriptor FD into
 * E->attr, takes a lookup reference to its inode and sets E->ino. FD is
 * taken over (kept by the inode or closed, also on failure). With SAME,
 * FD must still be that file (st_dev and st_ino), else -ESTALE. Returns
 * 0, -ENOMEM (no inode could be made) or -errno of the stat. */
static int entry_ref_fd(struct tlfs *fs, int fd, const struct stat *same,
			struct fuse_entry_param *e)
{
	struct ll_inode *in;
	int err;

	err = -ESTALE;
	if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1)
		err = -errno;
	else if (!same || (e->attr.st_dev == same->st_dev && e->attr.st_ino == same->st_ino))
		err = 0;
	if (err) {
		close(fd);
		return err;
	}
	in = inode_ref(fs, fd, &e->attr);
	if (!in)
		return -ENOMEM;
	e->ino = inode_id(fs, in);
	return 0;
}

/* Looks NAME up in PARENT (as the caller's credentials allow) and fills E
 * with a new lookup reference. Returns 0 or -errno. */
static int do_lookup(struct tlfs *fs, struct ll_inode *parent, const char *name,
		     struct fuse_entry_param *e)
{
	struct ll_inode *in;
	int fd;

	memset(e, 0, sizeof(*e));
	e->attr_timeout = fs->cfg->attr_timeout;
	e->entry_timeout = fs->cfg->entry_timeout;
	if (ctl_is_name(fs, parent, name))
		return ctl_lookup(fs, parent, name, e);
	/* An inode the kernel already knows (a cached entry that expired, the
	 * source of a rename) needs no new descriptor: one fstatat() instead
	 * of openat(), fstatat() and close(). A new one is opened, and what
	 * the descriptor reaches is what counts (the name may have moved on
	 * between the two calls). */
	if (fstatat(parent->fd, name, &e->attr, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT) == -1)
		return -errno; /* takes no descriptor: never EMFILE */
	if (lookup_loops(fs, parent, name, &e->attr)) {
		tl_log(LOG_WARNING, "refused a lookup of '%s': it leads back into this mount",
		       name);
		return -ELOOP;
	}
	in = inode_find_ref(fs, &e->attr);
	if (in) {
		e->ino = inode_id(fs, in);
		return 0;
	}
	fd = openat(parent->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1)
		return -tlfs_fd_errno(errno);
	return entry_ref_fd(fs, fd, NULL, e);
}

/* Replies entry E (holding a lookup reference, if E->ino); when the reply
 * cannot be sent (the request was interrupted), the kernel never learns
 * the inode and will never forget it, so the reference is dropped here. */
static void reply_entry(struct tlfs *fs, fuse_req_t req, struct fuse_entry_param *e)
{
	e->generation = inode_gen(fs, e->ino);
	if (fuse_reply_entry(req, e) != 0 && e->ino)
		inode_unref(fs, inode_get(fs, e->ino), 1);
}

static void reply_entry_or_err(struct tlfs *fs, fuse_req_t req, int err,
			       struct fuse_entry_param *e)
{
	if (err == -ENOENT && fs->cfg->negative_timeout > 0) {
		memset(e, 0, sizeof(*e));
		e->entry_timeout = fs->cfg->negative_timeout;
		fuse_reply_entry(req, e);
	} else if (err) {
		fuse_reply_err(req, -err);
	} else {
		reply_entry(fs, req, e);
	}
}

/* ---- lookups ------------------------------------------------------------- */

void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct tlfs *fs = req_fs(req);
	struct fuse_entry_param e;
	int err;

	if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) {
		ll_lookup_export(req, parent, name); /* only from file handles */
		return;
	}
	err = creds_enter(fs, req);
	if (!err)
		err = do_lookup(fs, inode_get(fs, parent), name, &e);
	if (!err && e.ino)
		inode_note_name(fs, inode_get(fs, e.ino), inode_get(fs, parent), name);
	reply_entry_or_err(fs, req, err, &e);
}

void ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct tlfs *fs = req_fs(req);

	inode_unref(fs, inode_get(fs, ino), nlookup);
	fuse_reply_none(req);
}

void ll_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct tlfs *fs = req_fs(req);
	size_t i;

	for (i = 0; i < count; i++)
		inode_unref(fs, inode_get(fs, forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

/* ---- creating and removing names ------------------------------------------ */

enum ns_op { NS_MKNOD, NS_MKDIR, NS_SYMLINK, NS_LINK, NS_UNLINK, NS_RMDIR };

struct ns_req {
	enum ns_op op;
	struct ll_inode *parent;
	const char *name;
	mode_t mode;
	dev_t rdev;
	const char *target;        /* symlink */
	struct ll_inode *src;      /* link */
};

static int ns_syscall(struct tlfs *fs, const struct ns_req *r)
{
	char proc[64];
	int res;

	switch (r->op) {
	case NS_MKNOD:
		res = S_ISFIFO(r->mode) ? mkfifoat(r->parent->fd, r->name, r->mode)
					: mknodat(r->parent->fd, r->name, r->mode, r->rdev);
		break;
	case NS_MKDIR:
		res = mkdirat(r->parent->fd, r->name, r->mode);
		break;
	case NS_SYMLINK:
		res = symlinkat(r->target, r->parent->fd, r->name);
		break;
	case NS_LINK:
		tlfs_proc_path(r->src->fd, proc);
		res = linkat(AT_FDCWD, proc, r->parent->fd, r->name, AT_SYMLINK_FOLLOW);
		break;
	case NS_UNLINK:
		res = unlinkat(r->parent->fd, r->name, 0);
		break;
	case NS_RMDIR:
		res = unlinkat(r->parent->fd, r->name, AT_REMOVEDIR);
		break;
	default:
		errno = EINVAL;
		res = -1;
	}
	return res == -1 ? -errno : 0;
}

/* Runs a namespace operation: refuses the control names, takes the entry
 * plan (lock_scope=namespace), acts as the caller, replies (an entry for
 * the creating ones). */
static void ns_run(fuse_req_t req, struct ns_req *r)
{
	struct tlfs *fs = req_fs(req);
	struct fuse_entry_param e;
	struct op_lock l;
	bool creates = r->op != NS_UNLINK && r->op != NS_RMDIR;
	int res;

	if (ctl_is_name(fs, r->parent, r->name)) {
		fuse_reply_err(req, creates ? -ctl_create_err(fs, r->parent, r->name) : EPERM);
		return;
	}
	if (r->src && r->src->ctl) {
		fuse_reply_err(req, EPERM);
		return;
	}
	res = rename_lock_entry(fs, req, r->parent, r->name, &l);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	res = creds_enter(fs, req);
	if (!res && (r->op == NS_MKNOD || r->op == NS_MKDIR))
		creds_umask(fs, req, r->parent, &r->mode);
	if (!res)
		res = ns_syscall(fs, r);
	if (!res && creates)
		res = do_lookup(fs, r->parent, r->name, &e);
	if (!res && creates && e.ino)
		inode_note_name(fs, inode_get(fs, e.ino), r->parent, r->name);
	rename_unlock_entry(fs, &l);
	if (!res) {
		index_note_name(fs, r->parent, r->name);
		if (r->op == NS_LINK)
			index_note_inode(fs, r->src, -1); /* its nlink */
	}
	if (res)
		fuse_reply_err(req, -res);
	else if (creates)
		reply_entry(fs, req, &e);
	else
		fuse_reply_err(req, 0);
}

void ll_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	struct ns_req r = {.op = NS_MKNOD, .parent = inode_get(req_fs(req), parent), .name = name,
			   .mode = mode, .rdev = rdev};

	ns_run(req, &r);
}

void ll_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct ns_req r = {.op = NS_MKDIR, .parent = inode_get(req_fs(req), parent), .name = name,
			   .mode = mode};

	ns_run(req, &r);
}

void ll_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_SYMLINK, .parent = inode_get(req_fs(req), parent), .name = name,
			   .target = link};

	ns_run(req, &r);
}

void ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_LINK, .parent = inode_get(req_fs(req), parent), .name = name,
			   .src = inode_get(req_fs(req), ino)};

	ns_run(req, &r);
}

void ll_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_UNLINK, .parent = inode_get(req_fs(req), parent), .name = name};

	ns_run(req, &r);
}

void ll_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_RMDIR, .parent = inode_get(req_fs(req), parent), .name = name};

	ns_run(req, &r);
}


/* ---- creating and opening a file ------------------------------------------ */

/* Fills E with a new lookup reference to the file open as FD (any open
 * fd, the name it was opened by may have changed since). Returns 0 or
 * -errno. */
static int entry_of_fd(struct tlfs *fs, int fd, struct fuse_entry_param *e)
{
	char proc[64];
	int pfd;

	memset(e, 0, sizeof(*e));
	e->attr_timeout = fs->cfg->attr_timeout;
	e->entry_timeout = fs->cfg->entry_timeout;
	tlfs_proc_path(fd, proc);
	pfd = open(proc, O_PATH | O_CLOEXEC);
	if (pfd == -1)
		return -tlfs_fd_errno(errno);
	return entry_ref_fd(fs, pfd, NULL, e);
}

/* Fills E with a new lookup reference to the file just created as FD under
 * NAME in P: looked up by NAME (cheaper than reopening FD through /proc)
 * when NAME still is that file (same st_dev and st_ino), else by FD
 * (entry_of_fd()). Returns 0 or -errno. */
static int entry_of_created(struct tlfs *fs, struct ll_inode *p, const char *name, int fd,
			    struct fuse_entry_param *e)
{
	struct stat st;
	int pfd, err;

	if (fstat(fd, &st) == -1)
		return -errno;
	pfd = openat(p->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (pfd == -1)
		return entry_of_fd(fs, fd, e);
	memset(e, 0, sizeof(*e));
	e->attr_timeout = fs->cfg->attr_timeout;
	e->entry_timeout = fs->cfg->entry_timeout;
	err = entry_ref_fd(fs, pfd, &st, e);
	if (err && err != -ENOMEM)
		return entry_of_fd(fs, fd, e); /* replaced meanwhile */
	return err;
}

/* Opens NAME in P for a create request with the caller's open FLAGS.
 *
 * The kernel sends a create only after it found NAME negative, so the
 * backing create is exclusive and never follows a symlink at NAME
 * (O_CREAT | O_EXCL): one planted since (by another host, or in BACKING)
 * is not followed out of the tree. When NAME appeared meanwhile and the
 * caller did not ask for O_EXCL, it gets what open(2) would give: a
 * regular file is opened (without O_CREAT); a symlink is ELOOP for
 * O_NOFOLLOW; anything else, and a symlink to follow, is ESTALE, on which
 * the kernel looks the name up again and opens what it finds itself.
 * A name that keeps appearing and vanishing between the two opens is
 * tried CREATE_TRIES times before that ESTALE: the kernel retries an
 * ESTALE only once, and with 4 tries a symlink planted and removed in a
 * loop let the caller see ESTALE now and then.
 * Returns the open fd or -errno. */
#define CREATE_TRIES 64
static int create_backing(struct ll_inode *p, const char *name, int flags, mode_t mode)
{
	int base = (flags | O_CLOEXEC) & ~(O_CREAT | O_EXCL | O_NOFOLLOW);
	char proc[64];
	struct stat st;
	int tries, pfd, fd;

	for (tries = 0; tries < CREATE_TRIES; tries++) {
		fd = openat(p->fd, name, base | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
		if (fd >= 0)
			return fd;
		if (errno != EEXIST)
			return -tlfs_fd_errno(errno);
		if (flags & O_EXCL)
			return -EEXIST;
		pfd = openat(p->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (pfd == -1) {
			if (errno == ENOENT)
				continue; /* gone again: create it */
			return -tlfs_fd_errno(errno);
		}
		if (fstat(pfd, &st) == -1) {
			fd = -errno;
			close(pfd);
			return fd;
		}
		if (!S_ISREG(st.st_mode)) {
			close(pfd);
			return S_ISLNK(st.st_mode) && (flags & O_NOFOLLOW) ? -ELOOP : -ESTALE;
		}
		tlfs_proc_path(pfd, proc);
		fd = open(proc, base);
		close(pfd);
		return fd == -1 ? -tlfs_fd_errno(errno) : fd;
	}
	return -ESTALE;
}

void ll_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *p = inode_get(fs, parent);
	struct fuse_entry_param e;
	struct op_lock l;
	int fd = -1, res;

	if (ctl_is_name(fs, p, name)) {
		fuse_reply_err(req, -ctl_create_err(fs, p, name));
		return;
	}
	res = rename_lock_entry(fs, req, p, name, &l);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	res = creds_enter(fs, req);
	if (!res) {
		creds_umask(fs, req, p, &mode);
		fd = create_backing(p, name, fi->flags, mode);
		res = fd < 0 ? fd : 0;
	}
	if (!res)
		res = entry_of_created(fs, p, name, fd, &e);
	rename_unlock_entry(fs, &l);
	if (res) {
		if (fd >= 0)
			close(fd);
		fuse_reply_err(req, -res);
		return;
	}
	creds_noatime(fs, fd);
	fi->fh = (uint64_t)fd;
	index_note_name(fs, p, name);
	inode_note_name(fs, inode_get(fs, e.ino), p, name);
	e.generation = inode_gen(fs, e.ino);
	passthrough_open(fs, req, inode_get(fs, e.ino), fd, fi);
	if (fuse_reply_create(req, &e, fi) != 0) {
		/* interrupted: nobody will forget the inode or release the file */
		passthrough_release(fs, inode_get(fs, e.ino));
		inode_unref(fs, inode_get(fs, e.ino), 1);
		close(fd);
	}
}
