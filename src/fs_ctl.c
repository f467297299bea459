/* fs_ctl.c - the hidden control entry ".treelockfs/", see fs.h
 *
 * ".treelockfs" at the root is never listed, cannot be created, removed or
 * renamed, and holds two read-only files rendered when opened: "stats" (the
 * lock manager's counters) and "locks" (the locks the store holds, one per
 * line, only those the reader may look up). Their inodes are static,
 * without fd; their handles carry CTL_TAG.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "lockplan.h"
#include "path.h"

static struct ll_inode ctl_inodes[] = {
	[CTL_DIR] = {.fd = -1, .type = S_IFDIR, .ctl = CTL_DIR},
	[CTL_STATS] = {.fd = -1, .type = S_IFREG, .ctl = CTL_STATS},
	[CTL_LOCKS] = {.fd = -1, .type = S_IFREG, .ctl = CTL_LOCKS},
};

struct ctl_buf {
	char *data;
	size_t len;
};

/* Writes KEY with backslashes, control bytes and invalid UTF-8 escaped, so
 * one lock is one line of valid text. */
static void ctl_put_key(FILE *f, const char *key)
{
	const unsigned char *s = (const unsigned char *)key;

	while (*s) {
		size_t n = path_utf8_len(s, strnlen((const char *)s, 4));

		if (*s == '\\') {
			fputs("\\\\", f);
			s++;
		} else if (n == 0 || *s < 0x20 || *s == 0x7f) {
			fprintf(f, "\\x%02x", *s);
			s++;
		} else {
			fwrite(s, 1, n, f);
			s += n;
		}
	}
}

/* True when the caller (whose credentials this thread has) may look up
 * KEY's entry: search permission on every directory from the backing root
 * to KEY's parent, which is what reaching the name natively takes. A key
 * that is not a path (no leading '/') names no entry. A key too long to
 * check, or whose directory is gone, is not shown. */
static bool ctl_key_visible(struct tlfs *fs, const char *key)
{
	const char *slash = strrchr(key, '/');
	char *dir;
	bool ok;

	if (key[0] != '/' || creds_are_root())
		return true;
	if (slash == key)
		return faccessat(fs->backing_fd, ".", X_OK, AT_EACCESS) == 0;
	dir = strndup(key + 1, (size_t)(slash - key - 1));
	if (!dir)
		return false;
	ok = faccessat(fs->backing_fd, dir, X_OK, AT_EACCESS) == 0;
	free(dir);
	return ok;
}

/* Renders control file KIND into a new buffer. The locks file lists only
 * the keys the requesting user may look up (ctl_key_visible(), checked
 * with REQ's credentials); the store is asked as the daemon. */
static int ctl_render(struct tlfs *fs, fuse_req_t req, enum ctl_kind kind,
		      struct ctl_buf **out)
{
	struct ctl_buf *b = calloc(1, sizeof(*b));
	FILE *f;

	if (!b)
		return -ENOMEM;
	f = open_memstream(&b->data, &b->len);
	if (!f) {
		free(b);
		return -ENOMEM;
	}
	if (kind == CTL_STATS) {
		char buf[2048];

		fprintf(f, "lock_store %s\nlock_strategy %s\n", lockmgr_store_name(&fs->mgr),
			lockplan_strategy_name(fs->cfg->lock_strategy));
		lockmgr_format_stats(&fs->mgr, buf, sizeof(buf));
		fputs(buf, f);
		/* forwarded flock()/fcntl() locks that wait now (fs_plock.c) */
		fprintf(f, "file_lock_waits %u\n", lockwait_count(&fs->waits));
	} else {
		struct tl_lock_info *v = NULL;
		size_t n = 0, i;
		int err;

		creds_daemon(fs);
		err = lockmgr_list(&fs->mgr, "/", &v, &n);
		if (!err)
			err = creds_enter(fs, req);
		if (err) {
			fprintf(f, "error %s\n", strerror(-err));
		} else {
			fputs("# mode count age_ms waiters holder key\n", f);
			for (i = 0; i < n; i++) {
				if (!ctl_key_visible(fs, v[i].key))
					continue;
				fprintf(f, "%s %u %" PRId64 " %u %s ",
					v[i].mode == TL_EXCLUSIVE ? "exclusive" : "shared",
					v[i].count, v[i].age_ms, v[i].waiters,
					v[i].holders ? v[i].holders : "-");
				ctl_put_key(f, v[i].key);
				fputc('\n', f);
			}
		}
		lockstore_free_list(v, n);
	}
	fclose(f);
	*out = b;
	return 0;
}

void ctl_stat(enum ctl_kind kind, struct stat *st)
{
	struct timespec now;

	memset(st, 0, sizeof(*st));
	clock_gettime(CLOCK_REALTIME, &now);
	st->st_ino = (ino_t)(UINT64_C(0xfffffffffffff000) + (uint64_t)kind);
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_atim = st->st_mtim = st->st_ctim = now;
	st->st_blksize = 4096;
	if (kind == CTL_DIR) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
	}
}

bool ctl_is_name(struct tlfs *fs, struct ll_inode *parent, const char *name)
{
	return (parent == fs->root && strcmp(name, TLFS_CTL_NAME) == 0) || parent->ctl;
}

int ctl_create_err(struct tlfs *fs, struct ll_inode *parent, const char *name)
{
	struct fuse_entry_param e;

	return ctl_lookup(fs, parent, name, &e) == 0 ? -EEXIST : -EPERM;
}

int ctl_lookup(struct tlfs *fs, struct ll_inode *parent, const char *name,
	       struct fuse_entry_param *e)
{
	enum ctl_kind k;

	memset(e, 0, sizeof(*e));
	if (!parent->ctl) {
		ctl_stat(CTL_DIR, &e->attr);
		e->ino = (fuse_ino_t)(uintptr_t)&ctl_inodes[CTL_DIR];
		e->attr_timeout = fs->cfg->attr_timeout;
		e->entry_timeout = fs->cfg->entry_timeout;
		return 0;
	}
	k = strcmp(name, "stats") == 0	 ? CTL_STATS
	    : strcmp(name, "locks") == 0 ? CTL_LOCKS
					 : CTL_NONE;
	if (parent->ctl != CTL_DIR || k == CTL_NONE)
		return -ENOENT;
	ctl_stat(k, &e->attr);
	e->ino = (fuse_ino_t)(uintptr_t)&ctl_inodes[k];
	return 0;
}

void ctl_open(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, struct fuse_file_info *fi)
{
	struct ctl_buf *b;
	int res;

	if (in->ctl == CTL_DIR) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EACCES);
		return;
	}
	/* a non-root daemon cannot check other users' permissions: its
	 * locks file is for itself and root only */
	if (in->ctl == CTL_LOCKS && !fs->switch_creds && fuse_req_ctx(req)->uid != 0 &&
	    fuse_req_ctx(req)->uid != geteuid()) {
		fuse_reply_err(req, EACCES);
		return;
	}
	creds_daemon(fs);
	res = ctl_render(fs, req, in->ctl, &b);
	creds_daemon(fs);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)b | CTL_TAG;
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

void ctl_read(fuse_req_t req, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct ctl_buf *b = (struct ctl_buf *)(uintptr_t)(fi->fh & ~CTL_TAG);
	size_t n = 0;

	if ((size_t)off < b->len)
		n = b->len - (size_t)off < size ? b->len - (size_t)off : size;
	fuse_reply_buf(req, n ? b->data + off : NULL, n);
}

void ctl_release(struct fuse_file_info *fi)
{
	struct ctl_buf *b = (struct ctl_buf *)(uintptr_t)(fi->fh & ~CTL_TAG);

	free(b->data);
	free(b);
}

size_t ctl_readdir(fuse_req_t req, char *buf, size_t rem, off_t offset)
{
	static const char *const names[] = {".", "..", "stats", "locks"};
	size_t used = 0;
	off_t i;

	for (i = offset; i < 4; i++) {
		struct stat st;
		size_t n;

		ctl_stat(i < 2 ? CTL_DIR : i == 2 ? CTL_STATS : CTL_LOCKS, &st);
		n = fuse_add_direntry(req, buf + used, rem - used, names[i], &st, i + 1);
		if (n > rem - used)
			break;
		used += n;
	}
	return used;
}
