/* es_retry.h - who retries what in the es store, and the two retry loops
 * that are not a request's own
 *
 * This chart is the one place that decides retries: a retry added
 * anywhere else in the es store belongs in it first. Deadlines are
 * monotonic ms, passed as arguments (0: none); a request's whole timeout
 * is min(es_timeout_ms, what is left of its deadline, at least
 * ES_GRACE_MS) (es_client.h).
 *
 *   level, who (file)          retries what, on what            bounded by
 *   -------------------------  -------------------------------  ------------------------------
 *   1 lockmgr_acquire()        the whole plan; on EAGAIN        lock_timeout (the rename's
 *     (lockmgr.c)              (conflict) and ENOLCK (failure)  deadline)
 *   2 try_acquire()            only the items that failed, and  ES_ITEM_RETRIES rounds; before
 *     (es_acquire.c)           the intent; on an item's 429 or  each es_retry_pause(), which
 *                              5xx, or the whole request        gives up when the deadline is
 *                              failing                          nearer than the pause
 *   3 es_send_idempotent()     a release-like bulk (release,    as level 2; then kept for
 *     (es_kept.c)              rollback, unmark, evict); as 2   level 5, never dropped
 *   4 httpc_request()          one request, on the next node    the request's timeout (from
 *     (httpc.c)                of es_url; on no answer          the deadline); a failed node
 *                                                               is skipped HTTPC_NODE_RETRY_MS
 *   5 heartbeat thread         kept releases                    none: until sent, and sent
 *     (es_kept_flush(),        (ES_PENDING_FIRST_MS, doubling   once more a request timeout
 *     driven by es_lease.c)    up to the heartbeat's period)    later; one last try at unmount
 *   6 heartbeat thread         the lease renewal; on any        every lease_ttl/3, a third of
 *     (es_lease.c)             failure                          that while failing; fenced
 *                                                               after lease_ttl
 *   7 es_start_retry()         a start step (cluster check,     es_start_timeout, passed to
 *     (es_retry.c)             bootstrap, first lease); on      the step as its deadline
 *                              EAGAIN (starting, 429, 5xx, no
 *                              answer)
 *   8 es_batch_send()          nothing: a bulk still queued     its deadline + ES_GRACE_MS
 *     (es_batch.c)             at its deadline fails unsent     (-ETIMEDOUT)
 *   9 Elasticsearch            a scripted update that met a     ES_RETRY_ON_CONFLICT
 *                              concurrent one
 *
 * Why this many: each level answers a failure the level above cannot see.
 * Level 1 waits for other holders; level 2 spares a plan its conflict
 * checks when one node hiccups; level 3 makes sure a lock we let go of is
 * let go of in the store even after the rename returned; level 4 hides a
 * dead node from all of them. No level retries a refusal (401/403, 400):
 * that is -EACCES at once. Whatever a level sends again is idempotent
 * (holder ids in the scripts; a create that 409s is checked against our
 * holder id), so an ambiguous failure (timeout after sending) is safe to
 * retry. (treelockctl owners reads the owners again every 200 ms until it
 * can judge them: a wait for a lease to move, not a retry.)
 *
 * Thread rules: any thread.
 */
#ifndef TREELOCKFS_ES_ES_RETRY_H
#define TREELOCKFS_ES_ES_RETRY_H

#include <stdbool.h>
#include <stdint.h>

#include "es/es_internal.h"

/* Levels 2 and 3: attempts, and the first pause (doubling: 100, 200 ms
 * before the second and third). */
#define ES_ITEM_RETRIES 3
#define ES_RETRY_BASE_MS 50
/* Level 5: the first resend of a kept release, then doubling up to the
 * heartbeat's period. */
#define ES_PENDING_FIRST_MS 100
/* Level 7: first and largest pause between start attempts. */
#define ES_START_BACKOFF_MS 100
#define ES_START_BACKOFF_MAX_MS 2000

/* Sleeps MS milliseconds (nothing when MS <= 0). */
void es_sleep_ms(int64_t ms);

/* Levels 2 and 3: before ATTEMPT (1, 2, ...) sleeps its pause
 * (ES_RETRY_BASE_MS << ATTEMPT) and returns true; returns false at once
 * when DEADLINE (monotonic ms, 0: none) is no further than that pause:
 * the caller's deadline decides then (lockmgr, or the heartbeat). */
bool es_retry_pause(int64_t deadline, int attempt);

/* Level 7: runs STEP(ES, ARG, DEADLINE) until it returns anything but
 * -EAGAIN, with a doubling backoff (ES_START_BACKOFF_MS ..
 * ES_START_BACKOFF_MAX_MS, jittered) for up to es_start_timeout seconds:
 * a store that is starting, overloaded or flaky does not fail a mount at
 * once. DEADLINE is the end of es_start_timeout (0 with
 * es_start_timeout=0: one attempt, each request with the client's
 * timeout). WHAT names the step in messages. Each failed attempt is
 * logged with its reason (es_client_last_error()); when time runs out the
 * last reason is. Returns what STEP returned, -EAGAIN turned into
 * -ENOLCK. The URLs in messages never carry credentials. */
int es_start_retry(struct es_store *es, const char *what,
		   int (*step)(struct es_store *, bool, int64_t deadline), bool arg);

#endif /* TREELOCKFS_ES_ES_RETRY_H */
