/* fs_attrs.c - what an inode says of itself, asked and changed without an
 * open file: getattr, setattr, access and readlink, see fs.h
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/fs.h"

void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
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

void ll_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
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
	res = creds_enter_proc(fs, req, in, proc);
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
	if (valid & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID |
		     FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME))
		index_note_inode(fs, in, fd); /* also after a partial failure */
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	ll_getattr(req, ino, fi);
}

void ll_readlink(fuse_req_t req, fuse_ino_t ino)
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

void ll_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = inode_get(fs, ino);
	char proc[64];
	int res;

	if (in->ctl) {
		fuse_reply_err(req, (mask & W_OK) ? EACCES : 0);
		return;
	}
	res = creds_enter_proc(fs, req, in, proc);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	res = faccessat(AT_FDCWD, proc, mask, AT_EACCESS);
	fuse_reply_err(req, res == -1 ? errno : 0);
}

