/* fs_index.c - the fs index's notes (fs_index=NAME): the key of what an
 * operation changed, to the lock manager, see fs.h
 *
 * The lock layer records a note and writes the document later (its store
 * looks the key up in the backing tree then), so a key that is stale by
 * then costs nothing: it is written as absent. Directories' keys come
 * from fs_keys.h; a file's from one readlink() of its descriptor.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs.h"
#include "fs/fs_keys.h"
#include "lock/lockmgr.h"

/* Open files tracked for writes at most (by fd number). */
#define INDEX_DIRTY_MAX (1u << 20)

static struct keys_dir index_dir(struct ll_inode *in)
{
	struct keys_dir d = {.fd = in->fd, .dev = in->dev, .ino = in->ino, .memo = &in->key_memo};

	return d;
}

void index_note_parent(struct tlfs *fs, char *key)
{
	char *slash = strrchr(key, '/');
	char keep;

	if (!slash || (slash == key && !key[1]))
		return; /* the root has none */
	keep = slash == key ? slash[1] : slash[0];
	if (slash == key)
		slash[1] = '\0';
	else
		slash[0] = '\0';
	lockmgr_note(&fs->mgr, key);
	if (slash == key)
		slash[1] = keep;
	else
		slash[0] = keep;
}

void index_note_name(struct tlfs *fs, struct ll_inode *parent, const char *name)
{
	struct keys_dir dir;
	struct keys_buf key;

	if (!lockmgr_indexing(&fs->mgr))
		return;
	creds_daemon(fs);
	dir = index_dir(parent);
	if (keys_of(&fs->keys, &dir, name, &key, NULL) == 0) {
		lockmgr_note(&fs->mgr, key.s);
		index_note_parent(fs, key.s); /* its mtime, its nlink */
	}
	keys_buf_free(&key);
}

/* Notes the file open as FD (any descriptor of it) by its path now. */
static void note_fd(struct tlfs *fs, int fd)
{
	static const char deleted[] = " (deleted)";
	const char *root = fs->keys.root_path;
	size_t rl = strlen(root);
	char proc[64], path[PATH_MAX + 1];
	struct stat st;
	ssize_t n;

	tlfs_proc_path(fd, proc);
	n = readlink(proc, path, sizeof(path) - 1);
	if (n <= 0 || (size_t)n >= sizeof(path) - 1)
		return; /* deeper than a page: the directory's next note will do */
	path[n] = '\0';
	if ((size_t)n >= sizeof(deleted) - 1 &&
	    strcmp(path + n - (sizeof(deleted) - 1), deleted) == 0 &&
	    (fstat(fd, &st) == -1 || st.st_nlink == 0))
		return; /* removed: its unlink was noted */
	if (strncmp(path, root, rl) != 0 || (path[rl] != '/' && path[rl] != '\0'))
		return;
	/* with its inode: PATH is what this host's dentries say, which may
	 * be a name another host renamed the file from */
	lockmgr_note_ino(&fs->mgr, path[rl] ? path + rl : "/",
			 fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0);
}

void index_note_inode(struct tlfs *fs, struct ll_inode *in, int fd)
{
	if (!lockmgr_indexing(&fs->mgr))
		return;
	creds_daemon(fs);
	if (S_ISDIR(in->type)) {
		struct keys_dir dir = index_dir(in);
		struct keys_buf key;

		if (keys_of(&fs->keys, &dir, NULL, &key, NULL) == 0)
			lockmgr_note_ino(&fs->mgr, key.s, (uint64_t)in->ino);
		keys_buf_free(&key);
		return;
	}
	note_fd(fs, fd >= 0 ? fd : in->fd);
}

/* The written-since-flush byte of FD, or NULL (none can be kept). */
static uint8_t *dirty_of(struct tlfs *fs, int fd)
{
	uint8_t *d = __atomic_load_n(&fs->index_dirty, __ATOMIC_ACQUIRE);

	if (fd < 0 || (size_t)fd >= INDEX_DIRTY_MAX)
		return NULL;
	if (!d) {
		struct rlimit rl;
		size_t n = INDEX_DIRTY_MAX;
		uint8_t *mine, *none = NULL;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
		    rl.rlim_max < n)
			n = (size_t)rl.rlim_max;
		mine = calloc(n, 1);
		if (!mine)
			return NULL;
		if (__atomic_compare_exchange_n(&fs->index_dirty, &none, mine, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			__atomic_store_n(&fs->index_dirty_n, n, __ATOMIC_RELEASE);
			d = mine;
		} else {
			free(mine);
			d = none;
		}
	}
	while (__atomic_load_n(&fs->index_dirty_n, __ATOMIC_ACQUIRE) == 0)
		; /* the winner stores the size right after the pointer */
	return (size_t)fd < __atomic_load_n(&fs->index_dirty_n, __ATOMIC_ACQUIRE) ? d + fd : NULL;
}

void index_written(struct tlfs *fs, int fd)
{
	uint8_t *d;

	if (!lockmgr_indexing(&fs->mgr))
		return;
	d = dirty_of(fs, fd);
	if (d && __atomic_exchange_n(d, 1, __ATOMIC_RELAXED))
		return; /* noted since the last flush */
	creds_daemon(fs);
	note_fd(fs, fd);
}

void index_flushed(struct tlfs *fs, int fd, int flags, bool release)
{
	uint8_t *d;
	bool dirty;

	if (!lockmgr_indexing(&fs->mgr))
		return;
	d = __atomic_load_n(&fs->index_dirty, __ATOMIC_ACQUIRE) ? dirty_of(fs, fd) : NULL;
	dirty = d && __atomic_exchange_n(d, 0, __ATOMIC_RELAXED);
	if (!dirty && !(release && (flags & O_ACCMODE) != O_RDONLY))
		return;
	creds_daemon(fs);
	note_fd(fs, fd);
}

void index_release(struct tlfs *fs)
{
	free(fs->index_dirty);
	fs->index_dirty = NULL;
	fs->index_dirty_n = 0;
}
