/* fs_passthrough.c - the FUSE operations that pass through, and the table
 * of all operations, see fs.h
 *
 * Why the low-level API: libfuse's high-level API keeps its own tree of
 * path nodes and locks paths in it. When another host (or anyone writing to
 * BACKING directly) renames directories behind its back, that tree and the
 * backing tree disagree, and libfuse 3.14 then deadlocks in its path lock
 * queue or asserts (both reproduced with libfuse's own example passthrough
 * under a rename storm on the backing directory). That is exactly the
 * situation treelockfs is for, so operations here address files by inode:
 * every inode the kernel knows is an O_PATH fd on the backing file (like
 * libfuse's passthrough_ll), and paths are computed only where a lock key
 * is needed (fs_rename.c).
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
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs/fs.h"
#include "lock/lockplan.h"
#include "base/log.h"
#include "base/mountchain.h"

/* ---- replies -------------------------------------------------------------- */

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

/* ---- operations ------------------------------------------------------------ */

/* True when the backing root can carry POSIX ACLs. */
static bool backing_has_acls(struct tlfs *fs)
{
	char proc[64];

	tlfs_proc_path(fs->root->fd, proc);
	return getxattr(proc, "system.posix_acl_access", NULL, 0) >= 0 || errno == ENODATA;
}

static void ll_init(void *userdata, struct fuse_conn_info *conn)
{
	struct tlfs *fs = userdata;

	/* splice halves the copies of large reads and writes (measured:
	 * sequential 1 MiB reads about twice as fast with it) */
	conn->want |= conn->capable & (FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
				       FUSE_CAP_SPLICE_MOVE | FUSE_CAP_PARALLEL_DIROPS);
	if (fs->cfg->export_support)
		conn->want |= conn->capable & FUSE_CAP_EXPORT_SUPPORT; /* fs_export.c */
	/* new entries get their mode as the backing filesystem gives it, with
	 * the caller's umask or the parent's default ACL (creds_umask()) */
	if (conn->capable & FUSE_CAP_DONT_MASK) {
		conn->want |= FUSE_CAP_DONT_MASK;
		fs->dont_mask = true;
	}
	/* with default_permissions the kernel checks permissions itself; it
	 * honours ACLs only when told the filesystem has them */
	if (fs->cfg->allow_other && (conn->capable & FUSE_CAP_POSIX_ACL) && backing_has_acls(fs)) {
		conn->want |= FUSE_CAP_POSIX_ACL;
		fs->posix_acl = true;
	}
	inode_pruner_init(fs, conn);
	creds_killpriv_init(fs, conn); /* before passthrough_init(), which reads it */
	passthrough_init(fs, conn);
	lockmgr_start(&fs->mgr); /* a failure is logged; requests then fail with ENOLCK */
	tl_log(LOG_INFO, "mounted with lock_store=%s lock_strategy=%s lock_scope=%s",
	       lockmgr_store_name(&fs->mgr), lockplan_strategy_name(fs->cfg->lock_strategy),
	       fs->cfg->lock_scope == TL_SCOPE_NAMESPACE ? "namespace" : "rename");
}

static void ll_destroy(void *userdata)
{
	struct tlfs *fs = userdata;
	const struct tl_stats *s = lockmgr_stats(&fs->mgr);

	tl_log(LOG_INFO, "unmounting: %" PRIu64 " renames, %" PRIu64 " conflicts, %" PRIu64
			 " timeouts",
	       stats_get(&s->renames), stats_get(&s->conflicts), stats_get(&s->timeouts));
}

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
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

static void ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct tlfs *fs = req_fs(req);

	inode_unref(fs, inode_get(fs, ino), nlookup);
	fuse_reply_none(req);
}

static void ll_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct tlfs *fs = req_fs(req);
	size_t i;

	for (i = 0; i < count; i++)
		inode_unref(fs, inode_get(fs, forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

static void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = inode_get(fs, ino);
	struct stat st;
	int res;

	if (in->ctl) {
		ctl_stat(in->ctl, &st);
		fuse_reply_attr(req, &st, 0);
		return;
	}
	res = fstatat(in->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	if (res == -1) {
		fuse_reply_err(req, errno);
		return;
	}
	inode_mode_sent(in, &st);
	fuse_reply_attr(req, &st, fs->cfg->attr_timeout);
}

/* True when MODE only clears set-user-ID / set-group-ID bits of IN. The
 * kernel asks for exactly that, in the name of a writer that does not own
 * the file, before a write or truncate; it has checked the write
 * permission itself. */
static bool chmod_kills_priv_only(struct ll_inode *in, mode_t mode)
{
	mode_t old, priv = S_ISUID | S_ISGID;
	struct stat st;

	if (fstatat(in->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1 ||
	    !S_ISREG(st.st_mode))
		return false;
	old = st.st_mode & 07777;
	mode &= 07777;
	return (old & ~priv) == (mode & ~priv) && (mode & priv & ~old) == 0 && mode != old;
}

static void ll_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
		       struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = inode_get(fs, ino);
	int fd = fi && !(fi->fh & (CTL_TAG | DIR_TAG)) ? (int)fi->fh : -1;
	char proc[64];
	int res;

	if (in->ctl) {
		fuse_reply_err(req, EPERM);
		return;
	}
	tlfs_proc_path(in->fd, proc);
	res = creds_enter(fs, req);
	if (res)
		goto out;
	if (valid & FUSE_SET_ATTR_MODE) {
		for (;;) {
			res = fd >= 0 ? fchmod(fd, attr->st_mode) : chmod(proc, attr->st_mode);
			res = res == -1 ? -errno : 0;
			if (res != -EPERM || !fs->switch_creds || creds_are_root() ||
			    !chmod_kills_priv_only(in, attr->st_mode))
				break;
			creds_daemon(fs);
		}
		if (res)
			goto out;
	}
	if (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		uid_t uid = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
		gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;

		res = fchownat(in->fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
		res = res == -1 ? -errno : 0;
		if (res)
			goto out;
	}
	if (valid & FUSE_SET_ATTR_SIZE) {
		/* FUSE_SET_ATTR_KILL_SUID: the kernel's FATTR_KILL_SUIDGID, the
		 * caller lacks CAP_FSETID (sent with killpriv only) */
		bool killing = (valid & FUSE_SET_ATTR_KILL_SUID) &&
			       creds_kill_begin(fs, req, in->fd, true);

		res = fd >= 0 ? ftruncate(fd, attr->st_size) : truncate(proc, attr->st_size);
		res = res == -1 ? -errno : 0;
		creds_kill_end(killing);
		if (res)
			goto out;
	}
	if (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
		struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_nsec = UTIME_OMIT}};

		if (valid & FUSE_SET_ATTR_ATIME_NOW)
			ts[0].tv_nsec = UTIME_NOW;
		else if (valid & FUSE_SET_ATTR_ATIME)
			ts[0] = attr->st_atim;
		if (valid & FUSE_SET_ATTR_MTIME_NOW)
			ts[1].tv_nsec = UTIME_NOW;
		else if (valid & FUSE_SET_ATTR_MTIME)
			ts[1] = attr->st_mtim;
		if (fd >= 0)
			res = futimens(fd, ts);
		else if (S_ISLNK(in->type))
			res = utimensat(in->fd, "", ts, AT_EMPTY_PATH);
		else
			res = utimensat(AT_FDCWD, proc, ts, 0);
		res = res == -1 ? -errno : 0;
		if (res)
			goto out;
	}
out:
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	ll_getattr(req, ino, fi);
}

static void ll_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = inode_get(fs, ino);
	char buf[PATH_MAX + 1];
	ssize_t n;
	int err = creds_enter(fs, req);

	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	n = readlinkat(in->fd, "", buf, sizeof(buf) - 1);
	if (n == -1) {
		fuse_reply_err(req, errno);
		return;
	}
	buf[n] = '\0';
	fuse_reply_readlink(req, buf);
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
	if (res)
		fuse_reply_err(req, -res);
	else if (creates)
		reply_entry(fs, req, &e);
	else
		fuse_reply_err(req, 0);
}

static void ll_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	struct ns_req r = {.op = NS_MKNOD, .parent = inode_get(req_fs(req), parent), .name = name,
			   .mode = mode, .rdev = rdev};

	ns_run(req, &r);
}

static void ll_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct ns_req r = {.op = NS_MKDIR, .parent = inode_get(req_fs(req), parent), .name = name,
			   .mode = mode};

	ns_run(req, &r);
}

static void ll_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_SYMLINK, .parent = inode_get(req_fs(req), parent), .name = name,
			   .target = link};

	ns_run(req, &r);
}

static void ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_LINK, .parent = inode_get(req_fs(req), parent), .name = name,
			   .src = inode_get(req_fs(req), ino)};

	ns_run(req, &r);
}

static void ll_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_UNLINK, .parent = inode_get(req_fs(req), parent), .name = name};

	ns_run(req, &r);
}

static void ll_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_RMDIR, .parent = inode_get(req_fs(req), parent), .name = name};

	ns_run(req, &r);
}

/* ---- files ------------------------------------------------------------------------ */

/* The kernel's FMODE_EXEC, which it leaves in the flags of the open an
 * execve() (or uselib()) makes; open(2) drops it from a caller's flags,
 * so only the kernel sets it. */
#define OPEN_FLAG_EXEC 040

/* Opens PROC (a file of the mount) for the kernel to load it as a
 * program: that needs execute permission, not read (a 0711 program runs,
 * its bytes stay unreadable by the caller). Execute permission is checked
 * as the caller; the open itself is the daemon's own, read-only, and the
 * kernel uses it to read the program only. Returns the fd or -errno. */
static int open_exec(struct tlfs *fs, const char *proc, int flags)
{
	int fd;

	flags = (flags | O_CLOEXEC) & ~(O_NOFOLLOW | OPEN_FLAG_EXEC);
	fd = open(proc, flags);
	if (fd >= 0 || errno != EACCES || !fs->switch_creds || (flags & O_ACCMODE) != O_RDONLY)
		return fd >= 0 ? fd : -errno;
	if (faccessat(AT_FDCWD, proc, X_OK, AT_EACCESS) == -1)
		return -errno;
	creds_daemon(fs);
	fd = open(proc, flags);
	return fd >= 0 ? fd : -errno;
}

static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = inode_get(fs, ino);
	char proc[64];
	int fd, res;

	if (in->ctl) {
		ctl_open(fs, req, in, fi);
		return;
	}
	res = creds_enter(fs, req);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	tlfs_proc_path(in->fd, proc);
	if (fi->flags & OPEN_FLAG_EXEC) {
		fd = open_exec(fs, proc, fi->flags);
	} else {
		/* the kernel clears no set-ID bit for an O_TRUNC open it leaves
		 * to us (FUSE_CAP_ATOMIC_O_TRUNC), killpriv or not */
		bool killing = (fi->flags & O_TRUNC) && creds_kill_begin(fs, req, in->fd, false);

		fd = open(proc, (fi->flags | O_CLOEXEC) & ~O_NOFOLLOW);
		if (fd == -1)
			fd = -errno;
		creds_kill_end(killing);
	}
	if (fd < 0) {
		fuse_reply_err(req, tlfs_fd_errno(-fd));
		return;
	}
	creds_noatime(fs, fd);
	fi->fh = (uint64_t)fd;
	passthrough_open(fs, req, in, fd, fi);
	if (fuse_reply_open(req, fi) != 0) {
		/* interrupted: there will be no release */
		passthrough_release(fs, in);
		close(fd);
	}
}

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

static void ll_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
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

/* Before an O_DIRECT read or write (FLAGS, the caller's file flags now)
 * of backing file FD: a caller may turn O_DIRECT on after its open
 * (fcntl(F_SETFL)), which the kernel only shows in the flags of its
 * requests; the backing file follows, so that it takes or refuses the
 * request by the backing filesystem's own rules, as it would the caller's
 * call. (Turned off again, it stays on: such a file's reads and writes
 * that are not aligned fail then. The check would cost every request.) */
static void direct_follow(int fd, int flags)
{
	int fl;

	if (!(flags & O_DIRECT))
		return;
	fl = fcntl(fd, F_GETFL);
	if (fl != -1 && !(fl & O_DIRECT))
		fcntl(fd, F_SETFL, fl | O_DIRECT);
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);

	if (fi->fh & CTL_TAG) {
		ctl_read(req, size, off, fi);
		return;
	}
	direct_follow((int)fi->fh, fi->flags);
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = (int)fi->fh;
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

/* Before an operation that writes to an open file: acts as the caller
 * (the kernel checked permissions at open, but the blocks must be the
 * caller's to take: root's reserve, quotas; and the file's set-ID bits go
 * as the caller's own write would leave them, see creds_kill_begin()). A
 * control file gets CTL_ERR. Returns true when the operation may go on,
 * with *KILLING for alloc_leave(); otherwise the request has been
 * answered. */
static bool alloc_enter(fuse_req_t req, const struct fuse_file_info *fi, int ctl_err,
			bool *killing)
{
	int err;

	*killing = false;
	if (fi->fh & CTL_TAG) {
		fuse_reply_err(req, ctl_err);
		return false;
	}
	err = creds_enter(req_fs(req), req);
	if (err) {
		fuse_reply_err(req, -err);
		return false;
	}
	/* without killpriv the kernel has cleared the bits before (a SETATTR) */
	*killing = req_fs(req)->killpriv && creds_kill_begin(req_fs(req), req, (int)fi->fh, false);
	return true;
}

/* After the operation alloc_enter() let go on. This function can't fail. */
static void alloc_leave(bool killing)
{
	creds_kill_end(killing);
}

/* Writes IN_BUF at OFF to FD, which is open with O_DIRECT, from a
 * page-aligned copy. The request's data is never aligned as O_DIRECT wants
 * it: spliced, it starts in a pipe page behind the request header (a
 * splice of it into the file fails with EINVAL from 4 KiB on), and read
 * into libfuse's buffer, it sits behind the same header. The copy makes
 * the write succeed or fail as the caller's own write would on the
 * backing file, by its offset and size alone (the caller's buffer was
 * copied by the kernel already). Returns the bytes written or -errno. */
static ssize_t write_direct(int fd, struct fuse_bufvec *in_buf, off_t off)
{
	size_t size = fuse_buf_size(in_buf);
	struct fuse_bufvec mem = FUSE_BUFVEC_INIT(size);
	long page = sysconf(_SC_PAGESIZE);
	ssize_t res;
	void *p;

	res = -posix_memalign(&p, page > 0 ? (size_t)page : 4096, size ? size : 1);
	if (res)
		return res;
	mem.buf[0].mem = p;
	res = fuse_buf_copy(&mem, in_buf, FUSE_BUF_NO_SPLICE);
	if (res >= 0) {
		res = pwrite(fd, p, (size_t)res, off);
		if (res == -1)
			res = -errno;
	}
	free(p);
	return res;
}

/* ---- page write-back ---- */

/* The kernel writes a shared mapping's dirty pages back (msync, munmap,
 * its flusher) as writes marked FUSE_WRITE_CACHE (fi->writepage), on the
 * handle of an open that mapped the file for writing, at the page's
 * offset, the last page cut at the file's size. Such a write carries the
 * page cache's bytes, not a caller's: on the backing file itself a
 * mapping's write-back never depends on how the file was opened. Two
 * status flags of the open's backing descriptor would make it so here:
 * O_DIRECT refuses a write whose offset, size or memory is not aligned as
 * the backing filesystem wants (the file's last, partial page never is:
 * msync() failed with EINVAL), and O_APPEND puts every write at the end
 * of the file, whatever its offset. An open with either gets a second
 * descriptor of the same file for its write-back, without both (with
 * O_SYNC and O_DSYNC as the open has them), opened at its first
 * write-back and closed at its release.
 *
 * Not an aligned copy to the O_DIRECT descriptor (as write_direct() makes
 * for a caller's direct write): the last page cannot be written aligned
 * without writing past the file's end (then cutting the file back,
 * racing every other writer, and longer for a moment to every reader),
 * nor a block written whole without first reading the rest of it (a
 * read-modify-write that loses a concurrent direct write to the same
 * block); and it would do nothing for O_APPEND.
 *
 * Coherence: the bytes land in the backing file's page cache, not on the
 * disk at once. Linux keeps a file's page cache and its direct I/O
 * coherent: a direct read first writes the cached dirty pages of its
 * range back, and a direct write also drops them. So a later O_DIRECT
 * read through the mount (the daemon's direct pread on the open's own
 * descriptor) returns what was written back, as it does on the backing
 * file after msync(). Durability is the caller's msync(MS_SYNC) or fsync:
 * the kernel follows the write-back with an FSYNC, whose fsync() of the
 * open's descriptor writes back the file's dirty pages, whichever
 * descriptor dirtied them (a direct write alone is no more durable
 * without O_SYNC or O_DSYNC). */

/* The second descriptor of the open FD (>= 0), or -1 for none yet. */
static int wb_get(struct tlfs *fs, int fd)
{
	int wfd = -1;

	pthread_mutex_lock(&fs->wb_mutex);
	if ((size_t)fd < fs->wb_n)
		wfd = fs->wb_fds[fd] - 1;
	pthread_mutex_unlock(&fs->wb_mutex);
	return wfd;
}

/* Keeps WFD as the second descriptor of the open FD, unless another
 * write-back kept one first. Returns the one kept: WFD, or the other one
 * (then WFD is closed); or -ENOMEM (WFD closed). */
static int wb_keep(struct tlfs *fs, int fd, int wfd)
{
	int kept = wfd, *grown = NULL;
	size_t n;

	pthread_mutex_lock(&fs->wb_mutex);
	if ((size_t)fd >= fs->wb_n) {
		n = fs->wb_n * 2 > (size_t)fd + 1 ? fs->wb_n * 2 : (size_t)fd + 16;
		grown = realloc(fs->wb_fds, n * sizeof(*grown));
		if (grown) {
			memset(grown + fs->wb_n, 0, (n - fs->wb_n) * sizeof(*grown));
			fs->wb_fds = grown;
			fs->wb_n = n;
		}
	}
	if ((size_t)fd >= fs->wb_n)
		kept = -ENOMEM;
	else if (fs->wb_fds[fd])
		kept = fs->wb_fds[fd] - 1;
	else
		fs->wb_fds[fd] = wfd + 1;
	pthread_mutex_unlock(&fs->wb_mutex);
	if (kept != wfd)
		close(wfd);
	return kept;
}

/* At the release of the open FD, before FD is closed (its number may then
 * be given again): closes its second descriptor, if any. This function
 * can't fail. */
static void wb_release(struct tlfs *fs, int fd)
{
	int wfd = -1;

	pthread_mutex_lock(&fs->wb_mutex);
	if ((size_t)fd < fs->wb_n) {
		wfd = fs->wb_fds[fd] - 1;
		fs->wb_fds[fd] = 0;
	}
	pthread_mutex_unlock(&fs->wb_mutex);
	if (wfd >= 0)
		close(wfd);
}

/* The descriptor for page write-back through the open FD (see above): FD
 * itself when it takes it, else the open's second descriptor (or -ENOMEM).
 * When that cannot be opened (the daemon may not open the file for writing: a
 * squashing NFS server, a mode changed since the open), FD when it has no
 * O_APPEND, with *DIRECT set when it has O_DIRECT (the write then goes
 * through write_direct() and succeeds only aligned, as it did before);
 * with O_APPEND -errno, rather than a write at the wrong offset. The
 * second descriptor is opened as the daemon: the open was checked with
 * its caller's rights when it was made, and a write-back has no caller
 * (the kernel sends it with uid 0 and no pid). May switch this thread to the
 * daemon's credentials. */
static int writeback_fd(struct tlfs *fs, int fd, bool *direct)
{
	static bool warned;
	char proc[64];
	int fl, wfd, err;

	*direct = false;
	wfd = wb_get(fs, fd);
	if (wfd >= 0)
		return wfd;
	fl = fcntl(fd, F_GETFL);
	if (fl == -1 || !(fl & (O_DIRECT | O_APPEND)) || (fl & O_ACCMODE) == O_RDONLY)
		return fd;
	tlfs_proc_path(fd, proc);
	creds_daemon(fs);
	wfd = open(proc, O_WRONLY | O_CLOEXEC | (fl & (O_SYNC | O_DSYNC)));
	if (wfd >= 0)
		return wb_keep(fs, fd, wfd);
	err = errno;
	if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
		tl_log(LOG_WARNING, "cannot open a file again for the write-back of its mapping "
				    "(its open has %s): %s",
		       fl & O_APPEND ? "O_APPEND" : "O_DIRECT", strerror(err));
	if (fl & O_APPEND)
		return -tlfs_fd_errno(err);
	*direct = (fl & O_DIRECT) != 0;
	return fd;
}

static void ll_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in_buf, off_t off,
			 struct fuse_file_info *fi)
{
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in_buf));
	int fd = (int)fi->fh;
	bool killing, direct = false;
	ssize_t res;

	if (fi->fh & CTL_TAG) {
		ctl_write(req_fs(req), req, inode_get(req_fs(req), ino), in_buf);
		return;
	}
	if (fi->writepage) {
		fd = writeback_fd(req_fs(req), fd, &direct);
		if (fd < 0) {
			fuse_reply_err(req, -fd);
			return;
		}
	}
	if (!alloc_enter(req, fi, EBADF, &killing))
		return;
	if (!fi->writepage && (fi->flags & O_DIRECT)) {
		direct_follow(fd, fi->flags);
		direct = true;
	}
	if (direct) {
		res = write_direct(fd, in_buf, off);
	} else {
		out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
		out.buf[0].fd = fd;
		out.buf[0].pos = off;
		res = fuse_buf_copy(&out, in_buf, 0);
	}
	alloc_leave(killing);
	if (res < 0) {
		fuse_reply_err(req, (int)-res);
		return;
	}
	inode_mode_check(req_fs(req), inode_get(req_fs(req), ino), (int)fi->fh);
	fuse_reply_write(req, (size_t)res);
}

static void ll_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int fd;

	if (fi->fh & CTL_TAG) {
		fuse_reply_err(req, 0);
		return;
	}
	plock_drop_owner(req_fs(req), (int)fi->fh, fi->lock_owner);
	/* close a duplicate so that close-time semantics of the backing
	 * filesystem (NFS write-back) happen now */
	fd = dup((int)fi->fh);
	if (fd == -1) {
		/* out of descriptors: the last close (release) does it */
		fuse_reply_err(req, errno == EMFILE || errno == ENFILE ? 0 : errno);
		return;
	}
	fuse_reply_err(req, close(fd) == -1 ? errno : 0);
}

static void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (fi->fh & CTL_TAG) {
		ctl_release(fi);
	} else {
		passthrough_release(req_fs(req), inode_get(req_fs(req), ino));
		plock_release_fh(req_fs(req), fi->fh);
		if (fi->flock_release)
			flock((int)fi->fh, LOCK_UN);
		wb_release(req_fs(req), (int)fi->fh);
		close((int)fi->fh);
	}
	fuse_reply_err(req, 0);
}

static void ll_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	int res;

	if (fi->fh & CTL_TAG) {
		fuse_reply_err(req, 0);
		return;
	}
	res = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);
	fuse_reply_err(req, res == -1 ? errno : 0);
}

static void ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	bool killing;
	int res;

	if (!alloc_enter(req, fi, EBADF, &killing))
		return;
	res = fallocate((int)fi->fh, mode, off, len) == -1 ? errno : 0;
	alloc_leave(killing);
	if (res) {
		fuse_reply_err(req, res);
		return;
	}
	inode_mode_check(req_fs(req), inode_get(req_fs(req), ino), (int)fi->fh);
	fuse_reply_err(req, 0);
}

static void ll_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			       struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
			       struct fuse_file_info *fi_out, size_t len, int flags)
{
	bool killing;
	ssize_t res;

	if (fi_in->fh & CTL_TAG) {
		fuse_reply_err(req, EXDEV); /* the kernel falls back to read and write */
		return;
	}
	if (!alloc_enter(req, fi_out, EXDEV, &killing))
		return;
	res = copy_file_range((int)fi_in->fh, &off_in, (int)fi_out->fh, &off_out, len,
			      (unsigned)flags);
	res = res == -1 ? -errno : res;
	alloc_leave(killing);
	if (res < 0) {
		fuse_reply_err(req, (int)-res);
		return;
	}
	inode_mode_check(req_fs(req), inode_get(req_fs(req), ino_out), (int)fi_out->fh);
	fuse_reply_write(req, (size_t)res);
}

static void ll_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		     struct fuse_file_info *fi)
{
	off_t res;

	if (fi->fh & CTL_TAG) {
		fuse_reply_err(req, ESPIPE);
		return;
	}
	res = lseek((int)fi->fh, off, whence);
	if (res == -1)
		fuse_reply_err(req, errno);
	else
		fuse_reply_lseek(req, res);
}

/* ---- directories --------------------------------------------------------------- */

struct ll_dir {
	DIR *dp;
	struct dirent *entry;
	off_t offset;
	bool root;
	bool ctl;
};

static struct ll_dir *dir_of(struct fuse_file_info *fi)
{
	return (struct ll_dir *)(uintptr_t)(fi->fh & ~DIR_TAG);
}

static void ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = inode_get(fs, ino);
	struct ll_dir *d;
	int fd, err;

	if (in->ctl && in->ctl != CTL_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (in->ctl) {
		d->ctl = true;
		goto out_reply;
	}
	err = creds_enter(fs, req);
	if (err)
		goto out_free;
	/* through /proc, not openat(fd, "."): that would also need search
	 * permission on the directory itself, which open(2) does not */
	{
		char proc[64];

		tlfs_proc_path(in->fd, proc);
		fd = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (fd == -1) {
		err = -tlfs_fd_errno(errno);
		goto out_free;
	}
	creds_noatime(fs, fd);
	d->dp = fdopendir(fd);
	if (!d->dp) {
		err = -tlfs_fd_errno(errno);
		close(fd);
		goto out_free;
	}
	d->root = in == fs->root;
out_reply:
	fi->fh = (uint64_t)(uintptr_t)d | DIR_TAG;
	fuse_reply_open(req, fi);
	return;

out_free:
	free(d);
	fuse_reply_err(req, -err);
}

static void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
		       struct fuse_file_info *fi)
{
	struct ll_dir *d = dir_of(fi);
	char *buf = calloc(1, size ? size : 1), *p = buf;
	size_t rem = size;
	int err = 0;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (d->ctl) {
		size_t n = ctl_readdir(req, p, rem, offset);

		p += n;
		rem -= n;
		goto out_reply;
	}
	if (offset != d->offset) {
		seekdir(d->dp, offset);
		d->entry = NULL;
		d->offset = offset;
	}
	for (;;) {
		struct stat st;
		off_t next;
		size_t n;

		if (!d->entry) {
			errno = 0;
			d->entry = readdir(d->dp);
			if (!d->entry) {
				if (errno && p == buf)
					err = errno;
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
		n = fuse_add_direntry(req, p, rem, d->entry->d_name, &st, next);
		if (n > rem)
			break;
		p += n;
		rem -= n;
		d->entry = NULL;
		d->offset = next;
	}
out_reply:
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

static void ll_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ll_dir *d = dir_of(fi);

	if (d->dp)
		closedir(d->dp);
	free(d);
	fuse_reply_err(req, 0);
}

static void ll_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct ll_dir *d = dir_of(fi);
	int res;

	if (d->ctl) {
		fuse_reply_err(req, 0);
		return;
	}
	res = datasync ? fdatasync(dirfd(d->dp)) : fsync(dirfd(d->dp));
	fuse_reply_err(req, res == -1 ? errno : 0);
}

static void ll_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct tlfs *fs = req_fs(req);
	struct statvfs st;

	if (fstatvfs(fs->backing_fd, &st) == -1)
		fuse_reply_err(req, errno);
	else
		fuse_reply_statfs(req, &st);
}

static void ll_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = inode_get(fs, ino);
	char proc[64];
	int res;

	if (in->ctl) {
		fuse_reply_err(req, (mask & W_OK) ? EACCES : 0);
		return;
	}
	res = creds_enter(fs, req);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	tlfs_proc_path(in->fd, proc);
	res = faccessat(AT_FDCWD, proc, mask, AT_EACCESS);
	fuse_reply_err(req, res == -1 ? errno : 0);
}

/* ---- extended attributes ------------------------------------------------ */

/* Names IN through /proc for the *xattr calls, which follow the magic link
 * to the file itself: for a symlink that is the link, never its target
 * (the magic link of an O_PATH | O_NOFOLLOW fd on a symlink resolves to
 * the symlink, and the walk ends there), so xattrs of symlinks, FIFOs and
 * devices are reached race-free, by the inode the fd holds, and the
 * backing filesystem answers as it would on the disk (trusted. and
 * security. names; user. names refused as ever). The l*xattr calls would
 * act on the magic link itself. */
static int xattr_target(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, char proc[64])
{
	int err;

	if (in->ctl)
		return -ENOTSUP;
	err = creds_enter(fs, req);
	if (err)
		return err;
	tlfs_proc_path(in->fd, proc);
	return 0;
}

static void ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	struct tlfs *fs = req_fs(req);
	char proc[64];
	int res = xattr_target(fs, req, inode_get(fs, ino), proc);

	if (!res)
		res = setxattr(proc, name, value, size, flags) == -1 ? -errno : 0;
	fuse_reply_err(req, -res);
}

static void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct tlfs *fs = req_fs(req);
	char proc[64], *buf = NULL;
	ssize_t n;
	int res = xattr_target(fs, req, inode_get(fs, ino), proc);

	if (res) {
		fuse_reply_err(req, res == -ENOTSUP ? ENODATA : -res);
		return;
	}
	if (size) {
		buf = malloc(size);
		if (!buf) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
	}
	n = getxattr(proc, name, buf, size);
	/* the kernel asks for ACLs to check permissions (fs->posix_acl), and
	 * takes "not supported" there for a failed check; a file that cannot
	 * have an ACL (another filesystem below the backing root) has none */
	if (n == -1 && errno == EOPNOTSUPP && fs->posix_acl &&
	    strncmp(name, "system.posix_acl_", 17) == 0)
		errno = ENODATA;
	if (n == -1)
		fuse_reply_err(req, errno);
	else if (size)
		fuse_reply_buf(req, buf, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(buf);
}

/* The names of LIST (LEN bytes) a caller who is not root may see: the
 * backing filesystem lists trusted. names to whoever has CAP_SYS_ADMIN,
 * which this thread keeps while acting as the caller, so they are left
 * out here as the disk leaves them out for that caller (a caller that is
 * not root but holds CAP_SYS_ADMIN itself does not see them either).
 * Returns the new length. */
static size_t xattr_list_visible(char *list, size_t len)
{
	static const char hidden[] = "trusted.";
	size_t in = 0, out = 0;

	while (in < len) {
		size_t n = strnlen(list + in, len - in) + 1;

		if (strncmp(list + in, hidden, sizeof(hidden) - 1) != 0) {
			memmove(list + out, list + in, n);
			out += n;
		}
		in += n;
	}
	return out;
}

static void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct tlfs *fs = req_fs(req);
	char proc[64], *buf = NULL;
	bool filter;
	ssize_t n;
	size_t want;
	int res = xattr_target(fs, req, inode_get(fs, ino), proc);

	if (res) {
		if (res == -ENOTSUP)
			size ? fuse_reply_buf(req, NULL, 0) : fuse_reply_xattr(req, 0);
		else
			fuse_reply_err(req, -res);
		return;
	}
	filter = fs->switch_creds && !creds_are_root();
	/* a filtered list is read whole: its length is known after filtering */
	for (;;) {
		want = size;
		if (filter) {
			n = listxattr(proc, NULL, 0);
			if (n == -1) {
				fuse_reply_err(req, errno);
				return;
			}
			want = (size_t)n;
		}
		free(buf);
		buf = NULL;
		if (want) {
			buf = malloc(want);
			if (!buf) {
				fuse_reply_err(req, ENOMEM);
				return;
			}
		}
		n = listxattr(proc, buf, want);
		if (n == -1 && errno == ERANGE && filter)
			continue; /* grew meanwhile */
		break;
	}
	if (n != -1 && filter) {
		n = (ssize_t)xattr_list_visible(buf, (size_t)n);
		if (size && (size_t)n > size) {
			n = -1;
			errno = ERANGE;
		}
	}
	if (n == -1)
		fuse_reply_err(req, errno);
	else if (size)
		fuse_reply_buf(req, buf, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(buf);
}

static void ll_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct tlfs *fs = req_fs(req);
	char proc[64];
	int res = xattr_target(fs, req, inode_get(fs, ino), proc);

	if (!res)
		res = removexattr(proc, name) == -1 ? -errno : 0;
	fuse_reply_err(req, -res);
}

const struct fuse_lowlevel_ops tlfs_ops = {
	.init = ll_init,
	.destroy = ll_destroy,
	.lookup = ll_lookup,
	.forget = ll_forget,
	.forget_multi = ll_forget_multi,
	.getattr = ll_getattr,
	.setattr = ll_setattr,
	.readlink = ll_readlink,
	.mknod = ll_mknod,
	.mkdir = ll_mkdir,
	.symlink = ll_symlink,
	.link = ll_link,
	.unlink = ll_unlink,
	.rmdir = ll_rmdir,
	.rename = ll_rename,
	.open = ll_open,
	.create = ll_create,
	.read = ll_read,
	.write_buf = ll_write_buf,
	.flush = ll_flush,
	.release = ll_release,
	.fsync = ll_fsync,
	.opendir = ll_opendir,
	.readdir = ll_readdir,
	.releasedir = ll_releasedir,
	.fsyncdir = ll_fsyncdir,
	.statfs = ll_statfs,
	.access = ll_access,
	.setxattr = ll_setxattr,
	.getxattr = ll_getxattr,
	.listxattr = ll_listxattr,
	.removexattr = ll_removexattr,
	.getlk = ll_getlk,
	.setlk = ll_setlk,
	.flock = ll_flock,
	.fallocate = ll_fallocate,
	.copy_file_range = ll_copy_file_range,
	.lseek = ll_lseek,
};
