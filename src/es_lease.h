/* es_lease.h - owners and leases of the es store (see lockstore_es.c)
 *
 * This mount's side: its owner id, the lease document a heartbeat thread
 * renews every lease_ttl/3, and releases kept for a later resend when the
 * store could not be reached. The observer's side: what it saw of other
 * owners' lease documents on its own monotonic clock, whether they are
 * dead, taking over a dead owner's locks, reaping.
 *
 * Thread rules: every function may be called from many threads at once
 * unless it says otherwise; functions named _locked need es->mutex held,
 * all others take it themselves and never hold it across a request.
 */
#ifndef TREELOCKFS_ES_LEASE_H
#define TREELOCKFS_ES_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "es_i.h"

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

/* Sends B (idempotent release-like items) with retries; keeps it for the
 * heartbeat when the store cannot be reached. Returns 0, -EINPROGRESS
 * (kept: the heartbeat thread resends it within ES_PENDING_FIRST_MS,
 * backing off) or -ENOLCK (neither sent nor kept). */
int es_send_idempotent(struct es_store *es, struct buf *b);

/* As es_send_idempotent(), for a rename's release: when B would have to
 * queue behind other requests, it is handed to the client's sender thread
 * (es_bulk_send_detached()) and 0 is returned at once; what fails there
 * is kept for the heartbeat as above. */
int es_send_release(struct es_store *es, struct buf *b);

/* Records that OWNER's lease document has SEQ (-1: gone) now, TTL_MS its
 * lease_ttl (0: unknown). Returns whether the owner is dead. */
bool es_obs_record(struct es_store *es, const char *owner, int64_t seq, int64_t ttl_ms);

/* The seq_no last seen of OWNER, INT64_MIN when never seen. */
int64_t es_obs_seq(struct es_store *es, const char *owner);

/* Reads the lease documents of OWNERS[0..N) with one _mget and records
 * them; DEAD[i] tells which are dead. Returns 0, -EAGAIN, -ENOMEM. */
int es_judge_owners(struct es_store *es, char *const *owners, size_t n, bool *dead);

/* The owners known dead, as a new array of new strings (free with
 * es_strv_free()). Returns 0 or -ENOMEM. */
int es_dead_owners(struct es_store *es, char ***out, size_t *n);
void es_strv_free(char **v, size_t n);

/* Takes over everything dead OWNER holds: the documents EXTRA[0..N) (ids
 * of keys it blocks), every lock its intents name, its lease document.
 * Best effort (logged). */
void es_takeover(struct es_store *es, const char *owner, char *const *extra, size_t n);

/* True when OWNER was reaped since it was last seen alive. */
bool es_obs_reaped(struct es_store *es, const char *owner);

/* Evicts OWNER from every lock its intents and exclusive locks name, in
 * one bulk, then deletes its lease document; with DROP_INTENTS its intents
 * too. *NLOCKS gets the number of lock documents changed. Returns 0 or
 * -ENOLCK. The caller decides that OWNER is dead. */
int es_reap_owner(struct es_store *es, const char *owner, bool drop_intents, size_t *nlocks);

/* True when document source SRC names OWNER: as its owner, or in a holder
 * or waiter id of its holders/waiters maps. */
bool es_doc_names_owner(const cJSON *src, const char *owner);

#endif /* TREELOCKFS_ES_LEASE_H */
