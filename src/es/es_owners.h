/* es_owners.h - other owners of the es store: the observer's side
 *
 * What this mount (or treelockctl) saw of other owners' lease documents,
 * on its own monotonic clock; whether they are dead; taking over a dead
 * owner's locks at a conflict; reaping. This mount's own lease is
 * es_lease.h's.
 *
 * Thread rules: every function may be called from many threads at once;
 * each takes es->mutex itself (the table es->obs) and never holds it
 * across a request. DEADLINE: monotonic ms, 0: none (es_client.h).
 */
#ifndef TREELOCKFS_ES_ES_OWNERS_H
#define TREELOCKFS_ES_ES_OWNERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "es/es_internal.h"

/* Records that OWNER's lease document has SEQ (-1: gone) now, TTL_MS its
 * lease_ttl (0: unknown). Returns whether the owner is dead. */
bool es_obs_record(struct es_store *es, const char *owner, int64_t seq, int64_t ttl_ms);

/* The seq_no last seen of OWNER, INT64_MIN when never seen. */
int64_t es_obs_seq(struct es_store *es, const char *owner);

/* True when OWNER was reaped since it was last seen alive. */
bool es_obs_reaped(struct es_store *es, const char *owner);

/* Reads the lease documents of OWNERS[0..N) with one _mget and records
 * them; DEAD[i] tells which are dead. Returns 0, -EAGAIN, -ENOMEM. */
int es_judge_owners(struct es_store *es, char *const *owners, size_t n, bool *dead,
		    int64_t deadline);

/* The owners known dead, as a new array of new strings (free with
 * es_strv_free()). Returns 0 or -ENOMEM. */
int es_dead_owners(struct es_store *es, char ***out, size_t *n);
void es_strv_free(char **v, size_t n);

/* Takes over everything dead OWNER holds: the documents EXTRA[0..N) (ids
 * of keys it blocks), every lock its intents name, its lease document.
 * Best effort (logged). */
void es_takeover(struct es_store *es, const char *owner, char *const *extra, size_t n,
		 int64_t deadline);

/* How es_reap_owner() reaps. */
enum {
	ES_REAP_DROP_INTENTS = 1u << 0, /* the owner's intents go too */
	ES_REAP_EVERY_DOC = 1u << 1,    /* reads every document (shares and
					 * marks no intent names), not only
					 * what names the owner (a term query) */
	ES_REAP_SELF = 1u << 2,         /* this mount's own owner at a clean
					 * exit: logged only when it changed
					 * something */
};

/* Evicts OWNER from every lock its intents and exclusive locks name (with
 * ES_REAP_EVERY_DOC: from every document naming it), in one bulk, then
 * deletes its lease document; flags HOW as above. *NLOCKS gets the number
 * of lock documents changed. Returns 0 or -ENOLCK. The caller decides that
 * OWNER is dead (or is OWNER, ending). */
int es_reap_owner(struct es_store *es, const char *owner, unsigned int how, size_t *nlocks,
		  int64_t deadline);

/* True when document source SRC names OWNER: as its owner, or in a holder
 * or waiter id of its holders/waiters maps. */
bool es_doc_names_owner(const cJSON *src, const char *owner);

/* Frees the table of what was seen (at close). */
void es_owners_free(struct es_store *es);

#endif /* TREELOCKFS_ES_ES_OWNERS_H */
