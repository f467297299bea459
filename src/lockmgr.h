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
 * lockmgr_release() releases in reverse plan order (longest path first).
 *
 * Thread rules: one lockmgr serves all FUSE threads; it has no lock of its
 * own (counters are atomic, holder tickets come from an atomic counter).
 */
#ifndef TREELOCKFS_LOCKMGR_H
#define TREELOCKFS_LOCKMGR_H

#include <stdbool.h>
#include <stdint.h>

#include "lockstore.h"
#include "stats.h"

struct lockmgr {
	struct lockstore *store;   /* not owned */
	unsigned int caps;         /* the store's TL_CAP_*, read once */
	double timeout;            /* seconds; atomic (lockmgr_set_timeout()) */
	char owner[64];            /* this mount's owner name, for holder ids */
	uint64_t next_ticket;      /* atomic */
	int stopping;              /* atomic: lockmgr_shutdown() was called */
	struct tl_stats stats;
};

/* Initialises M over STORE. OWNER names this mount in holder ids. This
 * function can't fail. */
void lockmgr_init(struct lockmgr *m, struct lockstore *store, double timeout, const char *owner);

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

/* The mount is ending: acquires fail with ENOLCK from their next attempt
 * on (new ones at once), and the store ends every request by END_MS
 * (monotonic ms; its shutdown op). Any thread; the first call counts. */
void lockmgr_shutdown(struct lockmgr *m, int64_t end_ms);

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

/* True when the store takes tree plans by their endpoints alone (its
 * TL_CAP_ENDPOINT_PLANS, see lockplan_rename_endpoints()). */
static inline bool lockmgr_takes_endpoint_plans(const struct lockmgr *m)
{
	return (m->caps & TL_CAP_ENDPOINT_PLANS) != 0;
}

/* The store's name, for logs and the stats file. */
const char *lockmgr_store_name(const struct lockmgr *m);

/* Starts the store's background work (lease heartbeat): once, after the
 * process daemonised, before the first request. Returns 0 or -errno
 * (logged). */
int lockmgr_start(struct lockmgr *m);

/* Lists the store's locks under PREFIX ("/" for all) into a new array *OUT
 * of *N rows (free with lockmgr_free_list()). Returns 0 or -errno. */
int lockmgr_list(struct lockmgr *m, const char *prefix, struct tl_lock_info **out, size_t *n);

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

#endif /* TREELOCKFS_LOCKMGR_H */
