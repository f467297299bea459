/* remount.h - "mount -o remount" of a treelockfs mount
 *
 * mount(8) runs a remount of a fuse.treelockfs mount through
 * mount.fuse3(8) as "treelockfs BACKING MOUNTPOINT -o remount,...", with
 * the mount's current options (or its fstab line's) and the new ones. That
 * process cannot reach the running daemon's settings, and must not start a
 * second daemon. It changes what the kernel keeps for the mount (ro/rw,
 * nosuid, nodev, noexec, sync, dirsync, lazytime, nosymfollow) with
 * mount(2) MS_REMOUNT, and lock_timeout and log_level by writing them to
 * MOUNTPOINT/.treelockfs/options, where the daemon applies them. It
 * refuses, naming each, the options that would change anything fixed at
 * mount time: the other treelockfs and libfuse options and the kernel's
 * FUSE options that differ from what the mount has (the daemon's own are
 * in MOUNTPOINT/.treelockfs/options), noatime and nodiratime turned on or
 * off (the daemon opens BACKING's files with O_NOATIME by them), and
 * strictatime, and any option that holds a control character (a newline
 * would make one option two lines of the options file). All or nothing:
 * a refused option or value changes nothing. Messages escape what they
 * quote (escape.h).
 */
#ifndef TREELOCKFS_FS_REMOUNT_H
#define TREELOCKFS_FS_REMOUNT_H

#include <stdbool.h>

/* True when ARGV asks for a remount (an option "remount"). */
bool remount_requested(int argc, char *argv[]);

/* The options in ARGV as given, one per line ("name=value" or "name",
 * from -o lists and --name[=value] arguments), in a new string, or NULL
 * when out of memory. */
char *remount_given_options(int argc, char *argv[]);

/* Does the remount ARGV asks for, printing every refusal to stderr.
 * Returns the exit status: 0 when remounted, 1 when refused or failed. */
int remount_run(int argc, char *argv[]);

#endif /* TREELOCKFS_FS_REMOUNT_H */
