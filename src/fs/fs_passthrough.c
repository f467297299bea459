/* fs_passthrough.c - FUSE passthrough: open files whose reads, writes and
 * mmap the kernel does on the backing file itself, see fs.h
 *
 * At open the daemon registers its descriptor of the backing file with the
 * kernel (FUSE_DEV_IOC_BACKING_OPEN on the session's /dev/fuse descriptor)
 * and answers with the passthrough id the kernel gives it (the kernel's and
 * libfuse's own names say "backing id": fi->backing_id, the ioctls below);
 * from then on read, write, splice and mmap of that open file never reach
 * the daemon. Everything else (flush, fsync, fallocate, locks, setattr,
 * copy_file_range) still does, on the daemon's own descriptor of the
 * open, as without passthrough.
 *
 * The kernel's rules (Linux 6.9 and later), and what follows from them:
 *
 *  - Registering needs CAP_SYS_ADMIN. The kernel keeps a copy of the
 *    registering thread's credentials and does every read and write
 *    through that registration with them, whoever opened the file. So on a
 *    mount that serves several users (fs->switch_creds) the registering
 *    thread carries nobody's fsuid and fsgid, no supplementary groups and
 *    no capability but CAP_SYS_ADMIN, which the ioctl itself checks: no
 *    CAP_SYS_RESOURCE (ext4's blocks reserved for root, quota hard
 *    limits), no CAP_FSETID (a write clears the set-user-ID and
 *    set-group-ID bits), no fsuid 0 (ext4's resuid). A write then gets at
 *    most what any user gets. Capabilities, fsuid and groups are per
 *    thread: they are switched on the request thread around the ioctl and
 *    put back (creds_registration_begin(), fs_creds.c). Files whose writes
 *    must keep root's privileges stay on the daemon path: files with a
 *    set-ID bit (a writer's own write decides whether the bits survive),
 *    and files opened for writing by root (reserved blocks, quota limits).
 *    Root's read-only opens pass through: a read needs no privilege once
 *    the open is allowed. (A file open in one mode keeps it: root's write
 *    open of a file that is open with passthrough writes as any user
 *    would, as it did before.) Permissions are checked once, at the
 *    daemon's own open with the caller's credentials; the kernel checks
 *    none at read or write. With FUSE_CAP_HANDLE_KILLPRIV_V2
 *    (fs->killpriv) the kernel clears no set-ID bit itself before such a
 *    write: the backing filesystem does, as the registration's credentials
 *    decide, so a registration on a mount that serves its owner only
 *    carries no CAP_FSETID either.
 *
 *  - Every open of an inode that is open with passthrough must name the
 *    same passthrough id, and an inode open through the page cache refuses
 *    a passthrough open: the kernel fails a mixed open with EIO. So an
 *    inode's mode is decided at its first open and kept while any open of
 *    it lasts (the daemon's count of opens is never below the kernel's:
 *    the kernel ends an open's I/O mode before it sends the RELEASE). The
 *    id is closed at the inode's last release.
 *
 *  - A backing file on a filesystem stacked as deep as max_stack_depth is
 *    refused (ELOOP). We ask for no stacking below us: the backing must be
 *    an ordinary filesystem (not overlayfs, not another passthrough FUSE
 *    mount), and treelockfs can itself still be an overlay's lower layer.
 *
 * An inode's states (in->opens, in->passthrough_id), under fs->itab_mutex;
 * the ioctls run outside it:
 *
 *   (0, 0) --first open--> (1, id)   passthrough
 *                      \-> (1, 0)    daemon path (a fallback)
 *   (n, x) --open--> (n+1, x)        the same mode as the opens before
 *   (n, x) --release--> (n-1, x)     n > 1
 *   (1, x) --release--> (0, 0)       id x closed
 *
 * Two first opens may race: each decides alone, the first to record its
 * decision wins, the other takes the winner's mode and closes the id it
 * registered, if any.
 */
#include <config.h>

#ifdef HAVE_FUSE_PASSTHROUGH

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "fs/fs.h"
#include "base/log.h"
#include "base/stats.h"

/* The kernel's interface (linux/fuse.h of 6.9 and later, which Debian
 * 12's kernel headers predate). */
struct tl_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define TL_DEV_IOC_MAGIC 229
#define TL_DEV_IOC_BACKING_OPEN _IOW(TL_DEV_IOC_MAGIC, 1, struct tl_backing_map)
#define TL_DEV_IOC_BACKING_CLOSE _IOW(TL_DEV_IOC_MAGIC, 2, uint32_t)

#define OVERLAYFS_MAGIC 0x794c7630
#define ECRYPTFS_MAGIC 0xf15f

/* Why an open went through the daemon; each is logged once. */
enum pt_why {
	PT_USED = 0,
	PT_WHY_KERNEL,
	PT_WHY_PRIVILEGE,
	PT_WHY_DEPTH,
	PT_WHY_REFUSED,
	PT_WHY_SETID,
	PT_WHY_ROOT,
	PT_WHY_MODE,
	PT_WHY_COUNT
};

static const char *const pt_why_text[PT_WHY_COUNT] = {
	[PT_WHY_KERNEL] = "the kernel does not offer FUSE passthrough (Linux 6.9 or later with "
			  "CONFIG_FUSE_PASSTHROUGH)",
	[PT_WHY_PRIVILEGE] = "the daemon lacks CAP_SYS_ADMIN, which the kernel wants to register "
			     "a backing file",
	[PT_WHY_DEPTH] = "the backing file is on a stacked filesystem (overlayfs, a FUSE "
			 "passthrough mount): the kernel's stacking depth limit",
	[PT_WHY_REFUSED] = "the kernel refused the backing file",
	[PT_WHY_SETID] = "a set-user-ID or set-group-ID file: its writes clear those bits as the "
			 "writer's own credentials decide",
	[PT_WHY_ROOT] = "opened for writing by root on a mount shared with other users: root's "
			"writes keep root's reserved blocks and quota exemption",
	[PT_WHY_MODE] = "the file is already open through the daemon (all opens of a file share "
			"one mode)",
};

static bool pt_warned[PT_WHY_COUNT];

/* Counts a fallback for WHY (ERR: the kernel's answer, or 0) and logs the
 * first of each reason. This function can't fail. */
static void pt_fallback(struct tlfs *fs, enum pt_why why, int err)
{
	stats_add(&fs->pt_fallbacks, 1);
	if (__atomic_exchange_n(&pt_warned[why], true, __ATOMIC_RELAXED))
		return;
	if (err)
		tl_log(LOG_NOTICE, "passthrough not used for a file: %s (%s); such files go "
				   "through the daemon",
		       pt_why_text[why], strerror(err));
	else
		tl_log(LOG_NOTICE, "passthrough not used for a file: %s; such files go through "
				   "the daemon",
		       pt_why_text[why]);
}

const char *passthrough_refusal(const char *backing)
{
	struct statfs sf;

	if (!creds_permitted(CAP_SYS_ADMIN))
		return "passthrough=on needs CAP_SYS_ADMIN, which the kernel wants to register a "
		       "backing file";
	if (statfs(backing, &sf) == 0 &&
	    (sf.f_type == OVERLAYFS_MAGIC || sf.f_type == ECRYPTFS_MAGIC))
		return "passthrough=on needs BACKING on an ordinary filesystem, not a stacked one "
		       "(overlayfs, ecryptfs)";
	return NULL;
}

void passthrough_init(struct tlfs *fs, struct fuse_conn_info *conn)
{
	fs->pt = PT_OFF;
	if (fs->cfg->passthrough == TL_PASSTHROUGH_OFF)
		return;
	/* the kernel opens its backing file with the flags of the caller's
	 * open: O_NOATIME, which noatime puts on the daemon's files, would
	 * not be on it (passthrough=on with noatime is refused at start) */
	if (fs->cfg->noatime) {
		tl_log(LOG_NOTICE, "passthrough not used: with noatime the kernel's reads of the "
				   "backing files would update their access times");
		return;
	}
	if (!(conn->capable & FUSE_CAP_PASSTHROUGH)) {
		if (fs->cfg->passthrough == TL_PASSTHROUGH_ON) {
			tl_log(LOG_ERR, "cannot mount with passthrough=on: %s",
			       pt_why_text[PT_WHY_KERNEL]);
			fs->pt_failed = true;
			fuse_session_exit(fs->se);
			return;
		}
		fs->pt = PT_UNAVAILABLE;
		return;
	}
	conn->want |= FUSE_CAP_PASSTHROUGH;
	/* only ordinary filesystems below us (see the top of this file) */
	conn->max_backing_stack_depth = 0;
	fs->pt = PT_IN_USE;
}

/* What in the rules at the top of this file keeps the open FD by the
 * caller of REQ off passthrough, or PT_USED. */
static enum pt_why pt_choose(struct tlfs *fs, fuse_req_t req, int fd, int flags)
{
	struct stat st;

	if (__atomic_load_n(&fs->pt_no_register, __ATOMIC_RELAXED))
		return PT_WHY_PRIVILEGE;
	/* root's reads need none of root's privileges: only its writes */
	if (fs->switch_creds && fuse_req_ctx(req)->uid == 0 &&
	    ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)))
		return PT_WHY_ROOT;
	if (fstat(fd, &st) == -1)
		return PT_WHY_REFUSED;
	/* also set-group-ID without group execute: a write by a user outside
	 * the group clears it on the backing file, which the daemon must see
	 * to tell the kernel (inode_mode_check()) */
	if (st.st_mode & (S_ISUID | S_ISGID))
		return PT_WHY_SETID;
	return PT_USED;
}

/* Registers the open FD with the kernel for passthrough, with credentials
 * no user gains from when several are served (creds_registration_begin()).
 * Returns the passthrough id (> 0) or -errno. */
static int passthrough_register(struct tlfs *fs, int fd)
{
	struct tl_backing_map map = {.fd = fd};
	struct creds_saved old;
	int id, err;

	err = creds_registration_begin(fs, &old);
	if (err)
		return err;
	id = ioctl(fuse_session_fd(fs->se), TL_DEV_IOC_BACKING_OPEN, &map);
	if (id == -1)
		err = -errno;
	else if (id == 0)
		err = -EPROTO;
	creds_registration_end(&old);
	if (err)
		return err;
	stats_add(&fs->pt_ids, 1);
	return id;
}

/* Closes passthrough id ID. This function can't fail. */
static void passthrough_unregister(struct tlfs *fs, int id)
{
	uint32_t v = (uint32_t)id;

	if (ioctl(fuse_session_fd(fs->se), TL_DEV_IOC_BACKING_CLOSE, &v) == -1)
		tl_log(LOG_WARNING, "cannot close backing id %d: %s", id, strerror(errno));
	/* a failed close leaves nothing of ours: the connection's end frees it */
	__atomic_sub_fetch(&fs->pt_ids, 1, __ATOMIC_RELAXED);
}

/* The reason for the kernel's refusal ERR (negative) of a registration;
 * a missing privilege turns registration off for the mount. */
static enum pt_why pt_refusal(struct tlfs *fs, int err)
{
	switch (err) {
	case -EPERM:
		__atomic_store_n(&fs->pt_no_register, true, __ATOMIC_RELAXED);
		return PT_WHY_PRIVILEGE;
	case -ELOOP:
		return PT_WHY_DEPTH;
	default:
		return PT_WHY_REFUSED;
	}
}

void passthrough_open(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, int fd,
		  struct fuse_file_info *fi)
{
	enum pt_why why;
	int id = 0, mine = 0, err = 0;

	if (fs->pt == PT_OFF || !S_ISREG(in->type))
		return;
	if (fs->pt == PT_UNAVAILABLE) {
		pt_fallback(fs, PT_WHY_KERNEL, 0);
		return;
	}
	pthread_mutex_lock(&fs->itab_mutex);
	if (in->opens > 0) {
		in->opens++;
		id = in->passthrough_id;
		pthread_mutex_unlock(&fs->itab_mutex);
		why = id ? PT_USED : PT_WHY_MODE;
		goto out_count;
	}
	pthread_mutex_unlock(&fs->itab_mutex);

	why = pt_choose(fs, req, fd, fi->flags);
	if (why == PT_USED) {
		mine = passthrough_register(fs, fd);
		if (mine < 0) {
			err = -mine;
			why = pt_refusal(fs, mine);
			mine = 0;
		}
	}
	pthread_mutex_lock(&fs->itab_mutex);
	if (in->opens == 0)
		in->passthrough_id = mine;
	id = in->passthrough_id;
	in->opens++;
	pthread_mutex_unlock(&fs->itab_mutex);
	if (mine && mine != id)
		passthrough_unregister(fs, mine); /* another first open won */
	if (id)
		why = PT_USED;
	else if (mine)
		why = PT_WHY_MODE;

out_count:
	if (why == PT_USED) {
		fi->backing_id = id;
		stats_add(&fs->pt_opens, 1);
	} else {
		pt_fallback(fs, why, err);
	}
}

void passthrough_release(struct tlfs *fs, struct ll_inode *in)
{
	int id = 0;

	if (fs->pt != PT_IN_USE || !S_ISREG(in->type))
		return;
	pthread_mutex_lock(&fs->itab_mutex);
	if (in->opens > 0 && --in->opens == 0) {
		id = in->passthrough_id;
		in->passthrough_id = 0;
	}
	pthread_mutex_unlock(&fs->itab_mutex);
	if (id)
		passthrough_unregister(fs, id);
}

#endif /* HAVE_FUSE_PASSTHROUGH */
