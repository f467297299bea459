/* es_batch.c - group commit of the es store's _bulk requests, see
 * es_batch.h */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "es/es_batch.h"
#include "es/es_client.h"
#include "es/es_docs.h"
#include "base/log.h"
#include "base/tlclock.h"

/*
 * A bulk waits in g->queue only while max_inflight requests are being
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
	/* handed off (es_batch_send_detached()): owns DATA, reports to DONE */
	bool detached;
	es_detached_fn *done_fn;
	void *arg;
	struct es_batch_req *fly_next; /* in g->flying while sent */
	/* hashes of the document ids of the items, NIDS of them (IDS_MADE:
	 * computed; IDS may still be NULL when out of memory) */
	uint64_t *ids;
	uint8_t *kinds;           /* es_docs_item_kind() of each of IDS */
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
	q->kinds = calloc(q->nitems > 0 ? (size_t)q->nitems : 1, sizeof(*q->kinds));
	if (!q->ids || !q->kinds) {
		free(q->ids);
		free(q->kinds);
		q->ids = NULL;
		q->kinds = NULL;
		return;
	}
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
			if (q->nids)
				q->kinds[q->nids - 1] = (uint8_t)es_docs_item_kind(p, (size_t)(eol - p));
			action = true;
		}
		p = nl ? nl + 1 : end;
	}
}

/* Under batch_mutex: whether Q must not leave yet: it names a document
 * that a handed-off bulk in flight in another request still carries (our
 * own release: the store would refuse Q on it). */
static bool req_blocked(const struct es_batch *g, struct es_batch_req *q)
{
	const struct es_batch_req *f;
	size_t i, k;

	if (q->detached || !g->flying)
		return false;
	if (!q->ids_made)
		req_ids(q);
	for (f = g->flying; f; f = f->fly_next)
		for (i = 0; i < q->nids; i++)
			for (k = 0; k < f->nids; k++)
				if (q->ids[i] == f->ids[k] &&
				    !(q->kinds[i] == ES_ITEM_SHARE && f->kinds[k] == ES_ITEM_RELEASE))
					return true;
	return false;
}

/* Sends the batch V[0..N) as one request and fills in each one's result
 * (not yet marked done). Runs without batch_mutex. */
static void batch_send(struct es_batch *g, struct es_batch_req **v, size_t n)
{
	int64_t earliest = 0;
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
	if (n == 1) {
		err = es_bulk_post(g->cl, v[0]->data, v[0]->len, earliest, &root);
	} else {
		for (i = 0; i < n; i++)
			buf_add(&body, v[i]->data, v[i]->len);
		err = body.err ? -ENOMEM : es_bulk_post(g->cl, body.data, body.len, earliest, &root);
	}
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
static struct es_batch_req *first_ready(const struct es_batch *g)
{
	struct es_batch_req *q;

	for (q = g->queue; q; q = q->next)
		if (!req_blocked(g, q))
			return q;
	return NULL;
}

/* Under batch_mutex, with a slot free: whether it may be used now while
 * WAITING renames' bulks queue: at once while no request a rename waits
 * for is out (requests that carry only handed-off releases do not count:
 * a rename after a rename goes out beside its release, one round trip
 * each), a further one once extra_min of them wait. */
static bool slot_opens(const struct es_batch *g, unsigned int waiting)
{
	return g->inflight == g->inflight_released || waiting >= g->extra_min;
}

/* Under batch_mutex: when a request may leave: 0 now, -1 not before
 * something changes (nothing may leave, or every slot taken), else the
 * time (tl_mono_ms) it may. The first slot takes whatever waits, at once;
 * a further one is opened by extra_min queued bulks that renames wait for
 * (a handed-off release holds up no rename: it does not count), which
 * makes requests carry several renames under load, or by a queue that has
 * waited batch_age_ms, so one slow request does not hold up the rest. */
static int64_t lead_at(const struct es_batch *g, int64_t now)
{
	const struct es_batch_req *q;
	int64_t aged;

	if (!g->queue || g->inflight >= g->max_inflight)
		return -1;
	q = first_ready(g);
	if (!q)
		return -1;
	if (slot_opens(g, g->queued - g->detached_queued))
		return 0;
	aged = q->queued_ms + g->age_ms;
	return aged <= now ? 0 : aged;
}

/* Under batch_mutex: unlinks Q (PREV before it, or NULL) from the queue. */
static void queue_unlink(struct es_batch *g, struct es_batch_req *q, struct es_batch_req *prev)
{
	if (prev)
		prev->next = q->next;
	else
		g->queue = q->next;
	if (g->queue_tail == q)
		g->queue_tail = prev;
	q->next = NULL;
	g->queued--;
	if (q->detached)
		g->detached_queued--;
}

/* Under batch_mutex: unlinks Q from the queue. */
static void queue_remove(struct es_batch *g, struct es_batch_req *q)
{
	struct es_batch_req *p, *prev = NULL;

	for (p = g->queue; p; prev = p, p = p->next)
		if (p == q) {
			queue_unlink(g, q, prev);
			return;
		}
}

static void req_free_detached(struct es_batch_req *q)
{
	free((char *)q->data);
	free(q->ids);
	free(q->kinds);
	free(q);
}

/* Under batch_mutex, with a free slot: takes the queued bulks that may
 * leave, in order (at least one, then up to ES_BATCH_MAX or
 * ES_BATCH_MAX_BYTES), sends them without the mutex, reports the
 * handed-off ones to their callbacks, then marks the rest done and wakes
 * their submitters. */
static void batch_lead(struct es_batch *g)
{
	struct es_batch_req *v[ES_BATCH_MAX], *q, *prev = NULL, *next;
	size_t n = 0, bytes = 0, i;
	bool released;

	for (q = g->queue; q && n < ES_BATCH_MAX; q = next) {
		next = q->next;
		if (n > 0 && bytes + q->len > ES_BATCH_MAX_BYTES)
			break;
		if (req_blocked(g, q)) {
			prev = q;
			continue;
		}
		queue_unlink(g, q, prev);
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
			v[i]->fly_next = g->flying;
			g->flying = v[i];
		}
	for (i = 0; i < n && v[i]->detached; i++)
		;
	released = i == n;
	g->inflight++;
	g->inflight_released += released;
	pthread_mutex_unlock(&g->mutex);
	batch_send(g, v, n);
	for (i = 0; i < n; i++)
		if (v[i]->detached) {
			struct buf b = {.data = (char *)v[i]->data, .len = v[i]->len};

			v[i]->done_fn(v[i]->arg, v[i]->err, v[i]->root, &b);
			v[i]->root = NULL;
		}
	pthread_mutex_lock(&g->mutex);
	g->inflight--;
	g->inflight_released -= released;
	for (i = 0; i < n; i++) {
		struct es_batch_req **pp;

		if (!v[i]->detached) {
			v[i]->done = true;
			continue;
		}
		for (pp = &g->flying; *pp; pp = &(*pp)->fly_next)
			if (*pp == v[i]) {
				*pp = v[i]->fly_next;
				break;
			}
		g->detached_live--;
		req_free_detached(v[i]);
	}
	pthread_cond_broadcast(&g->cond);
	if (g->detached_queued)
		pthread_cond_signal(&g->sender_cond); /* a slot is free */
}

/* Under batch_mutex: waits on COND until WAKE (tl_mono_ms; 0: until
 * woken). */
static void batch_wait(struct es_batch *g, pthread_cond_t *cond, int64_t wake)
{
	if (wake) {
		struct timespec ts = {.tv_sec = wake / 1000, .tv_nsec = (wake % 1000) * 1000000};

		pthread_cond_timedwait(cond, &g->mutex, &ts);
	} else {
		pthread_cond_wait(cond, &g->mutex);
	}
}

/* Under batch_mutex: queues Q at the tail. */
static void queue_add(struct es_batch *g, struct es_batch_req *q)
{
	q->queued_ms = tl_mono_ms();
	if (g->queue_tail)
		g->queue_tail->next = q;
	else
		g->queue = q;
	g->queue_tail = q;
	g->queued++;
}

/* One _bulk of DATA[0..LEN) (NITEMS items), alone or with the queue. */
static int bulk_send_one(struct es_batch *g, const char *data, size_t len, long nitems,
			 int64_t deadline, cJSON **root)
{
	struct es_batch_req me = {.data = data, .len = len, .deadline_ms = deadline};
	bool led = false, expired = false;
	int64_t until = 0;

	*root = NULL;
	me.nitems = nitems;
	if (me.nitems <= 0 || !g->ready)
		return es_bulk_post(g->cl, data, len, deadline, root); /* not ours to split */
	/* still queued then (the deadline, or now if it has passed, plus the
	 * grace every request gets): not sent, this caller's own failure */
	if (me.deadline_ms) {
		int64_t now = tl_mono_ms();

		until = (me.deadline_ms > now ? me.deadline_ms : now) + ES_GRACE_MS;
	}
	pthread_mutex_lock(&g->mutex);
	queue_add(g, &me);
	while (!me.done) {
		int64_t now = tl_mono_ms(), at = lead_at(g, now), wake = 0;

		if (at == 0) {
			batch_lead(g);
			led = true;
			continue;
		}
		if (until && !me.taken) {
			if (now >= until) {
				queue_remove(g, &me);
				me.err = -ETIMEDOUT;
				me.done = true;
				expired = true;
				break;
			}
			wake = until;
		}
		if (at > 0 && (!wake || at < wake))
			wake = at;
		batch_wait(g, &g->cond, wake);
	}
	/* the thread that sent our request runs already: without a sender
	 * thread it sends what queued meanwhile too (once: its own rename goes
	 * on after that), sparing the queue a wake-up before its request
	 * leaves; with one, the waiting submitters and the sender do */
	if (led && !g->sender_on && lead_at(g, tl_mono_ms()) == 0)
		batch_lead(g);
	pthread_mutex_unlock(&g->mutex);
	free(me.ids);
	free(me.kinds);
	if (expired)
		es_client_set_error(g->cl, "lock_timeout passed while the request waited for the "
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

int es_batch_send(struct es_batch *g, const struct buf *b, int64_t deadline, cJSON **root)
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
		return bulk_send_one(g, b->data, b->len, nitems, deadline, root);
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
		if (done && deadline && tl_mono_ms() >= deadline) {
			/* the rest is not sent: a caller past its deadline
			 * gets one chunk's grace, not one per chunk */
			err = -EAGAIN;
			break;
		}
		err = bulk_send_one(g, b->data + off, l, k, deadline, &part);
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
	struct es_batch *g = arg;

	pthread_mutex_lock(&g->mutex);
	while (!g->sender_stop || g->detached_queued) {
		int64_t at = g->detached_queued ? lead_at(g, tl_mono_ms()) : -1;

		if (at == 0)
			batch_lead(g);
		else
			batch_wait(g, &g->sender_cond, at > 0 ? at : 0);
	}
	pthread_mutex_unlock(&g->mutex);
	return NULL;
}

int es_batch_start_sender(struct es_batch *g)
{
	int err;

	if (g->sender_on || !g->ready)
		return 0;
	err = pthread_create(&g->sender, NULL, sender_main, g);
	if (err)
		return -err;
	pthread_mutex_lock(&g->mutex);
	g->sender_on = true;
	pthread_mutex_unlock(&g->mutex);
	return 0;
}

void es_batch_drain(struct es_batch *g)
{
	if (!g->ready)
		return;
	pthread_mutex_lock(&g->mutex);
	while (g->detached_live)
		pthread_cond_wait(&g->cond, &g->mutex);
	pthread_mutex_unlock(&g->mutex);
}

void es_batch_stop_sender(struct es_batch *g)
{
	if (!g->ready)
		return;
	pthread_mutex_lock(&g->mutex);
	if (!g->sender_on) {
		pthread_mutex_unlock(&g->mutex);
		return;
	}
	g->sender_stop = true;
	pthread_cond_signal(&g->sender_cond);
	pthread_mutex_unlock(&g->mutex);
	pthread_join(g->sender, NULL);
	es_batch_drain(g);
	pthread_mutex_lock(&g->mutex);
	g->sender_on = false;
	pthread_mutex_unlock(&g->mutex);
}

int es_batch_send_detached(struct es_batch *g, const struct buf *b, int64_t deadline,
			   cJSON **root, es_detached_fn *done, void *arg)
{
	struct es_batch_req *q;
	long nitems;
	bool at_once;

	*root = NULL;
	if (b->err)
		return -ENOMEM;
	nitems = es_bulk_count(b->data, b->len);
	if (nitems <= 0 || nitems > ES_BULK_MAX_ITEMS || !g->ready)
		return es_batch_send(g, b, deadline, root); /* a bulk in chunks is waited for */
	pthread_mutex_lock(&g->mutex);
	/* with a sender thread every release is handed to it, a lone
	 * rename's too: the rename returns after one round trip (its
	 * acquire), and its release leaves at once on the sender's
	 * connection; the mount's next acquire of the same documents waits
	 * for that answer (req_blocked()); without group commit each rename
	 * sends and waits for its own two requests, as before either */
	at_once = !g->sender_on || g->sender_stop || g->solo;
	pthread_mutex_unlock(&g->mutex);
	if (at_once)
		return es_batch_send(g, b, deadline, root);
	q = calloc(1, sizeof(*q));
	if (q)
		q->data = malloc(b->len + 1);
	if (!q || !q->data) {
		free(q);
		return es_batch_send(g, b, deadline, root);
	}
	memcpy((char *)q->data, b->data, b->len);
	((char *)q->data)[b->len] = '\0';
	q->len = b->len;
	q->nitems = nitems;
	q->detached = true;
	q->done_fn = done;
	q->arg = arg;
	req_ids(q);
	pthread_mutex_lock(&g->mutex);
	queue_add(g, q);
	g->detached_queued++;
	g->detached_live++;
	pthread_cond_signal(&g->sender_cond);
	pthread_mutex_unlock(&g->mutex);
	return 1;
}

int es_batch_open(struct es_batch *g, struct es_client *c, unsigned int max_inflight)
{
	pthread_condattr_t ca;

	memset(g, 0, sizeof(*g));
	g->cl = c;
	pthread_mutex_init(&g->mutex, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&g->cond, &ca);
	pthread_cond_init(&g->sender_cond, &ca);
	pthread_condattr_destroy(&ca);
	g->max_inflight = max_inflight;
	g->extra_min = ES_BATCH_EXTRA_MIN;
	if (max_inflight == 0) { /* no group commit: every slot opens at once */
		g->max_inflight = ES_BATCH_INFLIGHT_MAX;
		g->extra_min = 1;
		g->solo = true;
	}
	g->age_ms = ES_BATCH_AGE_MS;
	g->ready = true;
	return 0;
}

void es_batch_close(struct es_batch *g)
{
	if (!g->ready)
		return;
	es_batch_stop_sender(g);
	pthread_cond_destroy(&g->cond);
	pthread_cond_destroy(&g->sender_cond);
	pthread_mutex_destroy(&g->mutex);
	memset(g, 0, sizeof(*g));
}
