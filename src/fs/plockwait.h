/* plockwait.h - lock waits that hold no request thread
 *
 * A lock call that must wait (flock() without LOCK_NB, fcntl(F_OFD_SETLKW))
 * waits as long as another process keeps its lock. Made on a thread that
 * serves requests, each such wait takes one of the few threads a whole
 * mount shares: a handful of waiters stops the mount for everyone, and the
 * unlock that would let them go finds no thread to serve it. Here each wait
 * runs on a small thread of its own; the caller returns at once and is told
 * the outcome through a callback.
 *
 * Life of a wait:
 *
 *   plockwait_prepare()  counted against the bounds (per user, in total);
 *        |              a cancel now is remembered: the wait ends at once
 *   plockwait_run()      its thread makes the blocking call; a cancel sends
 *        |              that thread a signal until the call has returned
 *   done(res, arg)      exactly once, on the wait's thread
 *
 * Outcome (RES): 0 when the lock was granted, -errno of the call, or -ERR
 * of the cancel that ended the wait before the lock was granted. A cancel
 * that comes after the grant does not undo it: RES is 0 and the lock is
 * held, as when the grant had come just before the cancel. (Undoing it
 * would also drop what the same owner held before on that range, a read
 * lock being upgraded, and the caller's answer is sure to arrive: the
 * kernel waits for it even for a killed process, whose closes then release
 * the lock as any other.)
 *
 * Thread rules: every function may be called from any thread, except that
 * done() must not cancel or wait for its own wait. The set's mutex is a
 * leaf lock, never held across the blocking call or done(). The signal
 * PLOCKWAIT_SIGNAL interrupts the calls: plockwait_init() installs a handler
 * that does nothing and blocks the signal in the calling thread, so that
 * threads made after it (made by it or its descendants) ignore it; only
 * the waits' threads take it.
 */
#ifndef TREELOCKFS_FS_PLOCKWAIT_H
#define TREELOCKFS_FS_PLOCKWAIT_H

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The signal that interrupts a wait's call. SIGURG because its default
 * action is to ignore it: sent by someone else, it is harmless. */
#define PLOCKWAIT_SIGNAL SIGURG

struct plockwait;

/* The waits of one mount. Zeroed, it is a set that was never made:
 * plockwait_destroy() accepts it. */
struct plockwait_set {
	pthread_mutex_t mutex;
	pthread_cond_t changed;    /* a wait left its call or ended */
	bool ready;
	unsigned int per_user;     /* bounds; 0 refuses every wait */
	unsigned int total;
	struct plockwait *waits;    /* prepared or running, not yet answered;
				    * protected by mutex */
	unsigned int count;        /* waits in the list; protected by mutex */
	unsigned int alive;        /* waits whose done() has not returned;
				    * protected by mutex */
	int64_t warned_us;         /* last refusal logged; protected by mutex */
};

enum plockwait_kind {
	PLOCKWAIT_FLOCK,  /* flock(fd, flock_op) */
	PLOCKWAIT_OFD,    /* fcntl(fd, F_OFD_SETLKW, &lk) */
};

/* What to wait for and whom to tell. Copied by plockwait_prepare(). */
struct plockwait_params {
	enum plockwait_kind kind;
	int fd;              /* must stay open until done() is called */
	int flock_op;        /* LOCK_SH or LOCK_EX (PLOCKWAIT_FLOCK) */
	struct flock lk;     /* the lock (PLOCKWAIT_OFD) */
	uid_t uid;           /* who waits, for the per-user bound */
	uint64_t tag;        /* what plockwait_cancel_tag() matches (a file handle) */
	const void *key;     /* what plockwait_cancel_key() matches (a request);
			      * unique among the waits not yet answered */
	void (*done)(int res, void *arg);
	void *arg;
};

/* Makes S with the bounds PER_USER (waits of one uid) and TOTAL, installs
 * the handler of PLOCKWAIT_SIGNAL and blocks it in the calling thread.
 * Returns 0 or -errno. */
int plockwait_init(struct plockwait_set *s, unsigned int per_user, unsigned int total);

/* Cancels every wait with EINTR and returns when each has been answered
 * (its done() returned); then frees what S holds. Accepts a zeroed S. No
 * new wait may be prepared meanwhile. This function can't fail. */
void plockwait_destroy(struct plockwait_set *s);

/* Counts a new wait of P against the bounds and keeps it, not yet
 * running, in *OUT. Returns 0, -ENOLCK when P's user or the mount has as
 * many waits as allowed (logged, at most every 10 s), or -ENOMEM. Every
 * prepared wait must then be given to plockwait_run(). */
int plockwait_prepare(struct plockwait_set *s, const struct plockwait_params *p,
		     struct plockwait **out);

/* Starts W's thread. Returns 0: done() will be called; or -ENOLCK when no
 * thread can be made: W is gone, done() is never called. */
int plockwait_run(struct plockwait_set *s, struct plockwait *w);

/* Ends the wait of KEY with -ERR unless its lock was granted already (no
 * such wait: nothing happens). Returns once its call has returned (at once
 * when it was not running yet); done() may still be on its way. */
void plockwait_cancel_key(struct plockwait_set *s, const void *key, int err);

/* Ends every wait of TAG as plockwait_cancel_key() does and returns when
 * each has been answered (done() returned), so that nothing of this
 * module uses their descriptors any more. */
void plockwait_cancel_tag(struct plockwait_set *s, uint64_t tag, int err);

/* How many waits S has (prepared or running). */
unsigned int plockwait_count(struct plockwait_set *s);

#endif /* TREELOCKFS_FS_PLOCKWAIT_H */
