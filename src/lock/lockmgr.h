/* lockmgr.h - runs lock plans against a store
 *
 * lockmgr_acquire() takes a whole plan or nothing: it asks the store, and on
 * a conflict waits (the store's own wait, or a jittered exponential backoff
 * capped at 200 ms) and retries until lock_timeout, then gives up with
 * EBUSY. A store failure (unreachable, refusing) retries on the same
 * deadline and ends in ENOLCK. Nothing is held when it returns an error.
 * A wait longer than a second is logged once; a timeout is logged with the
 * key and holder that blocked it.
 *
 * The store's circuit: an acquire that gave up because the store failed
 * until its deadline marks the store down. While it is down, acquires
 * fail with ENOLCK at once instead of waiting out lock_timeout each
 * (renames in one directory queue behind each other in the kernel, so
 * waits that each start after the last one gave up would add up), and
 * acquires that are waiting on a failing store give up too. Any answer of
 * the store that is not a failure closes the circuit again (the lease
 * heartbeat's, or a probe: at most one acquire at a time, and one a
 * second, tries the store once with a short budget).
 *
 * lockmgr_release() releases in reverse plan order (longest path first).
 *
 * The FUSE layer holds locks through lockmgr_hold_rename() and
 * lockmgr_hold_entry(): it gives the keys, the manager chooses the plan's
 * form (the endpoints alone for a store that takes them, else every key),
 * takes it and writes the hold log (hold_log=FILE).
 *
 * Thread rules: one lockmgr serves all FUSE threads; it has no lock of its
 * own (counters are atomic, holder tickets come from an atomic counter).
 */
#ifndef TREELOCKFS_LOCK_LOCKMGR_H
#define TREELOCKFS_LOCK_LOCKMGR_H

#include <stdbool.h>
#include <stdint.h>

#include "lock/lockplan.h"
#include "lock/lockstore.h"
#include "base/stats.h"

struct tl_deleg_counters;

struct lockmgr {
	struct lockstore *store;   /* not owned */
	unsigned int caps;         /* the store's TL_CAP_*, read once */
	double timeout;            /* seconds; atomic (lockmgr_set_timeout()) */
	char owner[64];            /* this mount's owner name, for holder ids */
	uint64_t next_ticket;      /* atomic */
	int stopping;              /* atomic: lockmgr_shutdown() was called (1),
				    * and is done (2) */
	int hold_log_fd;           /* lockmgr_set_hold_log(), -1 for none */
	int64_t down_us;           /* atomic: monotonic us since when the store
				    * is known down (the circuit), 0: up */
	int64_t probe_us;          /* atomic: when the last probe of a down
				    * store started */
	struct tl_stats stats;
	struct tl_delegs *delegs;  /* delegations=on (lockdeleg.h), else NULL;
				    * set by lockmgr_start(), NULL again from
				    * lockmgr_shutdown() on; atomic */
	unsigned int deleg_refs;   /* atomic: threads using DELEGS outside a
				    * covered rename; lockmgr_shutdown()
				    * frees it once none is left */
	bool indexing;             /* fs_index=NAME and a store that keeps
				    * it (lockstore_ops.note); set once */
};

/* The locks one operation holds (lockmgr_hold_rename(),
 * lockmgr_hold_entry()). PLAN is NULL while it holds nothing; callers may
 * read PLAN->n (how many keys it locks) and HOLDER; the rest is the
 * manager's. */
struct tl_hold {
	struct tl_plan *plan;
	struct tl_plan ends;       /* an endpoint plan, when PLAN points here */
	struct tl_holder holder;
	struct lockmgr *via;       /* the manager that took it: a covered
				    * rename's is the delegations' private
				    * one; NULL: this mount's store */
	struct tl_deleg *use[2];   /* the delegations a covered rename uses */
	struct tl_delegs *delegs;  /* theirs: alive until USE ends, however
				    * the mount ends meanwhile */
};

/* Initialises M over STORE. OWNER names this mount in holder ids. This
 * function can't fail. */
void lockmgr_init(struct lockmgr *m, struct lockstore *store, double timeout, const char *owner);

/* hold_log=FILE: from now on each rename hold is written to FD (open
 * with O_APPEND, not owned: close it after the last release), one line
 * per event in one write(2), so lines of concurrent renames do not mix.
 * Fields are separated by tabs; paths escape bytes below 0x21, 0x7f and
 * '\\' as \\xHH:
 *   MONO_NS acquire PID HOLDER FROM TO MODE:KEY...  (MODE S or X), when
 *           the store granted the plan (every key, whatever its form)
 *   MONO_NS release PID HOLDER ERRNO   just before the locks are released
 *           (ERRNO 0: the rename was done)
 * and, with delegations=on (lockdeleg.h), a delegation's life:
 *   MONO_NS delegate PID HOLDER DIR MODE:KEY...  once the store granted it
 *           (before any covered rename uses it)
 *   MONO_NS recall PID HOLDER WHY  no new users from now on; WHY: wanted
 *           (another owner waits), idle (unused), lease (not fresh), own
 *           (a rename of this mount needs the store) or end (the mount ends)
 *   MONO_NS return PID HOLDER      its users done, just before it is
 *           released in the store
 * The renames a delegation covers are written as acquire and release
 * lines too, under holder ids of the private store (tickets from 2^62).
 * MONO_NS is CLOCK_MONOTONIC in nanoseconds: one clock for every mount of
 * the machine, so holds of mounts in other network namespaces compare.
 * Entry holds (lock_scope=namespace) are not written. A failed write is
 * logged. This function can't fail. */
void lockmgr_set_hold_log(struct lockmgr *m, int fd);

/* Writes a delegation's line EVENT ("delegate", "recall", "return") of
 * HOLDER to the hold log, if any (see lockmgr_set_hold_log()): PLAN's
 * directory and keys when PLAN, then WHY when not NULL. This function
 * can't fail. */
void lockmgr_log_delegation(struct lockmgr *m, const char *event, const char *holder,
			    const struct tl_plan *plan, const char *why);

/* Sets the lock timeout (seconds) of the acquisitions that start from now
 * on, from any thread. This function can't fail. */
void lockmgr_set_timeout(struct lockmgr *m, double timeout);

/* Acquires PLAN for a holder it fills in H (PID: the requesting process).
 * Returns 0, -EBUSY (not obtained before the timeout), -ENOLCK (the store
 * failed). An empty plan returns 0 at once. */
int lockmgr_acquire(struct lockmgr *m, const struct tl_plan *plan, uint32_t pid,
		    struct tl_holder *h);

/* Releases what lockmgr_acquire() took. Returns 0 or -ENOLCK (logged; the
 * store's leases clean up what could not be released). */
int lockmgr_release(struct lockmgr *m, const struct tl_plan *plan, struct tl_holder *h);

/* Plans rename(FROM, TO, FLAGS) with strategy S (lockplan_rename(); BELOW:
 * the keys of every entry below FROM, for the document strategy) in the
 * form the store takes, acquires it (lockmgr_acquire(), PID: the
 * requesting process) into *OUT and writes it to the hold log. FROM and TO
 * are borrowed until lockmgr_unhold(). Returns 0, -EINVAL (a key that is
 * not normalised), -ENOMEM, -EBUSY, -ENOLCK; nothing is held but on
 * success. */
int lockmgr_hold_rename(struct lockmgr *m, enum tl_strategy s, const char *from, const char *to,
			unsigned int flags, const char *const *below, size_t nbelow, uint32_t pid,
			struct tl_hold *out);

/* Plans and acquires the entry operation on KEY (lockplan_entry()) into
 * *OUT. Returns as lockmgr_hold_rename(). */
int lockmgr_hold_entry(struct lockmgr *m, enum tl_strategy s, const char *key, uint32_t pid,
		       struct tl_hold *out);

/* Ends hold H (a rename's writes RES, 0 or -errno, to the hold log first):
 * releases it (lockmgr_release(); a failure is logged) and frees its plan.
 * Accepts a hold that holds nothing. This function can't fail. */
void lockmgr_unhold(struct lockmgr *m, struct tl_hold *h, int res);

/* fs_index=NAME: true when the store keeps an index of the tree, so
 * that the FUSE layer computes keys for lockmgr_note() only then. */
static inline bool lockmgr_indexing(const struct lockmgr *m)
{
	return m->indexing;
}

/* fs_index=NAME: KEY's entry was created, removed or changed (its
 * attributes, its contents) through the mount. Cheap: recorded, sent
 * later. Any thread. This function can't fail (a note that finds no
 * memory is dropped and counted). */
void lockmgr_note(struct lockmgr *m, const char *key);

/* lockmgr_note() of an entry whose inode number in the backing tree was
 * INO (an open file, a known directory): when KEY no longer holds that
 * inode by the time it is looked up, the index's documents of INO are
 * looked up again (the entry was renamed by another host). */
void lockmgr_note_ino(struct lockmgr *m, const char *key, uint64_t ino);

/* fs_index=NAME: the rename FROM -> TO held by H was done; TREE: what
 * moved is a directory (or an exchange involved one), so every document
 * below FROM moves below TO, and H's release (lockmgr_unhold()) is
 * deferred until those index writes were answered: a rename inside TO
 * by another host waits for them. Otherwise both keys are noted as by
 * lockmgr_note(). This function can't fail. */
void lockmgr_note_rename(struct lockmgr *m, struct tl_hold *h, const char *from, const char *to,
			 bool tree);

/* The mount is ending: acquires fail with ENOLCK from their next attempt
 * on (new ones at once), and the store ends every request by END_MS
 * (monotonic ms; its shutdown op). Delegations are given back first,
 * once the covered renames under way are done (they may end after this
 * was called). Any thread; the first call counts, and a later one returns
 * once the first is done (so that its caller may close the store), or at
 * END_MS. */
void lockmgr_shutdown(struct lockmgr *m, int64_t end_ms);

/* True while the store is known to be down (the circuit is open). */
bool lockmgr_store_down(const struct lockmgr *m);

/* Fencing before acting on held locks: returns 0 while our lease is
 * fresh, else counts the refusal and returns -ENOLCK. */
int lockmgr_check_lease(struct lockmgr *m);

/* True when other mounts may change the tree and take locks in the store
 * (its TL_CAP_OTHER_WRITERS): keys computed before the locks were held
 * must then be checked again once they are. Asked several times a rename:
 * one load. */
static inline bool lockmgr_other_writers_possible(const struct lockmgr *m)
{
	return (m->caps & TL_CAP_OTHER_WRITERS) != 0;
}

/* The store's name, for logs and the stats file. */
const char *lockmgr_store_name(const struct lockmgr *m);

/* Starts the store's background work (lease heartbeat): once, after the
 * process daemonised, before the first request; with delegations=on
 * (lock_store=es, lock_strategy=tree; else ignored, logged once) also
 * the delegations (lockdeleg.h), which lockmgr_shutdown() gives back.
 * Returns 0 or -errno (logged). */
int lockmgr_start(struct lockmgr *m);

/* Lists the store's locks under PREFIX ("/" for all) into a new array *OUT
 * of *N rows (free with lockmgr_free_list()), as lockstore_list() does,
 * with what this mount knows of its own delegations (users, served,
 * deleg_state). Returns 0 or -errno. */
int lockmgr_list(struct lockmgr *m, const char *prefix, struct tl_lock_info **out, size_t *n);

/* The delegation counters (lockdeleg.h) into OUT; false when the mount
 * has no delegations (delegations=off, or after lockmgr_shutdown()).
 * This function can't fail. */
bool lockmgr_deleg_counters(struct lockmgr *m, struct tl_deleg_counters *out);

/* Frees LIST of N rows from lockmgr_list(); accepts NULL. */
void lockmgr_free_list(struct tl_lock_info *list, size_t n);

/* Counts a rename (RENAME) or entry operation done without a plan
 * (lock_strategy=none). This function can't fail. */
void lockmgr_count_unlocked(struct lockmgr *m, bool rename);

/* Counts a rename answered with RES (0 or -errno) US microseconds after it
 * arrived, by result and in the rename duration histogram. This function
 * can't fail. */
void lockmgr_count_rename(struct lockmgr *m, int res, int64_t us);

/* What the store tells of its work (requests, bytes, durations, lease),
 * for the metrics. Does not block on the store. This function can't
 * fail. */
void lockmgr_store_metrics(struct lockmgr *m, struct tl_store_metrics *out);

/* The counters, to read with stats_get(). */
const struct tl_stats *lockmgr_stats(const struct lockmgr *m);

/* Formats the counters and the store's round trips as "name value" lines
 * into BUF (stats_format()). Returns the length written. */
size_t lockmgr_format_stats(struct lockmgr *m, char *buf, size_t size);

#endif /* TREELOCKFS_LOCK_LOCKMGR_H */
