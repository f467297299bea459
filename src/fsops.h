/* fsops.h - the FUSE operations of treelockfs (included by treelockfs.c
 * and fsops.c only; nothing else sees <fuse.h>)
 *
 * Every operation is a passthrough to the backing directory, relative to
 * one directory fd opened on BACKING before mounting (so a mount over
 * BACKING itself works and no path grows by a prefix). rename() is wrapped
 * in the locks of its plan; with lock_scope=namespace so are the operations
 * that create or remove names. With allow_other, each operation runs with
 * the requesting user's fsuid, fsgid and supplementary groups.
 *
 * A hidden entry ".treelockfs/" at the root (never listed) holds read-only
 * "stats" and "locks" files.
 */
#ifndef TREELOCKFS_FSOPS_H
#define TREELOCKFS_FSOPS_H

#include <fuse.h>
#include <stdbool.h>

#include "config.h"
#include "lockmgr.h"
#include "lockstore.h"

struct tlfs {
	int backing_fd;          /* O_DIRECTORY fd on BACKING */
	const struct tl_config *cfg;
	struct lockstore *store;
	struct lockmgr mgr;
	bool switch_creds;       /* root daemon serving other users */
};

#define TLFS_CTL_NAME ".treelockfs"

/* The operations table; private_data must be a struct tlfs. */
extern const struct fuse_operations tlfs_ops;

#endif /* TREELOCKFS_FSOPS_H */
