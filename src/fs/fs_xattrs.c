/* fs_xattrs.c - extended attributes: setxattr, getxattr, listxattr and
 * removexattr, see fs.h
 */
#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "fs/fs.h"

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
	if (in->ctl)
		return -ENOTSUP;
	return creds_enter_proc(fs, req, in, proc);
}

/* Replies what a getxattr or listxattr of SIZE bytes (0: the size only)
 * into BUF gave: N bytes, or -1 with errno set; then frees BUF. */
static void reply_xattr(fuse_req_t req, char *buf, size_t size, ssize_t n)
{
	if (n == -1)
		fuse_reply_err(req, errno);
	else if (size)
		fuse_reply_buf(req, buf, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(buf);
}

void ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
		 int flags)
{
	struct tlfs *fs = req_fs(req);
	char proc[64];
	int res = xattr_target(fs, req, inode_get(fs, ino), proc);

	if (!res)
		res = setxattr(proc, name, value, size, flags) == -1 ? -errno : 0;
	fuse_reply_err(req, -res);
}

void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
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
	reply_xattr(req, buf, size, n);
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

void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
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
	reply_xattr(req, buf, size, n);
}

void ll_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct tlfs *fs = req_fs(req);
	char proc[64];
	int res = xattr_target(fs, req, inode_get(fs, ino), proc);

	if (!res)
		res = removexattr(proc, name) == -1 ? -errno : 0;
	fuse_reply_err(req, -res);
}

