/* fs_ops.c - the table of all FUSE operations, and the operations of the
 * mount as a whole (init, destroy, statfs), see fs.h
 *
 * Why the low-level API: libfuse's high-level API keeps its own tree of
 * path nodes and locks paths in it. When another host (or anyone writing to
 * BACKING directly) renames directories behind its back, that tree and the
 * backing tree disagree, and libfuse 3.14 then deadlocks in its path lock
 * queue or asserts (both reproduced with libfuse's own example passthrough
 * under a rename storm on the backing directory). That is exactly the
 * situation treelockfs is for, so the operations address files by inode:
 * every inode the kernel knows is an O_PATH fd on the backing file (like
 * libfuse's passthrough_ll), and paths are computed only where a lock key
 * is needed (fs_rename.c).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>

#include "fs/fs.h"
#include "lock/lockplan.h"
#include "base/log.h"

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

static void ll_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct tlfs *fs = req_fs(req);
	struct statvfs st;

	if (fstatvfs(fs->backing_fd, &st) == -1)
		fuse_reply_err(req, errno);
	else
		fuse_reply_statfs(req, &st);
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
