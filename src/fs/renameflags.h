/* renameflags.h - which rename flags a backing filesystem refuses
 *
 * Some filesystems refuse RENAME_NOREPLACE or RENAME_EXCHANGE with EINVAL
 * (mv tries RENAME_NOREPLACE first and falls back to a plain rename on
 * EINVAL). Once a filesystem is known to refuse a flag, such renames are
 * refused the same way before any lock is taken for nothing.
 *
 *   RENAME_EXCHANGE  EINVAL, neither path inside the other   --> refused
 *   RENAME_NOREPLACE EINVAL                                  --> suspect
 *                    (also a name the filesystem does not allow, or a
 *                    directory into its own subtree)
 *   the suspect rename, then without flags, succeeds         --> refused
 *
 * One filesystem (st_dev) is remembered per flag: the last that refused
 * it; one suspect: the last. No I/O, no lock: every field is atomic, so
 * one struct serves every thread.
 */
#ifndef TREELOCKFS_FS_RENAMEFLAGS_H
#define TREELOCKFS_FS_RENAMEFLAGS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Zero it to start: nothing refused. */
struct renameflags {
	uint64_t refused_on[2];  /* st_dev + 1 of the filesystem that refuses
				  * RENAME_NOREPLACE ([0]) or RENAME_EXCHANGE
				  * ([1]), 0 for none */
	uint64_t suspect;        /* a hash of the last rename refused with
				  * RENAME_NOREPLACE, 0 for none */
};

/* True when filesystem DEV is known to refuse FLAGS (a rename's flags; 0
 * is never refused). This function can't fail. */
bool renameflags_refused(struct renameflags *rf, dev_t dev, unsigned int flags);

/* Learns from renameat2(FROM, TO, FLAGS) on filesystem DEV that gave RES
 * (0 or -errno); FROM and TO are the rename's keys (paths below the
 * backing root). Logs when a flag becomes refused. This function can't
 * fail. */
void renameflags_learn(struct renameflags *rf, dev_t dev, unsigned int flags, int res,
		       const char *from, const char *to);

#endif /* TREELOCKFS_FS_RENAMEFLAGS_H */
