/* es_client.h - the Elasticsearch request layer of the es lock store
 *
 * Between the lock protocol (lockstore_es.c, es_lease.c) and plain HTTP
 * (httpc.h): request paths under one index, the classification of
 * statuses and of bulk items, _bulk, _mget and _search. Knows nothing of
 * leases, owners or holders; documents come from es_docs.h.
 *
 * Thread rules: every function may be called from many threads at once
 * (httpc's rules); es_client_open()/es_client_close() from one thread.
 */
#ifndef TREELOCKFS_ES_CLIENT_H
#define TREELOCKFS_ES_CLIENT_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "httpc.h"

/* The shortest timeout a request gets once its deadline is near or past:
 * cleanup (rollback, dropping waiter marks, release) still gets a chance,
 * and what fails is kept for the heartbeat. */
#define ES_GRACE_MS 150

struct es_batch_req;

/* Group commit: at most max_inflight (es_inflight=, default
 * ES_BATCH_INFLIGHT) _bulk requests of one client are in flight at once;
 * bulks submitted meanwhile queue and the next thread to find a slot open
 * sends every queued one (up to ES_BATCH_MAX of them, ES_BATCH_MAX_BYTES)
 * as one _bulk. A bulk submitted when nothing is in flight is sent at
 * once, alone: a lone rename never waits. With one request out, a further
 * slot opens only once ES_BATCH_EXTRA_MIN renames wait in the queue (a
 * handed-off release, below, holds up no rename and does not count; under
 * load each request then carries several renames, which costs the node
 * less than more, smaller requests) or the oldest has waited
 * ES_BATCH_AGE_MS (a slow request holds up the rest no longer than that). */
/*
 * Releases that would queue anyway need not be waited for: a release
 * submitted with es_bulk_send_detached() while a request is out or others
 * queue is handed to the client's sender thread and the rename goes on at
 * once; its items leave with the next request (the same queue, the same
 * rules) and its outcome reaches a callback. An acquire whose documents a
 * handed-off release still holds in flight in another request does not
 * leave before that answer: the store would refuse it on our own lock. In
 * one request the items keep their order, so a release queued before an
 * acquire of the same document is applied first.
 */
#define ES_BATCH_INFLIGHT 2
#define ES_BATCH_INFLIGHT_MAX 16
#define ES_BATCH_EXTRA_MIN 4
#define ES_BATCH_AGE_MS 50
#define ES_BATCH_MAX 64
#define ES_BATCH_MAX_BYTES (4u << 20)
/* Items of one _bulk request at most: a larger bulk (a document-strategy
 * plan of a large directory) goes in chunks of this many, one after the
 * other, so that no answer nears the response cap (an item's answer is a
 * few hundred bytes, a refusal's about 2 KB). */
#define ES_BULK_MAX_ITEMS 1000

struct es_client {
	struct httpc *http;
	char *index;           /* as given */
	char *index_esc;       /* percent-encoded, for paths */
	pthread_mutex_t err_mutex; /* leaf, guards last_err */
	char last_err[256];    /* the last failure, for start-up messages */
	unsigned int timeout_ms; /* per request, when no deadline is nearer */
	pthread_mutex_t batch_mutex; /* leaf, guards the queue and inflight */
	pthread_cond_t batch_cond;   /* CLOCK_MONOTONIC */
	struct es_batch_req *queue, *queue_tail;
	unsigned int inflight;       /* _bulk requests being sent */
	unsigned int max_inflight;   /* at most, 1..ES_BATCH_INFLIGHT_MAX */
	unsigned int queued;         /* bulks in the queue */
	unsigned int extra_min;      /* queued bulks that open a further slot */
	int64_t batch_age_ms;        /* or the queue's age that does */
	bool batch_ready;            /* the mutex and cond exist */
	/* handed-off bulks (es_bulk_send_detached()): queued, and in
	 * flight (linked by fly_next); the sender thread sends the queue
	 * while it holds any */
	unsigned int detached_queued;
	unsigned int detached_live;  /* queued or in flight */
	struct es_batch_req *flying;
	pthread_t sender;
	pthread_cond_t sender_cond;  /* CLOCK_MONOTONIC; the sender's alone */
	bool sender_on, sender_stop;
	/* How this client's lock scripts travel: by id (stored in the
	 * cluster) or inline (false, the default). Set while the store opens
	 * (es_index_scripts()), switched to inline by es_item_state() should
	 * a stored script go missing; read by whoever builds a request. */
	atomic_bool scripts_stored;
	/* es_index.c's: the scripts were checked once by a mount (its
	 * heartbeat checks them again), and how they travel, for the log
	 * and treelockctl check; written by one thread at a time (the
	 * opening one, then the heartbeat) */
	bool scripts_checked;
	char scripts_note[240];
};

enum es_call_class {
	ES_CALL_OK = 0,     /* 2xx */
	ES_CALL_RETRY,      /* 429, 5xx, timeout, unreachable: retry, maybe ambiguous */
	ES_CALL_FATAL,      /* 401/403, 400, other 4xx, out of memory */
};

enum es_item_state {
	ES_ITEM_OK = 0,
	ES_ITEM_REFUSED,     /* conflict: 409 on create, script refusal */
	ES_ITEM_RETRY,       /* 429, 5xx, update version conflict: resend */
	ES_ITEM_FATAL,       /* our bug: the caller logs it */
};

/* Opens the HTTP client of HC for index INDEX into C, with at most
 * MAX_INFLIGHT (1..ES_BATCH_INFLIGHT_MAX, es_inflight=) _bulk requests in
 * flight; MAX_INFLIGHT 0 turns group commit off (no_es_group_commit): each
 * bulk leaves at once, alone, while fewer than ES_BATCH_INFLIGHT_MAX are
 * out. Returns 0, -EINVAL (no usable URL, logged), -ENOMEM. On failure
 * C holds nothing. */
int es_client_open(struct es_client *c, const struct httpc_config *hc, const char *index,
		   unsigned int max_inflight);

/* Frees what C holds; accepts an empty client. */
void es_client_close(struct es_client *c);

/* "/<index>/<api>[/<escaped id>][?query]" as a new string (caller frees),
 * or NULL when out of memory. ID is percent-encoded as one path segment
 * (libcurl's escaping: RFC 3986 unreserved bytes are kept); QUERY is
 * appended as given. */
char *es_path(const struct es_client *c, const char *api, const char *id, const char *query);

/* Sends one request (CTYPE NULL: JSON). Returns the class; *R holds the
 * response whenever a status came back (caller frees with
 * httpc_response_free()), and is empty on transport failures. Transport
 * failures and 429/5xx are logged unless QUIET; every failure is recorded
 * (es_client_last_error()). */
enum es_call_class es_call(struct es_client *c, const char *method, const char *path,
			   const char *ctype, const char *body, size_t len,
			   struct httpc_response *r, bool quiet);

/* Logs the store's refusal R of request METHOD PATH (credentials, or the
 * status and body). */
void es_log_refusal(struct es_client *c, const char *method, const char *path,
		    const struct httpc_response *r);

/* Deadlines. Every request the calling thread makes until
 * es_deadline_set(0) gets min(the client's timeout, what is left until
 * DEADLINE_MS (monotonic ms), at least ES_GRACE_MS) as its whole timeout:
 * a rename's lock_timeout bounds every request made on its behalf. */
void es_deadline_set(int64_t deadline_ms);
/* The timeout of the calling thread's next request of C, as above, in
 * ms (0: none nearer than the client's own), for requests made with
 * httpc_request() directly. */
unsigned int es_request_timeout(const struct es_client *c);
/* True when the calling thread has a deadline and it has passed. */
bool es_deadline_passed(void);
/* Milliseconds left until the calling thread's deadline (INT64_MAX: none,
 * 0: passed). */
int64_t es_deadline_left(void);

/* Records why the last request failed (printf-style; no credentials). */
void es_client_set_error(struct es_client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Copies the last recorded failure ("" if none) to BUF. */
void es_client_last_error(struct es_client *c, char *buf, size_t size);

/* Parses the body of R, or NULL. */
cJSON *es_parse(const struct httpc_response *r);

/* Sends the ndjson of B to _bulk. On 0, *ROOT is the parsed response with
 * its "items" array (caller frees), holding exactly the items of B, in
 * order. Returns 0, -EAGAIN (the whole request failed in a retryable way:
 * it may or may not have been applied), -ETIMEDOUT (the calling thread's
 * deadline passed while B was still queued: it was not sent), -EACCES
 * (refused, logged), -ENOMEM (B failed while being built).
 *
 * B may travel in one _bulk with the bulks of other threads (group commit,
 * see max_inflight): the items of each caller are applied in its
 * order, a failure of the whole request is every caller's, and the
 * request's timeout is capped by the earliest deadline among them.
 * A B of more than ES_BULK_MAX_ITEMS items goes in chunks, in order; a
 * chunk that fails ends it (-EAGAIN once an earlier chunk was sent: those
 * may have been applied), and so does the deadline passing between two
 * chunks. *ROOT then holds the items of every chunk. */
int es_bulk_send(struct es_client *c, const struct buf *b, cJSON **root);

/* Called with the outcome of a bulk handed off by
 * es_bulk_send_detached(), on whichever thread sent its request (the
 * sender thread, or a rename's that led the queue), without the client's
 * locks: ERR and ROOT as es_bulk_send() returns them (ROOT is the
 * callback's to free), B the bulk as submitted, NUL-terminated. */
typedef void es_detached_fn(void *arg, int err, cJSON *root, const struct buf *b);

/* Starts C's sender thread (once the process runs as it will: after a
 * fork). Returns 0 or -errno. Without it every bulk is sent and waited
 * for by its submitter. */
int es_client_start_sender(struct es_client *c);

/* Sends B as es_bulk_send() does (its return value and *ROOT) when B can
 * leave at once or no sender thread runs. Otherwise hands a copy of B to
 * the sender thread, which sends it with the queue and calls DONE(ARG,
 * ...) once the answer or the failure is known, and returns 1 at once
 * (*ROOT NULL). */
int es_bulk_send_detached(struct es_client *c, const struct buf *b, cJSON **root,
			  es_detached_fn *done, void *arg);

/* Waits until no handed-off bulk is queued or in flight. */
void es_client_drain(struct es_client *c);

/* Sends what was handed off, waits for it, and ends the sender thread;
 * from then on every bulk is waited for. Accepts a client without one. */
void es_client_stop_sender(struct es_client *c);

/* The number of bulk items (action lines) in the ndjson DATA[0..LEN), or
 * -1 when a line is not an action this client writes. */
long es_bulk_count(const char *data, size_t len);

/* Classifies bulk response item IT of a request of C; *STATUS (may be
 * NULL) gets its status. A 404 on update or delete is OK: the document is
 * already gone. A stored script gone from the cluster switches C to inline
 * scripts and the item is to be resent. */
enum es_item_state es_item_state(struct es_client *c, const cJSON *it, long *status);

/* Whether C's lock scripts travel by id (stored in the cluster), else
 * inline; and setting it. Any thread. */
bool es_client_scripts_stored(struct es_client *c);
void es_client_set_scripts_stored(struct es_client *c, bool stored);

/* Reads PREFIX IDS[0..N) (PREFIX may be NULL) with one _mget. Returns the
 * parsed response (its "docs" in order; caller frees) or NULL. */
cJSON *es_mget(struct es_client *c, const char *prefix, char *const *ids, size_t n);

/* Refreshes the index and returns every document (up to 10000) matching
 * QUERY (taken over; NULL: all) as the parsed response, or NULL (a
 * refusal is logged). */
cJSON *es_search_all(struct es_client *c, cJSON *query);

/* The hits array of a _search response. */
const cJSON *es_hits(const cJSON *root);

/* DELETE /<index>/_doc/<ID>[?QUERY]. Returns 0, -ENOENT (no such
 * document), -ENOLCK (any other failure), -ENOMEM. */
int es_delete(struct es_client *c, const char *id, const char *query, bool quiet);

#endif /* TREELOCKFS_ES_CLIENT_H */
