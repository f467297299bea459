/* fs_files.c - open files: open, read, write (and the page write-back of
 * shared mappings), flush, fsync, fallocate, copy_file_range, lseek and
 * release, see fs.h
 *
 * An open file's handle (fi->fh) is the daemon's own descriptor of the
 * backing file, opened as the caller; a control file's carries CTL_TAG
 * (fs_ctl.c). With FUSE passthrough the kernel does the reads and writes
 * of some opens itself (fs_passthrough.c); the rest still come here.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs.h"
#include "base/log.h"

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

void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = inode_get(fs, ino);
	char proc[64];
	int fd, res;

	if (in->ctl) {
		ctl_open(fs, req, in, fi);
		return;
	}
	res = creds_enter_proc(fs, req, in, proc);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
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
	if (fi->flags & O_TRUNC)
		index_note_inode(fs, in, fd);
	passthrough_open(fs, req, in, fd, fi);
	if (fuse_reply_open(req, fi) != 0) {
		/* interrupted: there will be no release */
		passthrough_release(fs, in);
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

void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
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

void ll_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in_buf, off_t off,
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
	index_written(req_fs(req), (int)fi->fh);
	fuse_reply_write(req, (size_t)res);
}

void ll_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int fd;

	if (fi->fh & CTL_TAG) {
		fuse_reply_err(req, 0);
		return;
	}
	plock_drop_owner(req_fs(req), (int)fi->fh, fi->lock_owner);
	index_flushed(req_fs(req), (int)fi->fh, 0, false);
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

void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (fi->fh & CTL_TAG) {
		ctl_release(fi);
	} else {
		passthrough_release(req_fs(req), inode_get(req_fs(req), ino));
		plock_release_fh(req_fs(req), fi->fh);
		if (fi->flock_release)
			flock((int)fi->fh, LOCK_UN);
		wb_release(req_fs(req), (int)fi->fh);
		index_flushed(req_fs(req), (int)fi->fh, fi->flags, true);
		close((int)fi->fh);
	}
	fuse_reply_err(req, 0);
}

void ll_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	int res;

	if (fi->fh & CTL_TAG) {
		fuse_reply_err(req, 0);
		return;
	}
	res = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);
	fuse_reply_err(req, res == -1 ? errno : 0);
}

void ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
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
	index_written(req_fs(req), (int)fi->fh);
	fuse_reply_err(req, 0);
}

void ll_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
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
	index_written(req_fs(req), (int)fi_out->fh);
	fuse_reply_write(req, (size_t)res);
}

void ll_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
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

