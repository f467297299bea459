/* fs.h - the FUSE filesystem of treelockfs (libfuse low-level API)
 *
 * Every operation is forwarded to BACKING by inode: each inode the kernel
 * knows is an O_PATH fd on the backing file, so renames made behind the
 * mount's back (other hosts, BACKING itself) never confuse it. rename()
 * is wrapped in the locks of its plan, whose keys are the current paths
 * of the directories involved; with lock_scope=namespace so are the
 * operations that create or remove names. With allow_other, each
 * operation runs with the requesting user's fsuid, fsgid and
 * supplementary groups.
 *
 * A hidden entry ".treelockfs/" at the root (never listed) holds the
 * read-only "stats", "metrics", "locks" and "backing" files, and
 * "options", which also takes the options that may change while mounted.
 *
 * Files in src/fs/:
 *
 *   fs.h              this header: struct tlfs, the inodes, and the calls
 *                     between the files below (the only ones they make)
 *   fs_ops.c          the table of all operations (tlfs_ops) and those of
 *                     the mount as a whole: init, destroy, statfs
 *   fs_names.c        names looked up, created and removed: lookup,
 *                     forget, mknod, mkdir, symlink, link, create,
 *                     unlink, rmdir
 *   fs_attrs.c        an inode's attributes without an open file:
 *                     getattr, setattr, access, readlink
 *   fs_files.c        open files: open, read, write (and the write-back
 *                     of shared mappings), flush, fsync, fallocate,
 *                     copy_file_range, lseek, release
 *   fs_dirs.c         open directories: opendir, readdir, releasedir,
 *                     fsyncdir
 *   fs_xattrs.c       extended attributes
 *   fs_passthrough.c  FUSE passthrough: open files the kernel reads and
 *                     writes itself on the backing file
 *   fs_inode.c        the inode table, tlfs_prepare() and tlfs_release(),
 *                     paths through /proc, the daemon's descriptors
 *   fs_creds.c        acting as the caller: credentials, capabilities
 *                     (every switch of them), umask, set-ID bits, O_NOATIME
 *   fs_export.c       lookups by file handle (export_support)
 *   fs_rename.c       ll_rename() and entry locks: keys, hold, check,
 *                     rename (the plan and the hold: lockmgr.h)
 *   fs_index.c        the fs index's notes (fs_index=NAME): the key of
 *                     what an operation changed, to the lock manager
 *   fs_keys.[ch]      lock keys: where an entry of the backing tree is now
 *   renameflags.[ch]  which rename flags a backing filesystem refuses
 *   fs_plock.c        POSIX record locks and flock()
 *   plockwait.[ch]    lock waits that hold no request thread
 *   fs_ctl.c          the .treelockfs control entry
 *   remount.[ch]      "mount -o remount" of a treelockfs mount
 *
 * Depends on: base, config, lock.
 *
 * None of these files names a lock store: what they need of one they ask
 * the lock manager (lockmgr.h). From outside, only treelockfs.c includes
 * this header (it fills struct tlfs); config.c takes plockwait.h's
 * defaults.
 *
 * Called from outside src/fs/, by treelockfs.c only:
 *
 *   tlfs_ops, tlfs_prepare(), tlfs_release(), inode_export_prepare(),
 *   passthrough_refusal(), keys_set_home(), ctl_render_metrics(),
 *   remount_requested(), remount_given_options(), remount_run()
 */
#ifndef TREELOCKFS_FS_FS_H
#define TREELOCKFS_FS_FS_H

#include <errno.h>
#include <fuse_lowlevel.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "config/config.h"
#include "fs/fs_keys.h"
#include "lock/lockmgr.h"
#include "lock/lockplan.h"
#include "fs/plockwait.h"
#include "fs/renameflags.h"

#define TLFS_CTL_NAME ".treelockfs"

/* What a control inode is; CTL_NONE for every backing inode. */
enum ctl_kind { CTL_NONE, CTL_DIR, CTL_STATS, CTL_LOCKS, CTL_METRICS, CTL_OPTIONS, CTL_BACKING };

/* One inode the kernel knows: one per (st_dev, st_ino) it looked up, with
 * a lookup count and a nodeid of its own (never an address). The root is
 * fs->root (FUSE_ROOT_ID). Control entries are static inodes without fd,
 * with the nodeids below TLFS_FIRST_ID (fs_ctl.c). */
#define TLFS_FIRST_ID 16
/*
 *
 * With export_support, an inode the kernel forgot stays in the table as a
 * "forgotten" inode (fd -1, the backing's file handle kept, never a
 * control entry), so that a file handle naming its nodeid finds the file
 * again (fs_export.c); export_remember bounds how many are kept. */
struct ll_inode {
	struct ll_inode *next;   /* hash chain; protected by fs->itab_mutex */
	fuse_ino_t id;           /* the nodeid; set once */
	int fd;                  /* O_PATH | O_NOFOLLOW on the backing file */
	dev_t dev;
	ino_t ino;
	mode_t type;             /* S_IFMT bits */
	mode_t mode_sent;        /* atomic: st_mode in the last attributes the
				  * kernel got (inode_mode_sent()) */
	uint64_t nlookup;        /* protected by fs->itab_mutex */
	enum ctl_kind ctl;
	/* a directory's path as its last key found it (fs_keys.h); protected
	 * by fs->keys.mutex */
	struct keys_memo key_memo;
	/* file handles: (nodeid, gen) names one file for the mount's life */
	uint32_t gen;
	struct file_handle *fh;  /* export_support: the backing's handle, or NULL */
	struct ll_inode *id_next; /* chain by nodeid (fs->idtab) */
	/* the inode's place on one of two lists: with an fd, the live list
	 * (least recently looked up first); forgotten, the forgotten list
	 * (oldest first) */
	struct ll_inode *lru_prev, *lru_next;
	/* the five above: protected by fs->itab_mutex */
	/* the open files of a regular file while passthrough is in use, and
	 * the passthrough id they all share (0: they go through the daemon);
	 * fs_passthrough.c; protected by fs->itab_mutex */
	uint32_t opens;
	int passthrough_id;
	/* where the kernel last learnt this inode (a non-directory's name in
	 * the nodeid NAME_PARENT), kept only where the kernel cannot prune
	 * (inode_note_name()); protected by fs->itab_mutex */
	fuse_ino_t name_parent;
	char *name;
};

struct plock_owner;

/* A list of inodes through their lru_prev and lru_next (fs_inode.c). */
struct inode_list {
	struct ll_inode *head, *tail;
	size_t n;
};

/* The thread that keeps the inodes with an fd below fs->fd_high (fs_inode.c). */
struct inode_pruner {
	pthread_t thread;
	pthread_cond_t cond;      /* with fs->itab_mutex */
	bool started, stop;       /* protected by itab_mutex */
	bool no_prune;            /* the kernel has no FUSE_NOTIFY_PRUNE: only
				   * the pruner thread reads and writes it */
	uint64_t rounds;          /* atomic: rounds that asked the kernel */
	uint64_t asked;           /* atomic: inodes asked to be forgotten */
};

/* Whether this mount uses FUSE passthrough (fs_passthrough.c), decided at
 * init: OFF (passthrough=off, or a libfuse without it), UNAVAILABLE
 * (wanted, but the kernel does not offer it: every open falls back), IN_USE
 * (file by file). */
enum pt_state { PT_OFF = 0, PT_UNAVAILABLE, PT_IN_USE };

#define TLFS_ITAB_SIZE 4096

/* One mount: its configuration, its lock manager and its tables (as
 * libfuse's passthrough_ll keeps them in lo_data). */
struct tlfs {
	int backing_fd;          /* O_DIRECTORY fd on BACKING */
	struct fuse_session *se; /* for notifications to the kernel; set once
				  * before the session loop */
	const struct tl_config *cfg;
	struct lockstore *store; /* owned by main(); the fs uses it through mgr only */
	struct lockmgr mgr;
	bool switch_creds;       /* root daemon serving other users */
	bool dont_mask;          /* the kernel leaves the caller's umask to us
				  * (FUSE_CAP_DONT_MASK); set at init */
	bool posix_acl;          /* the kernel checks and caches POSIX ACLs
				  * (FUSE_CAP_POSIX_ACL); set at init */
	bool killpriv;           /* the kernel leaves clearing set-ID bits to us
				  * (FUSE_CAP_HANDLE_KILLPRIV_V2); set at init */
	struct ll_inode *root;   /* the backing root's inode */
	/* lock keys (fs_keys.h): set up by tlfs_prepare(); the home of the
	 * threads that make keys is set once serving (keys_set_home()) */
	struct keys keys;
	struct renameflags rename_flags; /* flags the backing refuses */
	/* fs index (fs_index.c): an open file written since its last flush,
	 * by fd, allocated at the first write (atomic pointer and bytes) */
	uint8_t *index_dirty;
	size_t index_dirty_n;
	const char *mountpoint;  /* as given, for the metrics' labels */
	int64_t start_ms;        /* wall clock when the mount started */
	char *given_options;     /* the options as given, one per line
				  * (remount.h), with what was changed since
				  * (fs_ctl.c); main() frees it; protected by
				  * the mutex of fs_ctl.c */
	/* the directories this mount is served from (mountchain.h), shown
	 * in .treelockfs/backing; set before serving, NULL for none */
	char *backing_chain;
	dev_t own_dev;           /* this mount's device, 0 while unknown: a
				  * lookup that reaches it again is ELOOP */

	/* FUSE passthrough (fs_passthrough.c): the state, set once by init
	 * before any open; failed: passthrough=on found it unusable at init
	 * (main() then exits 1); atomic counters for .treelockfs/stats:
	 * opens answered with a passthrough id, opens that fell back,
	 * passthrough ids registered now; no_register: atomic, set when the
	 * kernel refused a registration for the whole mount (no privilege) */
	enum pt_state pt;
	bool pt_failed;
	bool pt_no_register;
	uint64_t pt_opens;
	uint64_t pt_fallbacks;
	uint64_t pt_ids;

	/* the inode table (fs_inode.c); itab_mutex is a leaf lock, never
	 * held across a syscall */
	pthread_mutex_t itab_mutex;
	struct ll_inode *itab[TLFS_ITAB_SIZE]; /* protected by itab_mutex */
	/* every inode by nodeid, and the next nodeid to give; with
	 * export_support (fs_export.c) the forgotten ones oldest first; all
	 * protected by itab_mutex */
	struct ll_inode *idtab[TLFS_ITAB_SIZE];
	fuse_ino_t next_id;
	struct inode_list forgotten;
	/* the inodes that hold an fd, least recently looked up first; above
	 * fd_high of them the pruner asks the kernel to forget the unused
	 * ones down to fd_low (fs_inode.c); protected by itab_mutex */
	struct inode_list live;
	size_t fd_high, fd_low;
	struct inode_pruner pruner;
	uint32_t next_gen;
	int export_mount_id;     /* BACKING's mount: handles of others are not kept */

	/* the POSIX lock owners (fs_plock.c); plock_mutex is a leaf lock,
	 * never held across a syscall */
	pthread_mutex_t plock_mutex;
	struct plock_owner *plocks; /* protected by plock_mutex */

	/* the descriptors for page write-back of opens whose own descriptor
	 * cannot take it (fs_passthrough.c): wb_fds[fd] is the one of the
	 * open with backing descriptor fd, plus 1 (0: none); wb_mutex is a
	 * leaf lock, never held across a syscall */
	pthread_mutex_t wb_mutex;
	int *wb_fds;             /* protected by wb_mutex */
	size_t wb_n;             /* protected by wb_mutex */

	/* lock calls that wait, each on a thread of its own (fs_plock.c);
	 * waits.mutex is a leaf lock */
	struct plockwait_set waits;
};

/* The operations, for fuse_session_new() (fs_ops.c). */
extern const struct fuse_lowlevel_ops tlfs_ops;

/* Makes the tables and the root inode and notes BACKING's path; call after
 * backing_fd is open, on a zeroed FS (fs_inode.c). Returns 0 or -errno. */
int tlfs_prepare(struct tlfs *fs);

/* Frees what tlfs_prepare() made, also after it failed half-way or was
 * never called (fs->root NULL); call after the session loop ended. This
 * function can't fail. */
void tlfs_release(struct tlfs *fs);

/* Handles of control files and directories carry a tag bit; every other
 * handle is a backing fd. */
#define CTL_TAG (UINT64_C(1) << 63)
#define DIR_TAG (UINT64_C(1) << 62)

/* ---- fs_inode.c: inodes ---- */

static inline struct tlfs *req_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* The inode of nodeid INO, and back, and the generation of nodeid INO (0
 * for none) for an entry reply. These can't fail. INO must be a nodeid the
 * kernel holds a lookup of; a nodeid from a file handle goes through
 * inode_ref_nodeid(). */
struct ll_inode *inode_get(struct tlfs *fs, fuse_ino_t ino);
fuse_ino_t inode_id(struct tlfs *fs, struct ll_inode *in);
uint64_t inode_gen(struct tlfs *fs, fuse_ino_t ino);

/* Finds or makes the inode of the open O_PATH FD (stat ST), taking one
 * lookup reference. Takes FD over (closes it when an inode exists).
 * Returns NULL when out of memory. */
struct ll_inode *inode_ref(struct tlfs *fs, int fd, const struct stat *st);
/* The inode of ST (st_dev, st_ino) when the table has it, taking one
 * lookup reference; else NULL. */
struct ll_inode *inode_find_ref(struct tlfs *fs, const struct stat *st);

/* Drops N lookup references of IN; at zero frees it, or with
 * export_support keeps it as a forgotten inode (closing its fd). */
void inode_unref(struct tlfs *fs, struct ll_inode *in, uint64_t n);

/* export_support: the inode of nodeid ID (any number, as a file handle
 * gave it) with one more lookup reference, a forgotten one reopened by its
 * backing file handle; ST gets its attributes. Returns 0, -ESTALE for a
 * nodeid that names no file (never given, dropped, the file deleted) or
 * -errno. Needs CAP_DAC_READ_SEARCH for forgotten inodes. */
int inode_ref_nodeid(struct tlfs *fs, fuse_ino_t id, struct ll_inode **out, struct stat *st);

/* Notes that the kernel was just given IN (with a lookup reference) as
 * NAME in PARENT: where the kernel cannot prune inodes by nodeid, the
 * pruner invalidates that name instead (non-directories only). This
 * function can't fail (without memory the name is not kept). */
void inode_note_name(struct tlfs *fs, struct ll_inode *in, struct ll_inode *parent,
		     const char *name);

/* At init: whether the kernel prunes inodes by nodeid (FUSE protocol
 * 7.45, FUSE_NOTIFY_PRUNE). This function can't fail. */
void inode_pruner_init(struct tlfs *fs, const struct fuse_conn_info *conn);

/* Inodes with an fd, and what the pruner did, for the stats. */
void inode_fd_counts(struct tlfs *fs, uint64_t *live, uint64_t *asked);

/* Notes BACKING's mount for export_support (after tlfs_prepare()).
 * Returns 0, or -errno when the backing filesystem gives no file handles. */
int inode_export_prepare(struct tlfs *fs);
/* Notes that the kernel gets ST (of IN) as IN's attributes now. */
void inode_mode_sent(struct ll_inode *in, const struct stat *st);

/* After a request wrote to IN, open as FD (write, fallocate,
 * copy_file_range): when the kernel last got set-user-ID or set-group-ID
 * bits for IN and the backing filesystem has cleared them since (as it
 * does for a writer that may not keep them, in cases the kernel leaves to
 * it), tells the kernel at once that IN's attributes changed, instead of
 * letting it show the old mode until its cache expires. Files without
 * those bits cost nothing. This function can't fail. */
void inode_mode_check(struct tlfs *fs, struct ll_inode *in, int fd);

/* "/proc/self/fd/FD" into BUF: the file itself, through the magic link. */
void tlfs_proc_path(int fd, char buf[64]);

/* The errno to give a caller for a call of ours that failed to allocate a
 * descriptor with ERR (positive). EMFILE is the daemon's own table being
 * full, which the caller must not take for its own: the caller sees
 * ENFILE (the system's table, as far as it can tell). The first time the
 * daemon runs out it says so in the log, once: every inode the kernel
 * remembers holds an fd, so running out is a limit to raise
 * (LimitNOFILE=, ulimit -Hn), not a failure of one request. This function
 * can't fail. */
int tlfs_fd_errno(int err);

/* ---- the operations of tlfs_ops ----
 *
 * Each ll_* function below (and ll_rename(), ll_getlk(), ll_setlk(),
 * ll_flock() further down) is the libfuse low-level operation of its
 * name, with libfuse's contract (fuse_lowlevel.h): it answers its request
 * exactly once, also on failure, and never fails otherwise. A control
 * inode or handle (fs_ctl.c) is answered as the control entry is. */

/* fs_names.c: names looked up, created and removed */
void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void ll_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets);
void ll_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void ll_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void ll_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name);
void ll_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void ll_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void ll_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi);

/* fs_attrs.c: an inode's own attributes, without an open file */
void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ll_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
		struct fuse_file_info *fi);
void ll_access(fuse_req_t req, fuse_ino_t ino, int mask);
void ll_readlink(fuse_req_t req, fuse_ino_t ino);

/* fs_files.c: open files */
void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void ll_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in_buf, off_t off,
		  struct fuse_file_info *fi);
void ll_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ll_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
		  struct fuse_file_info *fi);
void ll_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
			struct fuse_file_info *fi_out, size_t len, int flags);
void ll_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi);

/* fs_dirs.c: open directories */
void ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
		struct fuse_file_info *fi);
void ll_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ll_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);

/* fs_xattrs.c: extended attributes */
void ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
		 size_t size, int flags);
void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void ll_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

/* ---- fs_creds.c: acting as the caller ---- */

/* Acts as the requesting user on this thread, when we serve other users as
 * root. Returns 0 or -errno. */
int creds_enter(struct tlfs *fs, fuse_req_t req);

/* Before an operation on IN's backing file as the caller of REQ: acts as
 * the caller (creds_enter()) and puts the path that names IN through /proc
 * (tlfs_proc_path()) into PROC, for the calls that take a path. Returns 0
 * or -errno (PROC is set either way). */
int creds_enter_proc(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, char proc[64]);

/* Back to the daemon's own (root) credentials on this thread. */
void creds_daemon(struct tlfs *fs);

/* With noatime: sets O_NOATIME on FD (a backing file or directory the
 * caller opened), so reads through the mount leave BACKING's atime alone.
 * May switch this thread to the daemon's credentials (call creds_enter()
 * again before acting for the caller). A file the daemon may not mark
 * (a non-root daemon, another user's file) keeps its atime updates. */
void creds_noatime(struct tlfs *fs, int fd);

/* True when this thread acts as root (its own or a root caller's). */
bool creds_are_root(void);

/* True when this thread's permitted set holds capability CAP (false also
 * when it cannot be asked). This function can't fail. */
bool creds_permitted(int cap);

/* This thread's credentials, as creds_registration_begin() saved them. */
struct creds_saved {
	enum { CREDS_KEPT, CREDS_RESTRICTED, CREDS_NO_FSETID } switched;
	struct __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3];
	gid_t groups[256];
	int ngroups;
	uid_t fsuid;
	gid_t fsgid;
};

/* Before this thread registers a passthrough id (fs_passthrough.c):
 * switches it to the credentials the kernel keeps for every read and
 * write through the id, whoever opened the file, saving its own in OLD.
 * Serving several users (fs->switch_creds): nobody's fsuid and fsgid, no
 * supplementary groups, no effective capability but CAP_SYS_ADMIN (which
 * the registration needs); serving its owner only with fs->killpriv: its
 * own without CAP_FSETID; else its own. Returns 0, or -errno with this
 * thread's credentials unchanged. After 0, call creds_registration_end()
 * once the registration is made. */
int creds_registration_begin(struct tlfs *fs, struct creds_saved *old);

/* Puts back what creds_registration_begin() saved in OLD. This function
 * can't fail: the thread has the capabilities it gives back. */
void creds_registration_end(const struct creds_saved *old);

/* Set-ID bits on write. With FUSE_CAP_HANDLE_KILLPRIV_V2 the kernel stops
 * asking for security.capability before every write (the FUSE superblock
 * gets SB_NOSEC) and leaves clearing the set-user-ID and set-group-ID bits
 * on a write, truncate or O_TRUNC open to the daemon. The backing
 * filesystem does that itself on the daemon's own call, by the rules a
 * caller meets natively, as long as the thread carries what the caller
 * has: acting as an ordinary user it has no CAP_FSETID (setfsuid() drops
 * it), and security.capability goes on any write, whoever writes. What a
 * thread cannot carry by itself is a root caller without CAP_FSETID:
 * creds_kill_begin() drops it for such a call. (A passthrough write never
 * reaches the daemon: creds_registration_begin() keeps CAP_FSETID out of
 * the registration.) */

/* At init: asks the kernel for FUSE_CAP_HANDLE_KILLPRIV_V2 where it and
 * libfuse offer it, and sets fs->killpriv. */
#ifdef HAVE_FUSE_KILLPRIV_V2
void creds_killpriv_init(struct tlfs *fs, struct fuse_conn_info *conn);
#else
static inline void creds_killpriv_init(struct tlfs *fs, struct fuse_conn_info *conn)
{
}
#endif /* HAVE_FUSE_KILLPRIV_V2 */

/* Before a write, truncate or O_TRUNC open by REQ of the backing file FD
 * (any fd of it, O_PATH too), after creds_enter(), where the kernel left
 * the set-ID bits to us (a write with fs->killpriv; an O_TRUNC open
 * always, the kernel drops its own clearing of them then): when this
 * thread holds CAP_FSETID, the file has a set-ID bit and the caller lacks
 * CAP_FSETID, drops CAP_FSETID from this thread's effective set, so that
 * the backing filesystem clears the bits as natively. KILL true: the
 * kernel said the caller lacks it (a truncate's FUSE_SET_ATTR_KILL_SUID);
 * false: the caller's task is asked (/proc/PID/status; a caller that
 * cannot be asked counts as lacking it). Returns true when dropped: call
 * creds_kill_end() after the operation. This function can't fail. */
bool creds_kill_begin(struct tlfs *fs, fuse_req_t req, int fd, bool kill);

/* Puts back what creds_kill_begin() dropped (DROPPED: what it returned).
 * This function can't fail. */
void creds_kill_end(bool dropped);

/* Before a request creates an entry in PARENT with *MODE (mkdir, mknod,
 * create): makes the new entry get the mode the caller's own call would
 * get on the backing filesystem. With fs->dont_mask the kernel sends the
 * mode without the caller's umask and the umask beside it, and the umask
 * applies only where PARENT has no default ACL (a default ACL replaces
 * it). This thread takes the caller's umask (on a filesystem context of
 * its own) and lets the backing filesystem apply that rule itself; where
 * a thread cannot have its own, *MODE loses the umask here unless PARENT
 * has a default ACL. Call after creds_enter(). This function can't fail. */
void creds_umask(struct tlfs *fs, fuse_req_t req, struct ll_inode *parent, mode_t *mode);

/* ---- fs_rename.c: rename and entry locks ---- */

/* Locks an entry operation holds (lock_scope=namespace), or none. */
struct op_lock {
	struct tl_hold hold;
};

/* Takes the entry plan of NAME in PARENT when lock_scope=namespace (else
 * holds nothing). Returns 0 or -errno (EBUSY, ENOLCK, ENOENT, ...). */
int rename_lock_entry(struct tlfs *fs, fuse_req_t req, struct ll_inode *parent, const char *name,
		      struct op_lock *l);

/* Releases what rename_lock_entry() took; accepts a lock that holds nothing. */
void rename_unlock_entry(struct tlfs *fs, struct op_lock *l);

void ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	       const char *newname, unsigned int flags);

/* ---- fs_index.c: the fs index's notes ---- */

/* Each notes (lockmgr_note()) the entry an operation changed, when the
 * mount keeps an fs index (lockmgr_indexing()), else does nothing; a key
 * that cannot be found is not noted. Run as the daemon (creds_daemon()).
 * None of them can fail. */
/* NAME in PARENT (created, removed), and PARENT (its times, its links). */
void index_note_name(struct tlfs *fs, struct ll_inode *parent, const char *name);
/* The directory of KEY (a key of fs_keys.h, written to and restored). */
void index_note_parent(struct tlfs *fs, char *key);
/* The file IN (its attributes changed), by FD when it is open (-1: not). */
void index_note_inode(struct tlfs *fs, struct ll_inode *in, int fd);
/* A write to the open file FD: noted once until its next flush. */
void index_written(struct tlfs *fs, int fd);
/* A flush (RELEASE false) or the release of open file FD, opened with
 * FLAGS (release only): noted when written since, or at the release of
 * a file opened for writing (passthrough writes never reach us). */
void index_flushed(struct tlfs *fs, int fd, int flags, bool release);
/* Frees what the notes keep (tlfs_release()). */
void index_release(struct tlfs *fs);

/* ---- fs_plock.c: POSIX record locks and flock ---- */

void ll_getlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock);
void ll_setlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock,
	      int sleep);
void ll_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op);

/* Drops every lock OWNER holds on the file open as FD (its flush). */
void plock_drop_owner(struct tlfs *fs, int fd, uint64_t owner);

/* ---- fs_export.c: file handles ---- */

/* Answers a lookup of "." (a file handle's nodeid the kernel forgot) or
 * ".." (the parent of a directory the kernel found by handle) in PARENT;
 * the kernel sends them only with export_support. */
void ll_lookup_export(fuse_req_t req, fuse_ino_t parent, const char *name);

/* ---- fs_passthrough.c: FUSE passthrough ---- */

#ifdef HAVE_FUSE_PASSTHROUGH
/* Why passthrough=on cannot work for BACKING before anything is mounted
 * (this process lacks CAP_SYS_ADMIN, BACKING is on a stacked filesystem),
 * or NULL when nothing is against it. The string is static. */
const char *passthrough_refusal(const char *backing);

/* At init: asks the kernel for passthrough as fs->cfg says and sets
 * fs->pt; with passthrough=on and a kernel without it, sets fs->pt_failed
 * and ends the session. */
void passthrough_init(struct tlfs *fs, struct fuse_conn_info *conn);

/* Decides how the open file FD (just opened on regular file IN for REQ)
 * does its I/O and records the open: sets fi->backing_id to a passthrough
 * id when the kernel is to do it on the backing file, else leaves the
 * open on the daemon path (and logs the reason, once per reason). Every
 * call must be matched by one passthrough_release() (also when the open's
 * reply fails). This function can't fail: what cannot pass through falls
 * back. */
void passthrough_open(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, int fd,
		      struct fuse_file_info *fi);

/* Records the release of an open of IN; the last one closes the inode's
 * passthrough id. This function can't fail. */
void passthrough_release(struct tlfs *fs, struct ll_inode *in);
#else
static inline const char *passthrough_refusal(const char *backing)
{
	return "this build's libfuse has no passthrough (3.16 or later needed)";
}

static inline void passthrough_init(struct tlfs *fs, struct fuse_conn_info *conn)
{
	fs->pt = PT_OFF;
}

static inline void passthrough_open(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, int fd,
				    struct fuse_file_info *fi)
{
}

static inline void passthrough_release(struct tlfs *fs, struct ll_inode *in)
{
}
#endif /* HAVE_FUSE_PASSTHROUGH */
/* Before the file handle FH is closed (its release): ends the lock waits
 * made through it and drops the locks of the owners that last used it,
 * open file description locks (F_OFD_SETLK) among them: they belong to the
 * caller's open file, which is gone. */
void plock_release_fh(struct tlfs *fs, uint64_t fh);

/* ---- fs_ctl.c: the control entry ---- */

/* True when NAME in PARENT is a control entry or inside one. */
bool ctl_is_name(struct tlfs *fs, struct ll_inode *parent, const char *name);

/* The error for creating NAME in PARENT (ctl_is_name() is true): -EEXIST
 * for a control entry that exists, -EPERM for any other name inside the
 * control directory. */
int ctl_create_err(struct tlfs *fs, struct ll_inode *parent, const char *name);

/* Looks a control NAME up in PARENT (ctl_is_name() is true) into E.
 * Returns 0 or -ENOENT. */
int ctl_lookup(struct tlfs *fs, struct ll_inode *parent, const char *name,
	       struct fuse_entry_param *e);

/* The control inode of nodeid ID (below TLFS_FIRST_ID), or NULL; and the
 * nodeid of control inode IN. These can't fail. */
struct ll_inode *ctl_inode_of(fuse_ino_t id);
fuse_ino_t ctl_inode_id(const struct ll_inode *in);

/* The attributes of a control inode of KIND. This function can't fail. */
void ctl_stat(enum ctl_kind kind, struct stat *st);

/* Opens control file IN (renders its text now) and replies. */
void ctl_open(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, struct fuse_file_info *fi);

/* Replies to a read of an open control file (fi->fh & CTL_TAG). */
void ctl_read(fuse_req_t req, size_t size, off_t off, struct fuse_file_info *fi);

/* Writes to control file IN (open with fi->fh & CTL_TAG): "name=value"
 * lines for .treelockfs/options, each an option that may change while
 * mounted (lock_timeout, log_level) or one that repeats the mount's value;
 * all or nothing. Replies the byte count or EINVAL (logged, naming the
 * option and why: another option, a bad value, a control character in a
 * line, a NUL byte, no "name=value"); other control files are EBADF. */
void ctl_write(struct tlfs *fs, fuse_req_t req, struct ll_inode *in, struct fuse_bufvec *buf);

/* Frees an open control file (fi->fh & CTL_TAG). */
void ctl_release(struct fuse_file_info *fi);

/* Adds the control directory's entries from OFFSET into BUF (REM bytes
 * left, updated). Returns the bytes added. */
size_t ctl_readdir(fuse_req_t req, char *buf, size_t rem, off_t offset);

/* Writes the metrics of FS (a struct tlfs *) to F in Prometheus's text
 * format: what .treelockfs/metrics and metrics_file= show. Returns 0 or
 * -errno. */
int ctl_render_metrics(void *fs, FILE *f);

#endif /* TREELOCKFS_FS_FS_H */
