/* fs_creds.c - acting as the caller: credentials, capabilities, umask,
 * set-ID bits on write and O_NOATIME, see fs.h
 *
 * Each request thread switches its own filesystem uid/gid, groups and
 * capabilities (all per thread in Linux) to the caller's before it acts
 * on the backing filesystem, so the backing filesystem judges every call
 * by the caller's rights, as it would natively. Every switch of a
 * thread's credentials or capabilities is made here, also those around
 * the registration of a passthrough id (fs_passthrough.c).
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs/fs.h"
#include "base/log.h"

/* ---- credentials ------------------------------------------------------ */

static __thread struct {
	bool set;
	pid_t pid;
	uid_t uid;
	gid_t gid;
} thread_creds;

/* This thread's capability sets into CAPS, and back (capget and capset
 * act on the calling thread only). Return 0 or -errno. */
static int caps_get(struct __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3])
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};

	return syscall(SYS_capget, &hdr, caps) == -1 ? -errno : 0;
}

static int caps_set(struct __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3])
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};

	return syscall(SYS_capset, &hdr, caps) == -1 ? -errno : 0;
}

/* Raises (ON) or drops capability CAP in this thread's effective set;
 * sets *CHANGED when it did. Returns 0 or -errno (a capability the thread
 * is not permitted has nothing to drop or raise). */
static int creds_cap(int cap, bool on, bool *changed)
{
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
	uint32_t bit = UINT32_C(1) << (cap % 32);
	int w = cap / 32, err;

	*changed = false;
	err = caps_get(data);
	if (err)
		return err;
	if (!(data[w].permitted & bit) || !!(data[w].effective & bit) == on)
		return 0;
	if (on)
		data[w].effective |= bit;
	else
		data[w].effective &= ~bit;
	err = caps_set(data);
	if (err)
		return err;
	*changed = true;
	return 0;
}

bool creds_permitted(int cap)
{
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	if (caps_get(data))
		return false;
	return data[cap / 32].permitted & (UINT32_C(1) << (cap % 32));
}

/* Raises (ON) or drops CAP_SYS_RESOURCE in this thread's effective set.
 * setfsuid() drops the file capabilities but not this one, with which
 * ext4 hands out the blocks it reserves for root (mkfs -m) and quotas let
 * a write past the hard limit; a user's request must meet both as the
 * user would. Returns 0 or -errno. */
static int creds_sys_resource(bool on)
{
	bool changed;

	return creds_cap(CAP_SYS_RESOURCE, on, &changed);
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

int creds_enter_proc(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, char proc[64])
{
	tlfs_proc_path(in->fd, proc);
	return creds_enter(fs, req);
}

bool creds_are_root(void)
{
	return thread_creds.uid == 0;
}

#ifdef HAVE_FUSE_KILLPRIV_V2
void creds_killpriv_init(struct tlfs *fs, struct fuse_conn_info *conn)
{
	if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV_V2) {
		conn->want |= FUSE_CAP_HANDLE_KILLPRIV_V2;
		fs->killpriv = true;
	}
}
#endif /* HAVE_FUSE_KILLPRIV_V2 */

/* True when the task PID (a thread id, as the kernel names a caller) has
 * CAP_FSETID in its effective set; false also when it cannot be asked
 * (gone, /proc hidden). */
static bool task_has_fsetid(pid_t pid)
{
	char path[64], buf[4096];
	const char *p;
	ssize_t n;
	int fd;

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd == -1)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strstr(buf, "\nCapEff:");
	if (!p)
		return false;
	return (strtoull(p + 9, NULL, 16) >> CAP_FSETID) & 1;
}

bool creds_kill_begin(struct tlfs *fs, fuse_req_t req, int fd, bool kill)
{
	struct stat st;
	bool dropped;

	if (!creds_are_root())
		return false; /* acting as a user: no CAP_FSETID to drop */
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) || !(st.st_mode & (S_ISUID | S_ISGID)))
		return false;
	if (!kill && task_has_fsetid(fuse_req_ctx(req)->pid))
		return false;
	if (creds_cap(CAP_FSETID, false, &dropped))
		return false;
	return dropped;
}

void creds_kill_end(bool dropped)
{
	bool changed;

	if (dropped)
		creds_cap(CAP_FSETID, true, &changed);
}

/* 1: this thread has a filesystem context (umask, working directory) of
 * its own; -1: it cannot have one */
static __thread int own_fs;

void creds_umask(struct tlfs *fs, fuse_req_t req, struct ll_inode *parent, mode_t *mode)
{
	mode_t um;
	char proc[64];

	if (!fs->dont_mask)
		return; /* the kernel applied the umask already */
	um = fuse_req_ctx(req)->umask & 0777;
	if (!own_fs)
		own_fs = unshare(CLONE_FS) == 0 ? 1 : -1;
	if (own_fs > 0) {
		umask(um);
		return;
	}
	tlfs_proc_path(parent->fd, proc);
	if (getxattr(proc, "system.posix_acl_default", NULL, 0) <= 0)
		*mode &= ~um; /* no default ACL (or none possible) */
}

/* Back to the daemon's own (root) credentials. */
void creds_daemon(struct tlfs *fs)
{
	if (fs->switch_creds)
		creds_switch(0, 0, 0, NULL);
}

/* ---- registering a passthrough id ------------------------------------- */

/* the kernel's overflow ids: nobody, nogroup */
#define CREDS_NOBODY 65534

static void creds_restore(const struct creds_saved *old);

/* Switches this thread to the credentials a registration carries on a
 * mount serving several users (see the top of fs_passthrough.c), saving
 * its own in OLD. Returns 0 or -errno (then this thread's credentials are
 * OLD again). */
static int creds_restrict(struct creds_saved *old)
{
	struct __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3];
	int w = CAP_SYS_ADMIN / 32, err;
	size_t i;

	err = caps_get(old->caps);
	if (err)
		return err;
	/* the raw syscalls act on this thread only (glibc's setgroups would
	 * change every thread) */
	old->ngroups = (int)syscall(SYS_getgroups, 256, old->groups);
	if (old->ngroups < 0)
		return -errno;
	old->fsuid = (uid_t)setfsuid((uid_t)-1);
	old->fsgid = (gid_t)setfsgid((gid_t)-1);
	if (syscall(SYS_setgroups, 0, NULL) == -1) {
		err = -errno;
		goto out_restore;
	}
	setfsgid(CREDS_NOBODY);
	setfsuid(CREDS_NOBODY);
	memcpy(caps, old->caps, sizeof(caps));
	for (i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
		caps[i].effective = 0;
	caps[w].effective = old->caps[w].permitted & (UINT32_C(1) << (CAP_SYS_ADMIN % 32));
	err = caps_set(caps);
	if (!err && (setfsuid((uid_t)-1) != CREDS_NOBODY || setfsgid((gid_t)-1) != CREDS_NOBODY))
		err = -EPERM;
	if (!err)
		return 0;
out_restore:
	creds_restore(old);
	return err;
}

/* Puts back what creds_restrict() saved in OLD. The order matters:
 * setfsuid() needs CAP_SETUID in the effective set, and moving fsuid to or
 * from 0 changes the effective file capabilities. This function can't
 * fail: the daemon's thread has the capabilities it gives back. */
static void creds_restore(const struct creds_saved *old)
{
	struct __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3];

	memcpy(caps, old->caps, sizeof(caps));
	caps_set(caps);
	syscall(SYS_setgroups, old->ngroups, old->groups);
	setfsgid(old->fsgid);
	setfsuid(old->fsuid);
	caps_set(caps);
}

/* On a mount that serves its owner only, with fs->killpriv: saves this
 * thread's capabilities in OLD and drops CAP_FSETID from its effective
 * set. The kernel then leaves set-ID bits to the registration's
 * credentials, and a caller without CAP_FSETID (a root process that gave
 * it up) may write through it: its writes must clear the bits, so no
 * registration keeps them (root's writes to a file that got a set-ID bit
 * while open through the kernel clear it too; files with the bits at
 * their first open stay on the daemon path). Returns 0 or -errno. */
static int creds_no_fsetid(struct creds_saved *old)
{
	struct __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3];
	int err;

	err = caps_get(old->caps);
	if (err)
		return err;
	memcpy(caps, old->caps, sizeof(caps));
	caps[CAP_FSETID / 32].effective &= ~(UINT32_C(1) << (CAP_FSETID % 32));
	return caps_set(caps);
}

int creds_registration_begin(struct tlfs *fs, struct creds_saved *old)
{
	int err = 0;

	old->switched = CREDS_KEPT;
	if (fs->switch_creds)
		err = creds_restrict(old);
	else if (fs->killpriv)
		err = creds_no_fsetid(old);
	else
		return 0;
	if (err)
		return err;
	old->switched = fs->switch_creds ? CREDS_RESTRICTED : CREDS_NO_FSETID;
	return 0;
}

void creds_registration_end(const struct creds_saved *old)
{
	struct __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3];

	if (old->switched == CREDS_RESTRICTED) {
		creds_restore(old);
	} else if (old->switched == CREDS_NO_FSETID) {
		memcpy(caps, old->caps, sizeof(caps));
		caps_set(caps);
	}
}

/* ---- atime ------------------------------------------------------------ */

void creds_noatime(struct tlfs *fs, int fd)
{
	int fl;

	if (!fs->cfg->noatime)
		return;
	fl = fcntl(fd, F_GETFL);
	if (fl == -1 || (fl & O_NOATIME) || fcntl(fd, F_SETFL, fl | O_NOATIME) == 0)
		return;
	if (errno == EPERM && fs->switch_creds) {
		/* O_NOATIME needs the owner or CAP_FOWNER: the open was
		 * checked as the caller, the flag is the daemon's */
		creds_daemon(fs);
		fcntl(fd, F_SETFL, fl | O_NOATIME);
	}
}
