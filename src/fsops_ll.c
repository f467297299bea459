/* fsops_ll.c - the FUSE low-level operations of treelockfs
 *
 * Why the low-level API: libfuse's high-level API keeps its own tree of
 * path nodes and locks paths in it. When another host (or anyone writing to
 * BACKING directly) renames directories behind its back, that tree and the
 * backing tree disagree, and libfuse 3.14 then deadlocks in its path lock
 * queue or asserts (both reproduced with libfuse's own example passthrough
 * under a rename storm on the backing directory). That is exactly the
 * situation treelockfs is for, so operations here address files by inode:
 * every inode the kernel knows is an O_PATH fd on the backing file (like
 * libfuse's passthrough_ll), and paths are computed only where a lock key
 * is needed, from the kernel's own view of the parent's fd
 * (/proc/self/fd/N), which follows renames made by anyone.
 *
 * Inodes: one struct ll_inode per (st_dev, st_ino) the kernel looked up,
 * with a lookup count; the nodeid is its address. The root is fs->root.
 * Control entries (.treelockfs and its files) are static inodes without fd.
 *
 * Lock order: itab.mutex is a leaf, never held across a syscall.
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "fsops_ll.h"
#include "lockplan.h"
#include "log.h"
#include "path.h"
#include "tlclock.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

enum ctl_kind { CTL_NONE, CTL_DIR, CTL_STATS, CTL_LOCKS };

struct ll_inode {
	struct ll_inode *next;   /* hash chain; protected by itab.mutex */
	int fd;                  /* O_PATH | O_NOFOLLOW on the backing file */
	dev_t dev;
	ino_t ino;
	mode_t type;             /* S_IFMT bits */
	uint64_t nlookup;        /* protected by itab.mutex */
	enum ctl_kind ctl;
};

#define ITAB_SIZE 4096

static struct {
	pthread_mutex_t mutex;
	struct ll_inode *buckets[ITAB_SIZE]; /* protected by mutex */
} itab = {.mutex = PTHREAD_MUTEX_INITIALIZER};

static struct ll_inode ctl_inodes[] = {
	[CTL_DIR] = {.fd = -1, .type = S_IFDIR, .ctl = CTL_DIR},
	[CTL_STATS] = {.fd = -1, .type = S_IFREG, .ctl = CTL_STATS},
	[CTL_LOCKS] = {.fd = -1, .type = S_IFREG, .ctl = CTL_LOCKS},
};

/* Handles of control files and directories carry a tag bit; every other
 * handle is a backing fd. */
#define CTL_TAG (UINT64_C(1) << 63)
#define DIR_TAG (UINT64_C(1) << 62)

static struct tlfs *req_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static struct ll_inode *ino_get(struct tlfs *fs, fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID)
		return fs->root;
	return (struct ll_inode *)(uintptr_t)ino;
}

static fuse_ino_t ino_id(struct tlfs *fs, struct ll_inode *in)
{
	return in == fs->root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)in;
}

static size_t ihash(dev_t dev, ino_t ino)
{
	return (size_t)((ino * UINT64_C(0x9e3779b97f4a7c15)) ^ dev) % ITAB_SIZE;
}

/* ---- credentials ------------------------------------------------------ */

static __thread struct {
	bool set;
	pid_t pid;
	uid_t uid;
	gid_t gid;
} thread_creds;

/* Acts as UID/GID with GROUPS from here on, on this thread only (the raw
 * setgroups syscall is per thread; glibc's would change every thread). */
static int creds_switch(pid_t pid, uid_t uid, gid_t gid, fuse_req_t req)
{
	gid_t groups[256];
	int n = 0;

	if (thread_creds.set && thread_creds.pid == pid && thread_creds.uid == uid &&
	    thread_creds.gid == gid)
		return 0;
	setfsuid(0);
	if (req && uid != 0) {
		n = fuse_req_getgroups(req, (int)(sizeof(groups) / sizeof(groups[0])), groups);
		if (n < 0)
			n = 0; /* the caller is gone or /proc hidden: primary group only */
		if (n > (int)(sizeof(groups) / sizeof(groups[0])))
			n = (int)(sizeof(groups) / sizeof(groups[0]));
	}
	if (syscall(SYS_setgroups, n, groups) == -1)
		return -errno;
	setfsgid(gid);
	setfsuid(uid);
	thread_creds.set = true;
	thread_creds.pid = pid;
	thread_creds.uid = uid;
	thread_creds.gid = gid;
	return 0;
}

/* Acts as the requesting user, when we serve other users as root. */
static int creds_enter(struct tlfs *fs, fuse_req_t req)
{
	const struct fuse_ctx *c;

	if (!fs->switch_creds)
		return 0;
	c = fuse_req_ctx(req);
	return creds_switch(c->pid, c->uid, c->gid, req);
}

/* Back to the daemon's own (root) credentials. */
static void creds_daemon(struct tlfs *fs)
{
	if (fs->switch_creds)
		creds_switch(0, 0, 0, NULL);
}

/* ---- inode table ------------------------------------------------------- */

/* Finds or makes the inode of the open O_PATH FD (stat ST), taking one
 * lookup reference. Takes FD over (closes it when an inode exists). */
static struct ll_inode *inode_ref(int fd, const struct stat *st)
{
	size_t h = ihash(st->st_dev, st->st_ino);
	struct ll_inode *in;

	pthread_mutex_lock(&itab.mutex);
	for (in = itab.buckets[h]; in; in = in->next)
		if (in->ino == st->st_ino && in->dev == st->st_dev)
			break;
	if (in) {
		in->nlookup++;
		pthread_mutex_unlock(&itab.mutex);
		close(fd);
		return in;
	}
	in = calloc(1, sizeof(*in));
	if (!in) {
		pthread_mutex_unlock(&itab.mutex);
		close(fd);
		return NULL;
	}
	in->fd = fd;
	in->dev = st->st_dev;
	in->ino = st->st_ino;
	in->type = st->st_mode & S_IFMT;
	in->nlookup = 1;
	in->next = itab.buckets[h];
	itab.buckets[h] = in;
	pthread_mutex_unlock(&itab.mutex);
	return in;
}

static void inode_unref(struct tlfs *fs, struct ll_inode *in, uint64_t n)
{
	struct ll_inode **pp;
	bool last = false;

	if (in == fs->root || in->ctl)
		return;
	pthread_mutex_lock(&itab.mutex);
	in->nlookup = in->nlookup > n ? in->nlookup - n : 0;
	if (in->nlookup == 0) {
		for (pp = &itab.buckets[ihash(in->dev, in->ino)]; *pp; pp = &(*pp)->next) {
			if (*pp == in) {
				*pp = in->next;
				break;
			}
		}
		last = true;
	}
	pthread_mutex_unlock(&itab.mutex);
	if (last) {
		close(in->fd);
		free(in);
	}
}

static void proc_name(int fd, char buf[64])
{
	snprintf(buf, 64, "/proc/self/fd/%d", fd);
}

/* ---- paths for lock keys ------------------------------------------------ */

/* The key of NAME in directory DIR (or of DIR itself when NAME is NULL):
 * the directory's current path below the backing root, as the kernel
 * resolves its fd. Writes a new string to *OUT. Returns 0, -ENOENT (the
 * directory is gone or outside the backing tree), -ENAMETOOLONG, -ENOMEM. */
static int key_of(struct tlfs *fs, struct ll_inode *dir, const char *name, char **out)
{
	char proc[64], buf[PATH_MAX + 1], *key;
	size_t rootlen = strlen(fs->root_path), len;
	ssize_t n;
	const char *rel;

	*out = NULL;
	if (dir == fs->root) {
		rel = "";
	} else {
		proc_name(dir->fd, proc);
		n = readlink(proc, buf, PATH_MAX);
		if (n < 0 || n >= PATH_MAX)
			return n < 0 ? -ENOENT : -ENAMETOOLONG;
		buf[n] = '\0';
		if (n > 10 && strcmp(buf + n - 10, " (deleted)") == 0)
			return -ENOENT;
		if (strncmp(buf, fs->root_path, rootlen) != 0 ||
		    (buf[rootlen] != '/' && buf[rootlen] != '\0'))
			return -ENOENT; /* moved out of the backing tree */
		rel = buf + rootlen;
	}
	len = strlen(rel) + (name ? strlen(name) + 1 : 0) + 2;
	if (len >= PATH_MAX)
		return -ENAMETOOLONG;
	key = malloc(len);
	if (!key)
		return -ENOMEM;
	if (name)
		snprintf(key, len, "%s/%s", rel, name);
	else
		snprintf(key, len, "%s", *rel ? rel : "/");
	*out = key;
	return 0;
}

/* ---- control entry ------------------------------------------------------ */

struct ctl_buf {
	char *data;
	size_t len;
};

/* Bytes of a valid UTF-8 sequence at S, or 0. */
static size_t utf8_seq_len(const unsigned char *s)
{
	size_t n, i;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0 && s[0] >= 0xc2)
		n = 2;
	else if ((s[0] & 0xf0) == 0xe0)
		n = 3;
	else if ((s[0] & 0xf8) == 0xf0 && s[0] <= 0xf4)
		n = 4;
	else
		return 0;
	for (i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

/* Writes KEY with backslashes, control bytes and invalid UTF-8 escaped, so
 * one lock is one line of valid text. */
static void ctl_put_key(FILE *f, const char *key)
{
	const unsigned char *s = (const unsigned char *)key;

	while (*s) {
		size_t n = utf8_seq_len(s);

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

static int ctl_render(struct tlfs *fs, enum ctl_kind kind, struct ctl_buf **out)
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
		uint64_t req = fs->store->ops->requests ? fs->store->ops->requests(fs->store) : 0;

		fprintf(f, "lock_store %s\nlock_strategy %s\n", fs->store->ops->name,
			lockplan_strategy_name(fs->cfg->lock_strategy));
		stats_format(&fs->mgr.stats, req, buf, sizeof(buf));
		fputs(buf, f);
	} else {
		struct tl_lock_info *v = NULL;
		size_t n = 0, i;
		int err = fs->store->ops->list(fs->store, "/", &v, &n);

		if (err) {
			fprintf(f, "error %s\n", strerror(-err));
		} else {
			fputs("# mode count age_ms waiters holder key\n", f);
			for (i = 0; i < n; i++) {
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

static void ctl_stat(struct tlfs *fs, enum ctl_kind kind, struct stat *st)
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

static bool is_ctl_name(struct tlfs *fs, struct ll_inode *parent, const char *name)
{
	return (parent == fs->root && strcmp(name, TLFS_CTL_NAME) == 0) || parent->ctl;
}

/* ---- locking around operations ----------------------------------------- */

struct op_lock {
	struct tl_plan *plan;
	struct tl_holder holder;
};

/* Takes the entry plan of NAME in PARENT when lock_scope=namespace. */
static int entry_lock(struct tlfs *fs, fuse_req_t req, struct ll_inode *parent, const char *name,
		      struct op_lock *l)
{
	char *key;
	int err;

	l->plan = NULL;
	if (fs->cfg->lock_scope != TL_SCOPE_NAMESPACE || fs->cfg->lock_strategy == TL_STRATEGY_NONE)
		return 0;
	creds_daemon(fs);
	err = key_of(fs, parent, name, &key);
	if (err)
		return err;
	err = lockplan_entry(fs->cfg->lock_strategy, key, &l->plan);
	free(key);
	if (err)
		return err == -EINVAL ? -ENAMETOOLONG : err;
	err = lockmgr_acquire(&fs->mgr, l->plan, (uint32_t)fuse_req_ctx(req)->pid, &l->holder);
	if (err) {
		lockplan_free(l->plan);
		l->plan = NULL;
	}
	return err;
}

static void entry_unlock(struct tlfs *fs, struct op_lock *l)
{
	if (!l->plan)
		return;
	creds_daemon(fs);
	lockmgr_release(&fs->mgr, l->plan, &l->holder);
	lockplan_free(l->plan);
	l->plan = NULL;
}

/* ---- replies -------------------------------------------------------------- */

/* Looks NAME up in PARENT (as the caller's credentials allow) and fills E
 * with a new lookup reference. Returns 0 or -errno. */
/* Returns ERR; the first EMFILE/ENFILE of the daemon's life is also logged,
 * once: every inode the kernel remembers holds an fd, so running out is a
 * limit to raise (LimitNOFILE=, ulimit -n), not a failure of one request. */
static int fd_error(int err)
{
	static bool warned;

	if ((err == -EMFILE || err == -ENFILE) &&
	    !__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
		tl_log(LOG_WARNING,
		       "out of file descriptors (%s): raise the hard open-file limit "
		       "(LimitNOFILE=, ulimit -Hn); until then such requests fail with it",
		       strerror(-err));
	return err;
}

static int do_lookup(struct tlfs *fs, struct ll_inode *parent, const char *name,
		     struct fuse_entry_param *e)
{
	struct ll_inode *in;
	int fd;

	memset(e, 0, sizeof(*e));
	e->attr_timeout = fs->cfg->attr_timeout;
	e->entry_timeout = fs->cfg->entry_timeout;
	if (parent == fs->root && strcmp(name, TLFS_CTL_NAME) == 0) {
		ctl_stat(fs, CTL_DIR, &e->attr);
		e->ino = (fuse_ino_t)(uintptr_t)&ctl_inodes[CTL_DIR];
		return 0;
	}
	if (parent->ctl) {
		enum ctl_kind k = strcmp(name, "stats") == 0	? CTL_STATS
				  : strcmp(name, "locks") == 0 ? CTL_LOCKS
							       : CTL_NONE;

		if (parent->ctl != CTL_DIR || k == CTL_NONE)
			return -ENOENT;
		ctl_stat(fs, k, &e->attr);
		e->ino = (fuse_ino_t)(uintptr_t)&ctl_inodes[k];
		e->attr_timeout = e->entry_timeout = 0;
		return 0;
	}
	fd = openat(parent->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1)
		return fd_error(-errno);
	if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1) {
		int err = -errno;

		close(fd);
		return err;
	}
	in = inode_ref(fd, &e->attr);
	if (!in)
		return -ENOMEM;
	e->ino = ino_id(fs, in);
	return 0;
}

static void reply_entry_or_err(struct tlfs *fs, fuse_req_t req, int err,
			       struct fuse_entry_param *e)
{
	if (err == -ENOENT && fs->cfg->negative_timeout > 0) {
		memset(e, 0, sizeof(*e));
		e->entry_timeout = fs->cfg->negative_timeout;
		fuse_reply_entry(req, e);
	} else if (err) {
		fuse_reply_err(req, -err);
	} else {
		fuse_reply_entry(req, e);
	}
}

/* ---- operations ------------------------------------------------------------ */

static void ll_init(void *userdata, struct fuse_conn_info *conn)
{
	struct tlfs *fs = userdata;
	int err;

	/* splice halves the copies of large reads and writes (measured:
	 * sequential 1 MiB reads about twice as fast with it) */
	conn->want |= conn->capable & (FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
				       FUSE_CAP_SPLICE_MOVE | FUSE_CAP_PARALLEL_DIROPS);
	if (fs->store->ops->start) {
		err = fs->store->ops->start(fs->store);
		if (err)
			tl_log(LOG_ERR, "cannot start the %s lock store: %s", fs->store->ops->name,
			       strerror(-err));
	}
	tl_log(LOG_INFO, "mounted with lock_store=%s lock_strategy=%s lock_scope=%s",
	       fs->store->ops->name, lockplan_strategy_name(fs->cfg->lock_strategy),
	       fs->cfg->lock_scope == TL_SCOPE_NAMESPACE ? "namespace" : "rename");
}

static void ll_destroy(void *userdata)
{
	struct tlfs *fs = userdata;

	tl_log(LOG_INFO, "unmounting: %" PRIu64 " renames, %" PRIu64 " conflicts, %" PRIu64
			 " timeouts",
	       stats_get(&fs->mgr.stats.renames), stats_get(&fs->mgr.stats.conflicts),
	       stats_get(&fs->mgr.stats.timeouts));
}

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct tlfs *fs = req_fs(req);
	struct fuse_entry_param e;
	int err = creds_enter(fs, req);

	if (!err)
		err = do_lookup(fs, ino_get(fs, parent), name, &e);
	reply_entry_or_err(fs, req, err, &e);
}

static void ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct tlfs *fs = req_fs(req);

	inode_unref(fs, ino_get(fs, ino), nlookup);
	fuse_reply_none(req);
}

static void ll_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct tlfs *fs = req_fs(req);
	size_t i;

	for (i = 0; i < count; i++)
		inode_unref(fs, ino_get(fs, forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

static void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = ino_get(fs, ino);
	struct stat st;
	int res;

	if (in->ctl) {
		ctl_stat(fs, in->ctl, &st);
		fuse_reply_attr(req, &st, 0);
		return;
	}
	res = fstatat(in->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	if (res == -1) {
		fuse_reply_err(req, errno);
		return;
	}
	fuse_reply_attr(req, &st, fs->cfg->attr_timeout);
}

/* True when MODE only clears set-user-ID / set-group-ID bits of IN. The
 * kernel asks for exactly that, in the name of a writer that does not own
 * the file, before a write or truncate; it has checked the write
 * permission itself. */
static bool chmod_kills_priv_only(struct ll_inode *in, mode_t mode)
{
	mode_t old, priv = S_ISUID | S_ISGID;
	struct stat st;

	if (fstatat(in->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1 ||
	    !S_ISREG(st.st_mode))
		return false;
	old = st.st_mode & 07777;
	mode &= 07777;
	return (old & ~priv) == (mode & ~priv) && (mode & priv & ~old) == 0 && mode != old;
}

static void ll_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
		       struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = ino_get(fs, ino);
	int fd = fi && !(fi->fh & (CTL_TAG | DIR_TAG)) ? (int)fi->fh : -1;
	char proc[64];
	int res;

	if (in->ctl) {
		fuse_reply_err(req, EPERM);
		return;
	}
	proc_name(in->fd, proc);
	res = creds_enter(fs, req);
	if (res)
		goto out;
	if (valid & FUSE_SET_ATTR_MODE) {
		for (;;) {
			res = fd >= 0 ? fchmod(fd, attr->st_mode) : chmod(proc, attr->st_mode);
			res = res == -1 ? -errno : 0;
			if (res != -EPERM || !fs->switch_creds || thread_creds.uid == 0 ||
			    !chmod_kills_priv_only(in, attr->st_mode))
				break;
			creds_daemon(fs);
		}
		if (res)
			goto out;
	}
	if (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		uid_t uid = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
		gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;

		res = fchownat(in->fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
		res = res == -1 ? -errno : 0;
		if (res)
			goto out;
	}
	if (valid & FUSE_SET_ATTR_SIZE) {
		res = fd >= 0 ? ftruncate(fd, attr->st_size) : truncate(proc, attr->st_size);
		res = res == -1 ? -errno : 0;
		if (res)
			goto out;
	}
	if (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
		struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_nsec = UTIME_OMIT}};

		if (valid & FUSE_SET_ATTR_ATIME_NOW)
			ts[0].tv_nsec = UTIME_NOW;
		else if (valid & FUSE_SET_ATTR_ATIME)
			ts[0] = attr->st_atim;
		if (valid & FUSE_SET_ATTR_MTIME_NOW)
			ts[1].tv_nsec = UTIME_NOW;
		else if (valid & FUSE_SET_ATTR_MTIME)
			ts[1] = attr->st_mtim;
		if (fd >= 0)
			res = futimens(fd, ts);
		else if (S_ISLNK(in->type))
			res = utimensat(in->fd, "", ts, AT_EMPTY_PATH);
		else
			res = utimensat(AT_FDCWD, proc, ts, 0);
		res = res == -1 ? -errno : 0;
		if (res)
			goto out;
	}
out:
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	ll_getattr(req, ino, fi);
}

static void ll_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = ino_get(fs, ino);
	char buf[PATH_MAX + 1];
	ssize_t n;
	int err = creds_enter(fs, req);

	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	n = readlinkat(in->fd, "", buf, sizeof(buf) - 1);
	if (n == -1) {
		fuse_reply_err(req, errno);
		return;
	}
	buf[n] = '\0';
	fuse_reply_readlink(req, buf);
}

/* ---- creating and removing names ------------------------------------------ */

enum ns_op { NS_MKNOD, NS_MKDIR, NS_SYMLINK, NS_LINK, NS_UNLINK, NS_RMDIR };

struct ns_req {
	enum ns_op op;
	struct ll_inode *parent;
	const char *name;
	mode_t mode;
	dev_t rdev;
	const char *target;        /* symlink */
	struct ll_inode *src;      /* link */
};

static int ns_syscall(struct tlfs *fs, const struct ns_req *r)
{
	char proc[64];
	int res;

	switch (r->op) {
	case NS_MKNOD:
		res = S_ISFIFO(r->mode) ? mkfifoat(r->parent->fd, r->name, r->mode)
					: mknodat(r->parent->fd, r->name, r->mode, r->rdev);
		break;
	case NS_MKDIR:
		res = mkdirat(r->parent->fd, r->name, r->mode);
		break;
	case NS_SYMLINK:
		res = symlinkat(r->target, r->parent->fd, r->name);
		break;
	case NS_LINK:
		proc_name(r->src->fd, proc);
		res = linkat(AT_FDCWD, proc, r->parent->fd, r->name, AT_SYMLINK_FOLLOW);
		break;
	case NS_UNLINK:
		res = unlinkat(r->parent->fd, r->name, 0);
		break;
	case NS_RMDIR:
		res = unlinkat(r->parent->fd, r->name, AT_REMOVEDIR);
		break;
	default:
		errno = EINVAL;
		res = -1;
	}
	return res == -1 ? -errno : 0;
}

/* Runs a namespace operation: refuses the control names, takes the entry
 * plan (lock_scope=namespace), acts as the caller, replies (an entry for
 * the creating ones). */
static void ns_run(fuse_req_t req, struct ns_req *r)
{
	struct tlfs *fs = req_fs(req);
	struct fuse_entry_param e;
	struct op_lock l;
	bool creates = r->op != NS_UNLINK && r->op != NS_RMDIR;
	int res;

	if (is_ctl_name(fs, r->parent, r->name)) {
		fuse_reply_err(req, creates ? EEXIST : EPERM);
		return;
	}
	if (r->src && r->src->ctl) {
		fuse_reply_err(req, EPERM);
		return;
	}
	res = entry_lock(fs, req, r->parent, r->name, &l);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	res = creds_enter(fs, req);
	if (!res)
		res = ns_syscall(fs, r);
	if (!res && creates)
		res = do_lookup(fs, r->parent, r->name, &e);
	entry_unlock(fs, &l);
	if (res)
		fuse_reply_err(req, -res);
	else if (creates)
		fuse_reply_entry(req, &e);
	else
		fuse_reply_err(req, 0);
}

static void ll_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	struct ns_req r = {.op = NS_MKNOD, .parent = ino_get(req_fs(req), parent), .name = name,
			   .mode = mode, .rdev = rdev};

	ns_run(req, &r);
}

static void ll_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct ns_req r = {.op = NS_MKDIR, .parent = ino_get(req_fs(req), parent), .name = name,
			   .mode = mode};

	ns_run(req, &r);
}

static void ll_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_SYMLINK, .parent = ino_get(req_fs(req), parent), .name = name,
			   .target = link};

	ns_run(req, &r);
}

static void ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_LINK, .parent = ino_get(req_fs(req), parent), .name = name,
			   .src = ino_get(req_fs(req), ino)};

	ns_run(req, &r);
}

static void ll_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_UNLINK, .parent = ino_get(req_fs(req), parent), .name = name};

	ns_run(req, &r);
}

static void ll_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ns_req r = {.op = NS_RMDIR, .parent = ino_get(req_fs(req), parent), .name = name};

	ns_run(req, &r);
}

/* ---- rename ------------------------------------------------------------------ */

struct key_list {
	char **v;
	size_t n, cap;
};

static int key_list_add(struct key_list *l, char *key)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		char **v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = key;
	return 0;
}

static void key_list_free(struct key_list *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

/* Collects the key of every entry below the directory KEY (document
 * strategy), breadth first without recursion. A non-directory has none. */
static int walk_below(struct tlfs *fs, const char *key, struct key_list *out)
{
	size_t next = 0;
	int err;
	char *first = strdup(key);

	if (!first)
		return -ENOMEM;
	err = key_list_add(out, first); /* the queue is OUT; the start goes at the end */
	if (err) {
		free(first);
		return err;
	}
	while (!err && next < out->n) {
		const char *dirkey = out->v[next++];
		struct dirent *d;
		DIR *dp;
		int fd;

		fd = openat(fs->backing_fd, path_rel(dirkey),
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd == -1)
			continue;
		dp = fdopendir(fd);
		if (!dp) {
			close(fd);
			continue;
		}
		while ((d = readdir(dp)) != NULL) {
			char *child;

			if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
				continue;
			if (asprintf(&child, "%s/%s", dirkey, d->d_name) < 0) {
				err = -ENOMEM;
				break;
			}
			err = key_list_add(out, child);
			if (err) {
				free(child);
				break;
			}
		}
		closedir(dp);
	}
	free(out->v[0]);
	memmove(out->v, out->v + 1, (out->n - 1) * sizeof(out->v[0]));
	out->n--;
	return err;
}

/* True when NAME in DIR still has the key KEY: no rename (here or on
 * another host) moved one of its directories since KEY was computed. */
static bool key_still(struct tlfs *fs, struct ll_inode *dir, const char *name, const char *key)
{
	char *now = NULL;
	bool same = key_of(fs, dir, name, &now) == 0 && strcmp(now, key) == 0;

	free(now);
	return same;
}

static void ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *p1 = ino_get(fs, parent), *p2 = ino_get(fs, newparent);
	struct key_list below = {0};
	struct tl_plan *plan = NULL;
	struct tl_holder holder;
	char *from = NULL, *to = NULL;
	int64_t t0 = tl_log_level >= LOG_DEBUG ? tl_mono_ms() : 0; /* for the debug line only */
	uint64_t gen = __atomic_load_n(&fs->rename_gen, __ATOMIC_ACQUIRE);
	int res;

	if ((flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) ||
	    ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (is_ctl_name(fs, p1, name) || is_ctl_name(fs, p2, newname)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	creds_daemon(fs);
	if (fs->cfg->lock_strategy == TL_STRATEGY_NONE) {
		/* no locks, no keys: the baseline the others are measured by */
		res = creds_enter(fs, req);
		if (!res && syscall(SYS_renameat2, p1->fd, name, p2->fd, newname, flags) == -1)
			res = -errno;
		stats_add(&fs->mgr.stats.renames, 1);
		fuse_reply_err(req, -res);
		return;
	}
	res = key_of(fs, p1, name, &from);
	if (!res)
		res = key_of(fs, p2, newname, &to);
	if (res)
		goto out_free_keys;
	if (fs->cfg->lock_strategy == TL_STRATEGY_DOCUMENT) {
		res = walk_below(fs, from, &below);
		if (res)
			goto out_free_keys;
	}
	res = lockplan_rename(fs->cfg->lock_strategy, from, to, flags,
			      (const char *const *)below.v, below.n, &plan);
	if (res) {
		if (res == -EINVAL)
			res = -ENAMETOOLONG; /* a key of PATH_MAX bytes or more */
		goto out_free_keys;
	}
	res = lockmgr_acquire(&fs->mgr, plan, (uint32_t)fuse_req_ctx(req)->pid, &holder);
	if (res)
		goto out_free_plan;
	if (fs->cfg->rename_delay_ms) {
		struct timespec ts = {.tv_sec = fs->cfg->rename_delay_ms / 1000,
				      .tv_nsec = (long)(fs->cfg->rename_delay_ms % 1000) * 1000000};

		nanosleep(&ts, NULL);
	}
	if (!lockmgr_lease_fresh(&fs->mgr)) {
		stats_add(&fs->mgr.stats.fenced, 1);
		tl_log(LOG_ERR, "rename '%s' -> '%s' refused: this mount's lease is no longer fresh",
		       from, to);
		res = -ENOLCK;
		goto out_release_locks;
	}
	/* The locks are on the paths the names had when we asked. If a rename
	 * we waited for moved one of them, the path the caller named is gone:
	 * that is the guide's ENOENT, and renaming by the directory fds now
	 * would act on a path nobody locked. With the mem store only renames
	 * through this mount can have moved them, and none completed since
	 * the keys were computed when the generation is unchanged. */
	if ((fs->cfg->lock_store != TL_STORE_MEM ||
	     __atomic_load_n(&fs->rename_gen, __ATOMIC_ACQUIRE) != gen) &&
	    (!key_still(fs, p1, name, from) || !key_still(fs, p2, newname, to))) {
		tl_log(LOG_INFO, "rename '%s' -> '%s': moved while it waited", from, to);
		res = -ENOENT;
		goto out_release_locks;
	}
	res = creds_enter(fs, req);
	if (res)
		goto out_release_locks;
	/* by the directories' fds: a directory moved by another host since the
	 * kernel resolved the names is still the one the kernel meant */
	res = (int)syscall(SYS_renameat2, p1->fd, name, p2->fd, newname, flags);
	res = res == -1 ? -errno : 0;
	if (!res)
		__atomic_add_fetch(&fs->rename_gen, 1, __ATOMIC_RELEASE);

out_release_locks:
	creds_daemon(fs);
	lockmgr_release(&fs->mgr, plan, &holder);
	tl_log(LOG_DEBUG, "rename '%s' -> '%s': %zu locks in %" PRId64 " ms: %s", from, to, plan->n,
	       tl_mono_ms() - t0, res ? strerror(-res) : "ok");
out_free_plan:
	lockplan_free(plan);
out_free_keys:
	key_list_free(&below);
	free(from);
	free(to);
	fuse_reply_err(req, -res);
}

/* ---- files ------------------------------------------------------------------------ */

static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = ino_get(fs, ino);
	char proc[64];
	int fd, res;

	if (in->ctl) {
		struct ctl_buf *b;

		if (in->ctl == CTL_DIR) {
			fuse_reply_err(req, EISDIR);
			return;
		}
		if ((fi->flags & O_ACCMODE) != O_RDONLY) {
			fuse_reply_err(req, EACCES);
			return;
		}
		creds_daemon(fs);
		res = ctl_render(fs, in->ctl, &b);
		if (res) {
			fuse_reply_err(req, -res);
			return;
		}
		fi->fh = (uint64_t)(uintptr_t)b | CTL_TAG;
		fi->direct_io = 1;
		fuse_reply_open(req, fi);
		return;
	}
	res = creds_enter(fs, req);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	proc_name(in->fd, proc);
	fd = open(proc, (fi->flags | O_CLOEXEC) & ~O_NOFOLLOW);
	if (fd == -1) {
		fuse_reply_err(req, -fd_error(-errno));
		return;
	}
	fi->fh = (uint64_t)fd;
	fuse_reply_open(req, fi);
}

static void ll_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *p = ino_get(fs, parent);
	struct fuse_entry_param e;
	struct op_lock l;
	int fd = -1, res;

	if (is_ctl_name(fs, p, name)) {
		fuse_reply_err(req, EEXIST);
		return;
	}
	res = entry_lock(fs, req, p, name, &l);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	res = creds_enter(fs, req);
	if (!res) {
		fd = openat(p->fd, name, (fi->flags | O_CREAT | O_CLOEXEC) & ~O_NOFOLLOW, mode);
		res = fd == -1 ? fd_error(-errno) : 0;
	}
	if (!res)
		res = do_lookup(fs, p, name, &e);
	entry_unlock(fs, &l);
	if (res) {
		if (fd >= 0)
			close(fd);
		fuse_reply_err(req, -res);
		return;
	}
	fi->fh = (uint64_t)fd;
	fuse_reply_create(req, &e, fi);
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);

	if (fi->fh & CTL_TAG) {
		struct ctl_buf *b = (struct ctl_buf *)(uintptr_t)(fi->fh & ~CTL_TAG);
		size_t n = 0;

		if ((size_t)off < b->len)
			n = b->len - (size_t)off < size ? b->len - (size_t)off : size;
		fuse_reply_buf(req, n ? b->data + off : NULL, n);
		return;
	}
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = (int)fi->fh;
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static void ll_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in_buf, off_t off,
			 struct fuse_file_info *fi)
{
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in_buf));
	ssize_t res;

	if (fi->fh & CTL_TAG) {
		fuse_reply_err(req, EBADF);
		return;
	}
	/* as the daemon: the kernel checked permissions when the file was
	 * opened, and killing set-user-ID bits is its business */
	creds_daemon(req_fs(req));
	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	out.buf[0].fd = (int)fi->fh;
	out.buf[0].pos = off;
	res = fuse_buf_copy(&out, in_buf, 0);
	if (res < 0)
		fuse_reply_err(req, (int)-res);
	else
		fuse_reply_write(req, (size_t)res);
}

/* ---- POSIX record locks ------------------------------------------------- */

/* A POSIX lock belongs to a process (the kernel's lock owner) and covers
 * all its open files of an inode; closing any of them drops them all, and
 * a child closing an inherited fd drops only the child's. They are
 * forwarded as open file description locks on the backing file (so that
 * other hosts and local processes see them), on one description per
 * (inode, owner): an fd the daemon opens for that owner and closes when the
 * owner flushes the file, which releases exactly that owner's locks. */
struct lk_owner {
	struct lk_owner *next;
	dev_t dev;
	ino_t ino;
	uint64_t owner;
	int fd;
	unsigned int refs;       /* the table's, plus one per user */
};

static struct {
	pthread_mutex_t mutex;
	struct lk_owner *list;   /* protected by mutex */
} lk_tab = {.mutex = PTHREAD_MUTEX_INITIALIZER};

static void lk_put(struct lk_owner *o)
{
	bool last;

	if (!o)
		return;
	pthread_mutex_lock(&lk_tab.mutex);
	last = --o->refs == 0;
	pthread_mutex_unlock(&lk_tab.mutex);
	if (last) {
		close(o->fd);
		free(o);
	}
}

static struct lk_owner *lk_find_locked(dev_t dev, ino_t ino, uint64_t owner)
{
	struct lk_owner *o;

	for (o = lk_tab.list; o; o = o->next)
		if (o->owner == owner && o->ino == ino && o->dev == dev)
			return o;
	return NULL;
}

/* The description of OWNER's locks on the file open as FD, with a
 * reference; created when CREATE. Returns 0, -ENOENT (none and not
 * CREATE) or -errno. */
static int lk_get(int fd, uint64_t owner, bool create, struct lk_owner **out)
{
	struct lk_owner *o, *found;
	struct stat st;
	char proc[64];
	int ofd;

	if (fstat(fd, &st) == -1)
		return -errno;
	pthread_mutex_lock(&lk_tab.mutex);
	o = lk_find_locked(st.st_dev, st.st_ino, owner);
	if (o)
		o->refs++;
	pthread_mutex_unlock(&lk_tab.mutex);
	if (o || !create) {
		*out = o;
		return o ? 0 : -ENOENT;
	}
	/* read-write whatever FD allows: the kernel has checked the mode of
	 * the caller's own file against the lock type already */
	proc_name(fd, proc);
	ofd = open(proc, O_RDWR | O_CLOEXEC | O_NOCTTY);
	if (ofd == -1)
		ofd = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (ofd == -1)
		ofd = open(proc, O_WRONLY | O_CLOEXEC | O_NOCTTY);
	if (ofd == -1)
		return -errno;
	o = calloc(1, sizeof(*o));
	if (!o) {
		close(ofd);
		return -ENOMEM;
	}
	o->dev = st.st_dev;
	o->ino = st.st_ino;
	o->owner = owner;
	o->fd = ofd;
	o->refs = 2;
	pthread_mutex_lock(&lk_tab.mutex);
	found = lk_find_locked(st.st_dev, st.st_ino, owner);
	if (found) {
		found->refs++;
	} else {
		o->next = lk_tab.list;
		lk_tab.list = o;
	}
	pthread_mutex_unlock(&lk_tab.mutex);
	if (found) {
		close(ofd);
		free(o);
		o = found;
	}
	*out = o;
	return 0;
}

/* Drops every lock OWNER holds on the file open as FD (its close). */
static void lk_drop_owner(int fd, uint64_t owner)
{
	struct lk_owner **pp, *o = NULL;
	struct stat st;

	if (!__atomic_load_n(&lk_tab.list, __ATOMIC_ACQUIRE) || fstat(fd, &st) == -1)
		return;
	pthread_mutex_lock(&lk_tab.mutex);
	for (pp = &lk_tab.list; *pp; pp = &(*pp)->next) {
		if ((*pp)->owner == owner && (*pp)->ino == st.st_ino && (*pp)->dev == st.st_dev) {
			o = *pp;
			*pp = o->next;
			break;
		}
	}
	pthread_mutex_unlock(&lk_tab.mutex);
	lk_put(o);
}

static int posix_lock(struct tlfs *fs, struct fuse_file_info *fi, int cmd, struct flock *lk)
{
	struct lk_owner *o = NULL;
	int ofd_cmd, fd, res;

	if (fi->fh & (CTL_TAG | DIR_TAG))
		return -EBADF;
	ofd_cmd = cmd == F_GETLK ? F_OFD_GETLK : cmd == F_SETLK ? F_OFD_SETLK : F_OFD_SETLKW;
	/* an owner without a description holds nothing: test against all
	 * (the caller's own fd holds no lock), and unlocking is a no-op */
	creds_daemon(fs);
	res = lk_get((int)fi->fh, fi->lock_owner, cmd != F_GETLK && lk->l_type != F_UNLCK, &o);
	if (res == -ENOENT)
		res = 0;
	if (res)
		return res;
	if (!o && cmd != F_GETLK)
		return 0;
	fd = o ? o->fd : (int)fi->fh;
	lk->l_pid = 0;
	res = fcntl(fd, ofd_cmd, lk) == -1 ? -errno : 0;
	if (!res && cmd == F_GETLK && lk->l_type != F_UNLCK)
		lk->l_pid = -1; /* the holder may be on another host */
	lk_put(o);
	return res;
}

static void ll_getlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock)
{
	int res = posix_lock(req_fs(req), fi, F_GETLK, lock);

	if (res)
		fuse_reply_err(req, -res);
	else
		fuse_reply_lock(req, lock);
}

static void ll_setlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock,
		     int sleep)
{
	fuse_reply_err(req, -posix_lock(req_fs(req), fi, sleep ? F_SETLKW : F_SETLK, lock));
}

static void ll_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op)
{
	if (fi->fh & (CTL_TAG | DIR_TAG)) {
		fuse_reply_err(req, EBADF);
		return;
	}
	fuse_reply_err(req, flock((int)fi->fh, op) == -1 ? errno : 0);
}

static void ll_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int fd;

	if (fi->fh & CTL_TAG) {
		fuse_reply_err(req, 0);
		return;
	}
	lk_drop_owner((int)fi->fh, fi->lock_owner);
	/* close a duplicate so that close-time semantics of the backing
	 * filesystem (NFS write-back) happen now */
	fd = dup((int)fi->fh);
	if (fd == -1) {
		fuse_reply_err(req, errno);
		return;
	}
	fuse_reply_err(req, close(fd) == -1 ? errno : 0);
}

static void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (fi->fh & CTL_TAG) {
		struct ctl_buf *b = (struct ctl_buf *)(uintptr_t)(fi->fh & ~CTL_TAG);

		free(b->data);
		free(b);
	} else {
		if (fi->flock_release)
			flock((int)fi->fh, LOCK_UN);
		close((int)fi->fh);
	}
	fuse_reply_err(req, 0);
}

static void ll_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	int res;

	if (fi->fh & CTL_TAG) {
		fuse_reply_err(req, 0);
		return;
	}
	res = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);
	fuse_reply_err(req, res == -1 ? errno : 0);
}

static void ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	if (fi->fh & CTL_TAG) {
		fuse_reply_err(req, EBADF);
		return;
	}
	creds_daemon(req_fs(req));
	fuse_reply_err(req, fallocate((int)fi->fh, mode, off, len) == -1 ? errno : 0);
}

static void ll_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			       struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
			       struct fuse_file_info *fi_out, size_t len, int flags)
{
	ssize_t res;

	if ((fi_in->fh & CTL_TAG) || (fi_out->fh & CTL_TAG)) {
		fuse_reply_err(req, EXDEV); /* the kernel falls back to read and write */
		return;
	}
	creds_daemon(req_fs(req));
	res = copy_file_range((int)fi_in->fh, &off_in, (int)fi_out->fh, &off_out, len,
			      (unsigned)flags);
	if (res == -1)
		fuse_reply_err(req, errno);
	else
		fuse_reply_write(req, (size_t)res);
}

static void ll_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		     struct fuse_file_info *fi)
{
	off_t res;

	if (fi->fh & CTL_TAG) {
		fuse_reply_err(req, ESPIPE);
		return;
	}
	res = lseek((int)fi->fh, off, whence);
	if (res == -1)
		fuse_reply_err(req, errno);
	else
		fuse_reply_lseek(req, res);
}

/* ---- directories --------------------------------------------------------------- */

struct ll_dir {
	DIR *dp;
	struct dirent *entry;
	off_t offset;
	bool root;
	bool ctl;
};

static struct ll_dir *dir_of(struct fuse_file_info *fi)
{
	return (struct ll_dir *)(uintptr_t)(fi->fh & ~DIR_TAG);
}

static void ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = ino_get(fs, ino);
	struct ll_dir *d;
	int fd, err;

	if (in->ctl && in->ctl != CTL_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (in->ctl) {
		d->ctl = true;
		goto out_reply;
	}
	err = creds_enter(fs, req);
	if (err)
		goto out_free;
	/* through /proc, not openat(fd, "."): that would also need search
	 * permission on the directory itself, which open(2) does not */
	{
		char proc[64];

		proc_name(in->fd, proc);
		fd = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (fd == -1) {
		err = fd_error(-errno);
		goto out_free;
	}
	d->dp = fdopendir(fd);
	if (!d->dp) {
		err = -errno;
		close(fd);
		goto out_free;
	}
	d->root = in == fs->root;
out_reply:
	fi->fh = (uint64_t)(uintptr_t)d | DIR_TAG;
	fuse_reply_open(req, fi);
	return;

out_free:
	free(d);
	fuse_reply_err(req, -err);
}

static void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
		       struct fuse_file_info *fi)
{
	struct ll_dir *d = dir_of(fi);
	char *buf = calloc(1, size ? size : 1), *p = buf;
	size_t rem = size;
	int err = 0;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (d->ctl) {
		static const char *const names[] = {".", "..", "stats", "locks"};
		off_t i;

		for (i = offset; i < 4; i++) {
			struct stat st;

			ctl_stat(NULL, i < 2 ? CTL_DIR : i == 2 ? CTL_STATS : CTL_LOCKS, &st);
			size_t n = fuse_add_direntry(req, p, rem, names[i], &st, i + 1);

			if (n > rem)
				break;
			p += n;
			rem -= n;
		}
		goto out_reply;
	}
	if (offset != d->offset) {
		seekdir(d->dp, offset);
		d->entry = NULL;
		d->offset = offset;
	}
	for (;;) {
		struct stat st;
		off_t next;
		size_t n;

		if (!d->entry) {
			errno = 0;
			d->entry = readdir(d->dp);
			if (!d->entry) {
				if (errno && p == buf)
					err = errno;
				break;
			}
		}
		next = telldir(d->dp);
		if (d->root && strcmp(d->entry->d_name, TLFS_CTL_NAME) == 0) {
			d->entry = NULL;
			d->offset = next;
			continue;
		}
		memset(&st, 0, sizeof(st));
		st.st_ino = d->entry->d_ino;
		st.st_mode = (mode_t)DTTOIF(d->entry->d_type);
		n = fuse_add_direntry(req, p, rem, d->entry->d_name, &st, next);
		if (n > rem)
			break;
		p += n;
		rem -= n;
		d->entry = NULL;
		d->offset = next;
	}
out_reply:
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

static void ll_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ll_dir *d = dir_of(fi);

	if (d->dp)
		closedir(d->dp);
	free(d);
	fuse_reply_err(req, 0);
}

static void ll_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct ll_dir *d = dir_of(fi);
	int res;

	if (d->ctl) {
		fuse_reply_err(req, 0);
		return;
	}
	res = datasync ? fdatasync(dirfd(d->dp)) : fsync(dirfd(d->dp));
	fuse_reply_err(req, res == -1 ? errno : 0);
}

static void ll_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct tlfs *fs = req_fs(req);
	struct statvfs st;

	if (fstatvfs(fs->backing_fd, &st) == -1)
		fuse_reply_err(req, errno);
	else
		fuse_reply_statfs(req, &st);
}

static void ll_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	struct tlfs *fs = req_fs(req);
	struct ll_inode *in = ino_get(fs, ino);
	char proc[64];
	int res;

	if (in->ctl) {
		fuse_reply_err(req, (mask & W_OK) ? EACCES : 0);
		return;
	}
	res = creds_enter(fs, req);
	if (res) {
		fuse_reply_err(req, -res);
		return;
	}
	proc_name(in->fd, proc);
	res = faccessat(AT_FDCWD, proc, mask, AT_EACCESS);
	fuse_reply_err(req, res == -1 ? errno : 0);
}

/* ---- extended attributes ------------------------------------------------ */

/* Names IN through /proc for the *xattr calls, which follow the magic link
 * to the file itself; symlinks and special files have no user xattrs. */
static int xattr_target(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, char proc[64])
{
	int err;

	if (in->ctl)
		return -ENOTSUP;
	if (!S_ISREG(in->type) && !S_ISDIR(in->type))
		return -EPERM;
	err = creds_enter(fs, req);
	if (err)
		return err;
	proc_name(in->fd, proc);
	return 0;
}

static void ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	struct tlfs *fs = req_fs(req);
	char proc[64];
	int res = xattr_target(fs, req, ino_get(fs, ino), proc);

	if (!res)
		res = setxattr(proc, name, value, size, flags) == -1 ? -errno : 0;
	fuse_reply_err(req, -res);
}

static void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct tlfs *fs = req_fs(req);
	char proc[64], *buf = NULL;
	ssize_t n;
	int res = xattr_target(fs, req, ino_get(fs, ino), proc);

	if (res) {
		fuse_reply_err(req, res == -ENOTSUP ? ENODATA : -res);
		return;
	}
	if (size) {
		buf = malloc(size);
		if (!buf) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
	}
	n = getxattr(proc, name, buf, size);
	if (n == -1)
		fuse_reply_err(req, errno);
	else if (size)
		fuse_reply_buf(req, buf, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(buf);
}

static void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct tlfs *fs = req_fs(req);
	char proc[64], *buf = NULL;
	ssize_t n;
	int res = xattr_target(fs, req, ino_get(fs, ino), proc);

	if (res) {
		if (res == -ENOTSUP || res == -EPERM)
			size ? fuse_reply_buf(req, NULL, 0) : fuse_reply_xattr(req, 0);
		else
			fuse_reply_err(req, -res);
		return;
	}
	if (size) {
		buf = malloc(size);
		if (!buf) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
	}
	n = listxattr(proc, buf, size);
	if (n == -1)
		fuse_reply_err(req, errno);
	else if (size)
		fuse_reply_buf(req, buf, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(buf);
}

static void ll_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct tlfs *fs = req_fs(req);
	char proc[64];
	int res = xattr_target(fs, req, ino_get(fs, ino), proc);

	if (!res)
		res = removexattr(proc, name) == -1 ? -errno : 0;
	fuse_reply_err(req, -res);
}

const struct fuse_lowlevel_ops tlfs_ll_ops = {
	.init = ll_init,
	.destroy = ll_destroy,
	.lookup = ll_lookup,
	.forget = ll_forget,
	.forget_multi = ll_forget_multi,
	.getattr = ll_getattr,
	.setattr = ll_setattr,
	.readlink = ll_readlink,
	.mknod = ll_mknod,
	.mkdir = ll_mkdir,
	.symlink = ll_symlink,
	.link = ll_link,
	.unlink = ll_unlink,
	.rmdir = ll_rmdir,
	.rename = ll_rename,
	.open = ll_open,
	.create = ll_create,
	.read = ll_read,
	.write_buf = ll_write_buf,
	.flush = ll_flush,
	.release = ll_release,
	.fsync = ll_fsync,
	.opendir = ll_opendir,
	.readdir = ll_readdir,
	.releasedir = ll_releasedir,
	.fsyncdir = ll_fsyncdir,
	.statfs = ll_statfs,
	.access = ll_access,
	.setxattr = ll_setxattr,
	.getxattr = ll_getxattr,
	.listxattr = ll_listxattr,
	.removexattr = ll_removexattr,
	.getlk = ll_getlk,
	.setlk = ll_setlk,
	.flock = ll_flock,
	.fallocate = ll_fallocate,
	.copy_file_range = ll_copy_file_range,
	.lseek = ll_lseek,
};

int tlfs_ll_prepare(struct tlfs *fs)
{
	char proc[64], buf[PATH_MAX + 1];
	struct stat st;
	ssize_t n;

	fs->root = calloc(1, sizeof(*fs->root));
	if (!fs->root)
		return -ENOMEM;
	fs->root->fd = fcntl(fs->backing_fd, F_DUPFD_CLOEXEC, 0);
	if (fs->root->fd == -1 || fstat(fs->root->fd, &st) == -1)
		return -errno;
	fs->root->dev = st.st_dev;
	fs->root->ino = st.st_ino;
	fs->root->type = S_IFDIR;
	fs->root->nlookup = 2;
	proc_name(fs->backing_fd, proc);
	n = readlink(proc, buf, sizeof(buf) - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	if (strcmp(buf, "/") == 0)
		buf[0] = '\0'; /* keys are then the paths themselves */
	fs->root_path = strdup(buf);
	return fs->root_path ? 0 : -ENOMEM;
}

void tlfs_ll_release(struct tlfs *fs)
{
	if (fs->root) {
		if (fs->root->fd >= 0)
			close(fs->root->fd);
		free(fs->root);
		fs->root = NULL;
	}
	free(fs->root_path);
	fs->root_path = NULL;
}
