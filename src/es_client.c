/* es_client.c - the Elasticsearch request layer, see es_client.h */
#include <config.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "es_client.h"
#include "es_docs.h"
#include "httpc.h"
#include "log.h"
#include "tlclock.h"

/* The calling thread's deadline (monotonic ms), 0: none. */
static __thread int64_t deadline_ms;

void es_deadline_set(int64_t d)
{
	deadline_ms = d;
}

int64_t es_deadline_left(void)
{
	int64_t left;

	if (!deadline_ms)
		return INT64_MAX;
	left = deadline_ms - tl_mono_ms();
	return left > 0 ? left : 0;
}

bool es_deadline_passed(void)
{
	return deadline_ms && es_deadline_left() == 0;
}

/* The timeout of the next request of this thread (0: the client's). */
static unsigned int request_timeout(const struct es_client *c)
{
	int64_t left = es_deadline_left();

	if (left == INT64_MAX || left >= (int64_t)c->timeout_ms)
		return 0;
	return left < ES_GRACE_MS ? ES_GRACE_MS : (unsigned int)left;
}

/* Percent-encodes S as one path segment (new string, free()), or NULL. */
static char *escape(const char *s)
{
	/* the handle argument is unused by libcurl's escaping */
	char *e = curl_easy_escape(NULL, s, 0);
	char *out = e ? strdup(e) : NULL;

	curl_free(e);
	return out;
}

int es_client_open(struct es_client *c, const struct httpc_config *hc, const char *index,
		   unsigned int max_inflight)
{
	int err = -ENOMEM;

	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->err_mutex, NULL);
	{
		pthread_condattr_t ca;

		pthread_mutex_init(&c->batch_mutex, NULL);
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&c->batch_cond, &ca);
		pthread_condattr_destroy(&ca);
		c->batch_ready = true;
	}
	c->index = strdup(index);
	if (!c->index)
		goto out_close;
	c->index_esc = escape(index);
	if (!c->index_esc)
		goto out_close;
	c->timeout_ms = hc->timeout_ms ? hc->timeout_ms : 5000;
	c->max_inflight = max_inflight;
	c->extra_min = ES_BATCH_EXTRA_MIN;
	c->batch_age_ms = ES_BATCH_AGE_MS;
	atomic_init(&c->scripts_stored, false);
	snprintf(c->scripts_note, sizeof(c->scripts_note), "inline (not checked)");
	err = httpc_open(hc, &c->http);
	if (err) {
		err = err == -ENOMEM ? err : -EINVAL;
		goto out_close;
	}
	return 0;

out_close:
	es_client_close(c);
	return err;
}

void es_client_close(struct es_client *c)
{
	httpc_close(c->http);
	free(c->index);
	free(c->index_esc);
	pthread_mutex_destroy(&c->err_mutex);
	if (c->batch_ready) {
		pthread_cond_destroy(&c->batch_cond);
		pthread_mutex_destroy(&c->batch_mutex);
	}
	memset(c, 0, sizeof(*c));
}

void es_client_set_error(struct es_client *c, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&c->err_mutex);
	va_start(ap, fmt);
	vsnprintf(c->last_err, sizeof(c->last_err), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&c->err_mutex);
}

void es_client_last_error(struct es_client *c, char *buf, size_t size)
{
	pthread_mutex_lock(&c->err_mutex);
	snprintf(buf, size, "%s", c->last_err);
	pthread_mutex_unlock(&c->err_mutex);
}

char *es_path(const struct es_client *c, const char *api, const char *id, const char *query)
{
	struct buf b = BUF_INIT;
	char *e = NULL;

	buf_add(&b, "/", 1);
	buf_adds(&b, c->index_esc);
	buf_add(&b, "/", 1);
	buf_adds(&b, api);
	if (id) {
		e = escape(id);
		if (!e)
			b.err = -ENOMEM;
		buf_add(&b, "/", 1);
		if (e)
			buf_adds(&b, e);
		free(e);
	}
	if (query) {
		buf_add(&b, "?", 1);
		buf_adds(&b, query);
	}
	if (b.err) {
		buf_free(&b);
		return NULL;
	}
	return buf_detach(&b, NULL);
}

cJSON *es_parse(const struct httpc_response *r)
{
	return r->body ? cJSON_ParseWithLengthOpts(r->body, r->len, NULL, false) : NULL;
}

void es_log_refusal(struct es_client *c, const char *method, const char *path,
		    const struct httpc_response *r)
{
	char type[96] = "";
	cJSON *root = es_parse(r);

	es_docs_error_type(root, type, sizeof(type));
	cJSON_Delete(root);
	if (r->status == 401 || r->status == 403)
		tl_log(LOG_ERR,
		       "lock store at '%s' refuses our credentials (HTTP %ld%s%s): check es_user, "
		       "the password or es_api_key_file",
		       httpc_node_name(c->http, r->node), r->status, *type ? " " : "", type);
	else
		tl_log(LOG_ERR, "lock store rejected our request '%s %s' (HTTP %ld): %.1000s", method,
		       path, r->status, r->body ? r->body : "");
}

enum es_call_class es_call(struct es_client *c, const char *method, const char *path,
			   const char *ctype, const char *body, size_t len,
			   struct httpc_response *r, bool quiet)
{
	char errbuf[256];
	int err;

	err = httpc_request(c->http, method, path, ctype, body, len, request_timeout(c), r, errbuf,
			    sizeof(errbuf));
	if (err) {
		es_client_set_error(c, "request '%s %s' failed: %s", method, path,
				    *errbuf ? errbuf : strerror(-err));
		if (!quiet)
			tl_log(LOG_WARNING, "lock store request '%s %s' failed: %s", method, path,
			       *errbuf ? errbuf : strerror(-err));
		return err == -ENOMEM ? ES_CALL_FATAL : ES_CALL_RETRY;
	}
	if (r->status >= 200 && r->status < 300)
		return ES_CALL_OK;
	{
		char type[96] = "";
		cJSON *root = es_parse(r);

		es_docs_error_type(root, type, sizeof(type));
		cJSON_Delete(root);
		es_client_set_error(c, "request '%s %s' answered HTTP %ld%s%s from '%s'", method,
				    path, r->status, *type ? " " : "", type,
				    httpc_node_name(c->http, r->node));
		if (r->status != 429 && r->status < 500)
			return ES_CALL_FATAL;
		/* the type tells an overloaded node (429 es_rejected_execution_
		 * exception, circuit_breaking_exception) from a failing one */
		if (!quiet)
			tl_log(LOG_WARNING, "lock store request '%s %s' failed: HTTP %ld%s%s from '%s'",
			       method, path, r->status, *type ? " " : "", type,
			       httpc_node_name(c->http, r->node));
		return ES_CALL_RETRY;
	}
}

/* One _bulk request of DATA[0..LEN), now, under the calling thread's
 * deadline; es_bulk_send()'s results. */
static int bulk_post(struct es_client *c, const char *data, size_t len, cJSON **root)
{
	struct httpc_response r;
	enum es_call_class cc;
	char *path;

	*root = NULL;
	path = es_path(c, "_bulk", NULL, NULL);
	if (!path)
		return -ENOMEM;
	cc = es_call(c, "POST", path, HTTPC_NDJSON, data, len, &r, false);
	if (cc == ES_CALL_RETRY) {
		httpc_response_free(&r);
		free(path);
		return -EAGAIN;
	}
	if (cc == ES_CALL_FATAL) {
		if (r.body)
			es_log_refusal(c, "POST", path, &r);
		httpc_response_free(&r);
		free(path);
		return -EACCES;
	}
	free(path);
	*root = es_parse(&r);
	if (!*root || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(*root, "items"))) {
		tl_log(LOG_ERR, "lock store sent a malformed bulk response: %.300s", r.body);
		cJSON_Delete(*root);
		*root = NULL;
		httpc_response_free(&r);
		return -EAGAIN;
	}
	httpc_response_free(&r);
	return 0;
}

long es_bulk_count(const char *data, size_t len)
{
	static const char *const ops[] = {"{\"delete\"", "{\"index\"", "{\"create\"",
					  "{\"update\""};
	const char *p = data, *end = data + len;
	long n = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t k, l = nl ? (size_t)(nl - p) : (size_t)(end - p);

		for (k = 0; k < 4; k++)
			if (l >= strlen(ops[k]) && memcmp(p, ops[k], strlen(ops[k])) == 0)
				break;
		if (k == 4)
			return -1;
		n++;
		p = nl ? nl + 1 : end;
		if (k > 0) { /* index, create and update carry a source line */
			if (p >= end)
				return -1;
			nl = memchr(p, '\n', (size_t)(end - p));
			p = nl ? nl + 1 : end;
		}
	}
	return n;
}

/* ---- group commit -------------------------------------------------------------------
 *
 * A bulk waits in c->queue only while max_inflight requests are being
 * sent. Whichever thread finds a free slot (a submitter, or the sender of
 * the request that just finished, on behalf of the queue) takes the queue
 * in order and sends it as one _bulk, then hands each submitter its own
 * items, or the whole request's failure. */

struct es_batch_req {
	const char *data;
	size_t len;
	long nitems;
	int64_t deadline_ms;      /* the submitter's, 0: none */
	int64_t queued_ms;        /* tl_mono_ms() when queued */
	bool taken, done;         /* taken: in a request being sent */
	int err;                  /* when done */
	cJSON *root;              /* when done and err == 0 */
	struct es_batch_req *next;
};

/* Under batch_mutex: unlinks Q from the queue. */
static void queue_remove(struct es_client *c, struct es_batch_req *q)
{
	struct es_batch_req **pp, *prev = NULL;

	for (pp = &c->queue; *pp; prev = *pp, pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			if (c->queue_tail == q)
				c->queue_tail = prev;
			q->next = NULL;
			c->queued--;
			return;
		}
}

/* Sends the batch V[0..N) as one request and fills in each one's result
 * (not yet marked done). Runs without batch_mutex. */
static void batch_send(struct es_client *c, struct es_batch_req **v, size_t n)
{
	int64_t own = deadline_ms, earliest = 0;
	struct buf body = BUF_INIT;
	cJSON *root = NULL, *items;
	long total = 0;
	size_t i;
	int err;

	for (i = 0; i < n; i++) {
		if (v[i]->deadline_ms && (!earliest || v[i]->deadline_ms < earliest))
			earliest = v[i]->deadline_ms;
		total += v[i]->nitems;
	}
	/* the request is capped by the earliest deadline among its members */
	deadline_ms = earliest;
	if (n == 1) {
		err = bulk_post(c, v[0]->data, v[0]->len, &root);
	} else {
		for (i = 0; i < n; i++)
			buf_add(&body, v[i]->data, v[i]->len);
		err = body.err ? -ENOMEM : bulk_post(c, body.data, body.len, &root);
	}
	deadline_ms = own;
	buf_free(&body);
	items = root ? cJSON_GetObjectItemCaseSensitive(root, "items") : NULL;
	if (!err && cJSON_GetArraySize(items) != total) {
		tl_log(LOG_ERR, "lock store answered a bulk of %ld items with %d items", total,
		       cJSON_GetArraySize(items));
		err = -EAGAIN;
	}
	if (err) {
		for (i = 0; i < n; i++)
			v[i]->err = err;
		cJSON_Delete(root);
		return;
	}
	if (n == 1) {
		v[0]->err = 0;
		v[0]->root = root;
		return;
	}
	for (i = 0; i < n; i++) {
		cJSON *mine = cJSON_CreateObject(), *arr = cJSON_CreateArray();
		long k;

		if (!mine || !arr || !cJSON_AddItemToObject(mine, "items", arr)) {
			cJSON_Delete(mine);
			cJSON_Delete(arr);
			mine = NULL;
		}
		for (k = 0; k < v[i]->nitems; k++) {
			cJSON *it = cJSON_DetachItemFromArray(items, 0);

			if (mine)
				cJSON_AddItemToArray(arr, it);
			else
				cJSON_Delete(it);
		}
		/* out of memory: the items are lost, the request may have been
		 * applied: the caller treats it like a failed request */
		v[i]->root = mine;
		v[i]->err = mine ? 0 : -EAGAIN;
	}
	cJSON_Delete(root);
}

/* Under batch_mutex: when a request may leave: 0 now, -1 not before
 * something changes (nothing queued, or every slot taken), else the time
 * (tl_mono_ms) it may. The first slot takes whatever waits, at once; a
 * further one is opened by extra_min queued bulks, which makes requests
 * carry several renames under load, or by a queue that has waited
 * batch_age_ms, so one slow request does not hold up the rest. */
static int64_t lead_at(const struct es_client *c, int64_t now)
{
	int64_t aged;

	if (!c->queue || c->inflight >= c->max_inflight)
		return -1;
	if (c->inflight == 0 || c->queued >= c->extra_min)
		return 0;
	aged = c->queue->queued_ms + c->batch_age_ms;
	return aged <= now ? 0 : aged;
}

/* Under batch_mutex, with a free slot: takes queued bulks in order (at
 * least one, then up to ES_BATCH_MAX or ES_BATCH_MAX_BYTES), sends them
 * without the mutex, then marks them done and wakes their submitters. */
static void batch_lead(struct es_client *c)
{
	struct es_batch_req *v[ES_BATCH_MAX];
	size_t n = 0, bytes = 0, i;

	while (c->queue && n < ES_BATCH_MAX &&
	       (n == 0 || bytes + c->queue->len <= ES_BATCH_MAX_BYTES)) {
		struct es_batch_req *q = c->queue;

		c->queue = q->next;
		if (!c->queue)
			c->queue_tail = NULL;
		q->next = NULL;
		q->taken = true;
		c->queued--;
		bytes += q->len;
		v[n++] = q;
	}
	c->inflight++;
	pthread_mutex_unlock(&c->batch_mutex);
	batch_send(c, v, n);
	pthread_mutex_lock(&c->batch_mutex);
	c->inflight--;
	for (i = 0; i < n; i++)
		v[i]->done = true;
	pthread_cond_broadcast(&c->batch_cond);
}

int es_bulk_send(struct es_client *c, const struct buf *b, cJSON **root)
{
	struct es_batch_req me = {.data = b->data, .len = b->len, .deadline_ms = deadline_ms};
	bool led = false, expired = false;
	int64_t until = 0;

	*root = NULL;
	if (b->err)
		return -ENOMEM;
	me.nitems = es_bulk_count(b->data, b->len);
	if (me.nitems <= 0 || !c->batch_ready)
		return bulk_post(c, b->data, b->len, root); /* not ours to split */
	/* still queued then (the deadline, or now if it has passed, plus the
	 * grace every request gets): not sent, this caller's own failure */
	if (me.deadline_ms) {
		int64_t now = tl_mono_ms();

		until = (me.deadline_ms > now ? me.deadline_ms : now) + ES_GRACE_MS;
	}
	pthread_mutex_lock(&c->batch_mutex);
	me.queued_ms = tl_mono_ms();
	if (c->queue_tail)
		c->queue_tail->next = &me;
	else
		c->queue = &me;
	c->queue_tail = &me;
	c->queued++;
	while (!me.done) {
		int64_t now = tl_mono_ms(), at = lead_at(c, now), wake = 0;

		if (at == 0) {
			batch_lead(c);
			led = true;
			continue;
		}
		if (until && !me.taken) {
			if (now >= until) {
				queue_remove(c, &me);
				me.err = -ETIMEDOUT;
				me.done = true;
				expired = true;
				break;
			}
			wake = until;
		}
		if (at > 0 && (!wake || at < wake))
			wake = at;
		if (wake) {
			struct timespec ts = {.tv_sec = wake / 1000,
					      .tv_nsec = (wake % 1000) * 1000000};

			pthread_cond_timedwait(&c->batch_cond, &c->batch_mutex, &ts);
		} else {
			pthread_cond_wait(&c->batch_cond, &c->batch_mutex);
		}
	}
	/* the thread that sent our request runs already: it sends what
	 * queued meanwhile too (once: its own rename goes on after that),
	 * sparing the queue a wake-up before its request leaves */
	if (led && lead_at(c, tl_mono_ms()) == 0)
		batch_lead(c);
	pthread_mutex_unlock(&c->batch_mutex);
	if (expired)
		es_client_set_error(c, "lock_timeout passed while the request waited for the "
				       "lock store's other requests");
	*root = me.root;
	return me.err;
}

bool es_client_scripts_stored(struct es_client *c)
{
	return atomic_load(&c->scripts_stored);
}

void es_client_set_scripts_stored(struct es_client *c, bool stored)
{
	atomic_store(&c->scripts_stored, stored);
}

enum es_item_state es_item_state(struct es_client *c, const cJSON *it, long *status_out)
{
	const cJSON *body = it ? it->child : NULL; /* {"create": {...}} */
	const char *op = body && body->string ? body->string : "";
	long status = (long)es_jint(body, "status", 0);
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(body, "error");

	if (status_out)
		*status_out = status;
	if (status >= 200 && status < 300)
		return ES_ITEM_OK;
	if (status == 404 && (strcmp(op, "delete") == 0 || strcmp(op, "update") == 0))
		return ES_ITEM_OK; /* already gone: release, unmark and evict are done */
	if (status == 409)
		return strcmp(op, "create") == 0 ? ES_ITEM_REFUSED : ES_ITEM_RETRY;
	if (status == 400 && es_docs_is_script_refusal(err))
		return ES_ITEM_REFUSED;
	if (status == 400 && es_docs_is_missing_script(err)) {
		/* our stored scripts were deleted: inline from now on */
		if (atomic_exchange(&c->scripts_stored, false)) {
			tl_log(LOG_WARNING, "the lock scripts stored in the cluster are gone: "
			       "sending them inline from now on");
		}
		return ES_ITEM_RETRY;
	}
	if (status == 429 || status >= 500 || status == 0)
		return ES_ITEM_RETRY;
	return ES_ITEM_FATAL;
}

/* POSTs the JSON REQ (freed) to API; the parsed answer on 2xx, else NULL.
 * With LOG, a refusal is logged. */
static cJSON *post_json(struct es_client *c, const char *api, cJSON *req, bool log)
{
	struct httpc_response r;
	cJSON *root = NULL;
	char *body = req ? cJSON_PrintUnformatted(req) : NULL;
	char *path = es_path(c, api, NULL, NULL);

	cJSON_Delete(req);
	if (!body || !path)
		goto out;
	if (es_call(c, "POST", path, HTTPC_JSON, body, strlen(body), &r, false) == ES_CALL_OK)
		root = es_parse(&r);
	else if (log && r.body)
		es_log_refusal(c, "POST", path, &r);
	httpc_response_free(&r);
out:
	free(path);
	free(body);
	return root;
}

cJSON *es_mget(struct es_client *c, const char *prefix, char *const *ids, size_t n)
{
	return post_json(c, "_mget", es_docs_ids(prefix, ids, n), false);
}

cJSON *es_search_all(struct es_client *c, cJSON *query)
{
	struct httpc_response r;
	char *path = es_path(c, "_refresh", NULL, NULL);

	if (path) {
		es_call(c, "POST", path, HTTPC_JSON, NULL, 0, &r, false);
		httpc_response_free(&r);
		free(path);
	}
	return post_json(c, "_search", es_docs_search(query), true);
}

const cJSON *es_hits(const cJSON *root)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "hits"),
						"hits");
}

int es_delete(struct es_client *c, const char *id, const char *query, bool quiet)
{
	struct httpc_response r;
	enum es_call_class cc;
	char *path = es_path(c, "_doc", id, query);
	int err;

	if (!path)
		return -ENOMEM;
	cc = es_call(c, "DELETE", path, NULL, NULL, 0, &r, quiet);
	if (cc == ES_CALL_OK)
		err = 0;
	else if (r.status == 404)
		err = -ENOENT;
	else
		err = -ENOLCK;
	httpc_response_free(&r);
	free(path);
	return err;
}
