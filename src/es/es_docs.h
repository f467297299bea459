/* es_docs.h - the documents and bulk items of the es lock store (pure)
 *
 * cJSON builders and readers only: no HTTP, no clock, no store state.
 * Whatever varies (time, the owners known dead, ...) comes in as an
 * argument, so every body the store sends can be checked without a server.
 * The document shapes are described at the top of es_store.c.
 *
 * Bulk builders append ndjson lines (an action line, then a body line when
 * the action has one) to a struct buf. They never fail on their own: when
 * memory runs out the buffer is left failed (b->err, see buf.h), and the
 * caller checks once before sending.
 *
 * Scripts travel by id when they are stored in the cluster, else inline:
 * the caller says which (es_req.stored, the STORED argument), from its
 * client's setting (es_client_scripts_stored()); this module keeps no
 * setting of its own.
 *
 * Thread rules: any thread.
 */
#ifndef TREELOCKFS_ES_ES_DOCS_H
#define TREELOCKFS_ES_ES_DOCS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "lock/lockplan.h"

#define ES_OWNER_PREFIX "owner:"
#define ES_INTENT_PREFIX "intent:"
#define ES_META_NAME "treelockfs"
#define ES_FORMAT_VERSION 1
/* The language of every script: a stored script of another is not ours. */
#define ES_SCRIPT_LANG "painless"
/* retry_on_conflict of scripted updates: concurrent shared updates of one
 * document are retried inside Elasticsearch */
#define ES_RETRY_ON_CONFLICT 5

/* One holder's request for a plan, as its documents name it. */
struct es_req {
	const struct tl_plan *plan;
	char *const *ids;      /* lock document ids, plan order (path_lock_id) */
	const char *holder;    /* holder id "<owner id>#<ticket>" */
	const char *owner;     /* owner id */
	int64_t start_ms;      /* wall clock of the holder's first attempt: its age */
	uint32_t pid;          /* requesting process, 0 if unknown */
	int64_t now_ms;        /* wall clock now ("since") */
	int64_t tmo_ms;        /* how long a waiter mark of this holder lives */
	bool marked;           /* refused before: exclusive items are scripted */
	bool stored;           /* scripts by id (stored in the cluster), else inline */
	char *const *dead;     /* owner ids known dead (their marks are ignored) */
	size_t ndead;
	size_t sent;           /* items 0..sent-1 may have reached the store (a
				* plan goes in chunks): a rollback releases these */
};

/* One script of the store: its versioned stored id and its source. */
struct es_script {
	const char *id;
	const char *source;
};

/* Every script (*N of them, static storage), for storing them (es_index.c). */
const struct es_script *es_docs_scripts(size_t *n);

/* The body of PUT _scripts/<id> for SOURCE. Returns a new object or NULL. */
cJSON *es_docs_stored_script(const char *source);

/* Rewrites the ndjson of B with every stored script of ours named by id
 * sent inline (its source), for a body built before the stored scripts
 * went missing. Returns 0 (also when there was nothing to rewrite) or
 * -ENOMEM (B unchanged). */
int es_docs_inline(struct buf *b);

/* True when the error object ERR (or one it was caused by) says that a
 * stored script is missing from the cluster. */
bool es_docs_is_missing_script(const cJSON *err);

/* Appends J as one ndjson line and frees J; J NULL (out of memory) fails B. */
void es_docs_line(struct buf *b, cJSON *j);

/* The acquire item of plan key I of R: create (exclusive, first attempt),
 * scripted update with scripted upsert (exclusive after a refusal, shared). */
void es_docs_acquire(struct buf *b, const struct es_req *r, size_t i);

/* The waiter mark of plan key I of R (scripted update, scripted upsert). */
void es_docs_mark(struct buf *b, const struct es_req *r, size_t i);

/* Drops HOLDER's share of document ID (deleted when nothing is left).
 * Here and below, STORED: the script by id (stored in the cluster), else
 * inline. */
void es_docs_release(struct buf *b, const char *id, const char *holder, bool stored);

/* What the item whose source line is LINE[0..N) (an update's) does to its
 * document, as far as the order of requests needs to know: ES_ITEM_SHARE
 * (a shared acquire), ES_ITEM_RELEASE (a holder's release), else
 * ES_ITEM_OTHER (an eviction, which drops another holder's share too,
 * reads as a release). A shared acquire and a release of another holder commute:
 * each changes its own holder's entry (retry_on_conflict settles the race
 * on the document); a release of an exclusive lock met by a shared
 * acquire makes at worst a refusal that is retried. Pure. */
enum { ES_ITEM_OTHER, ES_ITEM_SHARE, ES_ITEM_RELEASE };
int es_docs_item_kind(const char *line, size_t n);

/* Drops HOLDER's waiter mark from document ID. */
void es_docs_unmark(struct buf *b, const char *id, const char *holder, bool stored);

/* Removes every share and mark of owner OWNER from document ID. */
void es_docs_evict(struct buf *b, const char *id, const char *owner, bool stored);

/* Indexes the intent document of R (owner, NAME the owner name, from, to,
 * start, pid, keys; its id names the holder).
 * "keys" is left out where es_docs_intent_keys() derives them (tree and
 * global plans of keys that are their own text). */
void es_docs_intent(struct buf *b, const struct es_req *r, const char *name);

/* The lock keys (their text) named by intent document SRC of an index of
 * strategy S: its "keys", or those of the plan of its from and to. Writes
 * a new vector (*N strings; caller frees each and the vector). Returns 0
 * (maybe none) or -ENOMEM. */
int es_docs_intent_keys(const cJSON *src, enum tl_strategy s, char ***out, size_t *n);

/* Deletes the intent document of HOLDER. */
void es_docs_intent_delete(struct buf *b, const char *holder);

/* Deletes document ID. */
void es_docs_delete(struct buf *b, const char *id);

/* The lease document of owner id OWNER. Returns a new object or NULL. */
cJSON *es_docs_owner(const char *owner, const char *name, const char *host, int pid,
		     int64_t now_ms, int64_t ttl_ms);

/* The index creation body: settings (one shard; auto_expand_replicas 0-1:
 * one replica where a second node exists, none on a single node), keyword
 * mapping, strategy S in _meta. Returns a new object or NULL. */
cJSON *es_docs_mapping(enum tl_strategy s);

/* {"ids": [PREFIX IDS[0], ...]} for _mget (PREFIX may be NULL). Returns a
 * new object or NULL. */
cJSON *es_docs_ids(const char *prefix, char *const *ids, size_t n);

/* A _search body returning every document (up to 10000) with seq_no, for
 * QUERY (taken over; NULL: match_all). Returns a new object or NULL. */
cJSON *es_docs_search(cJSON *query);

/* "owner:<OWNER>", "intent:<HOLDER>": new strings (caller frees) or NULL. */
char *es_docs_owner_id(const char *owner);
char *es_docs_intent_id(const char *holder);

/* True when document id ID is a lock (not an owner or intent document). */
bool es_docs_is_lock_id(const char *id);

/* The owner id of holder id H ("<owner>#<ticket>"), and "host:pid" of owner
 * id O (the nonce dropped), as new strings (caller frees) or NULL. */
char *es_docs_owner_of_holder(const char *h);
char *es_docs_owner_display(const char *o);

/* What the store relies on from the engine, and whether the lock index
 * gives it (treelockfs(1), the es store): SETTINGS is the "index" object
 * of the index's settings (GET <index>/_settings: values are strings),
 * DATA_NODES the cluster's number of data nodes (0: unknown). Writes one
 * finding per line into BUF (NUL-terminated, "" when none; truncated to
 * SIZE) and returns how many:
 *   - no replica on a cluster of two or more data nodes, and none to come
 *     (auto_expand_replicas absent, "false" or capped at 0): the loss of
 *     the primary's node takes the acknowledged locks with it;
 *   - translog.durability "async": a node that crashes loses the writes
 *     it acknowledged since its last sync;
 *   - write.wait_for_active_shards other than 1: a lost replica blocks
 *     every rename until it is back. */
int es_docs_settings_findings(const cJSON *settings, long data_nodes, char *buf, size_t size);

/* Readers: string member NAME of O or NULL; number member or DFLT. */
const char *es_jstr(const cJSON *o, const char *name);
int64_t es_jint(const cJSON *o, const char *name, int64_t dflt);

/* True when the error object ERR (or one it was caused by) is a
 * script_exception: one of our scripts refused. */
bool es_docs_is_script_refusal(const cJSON *err);

/* The error type of response body ROOT into BUF ("" if none), for logs. */
void es_docs_error_type(const cJSON *root, char *buf, size_t size);

#endif /* TREELOCKFS_ES_ES_DOCS_H */
