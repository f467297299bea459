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
	double timeout;            /* seconds */
	char owner[64];            /* this mount's owner name, for holder ids */
	uint64_t next_ticket;      /* atomic */
	struct tl_stats stats;
};

/* Initialises M over STORE. OWNER names this mount in holder ids. This
 * function can't fail. */
void lockmgr_init(struct lockmgr *m, struct lockstore *store, double timeout, const char *owner);

/* Acquires PLAN for a holder it fills in H (PID: the requesting process).
 * Returns 0, -EBUSY (not obtained before the timeout), -ENOLCK (the store
 * failed). An empty plan returns 0 at once. */
int lockmgr_acquire(struct lockmgr *m, const struct tl_plan *plan, uint32_t pid,
		    struct tl_holder *h);

/* Releases what lockmgr_acquire() took. Returns 0 or -ENOLCK (logged; the
 * store's leases clean up what could not be released). */
int lockmgr_release(struct lockmgr *m, const struct tl_plan *plan, struct tl_holder *h);

/* True while the store says our lease is fresh (fencing). */
bool lockmgr_lease_fresh(struct lockmgr *m);

#endif /* TREELOCKFS_LOCKMGR_H */
