/* es_kept.h - release-like bulks of the es store that must reach it
 *
 * A release, a rollback, dropping waiter marks and evicting a dead owner
 * are idempotent (the scripts name the holder or the owner), so they are
 * sent again until the store has them: a few times within the caller's
 * deadline, then kept and resent by the heartbeat thread (es_lease.c
 * calls es_kept_flush()), even after the rename returned. Which level
 * retries what: es_retry.h.
 *
 * Thread rules: es_send_*() from any thread; es_kept_flush() from the
 * heartbeat thread (or, once it stopped, the closing one);
 * es_kept_free() from the closing thread. The kept list is es->pending,
 * under es->mutex.
 */
#ifndef TREELOCKFS_ES_ES_KEPT_H
#define TREELOCKFS_ES_ES_KEPT_H

#include <stdint.h>

#include "base/buf.h"
#include "es/es_internal.h"

/* Sends B (idempotent release-like items) with retries under DEADLINE
 * (monotonic ms, 0: none); keeps it for the heartbeat when the store
 * cannot be reached. Returns 0, -EINPROGRESS (kept: the heartbeat thread
 * resends it within ES_PENDING_FIRST_MS, backing off) or -ENOLCK (neither
 * sent nor kept). */
int es_send_idempotent(struct es_store *es, struct buf *b, int64_t deadline);

/* As es_send_idempotent(), for a rename's release: when B would have to
 * queue behind other requests, it is handed to the sender thread
 * (es_batch_send_detached()) and 0 is returned at once; what fails there
 * is kept for the heartbeat as above. */
int es_send_release(struct es_store *es, struct buf *b, int64_t deadline);

/* Resends the kept releases that are due, under no deadline; what fails
 * stays kept, backing off. */
void es_kept_flush(struct es_store *es);

/* Frees what is still kept (at close, after a last es_kept_flush()). */
void es_kept_free(struct es_store *es);

#endif /* TREELOCKFS_ES_ES_KEPT_H */
