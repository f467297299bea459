/* ctl_i.h - what the files of treelockctl's fs-index commands share: a
 * mount as they find it, and the walk of its tree
 */
#ifndef TREELOCKFS_CTL_CTL_I_H
#define TREELOCKFS_CTL_CTL_I_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "config/config.h"
#include "es/es_fsctl.h"

#define CTL_EXIT_DIFF 1
#define CTL_EXIT_USAGE 1
#define CTL_EXIT_STORE 2

/* A treelockfs mount as the commands use it. */
struct ctl_mount {
	char *shown;          /* MOUNTPOINT as given, without trailing '/' */
	char *real;           /* its real path */
	int rootfd;           /* O_PATH of its root */
	char *backing;        /* the backing directory (the mount's source), or NULL */
	int treefd;           /* O_PATH of the root the walks read: BACKING when
			       * the caller may read it, else the mount's */
	bool via_backing;
	struct tl_config cfg; /* the mount's options */
	bool cfg_ready;
	struct es_fsctl *fs;  /* the fs index */
};

/* Finds the treelockfs mount at MOUNTPOINT, its options (its
 * .treelockfs/options, parsed as the mount parsed them, then the store
 * options STORE_ARGS[0..NSTORE) given on the command line), its backing
 * directory, and opens its fs index (INDEX, else the mount's fs_index).
 * Prints what fails and returns CTL_EXIT_USAGE or CTL_EXIT_STORE; 0 on
 * success (ctl_mount_close() it). */
int ctl_mount_open(const char *mountpoint, const char *index, char **store_args, size_t nstore,
		   struct ctl_mount *m);
void ctl_mount_close(struct ctl_mount *m);

/* KEY's path relative to the tree root fd ("." for "/"). */
const char *ctl_rel(const char *key);

/* The wall clock in ns. */
int64_t ctl_now_ns(void);

/* One entry the walk found. */
typedef int (*ctl_walk_fn)(void *arg, const char *key, const struct stat *st, int64_t at_ns);

/* Walks the tree of M below KEY (KEY included; KEY need not be a
 * directory), calling FN for every entry with its stat and the wall clock
 * of the stat. Entries that vanish during the walk are skipped; a
 * directory that cannot be read is counted in *UNREADABLE (may be NULL)
 * and warned about. Stops when FN returns nonzero and returns that.
 * Returns 0, -ENOENT (KEY itself is not there), -errno. */
int ctl_walk(struct ctl_mount *m, const char *key, ctl_walk_fn fn, void *arg,
	     size_t *unreadable);

/* Prints KEY as M prints it (MOUNTPOINT and the key, escaped by escape.h)
 * to F. */
void ctl_print_path(const struct ctl_mount *m, const char *key, FILE *f);

/* The same as a new string (caller frees), or NULL. */
char *ctl_shown_path(const struct ctl_mount *m, const char *key);

/* The printed path, unescaped: MOUNTPOINT and KEY. A new string or NULL. */
char *ctl_raw_path(const struct ctl_mount *m, const char *key);

/* Commands (ctl_index.c, ctl_findcmd.c). */
int ctl_index_build(struct ctl_mount *m, const char *key, bool quiet);
int ctl_index_verify(struct ctl_mount *m, const char *key, bool repair, bool json);
int ctl_index_repair(struct ctl_mount *m, bool quiet, bool no_wait);

#endif /* TREELOCKFS_CTL_CTL_I_H */
