/* fs_export.c - lookups by file handle (export_support), see fs.h
 *
 * A file handle of the mount holds a nodeid and its generation. While the
 * kernel still has that inode it needs nothing of us; once it forgot it
 * (memory pressure, drop_caches) it asks for the nodeid with a lookup of
 * "." in it, and to connect a directory found that way to the tree it asks
 * for its parent with a lookup of "..". Neither name ever comes from a
 * path walk (the kernel resolves those itself), and only with
 * FUSE_CAP_EXPORT_SUPPORT. Both run with the daemon's credentials: the
 * caller already proved it may use handles (CAP_DAC_READ_SEARCH, or the
 * NFS server), and the open that follows is checked as usual.
 *
 * Limits: a nodeid is found again while the daemon runs and remembers it
 * (export_remember); after a restart every handle is stale. Files on a
 * filesystem mounted below BACKING are not remembered once forgotten.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs.h"
#include "base/log.h"

/* The parent of directory IN with one more lookup reference, into OUT
 * (ST its attributes). Returns 0 or -errno. */
static int lookup_parent(struct tlfs *fs, struct ll_inode *in, struct ll_inode **out,
			 struct stat *st)
{
	struct ll_inode *p;
	int fd;

	if (in == fs->root)
		return inode_ref_nodeid(fs, FUSE_ROOT_ID, out, st);
	if (in->ctl)
		return inode_ref_nodeid(fs, FUSE_ROOT_ID, out, st);
	if (fstatat(in->fd, "..", st, AT_SYMLINK_NOFOLLOW) == -1)
		return -errno;
	if (st->st_dev == fs->root->dev && st->st_ino == fs->root->ino)
		return inode_ref_nodeid(fs, FUSE_ROOT_ID, out, st);
	if (st->st_dev == in->dev && st->st_ino == in->ino)
		return -ESTALE; /* moved out of BACKING, up to a root of its own */
	p = inode_find_ref(fs, st);
	if (!p) {
		fd = openat(in->fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (fd == -1)
			return -tlfs_fd_errno(errno);
		if (fstat(fd, st) == -1) {
			int err = -errno;

			close(fd);
			return err;
		}
		p = inode_ref(fs, fd, st);
		if (!p)
			return -ENOMEM;
	}
	*out = p;
	return 0;
}

void ll_lookup_export(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct tlfs *fs = req_fs(req);
	struct fuse_entry_param e;
	struct ll_inode *in = NULL;
	int err;

	memset(&e, 0, sizeof(e));
	creds_daemon(fs);
	if (!fs->cfg->export_support)
		err = -ESTALE;
	else if (strcmp(name, ".") == 0)
		err = inode_ref_nodeid(fs, parent, &in, &e.attr);
	else
		err = lookup_parent(fs, inode_get(fs, parent), &in, &e.attr);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	e.ino = inode_id(fs, in);
	e.generation = inode_gen(fs, e.ino);
	e.attr_timeout = fs->cfg->attr_timeout;
	e.entry_timeout = fs->cfg->entry_timeout;
	if (fuse_reply_entry(req, &e) != 0)
		inode_unref(fs, in, 1);
}
