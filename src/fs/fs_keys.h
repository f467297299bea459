/* fs_keys.h - lock keys: where an entry of the backing tree is now
 *
 * A key is the path of an entry below the backing root, "/a/b/name" ("/"
 * for the root itself), of any length: a directory can sit deeper than any
 * one path a syscall accepts. Keys are found from directory fds, never from
 * names this host cached, in the cheapest way that can tell:
 *
 *   memo      the directory's path as its last key found it, kept on the
 *             caller's struct keys_memo (only without other writers, for
 *             memo_ttl at most, and while no rename noted since moved the
 *             directory or an ancestor: keys_renamed())
 *   getcwd    the thread moves its working directory to the directory and
 *             asks getcwd(); each thread first takes a working directory
 *             of its own (unshare(CLONE_FS)), so no other thread sees it
 *             move; it comes back to the home directory (keys_set_home())
 *             unless the home says it may stay
 *   readlink  one readlink() of /proc/self/fd/N (without a home, or when
 *             the thread cannot have a working directory of its own)
 *   walk      up through ".." to the backing root, finding each directory
 *             in its parent by st_dev/st_ino: deeper than PATH_MAX, or a
 *             name ending in " (deleted)" that a lookup does not confirm
 *
 * Once the locks are held, keys_still_valid() tells whether the keys still
 * name the directories the rename acts on. With other writers (other hosts
 * over the same storage), each key's parent is looked up again from the
 * backing root one component at a time (O_NOFOLLOW), which asks the
 * storage, and must reach the very directory; without, only a rename
 * through this mount can have moved a key, and the renames noted since the
 * keys were made (a window of KEYS_RECENT) tell whether one did.
 *
 * The document strategy locks every entry below a directory:
 * keys_below() lists their keys.
 *
 * Nothing here knows FUSE or a lock store; errors are -errno.
 *
 * Thread rules: one struct keys serves every thread. Its mutex is a leaf
 * lock, never held across a syscall; it protects the recent window and
 * every struct keys_memo. Key functions may move the calling thread's
 * working directory (a working directory of its own, see above).
 */
#ifndef TREELOCKFS_FS_FS_KEYS_H
#define TREELOCKFS_FS_FS_KEYS_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A directory's path as its last key found it, kept by the caller beside
 * the directory (zeroed at first). Protected by keys->mutex. */
struct keys_memo {
	char *path;              /* "/a/b", NULL for none */
	size_t len;
	uint64_t gen;            /* right up to this generation */
	int64_t until_us;        /* trusted until then (tl_mono_us()) */
};

/* A directory of the backing tree, as the key functions take it: an open
 * fd (O_PATH will do) and its st_dev/st_ino; MEMO may be NULL (then
 * nothing is remembered for it). */
struct keys_dir {
	int fd;
	dev_t dev;
	ino_t ino;
	struct keys_memo *memo;
};

/* A rename noted by keys_renamed(): its keys, or UNKNOWN when they are
 * longer than the buffers. */
#define KEYS_RECENT 64
#define KEYS_RECENT_KEY 240
struct keys_rename {
	uint64_t gen;            /* the generation it made */
	bool unknown;
	char from[KEYS_RECENT_KEY];
	char to[KEYS_RECENT_KEY];
};

/* The keys of one backing tree (one mount). */
struct keys {
	int backing_fd;          /* the backing root, borrowed */
	dev_t root_dev;
	ino_t root_ino;
	char *root_path;         /* as the kernel names it ("" for /) */
	int home_fd;             /* where threads come back to, or -1 */
	bool home_leave;         /* threads may stay where a key put them */
	bool other_writers;
	int64_t memo_ttl_us;     /* 0: no memo */
	uint64_t gen;            /* atomic: renames noted; written under mutex */
	pthread_mutex_t mutex;   /* leaf lock */
	struct keys_rename recent[KEYS_RECENT]; /* slot gen % KEYS_RECENT */
};

/* A key, in STACK when it fits (a directory the kernel names in one page
 * and a name of up to NAME_MAX bytes always do), else allocated: a
 * rename's keys then cost no allocation. Free with keys_buf_free(). */
struct keys_buf {
	char *s;                 /* the key, NUL-terminated; NULL for none */
	char stack[PATH_MAX + 1 + NAME_MAX + 1];
};

/* A list of keys (keys_below()); zero it before use, free with
 * keys_list_free(). */
struct keys_list {
	char **v;
	size_t n, cap;
};

/* Sets K up for the tree below BACKING_FD (borrowed: it must stay open
 * while K is used). OTHER_WRITERS: other mounts may change the tree (the
 * lock store's "other writers possible"); MEMO_TTL_S: how long a
 * directory's path may be remembered without them (0 for never). No home
 * yet: keys come from readlink() until keys_set_home(). Returns 0,
 * -ENOMEM or the -errno of fstat()/readlink() on BACKING_FD. */
int keys_init(struct keys *k, int backing_fd, bool other_writers, double memo_ttl_s);

/* Frees what keys_init() and keys_set_home() set; accepts a K that
 * keys_init() failed on or that was zeroed. This function can't fail. */
void keys_destroy(struct keys *k);

/* Lets threads find keys by getcwd(): HOME_FD (taken over; -1 for none) is
 * where each thread's working directory comes back to after a key, unless
 * LEAVE (nothing in the threads that make keys resolves a relative path):
 * then it stays, and the next key in the same directory costs no move.
 * Call once, before the first key. This function can't fail. */
void keys_set_home(struct keys *k, int home_fd, bool leave);

/* The key of NAME in directory DIR (of DIR itself when NAME is NULL), of
 * any length, into OUT, and the length of its directory part ("" for the
 * root, else "/a/b") to *DLEN when DLEN is not NULL. Returns 0, -ENOENT
 * (DIR was removed, is outside the backing tree or moved while we looked),
 * -ENOMEM, or another -errno of the walk; OUT->s is NULL but on success. */
int keys_of(struct keys *k, const struct keys_dir *dir, const char *name, struct keys_buf *out,
	    size_t *dlen);

/* The key of NAME in the directory whose path is the first DLEN bytes of
 * KEY (another key of that directory, from keys_of()), into OUT. Returns 0
 * or -ENOMEM. */
int keys_sibling(const char *key, size_t dlen, const char *name, struct keys_buf *out);

/* Frees a key; accepts one never set (s NULL). This function can't fail. */
void keys_buf_free(struct keys_buf *b);

/* True when this thread's working directory stayed at DIR after its last
 * key (a home with LEAVE): a key in DIR then costs no move, so a caller
 * with two directories asks for this one first. This function can't fail. */
bool keys_thread_at(const struct keys_dir *dir);

/* The generation now: how many renames were noted (keys_renamed()). Take
 * it before making keys, for keys_still_valid(). This function can't
 * fail. */
uint64_t keys_generation(struct keys *k);

/* True when FROM, a key of an entry of FROM_DIR, and TO, one of TO_DIR,
 * both made after generation GEN, still name entries of those directories
 * now. With other writers: each key's parent, looked up now from the
 * backing root, is that directory (a readlink() would be this host's
 * cached view, which another host's rename of an ancestor leaves as it
 * was). Without: true at once unless a rename noted since GEN moved one of
 * the keys' directories or an ancestor (or more than KEYS_RECENT were
 * noted); then this host's view of the directory's path must be the key's
 * parent. One check serves both keys when the directories are one. Does
 * not fail: a directory that cannot be looked up is false. */
bool keys_still_valid(struct keys *k, uint64_t gen, const struct keys_dir *from_dir,
		      const char *from, const struct keys_dir *to_dir, const char *to);

/* Notes that the rename FROM -> TO (keys) was just done through this
 * mount: a new generation. This function can't fail. */
void keys_renamed(struct keys *k, const char *from, const char *to);

/* Writes to OUT (zeroed) the key of every entry below the directory KEY (the
 * document strategy), breadth first, of any depth; a non-directory or a
 * directory that cannot be opened adds none. Returns 0 or -ENOMEM. */
int keys_below(struct keys *k, const char *key, struct keys_list *out);

/* Frees OUT's keys and array; accepts a zeroed list. This function can't
 * fail. */
void keys_list_free(struct keys_list *l);

/* Drops what MEMO remembers (its directory is another file now). This
 * function can't fail. */
void keys_memo_forget(struct keys *k, struct keys_memo *memo);

/* Frees what MEMO remembers, when no thread can use it any more (its
 * directory is freed). This function can't fail. */
void keys_memo_free(struct keys_memo *memo);

#endif /* TREELOCKFS_FS_FS_KEYS_H */
