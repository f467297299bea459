/* lockwait.h - lock waits that hold no request thread
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
 *   lockwait_prepare()  counted against the bounds (per user, in total);
 *        |              a cancel now is remembered: the wait ends at once
 *   lockwait_run()      its thread makes the blocking call; a cancel sends
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
 * LOCKWAIT_SIGNAL interrupts the calls: lockwait_init() installs a handler
 * that does nothing and blocks the signal in the calling thread, so that
 * threads made after it (made by it or its descendants) ignore it; only
 * the waits' threads take it.
 */
#ifndef TREELOCKFS_LOCKWAIT_H
#define TREELOCKFS_LOCKWAIT_H

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The signal that interrupts a wait's call. SIGURG because its default
 * action is to ignore it: sent by someone else, it is harmless. */
#define LOCKWAIT_SIGNAL SIGURG

/* Defaults of the bounds (options lock_waiters, lock_waiters_per_user). */
#define LOCKWAIT_DEFAULT_TOTAL 1024
#define LOCKWAIT_DEFAULT_PER_USER 256

struct lockwait;

/* The waits of one mount. Zeroed, it is a set that was never made:
 * lockwait_destroy() accepts it. */
struct lockwait_set {
	pthread_mutex_t mutex;
	pthread_cond_t changed;    /* a wait left its call or ended */
	bool ready;
	unsigned int per_user;     /* bounds; 0 refuses every wait */
	unsigned int total;
	struct lockwait *waits;    /* prepared or running, not yet answered;
				    * protected by mutex */
	unsigned int count;        /* waits in the list; protected by mutex */
	unsigned int alive;        /* waits whose done() has not returned;
				    * protected by mutex */
	int64_t warned_us;         /* last refusal logged; protected by mutex */
};

enum lockwait_kind {
	LOCKWAIT_FLOCK,  /* flock(fd, flock_op) */
	LOCKWAIT_OFD,    /* fcntl(fd, F_OFD_SETLKW, &lk) */
};

/* What to wait for and whom to tell. Copied by lockwait_prepare(). */
struct lockwait_params {
	enum lockwait_kind kind;
	int fd;              /* must stay open until done() is called */
	int flock_op;        /* LOCK_SH or LOCK_EX (LOCKWAIT_FLOCK) */
	struct flock lk;     /* the lock (LOCKWAIT_OFD) */
	uid_t uid;           /* who waits, for the per-user bound */
	uint64_t tag;        /* what lockwait_cancel_tag() matches (a file handle) */
	const void *key;     /* what lockwait_cancel_key() matches (a request);
			      * unique among the waits not yet answered */
	void (*done)(int res, void *arg);
	void *arg;
};

/* Makes S with the bounds PER_USER (waits of one uid) and TOTAL, installs
 * the handler of LOCKWAIT_SIGNAL and blocks it in the calling thread.
 * Returns 0 or -errno. */
int lockwait_init(struct lockwait_set *s, unsigned int per_user, unsigned int total);

/* Cancels every wait with EINTR and returns when each has been answered
 * (its done() returned); then frees what S holds. Accepts a zeroed S. No
 * new wait may be prepared meanwhile. This function can't fail. */
void lockwait_destroy(struct lockwait_set *s);

/* Counts a new wait of P against the bounds and keeps it, not yet
 * running, in *OUT. Returns 0, -ENOLCK when P's user or the mount has as
 * many waits as allowed (logged, at most every 10 s), or -ENOMEM. Every
 * prepared wait must then be given to lockwait_run(). */
int lockwait_prepare(struct lockwait_set *s, const struct lockwait_params *p,
		     struct lockwait **out);

/* Starts W's thread. Returns 0: done() will be called; or -ENOLCK when no
 * thread can be made: W is gone, done() is never called. */
int lockwait_run(struct lockwait_set *s, struct lockwait *w);

/* Ends the wait of KEY with -ERR unless its lock was granted already (no
 * such wait: nothing happens). Returns once its call has returned (at once
 * when it was not running yet); done() may still be on its way. */
void lockwait_cancel_key(struct lockwait_set *s, const void *key, int err);

/* Ends every wait of TAG as lockwait_cancel_key() does and returns when
 * each has been answered (done() returned), so that nothing of this
 * module uses their descriptors any more. */
void lockwait_cancel_tag(struct lockwait_set *s, uint64_t tag, int err);

/* How many waits S has (prepared or running). */
unsigned int lockwait_count(struct lockwait_set *s);

#endif /* TREELOCKFS_LOCKWAIT_H */
