/* lockstore.h - the lock store interface (one vtable, several backends)
 *
 * A store keeps the locks of plans (lockplan.h) for one or many mounts.
 * The lock manager (lockmgr.h) drives it and never knows which backend it
 * is: mem (in-process table, lockstore_mem.c) or es (an Elasticsearch or
 * OpenSearch index shared by many hosts, src/es/).
 *
 * Protocol, per plan:
 *
 *   try_acquire --0--> (rename) --> release
 *        |
 *        +--(-EAGAIN: conflict, nothing held)--> wait --> try_acquire ...
 *        +--(-ENOLCK: store failed, nothing held)--> give up or retry
 *   give up while waiting --> abandon (drops this holder's waiter marks)
 *
 * All-or-nothing: try_acquire either takes every item of the plan or none,
 * and never waits while holding, so two plans cannot deadlock.
 *
 * The plan and the holder given to try_acquire stay valid, unchanged and
 * in place until release (after a grant) or abandon (after a refusal) of
 * that holder returns: a store may keep pointers to them (the mem store
 * does, and keeps nothing else).
 *
 * Fairness: a refused request leaves a *waiter mark* (its age and modes) on
 * the plan's keys. A request is refused on a key held in an incompatible
 * mode, or marked by an OLDER waiter in an incompatible mode. The oldest
 * request is thus only ever blocked by holders, which always finish, so
 * nothing starves and nothing deadlocks: a rename waits at most for the
 * renames that held or waited for its keys when it started.
 *
 * Thread rules: every op may be called from many threads at once.
 *
 * This header also holds the map of the lock core, the layer between the
 * FUSE side (src/fs/) and the stores:
 *
 * Files in src/lock/:
 *
 *   lockplan.[ch]     which locks an operation needs, in which order (pure)
 *   lockmgr.[ch]      runs plans against the store: waits, deadline,
 *                     circuit, holds
 *   lockdeleg.[ch]    directory delegations: store locks a mount keeps
 *                     so that renames below lock in its memory
 *   lockstore.[ch]    this interface; lockstore.c: the registry of
 *                     backends, opening one, the one errno mapping, a
 *                     store's base
 *   lockstore_impl.h  the backends' constructors, for lockstore.c; a
 *                     store's base, mutex and condition, for the backends
 *   lockstore_mem.c   the embedded store: the plans it holds, in a list
 *
 * Depends on: base, config.
 * Exception: lockstore.c uses es (it opens the es store: lock_store=es).
 */
#ifndef TREELOCKFS_LOCK_LOCKSTORE_H
#define TREELOCKFS_LOCK_LOCKSTORE_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "lock/lockplan.h"
#include "base/stats.h"

struct tl_config;
struct tl_store_options;
struct lockstore;

/* One rename (or entry op) as a lock holder. Filled by lockmgr before the
 * first try_acquire; what a store keeps per holder hangs from PRIV. */
struct tl_holder {
	uint64_t ticket;       /* age: smaller is older; unique in this process */
	int64_t start_ms;      /* wall clock at the first attempt (for display) */
	int64_t deadline_us;   /* monotonic: lock_timeout ends; a store caps
				* every request made for this holder by it */
	uint32_t pid;          /* requesting process on this host, 0 if unknown */
	bool delegation;       /* a directory delegation (lockdeleg.h): its
				* id is "<owner>#d<ticket>"; with an fs
				* index its release waits for the index
				* writes of every rename noted before it */
	bool waited;           /* set by lockmgr_acquire(): refused at least
				* once before it got the plan */
	uint64_t index_seq;    /* fs index: the ticket of this rename's
				* index writes (lockmgr_note_rename()), 0:
				* none; its release waits until they were
				* answered */
	char id[96];           /* unique holder id: "<owner>#<ticket>" */
	void *priv;            /* the store's, NULL at first; freed by the store
				* by the time release or abandon returns */
};

/* Why a try_acquire was refused, for logs. */
struct tl_conflict {
	char key[256];         /* the contended key (truncated) */
	char holder[128];      /* who holds or waits for it: "host:pid ..." */
	int64_t held_ms;       /* for how long, if known, else -1 */
};

/* One row of a listing (treelockctl locks, .treelockfs/locks). */
struct tl_lock_info {
	char *key;
	enum tl_lock_mode mode;
	unsigned int count;    /* shared holders, 1 for exclusive */
	char *holders;         /* "owner#n, owner#m" */
	int64_t age_ms;        /* since it was taken, -1 if unknown */
	unsigned int waiters;
	/* set by lockstore_list(), whatever the store: */
	bool delegation;       /* KEY is a directory delegated (lockdeleg.h) to
				* its holder: held exclusive by an id
				* "<owner>#d<ticket>" (its ancestors are
				* shared by the same id) */
	/* set by lockmgr_list() for a delegation of its own mount, else
	 * -1 and NULL: */
	int users;             /* renames using it now */
	int64_t served;        /* renames it served */
	const char *deleg_state; /* "held", "recalled" (no new users) or
				  * "releasing" (a static string) */
};

/* What a store tells of its own work, for the metrics (metrics.h). A
 * field the store does not know stays as lockstore_metrics_init() left
 * it: 0, or -1 where it says so. */
struct tl_store_metrics {
	uint64_t requests;         /* round trips sent (answered or not) */
	uint64_t failures;         /* round trips with no answer (refused,
				    * timed out, cut) */
	uint64_t bytes_sent;       /* request bodies */
	uint64_t bytes_received;   /* response bodies */
	const struct tl_hist *request_seconds; /* round-trip durations, or NULL */
	int64_t lease_age_ms;      /* since this mount's lease was last renewed,
				    * -1: the store has no lease */
	int lease_fresh;           /* 1 fresh, 0 stale (fenced), -1 no lease */
	int64_t owners_alive;      /* other owners seen alive, -1 unknown */
	int64_t owners_dead;       /* other owners known dead, -1 unknown */
	int64_t served_us;         /* CLOCK_MONOTONIC us of the store's last
				    * answer that was not a failure (its
				    * circuit, lockmgr.c), 0: none yet, -1:
				    * the store cannot fail (mem) */
	int store_down;            /* 1 while the lock manager holds the store
				    * down (its circuit), 0 up, -1 the store
				    * cannot fail; set by lockmgr */
};

/* Sets M to "nothing known". This function can't fail. */
void lockstore_metrics_init(struct tl_store_metrics *m);

/* What lockstore_ops.note is told (fs_index=NAME). */
enum {
	/* KEY's entry changed through the mount (created, removed, its
	 * attributes or contents): its document is written as the tree
	 * holds it when it is sent, changes of one key coalescing */
	TL_NOTE_ENTRY = 0,
	/* a directory (or, exchanged, either entry) was renamed KEY -> TO:
	 * the documents below KEY go and those below TO come, crawled */
	TL_NOTE_TREE = 1,
};

/* Capabilities a store reports in lockstore_ops.caps. */
enum {
	/* Other mounts (other hosts) may change the tree and take locks in
	 * this store: a key computed before the locks were held may have
	 * been renamed away meanwhile, whatever this mount did. A store
	 * shared by several mounts must set it; without it the mount
	 * assumes it is the only writer (the mem store). */
	TL_CAP_OTHER_WRITERS = 1u << 0,
	/* The store takes a tree plan that carries only its endpoints
	 * (lockplan_rename_endpoints(): items NULL) wherever it takes a
	 * plan. */
	TL_CAP_ENDPOINT_PLANS = 1u << 1,
};

struct lockstore_ops {
	const char *name;
	unsigned int caps;     /* TL_CAP_* */

	/* Starts background work (lease heartbeat). Called once after the
	 * process daemonised, before the first request. May be NULL. */
	int (*start)(struct lockstore *st);

	/* Takes every item of PLAN for H, or none. Returns 0 (all held),
	 * -EAGAIN (a conflict: nothing held, WHY filled, waiter marks left),
	 * -ENOLCK (the store failed: unreachable, 5xx, 429, timeout; nothing
	 * held; lockmgr retries until the deadline), -EACCES (the store
	 * refuses us for good: credentials, a request it calls malformed;
	 * nothing held; not retried). */
	int (*try_acquire)(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h,
			   struct tl_conflict *why);

	/* Blocks until a retry may succeed or until DEADLINE (CLOCK_MONOTONIC).
	 * ATTEMPT counts refusals so far (for backoff). Returns 0 or
	 * -ETIMEDOUT. May be NULL: lockmgr then sleeps a jittered exponential
	 * backoff. */
	int (*wait)(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h,
		    unsigned int attempt, const struct timespec *deadline);

	/* Drops H's waiter marks after it gave up. Can't fail (best effort). */
	void (*abandon)(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h);

	/* Releases every item of PLAN held by H, longest path first. Returns
	 * 0 or -ENOLCK (what could not be released expires with the lease). */
	int (*release)(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h);

	/* True while this mount's lease is fresh enough to act on its locks
	 * (fencing). May be NULL: always fresh (the mem store). */
	bool (*lease_fresh)(struct lockstore *st);

	/* Lists the locks under PREFIX ("/" or NULL for all). Writes a new
	 * array to *OUT (free with lockstore_free_list()). Returns 0 or -errno. */
	int (*list)(struct lockstore *st, const char *prefix, struct tl_lock_info **out,
		    size_t *n);

	/* The mount is ending (unmounted, or a signal): every request of
	 * the store ends by END_MS (CLOCK_MONOTONIC ms), those in flight
	 * included, and later ones fail at once; what cannot be released
	 * by then expires with the lease. Any thread, once. May be NULL (a
	 * store that makes no requests). */
	void (*shutdown)(struct lockstore *st, int64_t end_ms);

	/* Of the lock documents of KEYS[0..N) (one request), sets WANTED[i]
	 * when key I carries a waiter mark of another owner (or of a rename
	 * of this mount: not a delegation) in a mode that conflicts with
	 * MODES[i] (a delegation's recall, lockdeleg.h).
	 * Returns 0 or -errno. May be NULL: no delegations. */
	int (*wanted)(struct lockstore *st, const char *const *keys,
		      const enum tl_lock_mode *modes, size_t n, bool *wanted);

	/* Store round trips so far (0 for the mem store). May be NULL. */
	uint64_t (*requests)(struct lockstore *st);

	/* Fills in what the store knows of M (lockstore_metrics_init() ran
	 * first). Must not block on the store: it is read at every scrape.
	 * May be NULL. */
	void (*metrics)(struct lockstore *st, struct tl_store_metrics *m);

	/* fs_index=NAME: what a FUSE operation changed (TL_NOTE_*; TO only
	 * with TL_NOTE_TREE), for the store's document index of the tree;
	 * cheap (the request path only records it). Returns 0, or for
	 * TL_NOTE_TREE the ticket of its index writes, for
	 * tl_holder.index_seq (0: nothing to wait for). INO: with
	 * TL_NOTE_ENTRY, the inode number the entry had in the backing tree
	 * when noted (0: unknown), so that a change made through a name
	 * another host renamed meanwhile reaches the entry's new path. May
	 * be NULL: no index. */
	uint64_t (*note)(struct lockstore *st, const char *key, const char *to, unsigned int what,
			 uint64_t ino);

	/* Appends the store's own "name value" lines to BUF (LEN used of
	 * SIZE) for the stats file; returns the new length. May be NULL. */
	size_t (*format_stats)(struct lockstore *st, char *buf, size_t size, size_t len);

	/* Stops background work and frees the store; accepts NULL. */
	void (*close)(struct lockstore *st);
};

/* Every backend embeds this as its first member. */
struct lockstore {
	const struct lockstore_ops *ops;
	const struct tl_config *cfg;
};

/* One backend, as lock_store=NAME selects it: its name, its own options
 * (parsed, checked and freed by config.c through them) and its
 * constructor (lockstore_open()). A new backend is one more file and one
 * more row of lockstore_backends. */
struct lockstore_backend {
	const char *name;                       /* lock_store=NAME */
	const struct tl_store_options *options; /* config.h; NULL: none */
	int (*open)(const struct tl_config *cfg, struct lockstore **out);
};

/* The one registry of backends: TL_STORE_COUNT rows, by enum
 * tl_store_kind (config.h). */
extern const struct lockstore_backend lockstore_backends[];

/* Opens the store named by cfg->lock_store. For es this checks the cluster
 * and bootstraps the index (no threads yet: start() comes later). Returns 0,
 * -EINVAL (bad configuration, logged), -ENOLCK (store unreachable or
 * refusing, logged), -ENOMEM. */
int lockstore_open(const struct tl_config *cfg, struct lockstore **out);

/* Closes ST; accepts NULL. */
void lockstore_close(struct lockstore *st);

/* Lists the locks of ST under PREFIX as ops->list does, and marks the
 * rows that are delegations (tl_lock_info.delegation; users and served
 * -1). Returns 0 or -errno of ops->list. */
int lockstore_list(struct lockstore *st, const char *prefix, struct tl_lock_info **out,
		   size_t *n);

/* True when ID is a holder id of a directory delegation,
 * "<owner>#d<ticket>", or a listing's holders that end with one (the
 * mem store's "pid N, <id>"). This function can't fail. */
bool lockstore_holder_is_delegation(const char *id);

void lockstore_free_list(struct tl_lock_info *list, size_t n);

/* The one place a store's results become errno for users (the man page's
 * ERRORS): 0 -> 0; a conflict still there at the deadline (-EAGAIN) ->
 * -EBUSY; anything else (-ENOLCK: unreachable or failing, -EACCES: refusing
 * us, -ESTALE: our lease lost, -ENOMEM, ...) -> -ENOLCK. This function
 * can't fail. */
int lockstore_errno(int store_err);

#endif /* TREELOCKFS_LOCK_LOCKSTORE_H */
