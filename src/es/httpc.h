/* httpc.h - a thin libcurl wrapper: request in, status + bounded body out
 *
 * Knows nothing of Elasticsearch. A client has a list of nodes (base URLs);
 * a request goes to the preferred node, and when that node cannot be reached
 * (connect error, reset, timeout, TLS failure) it is marked dead for a while
 * and the next node is tried, each node at most once per request. A dead
 * node is tried again after HTTPC_NODE_RETRY_MS, or at once when every node
 * is dead.
 *
 * Every request carries: an explicit Content-Type (application/json unless
 * the caller names another, e.g. application/x-ndjson for bulk), Accept:
 * application/json, X-Opaque-Id: <opaque id> (so a server can tell clients
 * apart), and the credentials (Basic user:password, or Authorization:
 * ApiKey <key>). Credentials are never logged, never put in error texts, and
 * URLs shown in logs have their userinfo removed.
 *
 * libcurl use: one easy handle per thread and client (pthread key), kept
 * between requests so connections are reused; CURLOPT_NOSIGNAL=1; connect
 * and total timeouts always set; the response body is capped (toobig).
 * curl_global_init() must have been called before httpc_open().
 *
 * Thread rules: httpc_request() may be called from many threads at once;
 * httpc_open()/httpc_close() from one thread while no request runs.
 */
#ifndef TREELOCKFS_ES_HTTPC_H
#define TREELOCKFS_ES_HTTPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/stats.h"

/* How long a node that failed is skipped. */
#define HTTPC_NODE_RETRY_MS 2000
/* Default cap of a response body. */
#define HTTPC_DEFAULT_MAX_BODY (16u << 20)

#define HTTPC_JSON "application/json"
#define HTTPC_NDJSON "application/x-ndjson"

struct httpc;

struct httpc_config {
	const char *urls;          /* "https://a:9200,https://b:9200" (required;
				    * ';', space or tab separate too) */
	const char *user;          /* Basic auth when set ... */
	const char *password;      /* ... with this password (may be NULL) */
	const char *api_key;       /* "Authorization: ApiKey ..." when set: "id:key"
				    * (base64-encoded here) or already encoded */
	const char *cacert;        /* CA bundle for TLS, NULL for the system's */
	bool insecure;             /* skip TLS peer and host verification */
	unsigned int timeout_ms;   /* total per attempt; 0 means 5000 */
	unsigned int connect_timeout_ms; /* 0 means min(timeout_ms, 2000) */
	size_t max_body;           /* response cap; 0 means HTTPC_DEFAULT_MAX_BODY */
	const char *opaque_id;     /* X-Opaque-Id, may be NULL */
};

struct httpc_response {
	long status;               /* HTTP status */
	char *body;                /* NUL-terminated, owned (httpc_response_free) */
	size_t len;
	int node;                  /* index of the node that answered */
};

/* Creates a client from CFG (strings are copied). Returns 0, -EINVAL when
 * no usable URL is given (logged), -ENOMEM. */
int httpc_open(const struct httpc_config *cfg, struct httpc **out);

/* Frees C and every easy handle it made; accepts NULL. */
void httpc_close(struct httpc *c);

/* Replaces the X-Opaque-Id sent from now on. Returns 0 or -ENOMEM. */
int httpc_set_opaque_id(struct httpc *c, const char *id);

/* Sends METHOD PATH (starting with '/', query included, already
 * percent-encoded) with BODY of LEN bytes (BODY may be NULL) of type CTYPE
 * (NULL: application/json). TIMEOUT_MS bounds the whole request, every
 * node tried included (0: the client's timeout bounds each attempt). On 0, *RESP holds any HTTP status and body (caller frees with
 * httpc_response_free()). Errors (nothing received; *RESP is empty):
 * -ECONNREFUSED (no node reachable), -ETIMEDOUT, -EPROTO (TLS or protocol
 * failure), -EMSGSIZE (response larger than max_body), -ENOMEM.
 * ERRBUF (may be NULL) receives a short reason without credentials. */
int httpc_request(struct httpc *c, const char *method, const char *path, const char *ctype,
		  const char *body, size_t len, unsigned int timeout_ms, struct httpc_response *resp,
		  char *errbuf, size_t errlen);

/* From now on every request of C ends by END_MS (monotonic ms, 0: no
 * end): later ones fail at once with -ETIMEDOUT, and those in flight are
 * ended (within about a second: libcurl's progress callback). For a
 * process that stops: no request outlives its budget. Any thread. */
void httpc_set_end(struct httpc *c, int64_t end_ms);

/* The end httpc_set_end() set last (0: none). Any thread. */
int64_t httpc_end(const struct httpc *c);

/* S percent-encoded as one path segment or query value (libcurl's
 * escaping: the RFC 3986 unreserved bytes A-Z a-z 0-9 - . _ ~ are kept,
 * every other byte becomes %XX), as a new string (caller frees), or NULL
 * when out of memory. Any thread. */
char *httpc_escape(const char *s);

/* Frees what *R owns and empties it; accepts an empty response. */
void httpc_response_free(struct httpc_response *r);

/* The URL of node I with any userinfo removed (for logs), "?" if none. */
const char *httpc_node_name(const struct httpc *c, int i);

/* Requests sent so far (every attempt counts). */
uint64_t httpc_requests(const struct httpc *c);

/* What this client did so far: requests sent (every attempt), those that
 * got no answer (refused, timed out, cut, too big), body bytes each way,
 * and the durations of the attempts. Each counter is read atomically. */
struct httpc_counters {
	uint64_t requests, failures, bytes_sent, bytes_received;
	const struct tl_hist *seconds; /* lives as long as the client */
	int64_t served_us;  /* monotonic us of the last answer that was not a
			     * failure (neither 5xx nor 429), 0: none yet */
};
void httpc_counters(const struct httpc *c, struct httpc_counters *out);

#endif /* TREELOCKFS_ES_HTTPC_H */
