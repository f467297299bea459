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

unsigned int es_request_timeout(const struct es_client *c)
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
		pthread_cond_init(&c->sender_cond, &ca);
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
	if (max_inflight == 0) { /* no group commit: every slot opens at once */
		c->max_inflight = ES_BATCH_INFLIGHT_MAX;
		c->extra_min = 1;
	}
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
	es_client_stop_sender(c);
	httpc_close(c->http);
	free(c->index);
	free(c->index_esc);
	pthread_mutex_destroy(&c->err_mutex);
	if (c->batch_ready) {
		pthread_cond_destroy(&c->batch_cond);
		pthread_cond_destroy(&c->sender_cond);
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

	err = httpc_request(c->http, method, path, ctype, body, len, es_request_timeout(c), r, errbuf,
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
 * sent. Whichever thread finds a free slot (a submitter, or the sender
 * thread on behalf of handed-off bulks) takes the queue in order and
 * sends it as one _bulk, then hands each submitter its own items, or the
 * whole request's failure. */

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
	/* handed off (es_bulk_send_detached()): owns DATA, reports to DONE */
	bool detached;
	es_detached_fn *done_fn;
	void *arg;
	struct es_batch_req *fly_next; /* in c->flying while sent */
	/* hashes of the document ids of the items, NIDS of them (IDS_MADE:
	 * computed; IDS may still be NULL when out of memory) */
	uint64_t *ids;
	size_t nids;
	bool ids_made;
};

/* FNV-1a of S[0..N). */
static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 14695981039346656037ull;

	while (n--) {
		h ^= (unsigned char)*s++;
		h *= 1099511628211ull;
	}
	return h;
}

/* Fills Q->ids with the hashes of the "_id" of each action line of its
 * bulk (as written, JSON-escaped: one builder writes them all). */
static void req_ids(struct es_batch_req *q)
{
	const char *p = q->data, *end = q->data + q->len;
	bool action = true;

	q->ids_made = true;
	q->ids = malloc((q->nitems > 0 ? (size_t)q->nitems : 1) * sizeof(*q->ids));
	if (!q->ids)
		return;
	while (p < end && q->nids < (size_t)q->nitems) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *eol = nl ? nl : end;

		if (action) {
			static const char key[] = "\"_id\":\"";
			const char *id = memmem(p, (size_t)(eol - p), key, sizeof(key) - 1), *e;

			if (id) {
				id += sizeof(key) - 1;
				for (e = id; e < eol && *e != '"'; e++)
					if (*e == '\\' && e + 1 < eol)
						e++;
				q->ids[q->nids++] = hash_bytes(id, (size_t)(e - id));
			}
			/* delete has no source line */
			action = eol - p >= 9 && memcmp(p, "{\"delete\"", 9) == 0;
		} else {
			action = true;
		}
		p = nl ? nl + 1 : end;
	}
}

/* Under batch_mutex: whether Q must not leave yet: it names a document
 * that a handed-off bulk in flight in another request still carries (our
 * own release: the store would refuse Q on it). */
static bool req_blocked(const struct es_client *c, struct es_batch_req *q)
{
	const struct es_batch_req *f;
	size_t i, k;

	if (q->detached || !c->flying)
		return false;
	if (!q->ids_made)
		req_ids(q);
	for (f = c->flying; f; f = f->fly_next)
		for (i = 0; i < q->nids; i++)
			for (k = 0; k < f->nids; k++)
				if (q->ids[i] == f->ids[k])
					return true;
	return false;
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

/* Under batch_mutex: the first queued bulk that may leave, or NULL. */
static struct es_batch_req *first_ready(const struct es_client *c)
{
	struct es_batch_req *q;

	for (q = c->queue; q; q = q->next)
		if (!req_blocked(c, q))
			return q;
	return NULL;
}

/* Under batch_mutex, with a slot free: whether it may be used now while
 * WAITING renames' bulks queue: the first slot at once, a further one once
 * extra_min of them wait. */
static bool slot_opens(const struct es_client *c, unsigned int waiting)
{
	return c->inflight == 0 || waiting >= c->extra_min;
}

/* Under batch_mutex: when a request may leave: 0 now, -1 not before
 * something changes (nothing may leave, or every slot taken), else the
 * time (tl_mono_ms) it may. The first slot takes whatever waits, at once;
 * a further one is opened by extra_min queued bulks that renames wait for
 * (a handed-off release holds up no rename: it does not count), which
 * makes requests carry several renames under load, or by a queue that has
 * waited batch_age_ms, so one slow request does not hold up the rest. */
static int64_t lead_at(const struct es_client *c, int64_t now)
{
	const struct es_batch_req *q;
	int64_t aged;

	if (!c->queue || c->inflight >= c->max_inflight)
		return -1;
	q = first_ready(c);
	if (!q)
		return -1;
	if (slot_opens(c, c->queued - c->detached_queued))
		return 0;
	aged = q->queued_ms + c->batch_age_ms;
	return aged <= now ? 0 : aged;
}

/* Under batch_mutex: unlinks Q (PREV before it, or NULL) from the queue. */
static void queue_unlink(struct es_client *c, struct es_batch_req *q, struct es_batch_req *prev)
{
	if (prev)
		prev->next = q->next;
	else
		c->queue = q->next;
	if (c->queue_tail == q)
		c->queue_tail = prev;
	q->next = NULL;
	c->queued--;
	if (q->detached)
		c->detached_queued--;
}

/* Under batch_mutex: unlinks Q from the queue. */
static void queue_remove(struct es_client *c, struct es_batch_req *q)
{
	struct es_batch_req *p, *prev = NULL;

	for (p = c->queue; p; prev = p, p = p->next)
		if (p == q) {
			queue_unlink(c, q, prev);
			return;
		}
}

static void req_free_detached(struct es_batch_req *q)
{
	free((char *)q->data);
	free(q->ids);
	free(q);
}

/* Under batch_mutex, with a free slot: takes the queued bulks that may
 * leave, in order (at least one, then up to ES_BATCH_MAX or
 * ES_BATCH_MAX_BYTES), sends them without the mutex, reports the
 * handed-off ones to their callbacks, then marks the rest done and wakes
 * their submitters. */
static void batch_lead(struct es_client *c)
{
	struct es_batch_req *v[ES_BATCH_MAX], *q, *prev = NULL, *next;
	size_t n = 0, bytes = 0, i;

	for (q = c->queue; q && n < ES_BATCH_MAX; q = next) {
		next = q->next;
		if (n > 0 && bytes + q->len > ES_BATCH_MAX_BYTES)
			break;
		if (req_blocked(c, q)) {
			prev = q;
			continue;
		}
		queue_unlink(c, q, prev);
		q->taken = true;
		bytes += q->len;
		v[n++] = q;
	}
	if (n == 0)
		return;
	/* in flight from now: later requests wait for these documents (in
	 * this one, the items keep their order) */
	for (i = 0; i < n; i++)
		if (v[i]->detached) {
			v[i]->fly_next = c->flying;
			c->flying = v[i];
		}
	c->inflight++;
	pthread_mutex_unlock(&c->batch_mutex);
	batch_send(c, v, n);
	for (i = 0; i < n; i++)
		if (v[i]->detached) {
			struct buf b = {.data = (char *)v[i]->data, .len = v[i]->len};

			v[i]->done_fn(v[i]->arg, v[i]->err, v[i]->root, &b);
			v[i]->root = NULL;
		}
	pthread_mutex_lock(&c->batch_mutex);
	c->inflight--;
	for (i = 0; i < n; i++) {
		struct es_batch_req **pp;

		if (!v[i]->detached) {
			v[i]->done = true;
			continue;
		}
		for (pp = &c->flying; *pp; pp = &(*pp)->fly_next)
			if (*pp == v[i]) {
				*pp = v[i]->fly_next;
				break;
			}
		c->detached_live--;
		req_free_detached(v[i]);
	}
	pthread_cond_broadcast(&c->batch_cond);
	if (c->detached_queued)
		pthread_cond_signal(&c->sender_cond); /* a slot is free */
}

/* Under batch_mutex: waits on COND until WAKE (tl_mono_ms; 0: until
 * woken). */
static void batch_wait(struct es_client *c, pthread_cond_t *cond, int64_t wake)
{
	if (wake) {
		struct timespec ts = {.tv_sec = wake / 1000, .tv_nsec = (wake % 1000) * 1000000};

		pthread_cond_timedwait(cond, &c->batch_mutex, &ts);
	} else {
		pthread_cond_wait(cond, &c->batch_mutex);
	}
}

/* Under batch_mutex: queues Q at the tail. */
static void queue_add(struct es_client *c, struct es_batch_req *q)
{
	q->queued_ms = tl_mono_ms();
	if (c->queue_tail)
		c->queue_tail->next = q;
	else
		c->queue = q;
	c->queue_tail = q;
	c->queued++;
}

/* One _bulk of DATA[0..LEN) (NITEMS items), alone or with the queue. */
static int bulk_send_one(struct es_client *c, const char *data, size_t len, long nitems,
			 cJSON **root)
{
	struct es_batch_req me = {.data = data, .len = len, .deadline_ms = deadline_ms};
	bool led = false, expired = false;
	int64_t until = 0;

	*root = NULL;
	me.nitems = nitems;
	if (me.nitems <= 0 || !c->batch_ready)
		return bulk_post(c, data, len, root); /* not ours to split */
	/* still queued then (the deadline, or now if it has passed, plus the
	 * grace every request gets): not sent, this caller's own failure */
	if (me.deadline_ms) {
		int64_t now = tl_mono_ms();

		until = (me.deadline_ms > now ? me.deadline_ms : now) + ES_GRACE_MS;
	}
	pthread_mutex_lock(&c->batch_mutex);
	queue_add(c, &me);
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
		batch_wait(c, &c->batch_cond, wake);
	}
	/* the thread that sent our request runs already: without a sender
	 * thread it sends what queued meanwhile too (once: its own rename goes
	 * on after that), sparing the queue a wake-up before its request
	 * leaves; with one, the waiting submitters and the sender do */
	if (led && !c->sender_on && lead_at(c, tl_mono_ms()) == 0)
		batch_lead(c);
	pthread_mutex_unlock(&c->batch_mutex);
	free(me.ids);
	if (expired)
		es_client_set_error(c, "lock_timeout passed while the request waited for the "
				       "lock store's other requests");
	*root = me.root;
	return me.err;
}

/* The end of the first N items of DATA[0..LEN) (ndjson es_bulk_count()
 * accepts). */
static size_t items_end(const char *data, size_t len, long n)
{
	const char *p = data, *end = data + len;

	while (n-- > 0 && p < end) {
		/* the action line; all but delete carry a source line */
		bool del = strncmp(p, "{\"delete\"", 9) == 0;
		int lines = del ? 1 : 2;

		while (lines-- > 0 && p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));

			p = nl ? nl + 1 : end;
		}
	}
	return (size_t)(p - data);
}

int es_bulk_send(struct es_client *c, const struct buf *b, cJSON **root)
{
	long nitems, done = 0, k;
	size_t off = 0, l;
	cJSON *all = NULL, *part, *items, *it;
	int err = 0;

	*root = NULL;
	if (b->err)
		return -ENOMEM;
	nitems = es_bulk_count(b->data, b->len);
	if (nitems <= ES_BULK_MAX_ITEMS)
		return bulk_send_one(c, b->data, b->len, nitems, root);
	/* in chunks, one after the other: each answer stays well below the
	 * response cap; the items of every chunk are appended in order */
	all = cJSON_CreateObject();
	items = all ? cJSON_AddArrayToObject(all, "items") : NULL;
	if (!items) {
		cJSON_Delete(all);
		return -ENOMEM;
	}
	cJSON_AddFalseToObject(all, "errors");
	while (done < nitems) {
		k = nitems - done < ES_BULK_MAX_ITEMS ? nitems - done : ES_BULK_MAX_ITEMS;
		l = items_end(b->data + off, b->len - off, k);
		if (done && es_deadline_passed()) {
			/* the rest is not sent: a caller past its deadline
			 * gets one chunk's grace, not one per chunk */
			err = -EAGAIN;
			break;
		}
		err = bulk_send_one(c, b->data + off, l, k, &part);
		if (err) {
			/* what went before may have been applied */
			if (done && err == -ETIMEDOUT)
				err = -EAGAIN;
			break;
		}
		while ((it = cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(part, "items"),
						       0)))
			cJSON_AddItemToArray(items, it);
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(part, "errors")))
			cJSON_ReplaceItemInObjectCaseSensitive(all, "errors", cJSON_CreateTrue());
		cJSON_Delete(part);
		done += k;
		off += l;
	}
	if (err) {
		cJSON_Delete(all);
		return err;
	}
	*root = all;
	return 0;
}

/* The sender thread: sends the queue whenever a handed-off bulk waits in
 * it and a slot is free, until stopped with nothing handed off queued.
 * It sleeps on sender_cond, signalled only when that may have changed:
 * the renames' answers do not wake it. */
static void *sender_main(void *arg)
{
	struct es_client *c = arg;

	pthread_mutex_lock(&c->batch_mutex);
	while (!c->sender_stop || c->detached_queued) {
		int64_t at = c->detached_queued ? lead_at(c, tl_mono_ms()) : -1;

		if (at == 0)
			batch_lead(c);
		else
			batch_wait(c, &c->sender_cond, at > 0 ? at : 0);
	}
	pthread_mutex_unlock(&c->batch_mutex);
	return NULL;
}

int es_client_start_sender(struct es_client *c)
{
	int err;

	if (c->sender_on || !c->batch_ready)
		return 0;
	err = pthread_create(&c->sender, NULL, sender_main, c);
	if (err)
		return -err;
	pthread_mutex_lock(&c->batch_mutex);
	c->sender_on = true;
	pthread_mutex_unlock(&c->batch_mutex);
	return 0;
}

void es_client_drain(struct es_client *c)
{
	if (!c->batch_ready)
		return;
	pthread_mutex_lock(&c->batch_mutex);
	while (c->detached_live)
		pthread_cond_wait(&c->batch_cond, &c->batch_mutex);
	pthread_mutex_unlock(&c->batch_mutex);
}

void es_client_stop_sender(struct es_client *c)
{
	if (!c->batch_ready)
		return;
	pthread_mutex_lock(&c->batch_mutex);
	if (!c->sender_on) {
		pthread_mutex_unlock(&c->batch_mutex);
		return;
	}
	c->sender_stop = true;
	pthread_cond_signal(&c->sender_cond);
	pthread_mutex_unlock(&c->batch_mutex);
	pthread_join(c->sender, NULL);
	es_client_drain(c);
	pthread_mutex_lock(&c->batch_mutex);
	c->sender_on = false;
	pthread_mutex_unlock(&c->batch_mutex);
}

int es_bulk_send_detached(struct es_client *c, const struct buf *b, cJSON **root,
			  es_detached_fn *done, void *arg)
{
	struct es_batch_req *q;
	long nitems;
	bool at_once;

	*root = NULL;
	if (b->err)
		return -ENOMEM;
	nitems = es_bulk_count(b->data, b->len);
	if (nitems <= 0 || nitems > ES_BULK_MAX_ITEMS || !c->batch_ready)
		return es_bulk_send(c, b, root); /* a bulk in chunks is waited for */
	pthread_mutex_lock(&c->batch_mutex);
	/* what es_bulk_send() would send at once, it sends: a lone rename
	 * sees its release answered before it returns, as without a sender */
	at_once = !c->sender_on || c->sender_stop ||
		  (!c->queue && c->inflight < c->max_inflight && slot_opens(c, 1));
	pthread_mutex_unlock(&c->batch_mutex);
	if (at_once)
		return es_bulk_send(c, b, root);
	q = calloc(1, sizeof(*q));
	if (q)
		q->data = malloc(b->len + 1);
	if (!q || !q->data) {
		free(q);
		return es_bulk_send(c, b, root);
	}
	memcpy((char *)q->data, b->data, b->len);
	((char *)q->data)[b->len] = '\0';
	q->len = b->len;
	q->nitems = nitems;
	q->detached = true;
	q->done_fn = done;
	q->arg = arg;
	req_ids(q);
	pthread_mutex_lock(&c->batch_mutex);
	queue_add(c, q);
	c->detached_queued++;
	c->detached_live++;
	pthread_cond_signal(&c->sender_cond);
	pthread_mutex_unlock(&c->batch_mutex);
	return 1;
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
