/* es_store.h - what treelockctl needs of the es store beyond the vtable
 *
 * The store itself is opened with lockstore_open() (lock_store=es); these
 * functions take the struct lockstore it returned and fail with -EINVAL on
 * another backend. None of them starts a lease: treelockctl is an observer,
 * not an owner. Memory returned is owned by the caller (free functions
 * below accept NULL). Thread rules: as the vtable.
 */
#ifndef TREELOCKFS_ES_ES_STORE_H
#define TREELOCKFS_ES_ES_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lock/lockstore.h"

struct tl_config;
struct tl_store_options;

/* The es backend's options (es_url, es_index, ...), for lockstore_backends. */
extern const struct tl_store_options es_store_options;

enum es_owner_state {
	ES_OWNER_ALIVE = 0,   /* its lease document moved while we looked, or is recent */
	ES_OWNER_DEAD,        /* document gone, or unmoved for 2 x lease_ttl while we looked */
	ES_OWNER_UNKNOWN,     /* not observed long enough to tell */
};

struct es_owner_info {
	char *id;             /* "host:pid:nonce" */
	char *name;           /* the owner= name */
	int64_t seq_no;       /* of its lease document, -1 when gone */
	int64_t renewed_ms;   /* wall clock of its last renewal (its clock), -1 if unknown */
	int64_t ttl_ms;       /* its lease_ttl */
	enum es_owner_state state;
	unsigned int delegations; /* directories delegated to it (lockdeleg.h) */
};

struct es_intent_info {
	char *holder;         /* "<owner id>#<ticket>" */
	char *owner;          /* owner id */
	char *from, *to;      /* to is NULL for entry operations */
	int64_t start_ms;     /* wall clock of the holder's first attempt */
	size_t nkeys;         /* keys the plan locks */
	enum es_owner_state owner_state;
};

/* True when CFG names es nodes (es_url), whatever lock_store says. */
bool es_store_configured(const struct tl_config *cfg);

/* Opens an es store for treelockctl: like lockstore_open() but it does not
 * create the index nor refuse a strategy other than cfg's. Returns 0,
 * -EINVAL, -ENOLCK (unreachable, logged), -ENOMEM. */
int es_store_open_ctl(const struct tl_config *cfg, struct lockstore **out);

/* Prints reachability, product and version, index, mapping and strategy to
 * OUT, as lines of text or (JSON) as one JSON document (described by
 * contrib/treelockctl.schema.json). Returns 0 when everything is in
 * order, -ENOENT when the index is missing, -EPROTO when its mapping or
 * strategy is not ours, -ENOLCK (nothing printed with JSON: the caller
 * reports the error). */
int es_store_check(struct lockstore *st, FILE *out, bool json);

/* Lists owners. With OBSERVE_MS > 0, owners whose state cannot be told at
 * once are read again for up to OBSERVE_MS (monotonic) so that dead ones
 * are told apart (2 x their lease_ttl unmoved). Returns 0 or -errno. */
int es_store_owners(struct lockstore *st, unsigned int observe_ms, struct es_owner_info **out,
			size_t *n);
void es_store_free_owners(struct es_owner_info *o, size_t n);

/* Lists intents (unfinished or in-flight operations), with the state of
 * their owner as es_store_owners() tells it. Returns 0 or -errno. */
int es_store_intents(struct lockstore *st, unsigned int observe_ms,
			 struct es_intent_info **out, size_t *n);
void es_store_free_intents(struct es_intent_info *it, size_t n);

/* Deletes the lock document of KEY (a path or "global"), whoever holds it.
 * Returns 0, -ENOENT (no such lock), -ENOLCK. */
int es_store_break(struct lockstore *st, const char *key);

/* Removes every lock share, waiter mark and intent of OWNER (an owner id)
 * and its lease document (every document is read). *NLOCKS receives the
 * number of lock documents changed. Returns 0, -ENOLCK. The caller
 * decides that OWNER is dead. */
int es_store_reap(struct lockstore *st, const char *owner, size_t *nlocks);

/* The owner ids that intents, locks or waiter marks name but that have no
 * lease document (any more): dead owners that were taken over, or whose
 * document was deleted. A new array of new strings in *OUT (free each and
 * the array). Returns 0, -ENOLCK, -ENOMEM. */
int es_store_orphans(struct lockstore *st, char ***out, size_t *n);

#endif /* TREELOCKFS_ES_ES_STORE_H */
