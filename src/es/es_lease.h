/* es_lease.h - this mount's lease in the es store (see es_acquire.c)
 *
 * Its owner id, the lease document a heartbeat thread renews every
 * lease_ttl/3, the fence (no fresh lease: no renames), a new owner id
 * when the lease was lost, and the lease documents of former owner ids
 * kept for deletion. The heartbeat also checks the index and resends the
 * kept releases (es_kept.h). Other owners' leases are es_owners.h's.
 *
 * Thread rules: every function may be called from many threads at once
 * unless it says otherwise; functions named _locked need es->mutex held,
 * all others take it themselves and never hold it across a request.
 */
#ifndef TREELOCKFS_ES_ES_LEASE_H
#define TREELOCKFS_ES_ES_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "es/es_internal.h"

/* Draws a new owner id "<name>:<pid>:<nonce>" into es->owner. Caller holds
 * es->mutex (or no thread runs yet). This function can't fail. */
void es_lease_new_owner_id_locked(struct es_store *es);

/* True while the last successful renewal was sent less than lease_ttl ago
 * (monotonic NOW). */
bool es_lease_fresh_locked(const struct es_store *es, int64_t now);

/* Creates the lease document and starts the heartbeat thread. Called once,
 * after daemonising. Returns 0, -ENOLCK (logged), -errno of the thread. */
int es_lease_start(struct es_store *es);

/* Stops the heartbeat, resends kept releases once, ends the lease (deletes
 * its document) and frees what is kept. Accepts a store never started. */
void es_lease_stop(struct es_store *es);

#endif /* TREELOCKFS_ES_ES_LEASE_H */
