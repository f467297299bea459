/* fs_inode.c - the inode table and the caller's credentials, see fs.h
 *
 * Inodes: one struct ll_inode per (st_dev, st_ino) the kernel looked up,
 * with a lookup count; the nodeid is its address. The root is fs->root.
 *
 * Lock order: fs->itab_mutex is a leaf, never held across a syscall.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fs.h"
#include "log.h"


struct ll_inode *ino_get(struct tlfs *fs, fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID)
		return fs->root;
	return (struct ll_inode *)(uintptr_t)ino;
}

fuse_ino_t ino_id(struct tlfs *fs, struct ll_inode *in)
{
	return in == fs->root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)in;
}

static size_t ihash(dev_t dev, ino_t ino)
{
	return (size_t)((ino * UINT64_C(0x9e3779b97f4a7c15)) ^ dev) % TLFS_ITAB_SIZE;
}

/* ---- credentials ------------------------------------------------------ */

static __thread struct {
	bool set;
	pid_t pid;
	uid_t uid;
	gid_t gid;
} thread_creds;

/* Raises (ON) or drops CAP_SYS_RESOURCE in this thread's effective set
 * (capset acts on the calling thread only). setfsuid() drops the file
 * capabilities but not this one, with which ext4 hands out the blocks it
 * reserves for root (mkfs -m) and quotas let a write past the hard limit;
 * a user's request must meet both as the user would. Returns 0 or -errno
 * (a daemon without the capability has nothing to drop). */
static int creds_sys_resource(bool on)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
	uint32_t bit = UINT32_C(1) << (CAP_SYS_RESOURCE % 32);
	int w = CAP_SYS_RESOURCE / 32;

	if (syscall(SYS_capget, &hdr, data) == -1)
		return -errno;
	if (!(data[w].permitted & bit) || !!(data[w].effective & bit) == on)
		return 0;
	if (on)
		data[w].effective |= bit;
	else
		data[w].effective &= ~bit;
	return syscall(SYS_capset, &hdr, data) == -1 ? -errno : 0;
}

/* Acts as UID/GID with GROUPS from here on, on this thread only (the raw
 * setgroups syscall is per thread; glibc's would change every thread). */
static int creds_switch(pid_t pid, uid_t uid, gid_t gid, fuse_req_t req)
{
	gid_t groups[256];
	int n = 0;

	/* the pid only matters for the groups, which root's requests (and the
	 * daemon's own) never take: no switch between root callers that share
	 * a gid, nor between them and the daemon */
	if (thread_creds.set && (thread_creds.pid == pid || uid == 0) && thread_creds.uid == uid &&
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
	if (!thread_creds.set || (thread_creds.uid == 0) != (uid == 0)) {
		int err = creds_sys_resource(uid == 0);

		if (err) {
			thread_creds.set = false;
			return err;
		}
	}
	thread_creds.set = true;
	thread_creds.pid = pid;
	thread_creds.uid = uid;
	thread_creds.gid = gid;
	return 0;
}

/* Acts as the requesting user, when we serve other users as root. */
int creds_enter(struct tlfs *fs, fuse_req_t req)
{
	const struct fuse_ctx *c;

	if (!fs->switch_creds)
		return 0;
	c = fuse_req_ctx(req);
	return creds_switch(c->pid, c->uid, c->gid, req);
}

bool creds_are_root(void)
{
	return thread_creds.uid == 0;
}

/* Back to the daemon's own (root) credentials. */
void creds_daemon(struct tlfs *fs)
{
	if (fs->switch_creds)
		creds_switch(0, 0, 0, NULL);
}

/* ---- inode table ------------------------------------------------------- */

/* The table's inode of ST (st_dev, st_ino), or NULL. Must be called with
 * itab_mutex held. */
static struct ll_inode *itab_find(struct tlfs *fs, const struct stat *st)
{
	struct ll_inode *in;

	for (in = fs->itab[ihash(st->st_dev, st->st_ino)]; in; in = in->next)
		if (in->ino == st->st_ino && in->dev == st->st_dev)
			break;
	return in;
}

/* Finds or makes the inode of the open O_PATH FD (stat ST), taking one
 * lookup reference. Takes FD over (closes it when an inode exists). */
struct ll_inode *inode_ref(struct tlfs *fs, int fd, const struct stat *st)
{
	size_t h = ihash(st->st_dev, st->st_ino);
	struct ll_inode *in;

	pthread_mutex_lock(&fs->itab_mutex);
	in = itab_find(fs, st);
	if (in) {
		in->nlookup++;
		pthread_mutex_unlock(&fs->itab_mutex);
		close(fd);
		return in;
	}
	in = calloc(1, sizeof(*in));
	if (!in) {
		pthread_mutex_unlock(&fs->itab_mutex);
		close(fd);
		return NULL;
	}
	in->fd = fd;
	in->dev = st->st_dev;
	in->ino = st->st_ino;
	in->type = st->st_mode & S_IFMT;
	in->nlookup = 1;
	in->next = fs->itab[h];
	fs->itab[h] = in;
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
	if (in)
		in->nlookup++;
	pthread_mutex_unlock(&fs->itab_mutex);
	return in;
}

void inode_unref(struct tlfs *fs, struct ll_inode *in, uint64_t n)
{
	struct ll_inode **pp;
	bool last = false;

	if (in == fs->root || in->ctl)
		return;
	pthread_mutex_lock(&fs->itab_mutex);
	in->nlookup = in->nlookup > n ? in->nlookup - n : 0;
	if (in->nlookup == 0) {
		for (pp = &fs->itab[ihash(in->dev, in->ino)]; *pp; pp = &(*pp)->next) {
			if (*pp == in) {
				*pp = in->next;
				break;
			}
		}
		last = true;
	}
	pthread_mutex_unlock(&fs->itab_mutex);
	if (last) {
		close(in->fd);
		free(in->key_path);
		free(in);
	}
}

int fd_errno(int err)
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

void proc_name(int fd, char buf[64])
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
	char proc[64], buf[PATH_MAX + 1];
	struct stat st;
	ssize_t n;
	int err;

	pthread_mutex_init(&fs->itab_mutex, NULL);
	pthread_mutex_init(&fs->plock_mutex, NULL);
	pthread_mutex_init(&fs->recent_mutex, NULL);
	fs->cwd_fd = -1;
	/* here, in the main thread: the threads made later block its signal */
	err = lockwait_init(&fs->waits, fs->cfg->lock_waiters_per_user, fs->cfg->lock_waiters);
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

void tlfs_release(struct tlfs *fs)
{
	/* answered while the session still exists */
	lockwait_destroy(&fs->waits);
	/* the kernel need not forget every inode before the session ends */
	for (size_t h = 0; h < TLFS_ITAB_SIZE; h++) {
		while (fs->itab[h]) {
			struct ll_inode *in = fs->itab[h];

			fs->itab[h] = in->next;
			if (in != fs->root) {
				close(in->fd);
				free(in->key_path);
				free(in);
			}
		}
	}
	if (fs->root) {
		/* set by tlfs_prepare(), which made the root */
		if (fs->cwd_fd >= 0)
			close(fs->cwd_fd);
		fs->cwd_fd = -1;
		if (fs->root->fd >= 0)
			close(fs->root->fd);
		free(fs->root);
		fs->root = NULL;
	}
	free(fs->root_path);
	fs->root_path = NULL;
}
