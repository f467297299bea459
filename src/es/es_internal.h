/* es_internal.h - the es store's state, shared by the files of the es store
 *
 * Files in src/es/:
 *
 *   es_internal.h   this header: the store's state, shared by its files
 *   es_store.[ch]   the store's face: the vtable, open, close; the
 *                   documents' shapes; es_store.h: what treelockctl asks
 *                   beyond the vtable
 *   es_acquire.c    taking and releasing a plan's locks: the protocol
 *                   (try-acquire, release, abandon), its requests, charts
 *   es_refusal.c    a refused attempt: ours after all?, who blocks,
 *                   take-over, rollback and waiter marks
 *   es_listing.c    listing the locks: the vtable's list
 *   es_admin.c      treelockctl's asks: owners, intents, orphans, reap,
 *                   break, check
 *   es_lease.[ch]   this mount's lease and its heartbeat thread
 *   es_owners.[ch]  other owners: observer table, take-over, reap
 *   es_kept.[ch]    release-like bulks that must arrive; kept ones
 *   es_retry.[ch]   who retries what (the chart), start retries
 *   es_batch.[ch]   group commit of _bulk requests, sender thread
 *   es_index.[ch]   cluster check, index bootstrap, stored scripts
 *   es_client.[ch]  one request: paths, statuses, _bulk, _mget, ...
 *   es_docs.[ch]    documents and bulk items (pure)
 *   es_fsdoc.[ch]   the fs index's documents (pure; fs_index=NAME)
 *   es_fsindex.[ch]  the fs index of a mount: notes, rename jobs,
 *                   the thread that writes them, parked releases
 *   es_fsctl.[ch]   the fs index as treelockctl reads and writes it
 *   es_scripts.h    the Painless scripts (includes nothing)
 *   es_options.c    the backend's own options
 *   httpc.[ch]      a thin libcurl wrapper; knows nothing of Elasticsearch
 *
 * Who calls whom among them (drawn from the objects' symbols; no circle):
 *
 *   es_admin   -> es_store, es_owners, es_index, es_retry, es_options,
 *                 es_client, es_docs, httpc
 *   es_fsctl   -> es_options, es_retry, es_client, es_docs, es_fsdoc,
 *                 httpc
 *   es_store   -> es_acquire, es_listing, es_lease, es_owners, es_batch,
 *                 es_index, es_retry, es_options, es_client, es_docs,
 *                 es_fsindex, httpc
 *   es_acquire -> es_refusal, es_lease, es_owners, es_kept, es_batch,
 *                 es_retry, es_client, es_docs, es_fsindex
 *   es_refusal -> es_owners, es_kept, es_batch, es_client, es_docs
 *   es_listing -> es_batch, es_client, es_docs
 *   es_lease   -> es_owners, es_kept, es_index, es_retry, es_client,
 *                 es_docs, httpc
 *   es_owners  -> es_kept, es_batch, es_client, es_docs, es_fsindex
 *   es_fsindex -> es_kept, es_client, es_fsdoc, es_docs, httpc
 *   es_kept    -> es_batch, es_retry, es_client, es_docs
 *   es_retry   -> es_client, httpc
 *   es_batch   -> es_client, es_docs
 *   es_index   -> es_client, es_docs, httpc
 *   es_client  -> es_docs, httpc
 *   es_fsdoc   -> es_docs
 *   (es_docs, es_options and httpc call none of them)
 *
 * Depends on: base, config, lock.
 *
 * Lock order: es_store.mutex is a leaf; it is never held across a request.
 */
#ifndef TREELOCKFS_ES_ES_INTERNAL_H
#define TREELOCKFS_ES_ES_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "es/es_batch.h"
#include "es/es_client.h"
#include "lock/lockplan.h"
#include "lock/lockstore.h"

struct es_req;

/* Longest owner= name: an owner id "<name>:<pid>:<nonce>" fits ES_ID_MAX. */
#define ES_NAME_MAX 63
#define ES_ID_MAX 160
#define ES_DEFAULT_INDEX "treelockfs-locks"
#define ES_DEFAULT_TIMEOUT_MS 5000
/* How long a mount retries a store that fails at start (seconds). */
#define ES_DEFAULT_START_TIMEOUT 30
#define ES_PASSWORD_ENV "TREELOCKFS_ES_PASSWORD"

/* Lease documents of our own former owner ids kept for deletion. */
#define ES_MAX_ABANDONED 8
/* Owners remembered by an observer (oldest live ones are forgotten). */
#define ES_MAX_OBSERVED 256
#define ES_MAX_MARKS_SEEN 64   /* waiter marks the delegation poller timed */

/* The es backend's own options (es_options.c), hung on tl_config. */
struct es_options {
	char *url;             /* "https://a:9200,https://b:9200" */
	char *index;
	char *user;
	char *password_file;
	char *api_key_file;
	char *cacert;
	char *timeout_ms_s;
	char *start_timeout_s;
	char *inflight_s;
	int insecure;
	/* es_allow_insecure: credentials may go to an http:// URL (warned) */
	int allow_insecure;
	unsigned int timeout_ms;
	unsigned int start_timeout; /* seconds */
	unsigned int inflight;      /* _bulk requests in flight at most */
	/* es_group_commit (default 1): 0 sends each rename's bulk at once,
	 * alone, up to ES_BATCH_INFLIGHT_MAX in flight (es_inflight unused) */
	int group_commit;
	/* es_scripts=stored|inline (default stored); inline: 1 */
	char *scripts_s;
	int scripts_inline;
	/* es_password=, es_api_key= as given: always refused (a secret in an
	 * option is seen by others), kept only to say so; never logged */
	char *password_arg;
	char *api_key_arg;
	/* secrets, loaded by config_load_secrets(); never logged */
	char *password;
	char *api_key;
};

/* What an observer saw of one owner's lease document. */
struct es_observed {
	char *id;              /* owner id */
	int64_t seq_no;        /* -1: document gone */
	int64_t first_ms;      /* monotonic, when seq_no was first seen */
	int64_t ttl_ms;        /* the owner's lease_ttl, from its document */
	bool dead;
	bool reaped;
};

/* A release bulk that could not be sent, resent by the heartbeat. */
struct es_pending {
	char *body;            /* ndjson of idempotent release items */
	size_t len;
	int64_t not_before;    /* monotonic ms */
	int confirms;          /* resends left after the first success */
	struct es_pending *next;
};

struct es_store {
	struct lockstore base;
	struct es_client cl;
	struct es_batch batch;   /* every _bulk goes through it */
	char name[ES_NAME_MAX + 1]; /* owner= name */
	int64_t ttl_ms;
	int64_t tmo_ms;        /* lock_timeout + ttl: how long a waiter mark lives */
	unsigned int timeout_ms;
	unsigned int start_timeout; /* seconds */
	enum tl_strategy strategy;
	char version[64];
	bool opensearch;
	/* es_allow_insecure=1 let credentials go to an http:// URL: said at
	 * start and by treelockctl check */
	bool cleartext_creds;

	pthread_mutex_t mutex;   /* leaf: never held across a request */
	/* protected by mutex: */
	char owner[ES_ID_MAX];   /* this mount's owner id */
	char nonce[24];
	int64_t owner_seq, owner_term;
	bool owner_doc;          /* our lease document exists */
	bool lease_missing;      /* the start could not create it: the
				  * heartbeat does, and says so */
	int64_t renewed_ms;      /* monotonic SEND time of the last good renewal */
	unsigned int epoch;
	unsigned int held_cur, held_old; /* holders acquired in this / older epochs */
	struct es_observed obs[ES_MAX_OBSERVED];
	size_t nobs;
	/* waiter marks es_wanted() saw ("DOC-ID\tHOLDER", malloc'd), and
	 * when first (monotonic ms): a mark is judged stale by how long THIS
	 * mount has seen it, never by comparing its wall clock with ours */
	char *marks_seen[ES_MAX_MARKS_SEEN];
	int64_t marks_first[ES_MAX_MARKS_SEEN];
	struct es_pending *pending;
	/* kept releases are resent from pending_due on (monotonic ms, 0:
	 * none kept), not only at the next heartbeat: until they are sent,
	 * our own renames on those keys would wait for them */
	int64_t pending_due;
	int64_t pending_backoff; /* ms, doubles up to the heartbeat period */
	/* lease documents of our former owner ids (lapsed, then renewed):
	 * deleted once no rename can act under them (after due_ms), or at a
	 * clean exit, so that they do not wait for a reap */
	char abandoned[ES_MAX_ABANDONED][ES_ID_MAX];
	int64_t abandoned_due[ES_MAX_ABANDONED]; /* monotonic ms */
	size_t nabandoned;
	bool started, stop;
	pthread_cond_t cond;
	pthread_t hb;
	bool warned_stale;
	/* the index lost our mapping or strategy (es_index_verify() by the
	 * heartbeat): no lock is taken until it is ours again */
	int index_err;           /* 0, -EPROTO or -EINVAL */
	/* fs_index=NAME (es_fsindex.h), NULL without; set once at open */
	struct es_fsindex *fsi;
};

/* Per-holder scratch of the es store (tl_holder.priv): made by the first
 * try-acquire, freed by release or abandon (es_acquire.c). */
struct es_hold {
	char holder[ES_ID_MAX + 24]; /* holder id "<owner id>#<ticket>" of the last attempt */
	unsigned int epoch;
	bool held;
	bool marked; /* waiter marks left in the index */
};

/* ST, which is an es store (the vtable's functions are called with their
 * own store only); es_store_of() when it may be another backend. */
static inline struct es_store *es_of(struct lockstore *st)
{
	return (struct es_store *)st;
}

/* The deadline of holder H in monotonic ms (0: none), passed to every
 * request made on its behalf. */
static inline int64_t es_hold_deadline(const struct tl_holder *h)
{
	return h->deadline_us ? h->deadline_us / 1000 : 0;
}

/* The vtable's try_acquire, release and abandon (es_acquire.c), as
 * lockstore.h describes them. es_try_acquire(): one attempt at PLAN for
 * holder H; returns 0, -EAGAIN (WHY filled), -ENOLCK, -EACCES, -ENOMEM.
 * es_release(): a release that cannot be sent now is kept and resent
 * (0); returns -ENOLCK (neither sent nor kept) or -ENOMEM. es_abandon():
 * drops H's waiter marks (best effort). Any thread; one call per holder
 * at a time. */
int es_try_acquire(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h,
		   struct tl_conflict *why);
int es_release(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h);
void es_abandon(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h);

/* The refusal path of holder H's request R (es_refusal.c), after items of
 * it were refused (ST[i] ES_ITEM_REFUSED): decides which refused items
 * are ours after all (ambiguous earlier attempts; ST updated), who blocks
 * (described in WHY), takes over dead owners, rolls back what R sent
 * (R->sent items) and leaves waiter marks. Returns 0 when it turns out
 * everything is held, -EAGAIN (conflict), -ENOLCK. */
int es_on_refusal(struct es_store *es, struct es_req *r, const struct tl_holder *h,
		  enum es_item_state *st, struct tl_conflict *why);

/* The vtable's list (es_listing.c), as lockstore.h describes it: keys are
 * listed as their text (path_key_text()), as the documents hold them;
 * PREFIX is a key and matches the texts below it. Releases this mount
 * handed off are answered first. Returns 0, -ENOLCK, -ENOMEM. */
int es_list(struct lockstore *st, const char *prefix, struct tl_lock_info **out, size_t *n);

/* The es backend's options in CFG (es_options.c). */
const struct es_options *es_options_of(const struct tl_config *cfg);

struct httpc_config;
/* Fills in HC where to reach the nodes of EO and how to sign in (urls,
 * credentials, TLS); the timeouts and the rest are the caller's. */
void es_options_httpc(const struct es_options *eo, struct httpc_config *hc);

/* True when a URL of O's es_url is http:// (credentials would travel
 * unencrypted). */
bool es_opts_cleartext(const struct es_options *o);

/* Opens the store (es_store.c); FOR_CTL: treelockctl's observer. */
int es_open(const struct tl_config *cfg, struct lockstore **out, bool for_ctl);

/* ST as an es store, or NULL when it is another backend. */
struct es_store *es_store_of(struct lockstore *st);

/* How often the heartbeat renews the lease: lease_ttl/3, at least 50 ms
 * (es_lease.c's thread; es_kept.c backs off up to it). */
static inline int64_t es_heartbeat_period(const struct es_store *es)
{
	return es->ttl_ms / 3 > 50 ? es->ttl_ms / 3 : 50;
}

#endif /* TREELOCKFS_ES_ES_INTERNAL_H */
