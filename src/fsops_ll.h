/* fsops_ll.h - the FUSE operations of treelockfs (low-level API; included
 * by treelockfs.c and fsops_ll.c only)
 *
 * Every operation is a passthrough to the backing directory by inode: each
 * inode the kernel knows is an O_PATH fd on the backing file, so renames
 * made behind the mount's back (other hosts, BACKING itself) never confuse
 * it. rename() is wrapped in the locks of its plan, whose keys are the
 * current paths of the directories involved; with lock_scope=namespace so
 * are the operations that create or remove names. With allow_other, each
 * operation runs with the requesting user's fsuid, fsgid and supplementary
 * groups.
 *
 * A hidden entry ".treelockfs/" at the root (never listed) holds read-only
 * "stats" and "locks" files.
 */
#ifndef TREELOCKFS_FSOPS_LL_H
#define TREELOCKFS_FSOPS_LL_H

#include <fuse_lowlevel.h>
#include <stdbool.h>

#include "options.h"
#include "lockmgr.h"
#include "lockstore.h"

struct ll_inode;

struct tlfs {
	int backing_fd;          /* O_DIRECTORY fd on BACKING */
	const struct tl_config *cfg;
	struct lockstore *store;
	struct lockmgr mgr;
	bool switch_creds;       /* root daemon serving other users */
	struct ll_inode *root;   /* the backing root's inode */
	char *root_path;         /* BACKING as the kernel names it ("" for /) */
	uint64_t rename_gen;     /* atomic: renames done through this mount */
};

#define TLFS_CTL_NAME ".treelockfs"

extern const struct fuse_lowlevel_ops tlfs_ll_ops;

/* Makes the root inode and notes BACKING's path; call after backing_fd is
 * open. Returns 0 or -errno. */
int tlfs_ll_prepare(struct tlfs *fs);

/* Frees what tlfs_ll_prepare() made, also after it failed half-way or was
 * never called (fs->root NULL); call after the session loop ended. This
 * function can't fail. */
void tlfs_ll_release(struct tlfs *fs);

#endif /* TREELOCKFS_FSOPS_LL_H */
