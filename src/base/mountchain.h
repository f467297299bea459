/* mountchain.h - which directories a mount is served from, to refuse mounts
 * that would serve each other
 *
 * Two treelockfs mounts form a cycle when one's BACKING is reached through
 * the other, whose backing directory contains the first one's MOUNTPOINT
 * ("treelockfs bA mA; treelockfs mA bA/sub"): a lookup through one then
 * waits for the other while the kernel holds the first one's directory
 * locks, and one rename hangs both for good.
 *
 * A mount's *chain* is text, one "MAJOR:MINOR INODE" line per directory it
 * is served from: its backing root first, then the chain of the treelockfs
 * mount that backing root lies on, if any (read from that mount's
 * ".treelockfs/backing" file, which shows this chain). The mount
 * refuses to start when MOUNTPOINT lies below a directory of BACKING's
 * chain, and a lookup that crosses into a FUSE mount whose chain names this
 * mount's own device fails with ELOOP.
 *
 * No function here takes a lock or keeps state; all may be called from
 * any thread.
 */
#ifndef TREELOCKFS_BASE_MOUNTCHAIN_H
#define TREELOCKFS_BASE_MOUNTCHAIN_H

#include <stdbool.h>
#include <sys/types.h>

struct stat;

/* The most lines a chain has (deeper stacks are cut there). */
#define MOUNTCHAIN_MAX 32

/* Builds the chain of directory DIRFD: its own line, then, when DIRFD
 * lies on a FUSE mount whose root shows a chain, that chain. Returns 0
 * with a new string in *OUT (caller frees), or -errno of fstat(). A chain
 * that cannot be read below DIRFD is left out (what cannot be seen). */
int mountchain_of_dir(int dirfd, char **out);

/* Reads the chain shown by the treelockfs mount whose root is ROOTFD
 * (its ".treelockfs/backing"). Returns 0 with a new string in *OUT, or
 * -ENOENT when ROOTFD is no FUSE mount showing one, or another -errno. */
int mountchain_of_mount(int rootfd, char **out);

/* Whether CHAIN names a directory on device DEV. This function can't
 * fail. */
bool mountchain_has_dev(const char *chain, dev_t dev);

/* Whether directory PATH lies strictly below a directory that line
 * FIRST or a later one of CHAIN names (compared by device and inode up
 * the ".." of PATH, so bind mounts and symbolic links are seen through).
 * This function can't fail: what cannot be checked is not below. */
bool mountchain_below(const char *chain, unsigned first, const char *path);

/* Whether directory PATH lies strictly below directory DIR (its stat), by
 * the same walk. This function can't fail. */
bool mountchain_path_below_dir(const char *path, const struct stat *dir);

/* The device of the mount at MOUNTPOINT (as /proc/self/mountinfo names
 * it: the last mount there), read without touching the mount itself.
 * Returns 0, or -ENOENT when nothing is mounted there, or -errno. */
int mountchain_mount_dev(const char *mountpoint, dev_t *out);

/* What /proc/self/mountinfo says of one mount. */
struct mountchain_mount {
	dev_t dev;
	/* the filesystem type, "fuse.treelockfs" for a treelockfs mount (cut
	 * at 63 bytes) */
	char fstype[64];
	/* whether the mount shows its filesystem from the root (ROOT "/"),
	 * not one directory below it as a bind mount of a subdirectory does */
	bool whole;
};

/* The mount at MOUNTPOINT (an absolute path without symbolic links, as
 * realpath() gives it: the last mount there, the one on top) into *OUT,
 * read without touching the mount itself. Returns 0, or -ENOENT when
 * nothing is mounted there, or -errno. */
int mountchain_mount_find(const char *mountpoint, struct mountchain_mount *out);

/* Undoes mountinfo's octal escapes (\ooo, e.g. \040 for a space) of S in
 * place and returns S. This function can't fail. */
char *mountchain_unescape(char *s);

#endif /* TREELOCKFS_BASE_MOUNTCHAIN_H */
