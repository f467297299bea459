/* fs_dirs.c - open directories: opendir, readdir, releasedir and
 * fsyncdir, see fs.h
 *
 * A directory's handle carries DIR_TAG and points to a struct ll_dir: the
 * backing directory's stream, or the control directory's entries. The
 * root's listing never shows TLFS_CTL_NAME of BACKING.
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs.h"

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

void ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = inode_get(fs, ino);
	struct ll_dir *d;
	char proc[64];
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
	err = creds_enter_proc(fs, req, in, proc);
	if (err)
		goto out_free;
	/* through /proc, not openat(fd, "."): that would also need search
	 * permission on the directory itself, which open(2) does not */
	fd = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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

void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
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

void ll_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ll_dir *d = dir_of(fi);

	if (d->dp)
		closedir(d->dp);
	free(d);
	fuse_reply_err(req, 0);
}

void ll_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
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

