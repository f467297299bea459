/* fs_inode.c - the inode table, see fs.h (the caller's credentials: fs_creds.c)
 *
 * Inodes: one struct ll_inode per (st_dev, st_ino) the kernel looked up,
 * with a lookup count, found by nodeid in fs->idtab. Nodeids count up from
 * TLFS_FIRST_ID and are never reused: they are not addresses, since file
 * handles (name_to_handle_at(), no privilege needed) show them to every
 * user. The root is fs->root.
 *
 * File handles (export_support): the kernel puts (nodeid, generation) in
 * a handle and, when it no longer has that inode, sends a lookup of "."
 * with the nodeid. So a forgotten inode is not freed but kept without its
 * fd and with the backing's own file handle (name_to_handle_at()), which
 * reopens it; its nodeid stays its own. A nodeid from a handle is trusted
 * only when found in fs->idtab. At most export_remember forgotten inodes
 * are kept, oldest dropped first. Each new inode (and a forgotten one found
 * again with a different backing handle: its inode number was reused)
 * takes a new generation, so (nodeid, generation) never names two files.
 *
 * Descriptors: every inode the kernel knows holds an O_PATH fd, and the
 * kernel forgets inodes only when it reclaims memory, so one user who
 * looks up names (a find, a touch loop) would take every descriptor the
 * daemon may have, and every user would get ENFILE. So the inodes with an
 * fd are kept on a list, least recently looked up first, and once more
 * than fs->fd_high of them hold an fd (half the open-file limit), the
 * pruner thread asks the kernel to forget the oldest down to fs->fd_low:
 * by nodeid (FUSE_NOTIFY_PRUNE, protocol 7.45: the kernel drops what no
 * one uses, and keeps the rest), or, on older kernels, by invalidating the
 * name a non-directory was last looked up by (directories are left
 * alone there: invalidating one would detach mounts made on it). The
 * kernel's forgets then close the fds. The pruner runs apart from the
 * request threads: a notification waits for the directory's lock, which
 * a request in it may hold.
 *
 * Lock order: fs->itab_mutex is a leaf, never held across a syscall.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs.h"
#include "base/log.h"


static struct ll_inode *idtab_find(struct tlfs *fs, fuse_ino_t id);

struct ll_inode *inode_get(struct tlfs *fs, fuse_ino_t ino)
{
	struct ll_inode *in;

	if (ino == FUSE_ROOT_ID)
		return fs->root;
	if (ino < TLFS_FIRST_ID)
		return ctl_inode_of(ino);
	pthread_mutex_lock(&fs->itab_mutex);
	in = idtab_find(fs, ino);
	pthread_mutex_unlock(&fs->itab_mutex);
	return in;
}

fuse_ino_t inode_id(struct tlfs *fs, struct ll_inode *in)
{
	if (in == fs->root)
		return FUSE_ROOT_ID;
	return in->ctl ? ctl_inode_id(in) : in->id;
}

uint64_t inode_gen(struct tlfs *fs, fuse_ino_t ino)
{
	struct ll_inode *in = ino ? inode_get(fs, ino) : NULL;

	return in && in != fs->root && !in->ctl ? in->gen : 0;
}

static size_t idhash(fuse_ino_t id)
{
	return (size_t)(id * UINT64_C(0x9e3779b97f4a7c15) >> 32) % TLFS_ITAB_SIZE;
}

static size_t ihash(dev_t dev, ino_t ino)
{
	return (size_t)((ino * UINT64_C(0x9e3779b97f4a7c15)) ^ dev) % TLFS_ITAB_SIZE;
}

/* ---- inode table ------------------------------------------------------- */

static bool exporting(const struct tlfs *fs)
{
	return fs->cfg && fs->cfg->export_support;
}

/* The table's inode of ST (st_dev, st_ino), forgotten or not, or NULL.
 * Must be called with itab_mutex held. */
static struct ll_inode *itab_find(struct tlfs *fs, const struct stat *st)
{
	struct ll_inode *in;

	for (in = fs->itab[ihash(st->st_dev, st->st_ino)]; in; in = in->next)
		if (in->ino == st->st_ino && in->dev == st->st_dev)
			break;
	return in;
}

/* The inode of nodeid ID, or NULL; with itab_mutex held. */
static struct ll_inode *idtab_find(struct tlfs *fs, fuse_ino_t id)
{
	struct ll_inode *in;

	for (in = fs->idtab[idhash(id)]; in; in = in->id_next)
		if (in->id == id)
			break;
	return in;
}

/* The backing's file handle of the open FD, when it is on BACKING's mount
 * (else NULL: it cannot be reopened through BACKING). */
static struct file_handle *handle_of(struct tlfs *fs, int fd)
{
	struct file_handle *fh, *out;
	int mount_id;

	fh = malloc(sizeof(*fh) + MAX_HANDLE_SZ);
	if (!fh)
		return NULL;
	fh->handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(fd, "", fh, &mount_id, AT_EMPTY_PATH) == -1 ||
	    mount_id != fs->export_mount_id) {
		free(fh);
		return NULL;
	}
	out = realloc(fh, sizeof(*fh) + fh->handle_bytes);
	return out ? out : fh;
}

static bool handle_equal(const struct file_handle *a, const struct file_handle *b)
{
	return a && b && a->handle_type == b->handle_type && a->handle_bytes == b->handle_bytes &&
	       memcmp(a->f_handle, b->f_handle, a->handle_bytes) == 0;
}

/* ---- the live and forgotten lists, with itab_mutex held ---- */

static void list_unlink(struct inode_list *l, struct ll_inode *in)
{
	if (in->lru_prev)
		in->lru_prev->lru_next = in->lru_next;
	else
		l->head = in->lru_next;
	if (in->lru_next)
		in->lru_next->lru_prev = in->lru_prev;
	else
		l->tail = in->lru_prev;
	in->lru_prev = in->lru_next = NULL;
	l->n--;
}

static void list_append(struct inode_list *l, struct ll_inode *in)
{
	in->lru_prev = l->tail;
	in->lru_next = NULL;
	if (l->tail)
		l->tail->lru_next = in;
	else
		l->head = in;
	l->tail = in;
	l->n++;
}

/* IN (on the live list) was looked up again: last to be pruned. */
static void live_touch(struct tlfs *fs, struct ll_inode *in)
{
	if (fs->live.tail != in) {
		list_unlink(&fs->live, in);
		list_append(&fs->live, in);
	}
}

static void pruner_kick(struct tlfs *fs);

/* IN got an fd: onto the live list, and the pruner woken when too many
 * hold one. */
static void live_add(struct tlfs *fs, struct ll_inode *in)
{
	list_append(&fs->live, in);
	if (fs->fd_high && fs->live.n > fs->fd_high)
		pruner_kick(fs);
}

/* Takes IN out of both hash tables; with itab_mutex held. */
static void itab_remove(struct tlfs *fs, struct ll_inode *in)
{
	struct ll_inode **pp;

	for (pp = &fs->itab[ihash(in->dev, in->ino)]; *pp; pp = &(*pp)->next) {
		if (*pp == in) {
			*pp = in->next;
			break;
		}
	}
	for (pp = &fs->idtab[idhash(in->id)]; *pp; pp = &(*pp)->id_next) {
		if (*pp == in) {
			*pp = in->id_next;
			break;
		}
	}
}

static uint32_t gen_next(struct tlfs *fs)
{
	if (++fs->next_gen == 0)
		fs->next_gen = 1;
	return fs->next_gen;
}

static void inode_free(struct ll_inode *in)
{
	if (in->fd >= 0)
		close(in->fd);
	free(in->fh);
	free(in->name);
	keys_memo_free(&in->key_memo);
	free(in);
}

/* Finds or makes the inode of the open O_PATH FD (stat ST), taking one
 * lookup reference. Takes FD over (closes it when an inode exists). */
struct ll_inode *inode_ref(struct tlfs *fs, int fd, const struct stat *st)
{
	size_t h = ihash(st->st_dev, st->st_ino);
	struct file_handle *fh = exporting(fs) ? handle_of(fs, fd) : NULL;
	struct file_handle *drop_fh = NULL;
	struct ll_inode *in;
	bool other_file;

	pthread_mutex_lock(&fs->itab_mutex);
	in = itab_find(fs, st);
	if (in && in->fd >= 0) {
		in->nlookup++;
		live_touch(fs, in);
		pthread_mutex_unlock(&fs->itab_mutex);
		close(fd);
		free(fh);
		inode_mode_sent(in, st);
		return in;
	}
	if (in) {
		/* forgotten: the same file again, or its inode number reused */
		list_unlink(&fs->forgotten, in);
		other_file = !handle_equal(in->fh, fh);
		if (other_file)
			in->gen = gen_next(fs);
		drop_fh = in->fh;
		in->fh = fh;
		in->fd = fd;
		in->nlookup = 1;
		in->type = st->st_mode & S_IFMT;
		live_add(fs, in);
		pthread_mutex_unlock(&fs->itab_mutex);
		free(drop_fh);
		if (other_file) /* the path its last key found was the other file's */
			keys_memo_forget(&fs->keys, &in->key_memo);
		inode_mode_sent(in, st);
		return in;
	}
	in = calloc(1, sizeof(*in));
	if (!in) {
		pthread_mutex_unlock(&fs->itab_mutex);
		close(fd);
		free(fh);
		return NULL;
	}
	in->fd = fd;
	in->dev = st->st_dev;
	in->ino = st->st_ino;
	in->type = st->st_mode & S_IFMT;
	in->mode_sent = st->st_mode;
	in->nlookup = 1;
	in->gen = gen_next(fs);
	in->fh = fh;
	in->next = fs->itab[h];
	fs->itab[h] = in;
	/* a nodeid is never given twice in a mount's life, and is no
	 * address: file handles show it to anyone */
	in->id = fs->next_id++;
	in->id_next = fs->idtab[idhash(in->id)];
	fs->idtab[idhash(in->id)] = in;
	live_add(fs, in);
	pthread_mutex_unlock(&fs->itab_mutex);
	return in;
}

/* The inode of ST (st_dev, st_ino) when it is in the table, with one more
 * lookup reference; NULL when it is not (the caller then opens it and
 * calls inode_ref()). */
struct ll_inode *inode_find_ref(struct tlfs *fs, const struct stat *st)
{
	struct ll_inode *in;

	pthread_mutex_lock(&fs->itab_mutex);
	in = itab_find(fs, st);
	if (in && in->fd < 0)
		in = NULL; /* forgotten: inode_ref() takes it back with the new fd */
	if (in) {
		in->nlookup++;
		live_touch(fs, in);
	}
	pthread_mutex_unlock(&fs->itab_mutex);
	if (in)
		inode_mode_sent(in, st);
	return in;
}

void inode_unref(struct tlfs *fs, struct ll_inode *in, uint64_t n)
{
	struct ll_inode *drop = NULL;
	int close_fd = -1;

	if (in == fs->root || in->ctl)
		return;
	pthread_mutex_lock(&fs->itab_mutex);
	in->nlookup = in->nlookup > n ? in->nlookup - n : 0;
	if (in->nlookup == 0 && in->fd >= 0) {
		list_unlink(&fs->live, in);
		if (in->fh && fs->cfg->export_remember > 0) {
			/* forgotten: keep it findable by its handle */
			close_fd = in->fd;
			in->fd = -1;
			list_append(&fs->forgotten, in);
			if (fs->forgotten.n > fs->cfg->export_remember) {
				drop = fs->forgotten.head;
				list_unlink(&fs->forgotten, drop);
				itab_remove(fs, drop);
			}
		} else {
			itab_remove(fs, in);
			drop = in;
		}
	}
	pthread_mutex_unlock(&fs->itab_mutex);
	if (close_fd >= 0)
		close(close_fd);
	if (drop)
		inode_free(drop);
}

int inode_ref_nodeid(struct tlfs *fs, fuse_ino_t id, struct ll_inode **out, struct stat *st)
{
	struct file_handle *fh = NULL;
	struct ll_inode *in;
	int fd, err;

	*out = NULL;
	if (id == FUSE_ROOT_ID) {
		if (fstat(fs->root->fd, st) == -1)
			return -errno;
		*out = fs->root;
		return 0;
	}
	if (!exporting(fs))
		return -ESTALE;
	pthread_mutex_lock(&fs->itab_mutex);
	in = idtab_find(fs, id);
	if (in && in->fd >= 0) {
		in->nlookup++;
		pthread_mutex_unlock(&fs->itab_mutex);
		err = 0;
		if (fstatat(in->fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1)
			err = -errno;
		else if (st->st_nlink == 0)
			err = -ESTALE; /* deleted; its forget is on the way */
		if (err) {
			inode_unref(fs, in, 1);
			return err;
		}
		*out = in;
		return 0;
	}
	if (in && in->fh) {
		fh = malloc(sizeof(*fh) + in->fh->handle_bytes);
		if (fh)
			memcpy(fh, in->fh, sizeof(*fh) + in->fh->handle_bytes);
	}
	pthread_mutex_unlock(&fs->itab_mutex);
	if (!in)
		return -ESTALE;
	if (!fh)
		return -ENOMEM;
	/* by the backing's handle: nothing of ours is held meanwhile, the
	 * inode may even be dropped; the nodeid is checked again below */
	fd = open_by_handle_at(fs->backing_fd, fh, O_PATH | O_CLOEXEC);
	free(fh);
	if (fd == -1) {
		err = errno;
		if (err == EMFILE || err == ENFILE)
			return -tlfs_fd_errno(err);
		if (err == EPERM)
			tl_log(LOG_WARNING, "cannot reopen a file by its handle: the daemon lacks "
					    "CAP_DAC_READ_SEARCH");
		return -ESTALE; /* deleted (ESTALE), or cannot be reached */
	}
	err = 0;
	if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1)
		err = -errno;
	else if (st->st_nlink == 0)
		err = -ESTALE; /* deleted, still open somewhere */
	if (err) {
		close(fd);
		return err;
	}
	in = inode_ref(fs, fd, st);
	if (!in)
		return -ENOMEM;
	if (inode_id(fs, in) != id) {
		/* dropped meanwhile and made anew under another nodeid */
		inode_unref(fs, in, 1);
		return -ESTALE;
	}
	*out = in;
	return 0;
}

/* ---- the pruner ---------------------------------------------------------- */

/* FUSE_NOTIFY_PRUNE (protocol 7.45): a notification the libfuse of this
 * build may not wrap, written as the kernel reads it */
#define NOTIFY_PRUNE 9
#define PRUNE_BATCH 256 /* nodeids a notification */

struct prune_msg {
	uint32_t len;   /* struct fuse_out_header */
	int32_t code;
	uint64_t unique;
	uint32_t count; /* struct fuse_notify_prune_out */
	uint32_t padding;
	uint64_t spare;
	uint64_t ids[PRUNE_BATCH];
};

/* What the pruner asks the kernel to forget: a nodeid, or (without
 * FUSE_NOTIFY_PRUNE) a name in a parent's nodeid. */
struct prune_item {
	fuse_ino_t id;
	fuse_ino_t parent;
	char *name;
};

/* Asks the kernel to forget the unused inodes among IDS (N of them).
 * Returns 0 or -errno (-EINVAL, -ENOSYS: the kernel has no such
 * notification). */
static int notify_prune(struct tlfs *fs, const struct prune_item *items, size_t n)
{
	struct prune_msg m;
	size_t i, k;

	for (i = 0; i < n; i += k) {
		ssize_t len;

		memset(&m, 0, offsetof(struct prune_msg, ids));
		for (k = 0; k < PRUNE_BATCH && i + k < n; k++)
			m.ids[k] = items[i + k].id;
		len = (ssize_t)(offsetof(struct prune_msg, ids) + k * sizeof(uint64_t));
		m.len = (uint32_t)len;
		m.code = NOTIFY_PRUNE;
		m.count = (uint32_t)k;
		if (write(fuse_session_fd(fs->se), &m, (size_t)len) != len)
			return -errno;
	}
	return 0;
}

/* Takes up to WANT of the least recently looked up inodes with an fd
 * (non-directories with a known name, without FUSE_NOTIFY_PRUNE) into
 * ITEMS and moves them last, so that the next round asks for others.
 * With itab_mutex held. Returns how many. */
static size_t prune_pick(struct tlfs *fs, struct prune_item *items, size_t want)
{
	struct ll_inode *in = fs->live.head, *next;
	size_t n = 0, seen, total = fs->live.n;

	for (seen = 0; in && n < want && seen < total; seen++, in = next) {
		next = in->lru_next;
		if (fs->pruner.no_prune) {
			if (!in->name || in->type == S_IFDIR)
				continue;
			items[n].name = strdup(in->name);
			if (!items[n].name)
				break;
			items[n].parent = in->name_parent;
		}
		items[n++].id = inode_id(fs, in);
		live_touch(fs, in);
	}
	return n;
}

static void *pruner_main(void *arg)
{
	struct tlfs *fs = arg;
	struct inode_pruner *p = &fs->pruner;
	int64_t pause_ms = 10;
	struct prune_item *items;
	size_t n, want, i, before;
	struct timespec ts;
	int err;

	pthread_mutex_lock(&fs->itab_mutex);
	while (!p->stop) {
		if (fs->live.n <= fs->fd_high) {
			pause_ms = 10;
			pthread_cond_wait(&p->cond, &fs->itab_mutex);
			continue;
		}
		want = fs->live.n - fs->fd_low;
		items = calloc(want, sizeof(*items));
		n = items ? prune_pick(fs, items, want) : 0;
		before = fs->live.n;
		pthread_mutex_unlock(&fs->itab_mutex);

		err = 0;
		if (n && !p->no_prune) {
			err = notify_prune(fs, items, n);
			if (err == -EINVAL || err == -ENOSYS) {
				p->no_prune = true;
				tl_log(LOG_NOTICE, "the kernel cannot prune inodes by nodeid "
						   "(FUSE_NOTIFY_PRUNE): files are forgotten by name "
						   "instead, directories not at all");
			}
		} else {
			for (i = 0; i < n && !err; i++) {
				err = fuse_lowlevel_notify_inval_entry(fs->se, items[i].parent,
								       items[i].name,
								       strlen(items[i].name));
				if (err == -ENOENT || err == -ENOTDIR)
					err = 0; /* the name or its parent is gone: so be it */
			}
		}
		if (n) {
			__atomic_add_fetch(&p->rounds, 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&p->asked, n, __ATOMIC_RELAXED);
		}
		for (i = 0; i < n; i++)
			free(items[i].name);
		free(items);
		if (err == -ENODEV || err == -EBADF)
			break; /* the session is over */

		/* the forgets arrive on the request threads: wait for them,
		 * longer while the kernel keeps what it was asked for (in use) */
		pthread_mutex_lock(&fs->itab_mutex);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += pause_ms * 1000000;
		ts.tv_sec += ts.tv_nsec / 1000000000;
		ts.tv_nsec %= 1000000000;
		if (!p->stop)
			pthread_cond_timedwait(&p->cond, &fs->itab_mutex, &ts);
		if (fs->live.n + n / 8 >= before)
			pause_ms = pause_ms * 2 > 1000 ? 1000 : pause_ms * 2;
		else
			pause_ms = 10;
	}
	pthread_mutex_unlock(&fs->itab_mutex);
	return NULL;
}

/* With itab_mutex held: wakes the pruner, started at the first need
 * (after the daemon forked, from a request thread: signals blocked). */
static void pruner_kick(struct tlfs *fs)
{
	struct inode_pruner *p = &fs->pruner;

	if (!fs->se || p->stop)
		return;
	if (!p->started) {
		int err = pthread_create(&p->thread, NULL, pruner_main, fs);

		if (err) {
			tl_log(LOG_WARNING, "cannot start the inode pruner: %s", strerror(err));
			fs->fd_high = 0; /* not again */
			return;
		}
		p->started = true;
		tl_log(LOG_NOTICE, "more than %zu inodes hold a descriptor: from now on the "
				   "kernel is asked to forget the least recently used ones",
		       fs->fd_high);
		return;
	}
	pthread_cond_signal(&p->cond);
}

void inode_pruner_init(struct tlfs *fs, const struct fuse_conn_info *conn)
{
	fs->pruner.no_prune = fs->cfg->inode_prune == TL_PRUNE_NAMES || conn->proto_major < 7 ||
			      (conn->proto_major == 7 && conn->proto_minor < 45);
	if (fs->cfg->inode_prune == TL_PRUNE_OFF) {
		pthread_mutex_lock(&fs->itab_mutex);
		fs->fd_high = 0;
		pthread_mutex_unlock(&fs->itab_mutex);
	}
}

void inode_note_name(struct tlfs *fs, struct ll_inode *in, struct ll_inode *parent,
		     const char *name)
{
	char *copy = NULL, *old = NULL;

	if (!fs->pruner.no_prune || in == fs->root || in->ctl || in->type == S_IFDIR)
		return;
	pthread_mutex_lock(&fs->itab_mutex);
	if (in->fd >= 0 && (!in->name || in->name_parent != inode_id(fs, parent) ||
			    strcmp(in->name, name) != 0)) {
		pthread_mutex_unlock(&fs->itab_mutex);
		copy = strdup(name);
		pthread_mutex_lock(&fs->itab_mutex);
		if (copy && in->fd >= 0) {
			old = in->name;
			in->name = copy;
			in->name_parent = inode_id(fs, parent);
			copy = NULL;
		}
	}
	pthread_mutex_unlock(&fs->itab_mutex);
	free(copy);
	free(old);
}

void inode_fd_counts(struct tlfs *fs, uint64_t *live, uint64_t *asked)
{
	pthread_mutex_lock(&fs->itab_mutex);
	*live = fs->live.n;
	pthread_mutex_unlock(&fs->itab_mutex);
	*asked = __atomic_load_n(&fs->pruner.asked, __ATOMIC_RELAXED);
}

int inode_export_prepare(struct tlfs *fs)
{
	struct file_handle *fh;
	int err = 0;

	fh = malloc(sizeof(*fh) + MAX_HANDLE_SZ);
	if (!fh)
		return -ENOMEM;
	fh->handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(fs->backing_fd, "", fh, &fs->export_mount_id, AT_EMPTY_PATH) == -1)
		err = -errno;
	free(fh);
	return err;
}

void inode_mode_sent(struct ll_inode *in, const struct stat *st)
{
	__atomic_store_n(&in->mode_sent, st->st_mode, __ATOMIC_RELAXED);
}

void inode_mode_check(struct tlfs *fs, struct ll_inode *in, int fd)
{
	mode_t sent = __atomic_load_n(&in->mode_sent, __ATOMIC_RELAXED);
	struct stat st;

	if (!(sent & (S_ISUID | S_ISGID)) || fstat(fd, &st) == -1 || st.st_mode == sent)
		return;
	__atomic_store_n(&in->mode_sent, st.st_mode, __ATOMIC_RELAXED);
	if (fs->se)
		fuse_lowlevel_notify_inval_inode(fs->se, inode_id(fs, in), -1, 0);
}

int tlfs_fd_errno(int err)
{
	static bool warned;

	if (err != EMFILE && err != ENFILE)
		return err;
	if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
		tl_log(LOG_WARNING,
		       "out of file descriptors (%s): raise the hard open-file limit "
		       "(LimitNOFILE=, ulimit -Hn); until then such requests fail with ENFILE",
		       strerror(err));
	return ENFILE;
}

void tlfs_proc_path(int fd, char buf[64])
{
	static const char pre[] = "/proc/self/fd/";
	char digits[16];
	unsigned int v = fd < 0 ? 0U - (unsigned int)fd : (unsigned int)fd;
	size_t n = 0, o = sizeof(pre) - 1;

	/* by hand: it runs on every open, setattr and rename key */
	memcpy(buf, pre, o);
	if (fd < 0)
		buf[o++] = '-';
	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		buf[o++] = digits[--n];
	buf[o] = '\0';
}

int tlfs_prepare(struct tlfs *fs)
{
	struct rlimit rl;
	struct stat st;
	int err;

	pthread_mutex_init(&fs->itab_mutex, NULL);
	pthread_mutex_init(&fs->plock_mutex, NULL);
	pthread_mutex_init(&fs->wb_mutex, NULL);
	pthread_cond_init(&fs->pruner.cond, NULL);
	/* half the open-file limit for inodes; the rest for open files, the
	 * store's connections and the daemon's own */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rlim_t lim = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 30) ? (1u << 30)
										      : rl.rlim_cur;

		fs->fd_high = lim / 2 > 16 ? (size_t)(lim / 2) : 16;
		fs->fd_low = fs->fd_high * 3 / 4;
	}
	/* here, in the main thread: the threads made later block its signal */
	err = plockwait_init(&fs->waits, fs->cfg->lock_waiters_per_user, fs->cfg->lock_waiters);
	if (err)
		return err;
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
	fs->root->id = FUSE_ROOT_ID;
	fs->next_id = TLFS_FIRST_ID;
	fs->export_mount_id = -1;
	return keys_init(&fs->keys, fs->backing_fd, lockmgr_other_writers_possible(&fs->mgr),
			 fs->cfg->entry_timeout);
}

void tlfs_release(struct tlfs *fs)
{
	/* answered while the session still exists */
	plockwait_destroy(&fs->waits);
	index_release(fs);
	if (fs->root) {
		pthread_mutex_lock(&fs->itab_mutex);
		fs->pruner.stop = true;
		pthread_cond_signal(&fs->pruner.cond);
		pthread_mutex_unlock(&fs->itab_mutex);
		if (fs->pruner.started)
			pthread_join(fs->pruner.thread, NULL);
	}
	/* the kernel need not forget every inode before the session ends */
	for (size_t h = 0; h < TLFS_ITAB_SIZE; h++) {
		while (fs->itab[h]) {
			struct ll_inode *in = fs->itab[h];

			fs->itab[h] = in->next;
			if (in != fs->root)
				inode_free(in);
		}
	}
	if (fs->root) {
		if (fs->root->fd >= 0)
			close(fs->root->fd);
		free(fs->root);
		fs->root = NULL;
	}
	/* opens the kernel never released */
	for (size_t fd = 0; fd < fs->wb_n; fd++) {
		if (fs->wb_fds[fd])
			close(fs->wb_fds[fd] - 1);
	}
	free(fs->wb_fds);
	fs->wb_fds = NULL;
	fs->wb_n = 0;
	keys_destroy(&fs->keys);
}
