/* es_client.h - the Elasticsearch request layer of the es lock store
 *
 * Between the lock protocol (es_acquire.c and the files by meaning
 * around it) and plain HTTP (httpc.h): request paths under one index, one
 * request now, the classification of statuses and of bulk items, _bulk,
 * _mget, _search, delete. Knows nothing of leases, owners or holders, nor
 * of batching (es_batch.h sends bulks through es_bulk_post()); documents
 * come from es_docs.h. It retries nothing itself (es_retry.h).
 *
 * Deadlines: every function that sends takes DEADLINE (monotonic ms, 0:
 * none); the request then gets min(the client's timeout, what is left
 * until DEADLINE, at least ES_GRACE_MS) as its whole timeout
 * (es_request_timeout()): a rename's lock_timeout bounds every request
 * made on its behalf.
 *
 * Thread rules: every function may be called from many threads at once
 * (httpc's rules); es_client_open()/es_client_close() from one thread.
 */
#ifndef TREELOCKFS_ES_ES_CLIENT_H
#define TREELOCKFS_ES_ES_CLIENT_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "es/httpc.h"

/* The shortest timeout a request gets once its deadline is near or past:
 * cleanup (rollback, dropping waiter marks, release) still gets a chance,
 * and what fails is kept for the heartbeat. */
#define ES_GRACE_MS 150

struct es_client {
	struct httpc *http;
	char *index;           /* as given */
	char *index_esc;       /* percent-encoded, for paths */
	pthread_mutex_t err_mutex; /* leaf, guards last_err */
	char last_err[256];    /* the last failure, for start-up messages */
	unsigned int timeout_ms; /* per request, when no deadline is nearer */
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
	/* es_scripts=inline: the scripts always travel inline, whatever the
	 * cluster stores under their ids (nothing is read or stored); set
	 * once before the first check */
	bool scripts_inline_only;
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

/* Opens the HTTP client of HC for index INDEX into C. Returns 0, -EINVAL
 * (no usable URL, logged), -ENOMEM. On failure C holds nothing. */
int es_client_open(struct es_client *c, const struct httpc_config *hc, const char *index);

/* Frees what C holds; accepts an empty client. */
void es_client_close(struct es_client *c);

/* "/<index>/<api>[/<escaped id>][?query]" as a new string (caller frees),
 * or NULL when out of memory. ID is percent-encoded as one path segment
 * (httpc_escape()); QUERY is appended as given. */
char *es_path(const struct es_client *c, const char *api, const char *id, const char *query);

/* Sends one request (CTYPE NULL: JSON). Returns the class; *R holds the
 * response whenever a status came back (caller frees with
 * httpc_response_free()), and is empty on transport failures. Transport
 * failures and 429/5xx are logged unless QUIET; every failure is recorded
 * (es_client_last_error()). */
enum es_call_class es_call(struct es_client *c, const char *method, const char *path,
			   const char *ctype, const char *body, size_t len, int64_t deadline,
			   struct httpc_response *r, bool quiet);

/* Logs the store's refusal R of request METHOD PATH (credentials, or the
 * status and body). */
void es_log_refusal(struct es_client *c, const char *method, const char *path,
		    const struct httpc_response *r);

/* The whole timeout of a request of C sent now under DEADLINE, as above,
 * in ms (0: none nearer than the client's own), for requests made with
 * httpc_request() directly. */
unsigned int es_request_timeout(const struct es_client *c, int64_t deadline);

/* Records why the last request failed (printf-style; no credentials). */
void es_client_set_error(struct es_client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Copies the last recorded failure ("" if none) to BUF. */
void es_client_last_error(struct es_client *c, char *buf, size_t size);

/* Parses the body of R, or NULL. */
cJSON *es_parse(const struct httpc_response *r);

/* Sends the ndjson DATA[0..LEN) to _bulk now, as one request under
 * DEADLINE. On 0, *ROOT is the parsed response with its "items" array
 * (caller frees). Returns 0, -EAGAIN (the whole request failed in a
 * retryable way: it may or may not have been applied; or the response
 * was malformed), -EACCES (refused, logged), -ENOMEM. The lock protocol
 * sends bulks through es_batch_send(), which calls this. */
int es_bulk_post(struct es_client *c, const char *data, size_t len, int64_t deadline,
		 cJSON **root);

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
cJSON *es_mget(struct es_client *c, const char *prefix, char *const *ids, size_t n,
	       int64_t deadline);

/* Refreshes the index and returns every document (up to 10000) matching
 * QUERY (taken over; NULL: all) as the parsed response, or NULL (a
 * refusal is logged). */
cJSON *es_search_all(struct es_client *c, cJSON *query, int64_t deadline);

/* The hits array of a _search response. */
const cJSON *es_hits(const cJSON *root);

/* DELETE /<index>/_doc/<ID>[?QUERY]. Returns 0, -ENOENT (no such
 * document), -ENOLCK (any other failure), -ENOMEM. */
int es_delete(struct es_client *c, const char *id, const char *query, bool quiet,
	      int64_t deadline);

#endif /* TREELOCKFS_ES_ES_CLIENT_H */
