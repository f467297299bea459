/* ctl.h - treelockctl's commands over the fs index: index build, verify
 * and repair, and find
 *
 * The fs index (fs_index=NAME, es_fsdoc.h) holds one document per entry
 * of a mount's tree. These commands find a mount's store and index from
 * the mount itself (its .treelockfs/options), crawl its tree (through the
 * backing directory when the caller may read it, else through the mount)
 * and hold the index against it, and answer find's questions from it.
 *
 * Files in src/ctl/:
 *
 *   ctl.h          this map, and the commands' entry points
 *   ctl_i.h        what the files below share: the mount, the walk
 *   ctl_mount.c    a mount's options, backing directory and fs index;
 *                  the walk of its tree
 *   ctl_index.c    index build, verify and repair
 *   ctl_findcmd.c  find, visibility, and the entry points
 *   ctl_find.[ch]  find's tests: arguments, meanings, query (pure)
 *
 * Depends on: base, config, lock, es.
 *
 * Called from outside src/ctl/, by treelockctl.c only:
 *
 *   ctl_index_main(), ctl_find_main()
 *
 * Thread rules: the entry points run in the program's main thread.
 */
#ifndef TREELOCKFS_CTL_CTL_H
#define TREELOCKFS_CTL_CTL_H

/* "treelockctl index ...": ARGV[0] is "index". Returns the exit status:
 * 0, 1 (differences found by verify, or usage), 2 (store failure). */
int ctl_index_main(int argc, char **argv);

/* "treelockctl find ...": ARGV[0] is "find". Returns the exit status:
 * 0, 1 (usage; the starting point not in the index), 2 (store failure). */
int ctl_find_main(int argc, char **argv);

#endif /* TREELOCKFS_CTL_CTL_H */
