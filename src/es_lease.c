/* es_lease.c - owners and leases of the es store, see es_lease.h
 *
 * This mount's lease, as a chart (the heartbeat thread drives it):
 *
 *   start --create--> fresh --renew ok (each lease_ttl/3)--> fresh
 *                       |
 *                       +--renewals fail for lease_ttl--> stale (no renames)
 *                       +--document gone (reaped) or renewed only after it
 *                          lapsed--> new owner id, epoch++, create again;
 *                          renames held under the old id are fenced
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "es_client.h"
#include "es_docs.h"
#include "es_index.h"
#include "es_i.h"
#include "es_lease.h"
#include "httpc.h"
#include "log.h"
#include "path.h"
#include "tlclock.h"

void es_lease_new_owner_id_locked(struct es_store *es)
{
	unsigned char r[8];
	size_t i;

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		uint64_t x = (uint64_t)tl_mono_ms() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)tl_wall_ms();

		memcpy(r, &x, sizeof(r));
	}
	for (i = 0; i < sizeof(r); i++)
		snprintf(es->nonce + 2 * i, 3, "%02x", r[i]);
	snprintf(es->owner, sizeof(es->owner), "%s:%d:%s", es->name, (int)getpid(), es->nonce);
}

bool es_lease_fresh_locked(const struct es_store *es, int64_t now)
{
	return es->renewed_ms > 0 && now - es->renewed_ms < es->ttl_ms;
}

/* After a 409 on our lease document: an earlier write of ours may have
 * been applied without us seeing the answer (timeout, reset). Nobody but a
 * reaper touches the document, and a reaper deletes it. Returns -EAGAIN
 * (it is ours: seq_no adopted, renew again) or -ESTALE (gone: reaped). */
static int lease_reread(struct es_store *es, const char *owner)
{
	struct httpc_response r;
	enum es_call_class cc;
	char *id = es_docs_owner_id(owner), *path;
	cJSON *root;
	int err = -EAGAIN;

	path = id ? es_path(&es->cl, "_doc", id, NULL) : NULL;
	free(id);
	if (!path)
		return -EAGAIN;
	cc = es_call(&es->cl, "GET", path, NULL, NULL, 0, &r, true);
	free(path);
	if (cc == ES_CALL_OK) {
		root = es_parse(&r);
		pthread_mutex_lock(&es->mutex);
		if (strcmp(owner, es->owner) == 0) {
			es->owner_seq = es_jint(root, "_seq_no", 0);
			es->owner_term = es_jint(root, "_primary_term", 1);
			es->owner_doc = true;
		}
		pthread_mutex_unlock(&es->mutex);
		cJSON_Delete(root);
	} else if (r.status == 404) {
		err = -ESTALE;
	}
	httpc_response_free(&r);
	return err;
}

/* Creates (CREATE) or renews our lease document. Returns 0, -ESTALE (it
 * was removed: we were reaped), -ETIME (renewed, but after the lease had
 * lapsed: others may be taking our locks over, so this owner id must not
 * act again), -EAGAIN, -ENOMEM. */
static int lease_write(struct es_store *es, bool create)
{
	struct httpc_response r;
	char owner[ES_ID_MAX], query[96], host[256] = "";
	int64_t seq, term, sent;
	enum es_call_class cc;
	char *id, *path, *body;
	cJSON *root;
	int err = -EAGAIN;

	pthread_mutex_lock(&es->mutex);
	snprintf(owner, sizeof(owner), "%s", es->owner);
	seq = es->owner_seq;
	term = es->owner_term;
	pthread_mutex_unlock(&es->mutex);
	snprintf(query, sizeof(query), "if_seq_no=%" PRId64 "&if_primary_term=%" PRId64, seq, term);
	id = es_docs_owner_id(owner);
	path = id ? es_path(&es->cl, create ? "_create" : "_doc", id, create ? NULL : query) : NULL;
	free(id);
	if (!path)
		return -ENOMEM;
	gethostname(host, sizeof(host) - 1);
	root = es_docs_owner(owner, es->name, host, getpid(), tl_wall_ms(), es->ttl_ms);
	body = root ? cJSON_PrintUnformatted(root) : NULL;
	cJSON_Delete(root);
	if (!body) {
		free(path);
		return -ENOMEM;
	}
	sent = tl_mono_ms();
	cc = es_call(&es->cl, "PUT", path, HTTPC_JSON, body, strlen(body), &r, true);
	free(body);
	free(path);
	if (cc == ES_CALL_OK) {
		root = es_parse(&r);
		pthread_mutex_lock(&es->mutex);
		err = 0;
		if (strcmp(owner, es->owner) == 0) {
			es->owner_seq = es_jint(root, "_seq_no", 0);
			es->owner_term = es_jint(root, "_primary_term", 1);
			es->owner_doc = true;
			/* a renewal after the lease lapsed does not make it
			 * fresh again: observers may be taking it over now */
			if (!create && es->renewed_ms > 0 && sent - es->renewed_ms >= es->ttl_ms) {
				err = -ETIME;
			} else {
				es->renewed_ms = sent;
				es->warned_stale = false;
			}
		}
		pthread_mutex_unlock(&es->mutex);
		cJSON_Delete(root);
	} else if (r.status == 409 || r.status == 404) {
		err = lease_reread(es, owner);
	} else if (r.status) {
		char type[96] = "";

		root = es_parse(&r);
		es_docs_error_type(root, type, sizeof(type));
		cJSON_Delete(root);
		tl_log(LOG_WARNING, "cannot renew the lease of owner '%s': HTTP %ld %s", owner,
		       r.status, type);
	}
	httpc_response_free(&r);
	return err;
}

/* How often the heartbeat renews the lease: lease_ttl/3, at least 50 ms. */
static int64_t heartbeat_period(const struct es_store *es)
{
	return es->ttl_ms / 3 > 50 ? es->ttl_ms / 3 : 50;
}

/* Under es->mutex: when the heartbeat thread resends what is kept. FRESH:
 * a release was just kept (first resend soon, and wake the thread);
 * otherwise a resend failed or is not yet due: back off. */
static void pending_schedule_locked(struct es_store *es, bool fresh)
{
	int64_t period = heartbeat_period(es);

	if (!es->pending) {
		es->pending_due = 0;
		es->pending_backoff = 0;
		return;
	}
	if (fresh || !es->pending_backoff)
		es->pending_backoff = ES_PENDING_FIRST_MS;
	else if (es->pending_backoff < period)
		es->pending_backoff = es->pending_backoff * 2 < period ? es->pending_backoff * 2
								       : period;
	es->pending_due = tl_mono_ms() + es->pending_backoff;
	if (fresh)
		pthread_cond_signal(&es->cond);
}

/* Keeps a release bulk that could not be sent, for the heartbeat thread,
 * which resends it soon (pending_schedule_locked()). */
static void pending_add(struct es_store *es, const struct buf *b)
{
	struct es_pending *p;

	if (b->err || !b->len)
		return;
	p = calloc(1, sizeof(*p));
	if (!p)
		return;
	p->body = malloc(b->len + 1);
	if (!p->body) {
		free(p);
		return;
	}
	memcpy(p->body, b->data, b->len + 1);
	p->len = b->len;
	p->confirms = 1;
	pthread_mutex_lock(&es->mutex);
	p->next = es->pending;
	es->pending = p;
	pending_schedule_locked(es, true);
	pthread_mutex_unlock(&es->mutex);
}

/* Resends kept releases that are due. */
static void pending_flush(struct es_store *es)
{
	struct es_pending *list, *p, *next, *keep = NULL;
	int64_t now = tl_mono_ms();

	pthread_mutex_lock(&es->mutex);
	list = es->pending;
	es->pending = NULL;
	pthread_mutex_unlock(&es->mutex);
	for (p = list; p; p = next) {
		struct buf b = {.data = p->body, .len = p->len, .cap = p->len + 1};
		cJSON *root = NULL;

		next = p->next;
		if (!es_client_scripts_stored(&es->cl) && es_docs_inline(&b) == 0) {
			/* kept while the scripts were stored; they are gone */
			p->body = b.data;
			p->len = b.len;
		}
		if (p->not_before > now || es_bulk_send(&es->cl, &b, &root) != 0) {
			p->next = keep;
			keep = p;
			continue;
		}
		cJSON_Delete(root);
		/* A request that timed out may still run after this one: send
		 * it once more after a timeout's time. */
		if (p->confirms-- > 0) {
			p->not_before = now + es->timeout_ms;
			p->next = keep;
			keep = p;
			continue;
		}
		tl_log(LOG_NOTICE, "kept lock release sent to the lock store");
		free(p->body);
		free(p);
	}
	pthread_mutex_lock(&es->mutex);
	if (keep) {
		for (p = keep; p->next; p = p->next)
			;
		p->next = es->pending;
		es->pending = keep;
	}
	pending_schedule_locked(es, false);
	pthread_mutex_unlock(&es->mutex);
}

/* Judges the answer ROOT (freed here) of an idempotent bulk: true when
 * an item is to be resent; items refused for good are logged. */
static bool idempotent_retry(struct es_store *es, cJSON *root)
{
	bool retry = false;
	cJSON *it;

	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "items"))
	{
		long st;
		enum es_item_state is = es_item_state(&es->cl, it, &st);

		if (is == ES_ITEM_RETRY) {
			retry = true;
		} else if (is == ES_ITEM_FATAL) {
			char *t = cJSON_PrintUnformatted(it);

			tl_log(LOG_ERR, "lock store refused a release item (HTTP %ld): %.1000s", st,
			       t ? t : "?");
			free(t);
		}
	}
	cJSON_Delete(root);
	return retry;
}

/* Keeps B for the heartbeat thread; -EINPROGRESS. */
static int keep(struct es_store *es, const struct buf *b)
{
	pending_add(es, b);
	tl_log(LOG_WARNING, "lock store unavailable: release kept for a later retry");
	return -EINPROGRESS;
}

/* The outcome of a release handed off to the sender thread
 * (es_bulk_send_detached()): what es_send_idempotent() would keep after
 * its first attempt is kept, and resent by the heartbeat thread within
 * ES_PENDING_FIRST_MS, backing off. */
static void detached_done(void *arg, int err, cJSON *root, const struct buf *sent)
{
	struct es_store *es = arg;

	if (err == -EACCES || err == -ENOMEM) {
		cJSON_Delete(root);
		tl_log(LOG_ERR, "cannot release locks: the lock store refused the request; "
		       "they expire with the lease");
		return;
	}
	if (!err && !idempotent_retry(es, root))
		return;
	/* kept as sent: pending_flush() sends it inline should the stored
	 * scripts have gone missing */
	keep(es, sent);
}

static int send_idempotent(struct es_store *es, struct buf *b, bool may_detach)
{
	cJSON *root = NULL;
	int err = -EAGAIN, attempt;

	for (attempt = 0; attempt < ES_ITEM_RETRIES; attempt++) {
		if (attempt) {
			/* past the rename's deadline: the heartbeat resends it */
			if (es_deadline_left() <= ES_RETRY_BASE_MS << attempt)
				break;
			es_sleep_ms(ES_RETRY_BASE_MS << attempt);
		}
		if (attempt == 0 && may_detach)
			err = es_bulk_send_detached(&es->cl, b, &root, detached_done, es);
		else
			err = es_bulk_send(&es->cl, b, &root);
		if (err == 1)
			return 0; /* the sender thread's, with the queue */
		if (err == -ETIMEDOUT)
			err = -EAGAIN; /* not sent: kept below */
		if (err == -EAGAIN)
			continue;
		if (err)
			break;
		if (!idempotent_retry(es, root))
			return 0;
		root = NULL;
		err = -EAGAIN; /* resending the whole body is safe: idempotent */
		if (!es_client_scripts_stored(&es->cl) && es_docs_inline(b) != 0)
			break; /* the stored scripts went missing: inline from now on */
	}
	if (err == -EAGAIN)
		return keep(es, b);
	return -ENOLCK;
}

int es_send_idempotent(struct es_store *es, struct buf *b)
{
	return send_idempotent(es, b, false);
}

int es_send_release(struct es_store *es, struct buf *b)
{
	return send_idempotent(es, b, true);
}

/* Deletes the lease documents of our former owner ids that are due (all
 * with ALL: no rename runs any more). Best effort: a document that cannot
 * be deleted now is tried again later, or left to a reap. */
static void abandoned_flush(struct es_store *es, bool all)
{
	char id[ES_ID_MAX];
	int64_t now = tl_mono_ms();
	size_t i;
	int err;

	for (;;) {
		pthread_mutex_lock(&es->mutex);
		for (i = 0; i < es->nabandoned; i++)
			if (all || es->abandoned_due[i] <= now)
				break;
		if (i == es->nabandoned) {
			pthread_mutex_unlock(&es->mutex);
			return;
		}
		snprintf(id, sizeof(id), "%s", es->abandoned[i]);
		pthread_mutex_unlock(&es->mutex);

		{
			char *doc = es_docs_owner_id(id);

			err = doc ? es_delete(&es->cl, doc, NULL, true) : -ENOMEM;
			free(doc);
		}
		pthread_mutex_lock(&es->mutex);
		if (err == 0 || err == -ENOENT || all) {
			/* gone, or at exit: tried once */
			for (i = 0; i < es->nabandoned; i++)
				if (strcmp(es->abandoned[i], id) == 0)
					break;
			if (i < es->nabandoned) {
				memmove(&es->abandoned[i], &es->abandoned[i + 1],
					(es->nabandoned - i - 1) * sizeof(es->abandoned[0]));
				memmove(&es->abandoned_due[i], &es->abandoned_due[i + 1],
					(es->nabandoned - i - 1) * sizeof(es->abandoned_due[0]));
				es->nabandoned--;
			}
			pthread_mutex_unlock(&es->mutex);
			continue;
		}
		pthread_mutex_unlock(&es->mutex);
		return; /* the store fails: later */
	}
}

/* Takes a new owner id after the lease was lost (ERR -ESTALE: reaped;
 * -ETIME: renewed after it lapsed); renames held under the old one are
 * fenced. */
static void lease_lost(struct es_store *es, int err)
{
	char old[ES_ID_MAX], now_id[ES_ID_MAX];

	pthread_mutex_lock(&es->mutex);
	snprintf(old, sizeof(old), "%s", es->owner);
	/* renewed after it lapsed: the old document is still there. A rename
	 * that passed its lease check may act for up to lease_ttl more, so it
	 * goes after that (or at exit), not now. */
	if (err == -ETIME && es->owner_doc) {
		if (es->nabandoned == ES_MAX_ABANDONED) {
			memmove(&es->abandoned[0], &es->abandoned[1],
				(ES_MAX_ABANDONED - 1) * sizeof(es->abandoned[0]));
			memmove(&es->abandoned_due[0], &es->abandoned_due[1],
				(ES_MAX_ABANDONED - 1) * sizeof(es->abandoned_due[0]));
			es->nabandoned--;
		}
		snprintf(es->abandoned[es->nabandoned], sizeof(es->abandoned[0]), "%s", old);
		es->abandoned_due[es->nabandoned++] = tl_mono_ms() + es->ttl_ms;
	}
	es_lease_new_owner_id_locked(es);
	es->epoch++;
	es->held_old += es->held_cur;
	es->held_cur = 0;
	es->owner_doc = false;
	es->renewed_ms = 0;
	snprintf(now_id, sizeof(now_id), "%s", es->owner);
	pthread_mutex_unlock(&es->mutex);
	if (err == -ESTALE)
		tl_log(LOG_ERR,
		       "the lease of owner '%s' was removed by another client: "
		       "locks taken under it are lost; continuing as a new owner",
		       old);
	else
		tl_log(LOG_ERR,
		       "the lease of owner '%s' lapsed (no renewal for %.1f s): "
		       "locks taken under it may be taken over; continuing as a "
		       "new owner",
		       old, (double)es->ttl_ms / 1000);
	httpc_set_opaque_id(es->cl.http, now_id);
}

/* Checks that the index still carries our mapping and strategy, and
 * re-creates it when the store lost it (es_index_verify()): lock
 * documents must never land in an index that a write auto-created with a
 * dynamic mapping and no strategy. Sets es->index_err, logged when it
 * changes. */
static void index_check(struct es_store *es)
{
	char *have = NULL;
	int err = es_index_verify(&es->cl, es->strategy, &have), old;

	if (err != 0 && err != -EPROTO && err != -EINVAL) {
		free(have);
		return; /* cannot tell now */
	}
	pthread_mutex_lock(&es->mutex);
	old = es->index_err;
	es->index_err = err;
	pthread_mutex_unlock(&es->mutex);
	if (err && err != old)
		tl_log(LOG_ERR,
		       "lock index '%s' %s%s: renames fail with ENOLCK until it is deleted "
		       "(a mount then re-creates it)",
		       es->cl.index,
		       err == -EPROTO ? "lost its mapping (re-created by a write after the store "
					"lost it?)"
				      : "now records lock_strategy=",
		       err == -EPROTO ? "" : have ? have : "?");
	else if (!err && old)
		tl_log(LOG_NOTICE, "lock index '%s' carries our mapping again", es->cl.index);
	free(have);
}

static void *heartbeat(void *arg)
{
	struct es_store *es = arg;
	int64_t period = heartbeat_period(es);
	int64_t next = tl_mono_ms() + period;
	int err;

	for (;;) {
		struct timespec ts;
		bool stop, have_doc;

		pthread_mutex_lock(&es->mutex);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		while (!es->stop) {
			int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
			int64_t wake = next;
			struct timespec until;

			if (es->pending_due && es->pending_due < wake)
				wake = es->pending_due;
			if (now >= wake)
				break;
			until.tv_sec = wake / 1000;
			until.tv_nsec = (wake % 1000) * 1000000;
			pthread_cond_timedwait(&es->cond, &es->mutex, &until);
			clock_gettime(CLOCK_MONOTONIC, &ts);
		}
		stop = es->stop;
		have_doc = es->owner_doc;
		pthread_mutex_unlock(&es->mutex);
		if (stop)
			break;
		if (tl_mono_ms() < next) {
			/* woken for kept releases only */
			pending_flush(es);
			continue;
		}
		next = tl_mono_ms() + period;
		index_check(es);
		err = lease_write(es, !have_doc);
		if (err)
			next = tl_mono_ms() + period / 3; /* failing: retry sooner */
		if ((err == -ESTALE || err == -ETIME) && have_doc) {
			lease_lost(es, err);
			next = tl_mono_ms(); /* create the new document at once */
		}
		pending_flush(es);
		abandoned_flush(es, false);
	}
	return NULL;
}

/* One attempt at creating our lease document (es_start_retry()). When an
 * earlier attempt turns out to have created it (its answer was lost: a 409
 * and a read adopt the document), the next attempt renews it, which makes
 * the lease fresh. */
static int lease_create_step(struct es_store *es, bool unused)
{
	bool have;
	int err;

	(void)unused;
	pthread_mutex_lock(&es->mutex);
	have = es->owner_doc;
	pthread_mutex_unlock(&es->mutex);
	err = lease_write(es, !have);
	if (err == -ESTALE) {
		/* gone after all: create it again */
		pthread_mutex_lock(&es->mutex);
		es->owner_doc = false;
		pthread_mutex_unlock(&es->mutex);
		err = -EAGAIN;
	}
	return err;
}

int es_lease_start(struct es_store *es)
{
	int err;

	pthread_mutex_lock(&es->mutex);
	es_lease_new_owner_id_locked(es); /* after the fork: our pid */
	pthread_mutex_unlock(&es->mutex);
	err = httpc_set_opaque_id(es->cl.http, es->owner);
	if (err)
		return err;
	err = es_start_retry(es, "create the lease in the lock store", lease_create_step, false);
	if (err) {
		tl_log(LOG_ERR, "cannot create the lease of owner '%s' in the lock store", es->owner);
		return -ENOLCK;
	}
	err = pthread_create(&es->hb, NULL, heartbeat, es);
	if (err)
		return -err;
	es->started = true;
	tl_log(LOG_INFO, "lock store owner '%s', lease_ttl %.1f s", es->owner,
	       (double)es->ttl_ms / 1000);
	return 0;
}

void es_lease_stop(struct es_store *es)
{
	struct es_pending *p, *next;

	if (es->started) {
		pthread_mutex_lock(&es->mutex);
		es->stop = true;
		pthread_cond_signal(&es->cond);
		pthread_mutex_unlock(&es->mutex);
		pthread_join(es->hb, NULL);
		es->started = false;
		pending_flush(es);
		abandoned_flush(es, true);
		/* a clean unmount ends the lease at once */
		if (es->owner_doc) {
			char *id = es_docs_owner_id(es->owner);

			if (id)
				es_delete(&es->cl, id, NULL, true);
			free(id);
		}
	}
	for (p = es->pending; p; p = next) {
		next = p->next;
		free(p->body);
		free(p);
	}
	es->pending = NULL;
}

/* The observation of OWNER, made when missing; NULL when out of memory.
 * Caller holds es->mutex. */
static struct es_observed *obs_find_locked(struct es_store *es, const char *owner, bool make)
{
	struct es_observed *o;
	size_t i;
	char *id;

	for (i = 0; i < es->nobs; i++)
		if (strcmp(es->obs[i].id, owner) == 0)
			return &es->obs[i];
	if (!make)
		return NULL;
	id = strdup(owner);
	if (!id)
		return NULL;
	if (es->nobs == ES_MAX_OBSERVED) {
		/* forget the oldest live entry; dead ones are kept for scripts */
		for (i = 0; i < es->nobs && es->obs[i].dead; i++)
			;
		if (i == es->nobs)
			i = 0;
		free(es->obs[i].id);
		memmove(&es->obs[i], &es->obs[i + 1], (es->nobs - i - 1) * sizeof(es->obs[0]));
		es->nobs--;
	}
	o = &es->obs[es->nobs++];
	memset(o, 0, sizeof(*o));
	o->id = id;
	o->seq_no = INT64_MIN;
	return o;
}

bool es_obs_record(struct es_store *es, const char *owner, int64_t seq, int64_t ttl_ms)
{
	struct es_observed *o;
	int64_t now = tl_mono_ms(), limit;
	bool dead = false;

	pthread_mutex_lock(&es->mutex);
	o = obs_find_locked(es, owner, true);
	if (!o)
		goto out_unlock;
	if (ttl_ms > 0)
		o->ttl_ms = ttl_ms;
	if (seq < 0) {
		o->dead = true;
	} else if (seq != o->seq_no) {
		o->seq_no = seq;
		o->first_ms = now;
		o->dead = false;
		o->reaped = false;
	} else {
		/* the holder fences itself after ITS lease_ttl */
		limit = 2 * (o->ttl_ms > 0 ? o->ttl_ms : es->ttl_ms);
		if (now - o->first_ms >= limit)
			o->dead = true;
	}
	dead = o->dead;
out_unlock:
	pthread_mutex_unlock(&es->mutex);
	return dead;
}

/* A copy of what was seen of OWNER (its id NULL), or of a never seen one
 * (seq_no INT64_MIN, nothing else set). Takes es->mutex. */
static struct es_observed obs_get(struct es_store *es, const char *owner)
{
	struct es_observed copy = {.seq_no = INT64_MIN}, *o;

	pthread_mutex_lock(&es->mutex);
	o = obs_find_locked(es, owner, false);
	if (o) {
		copy = *o;
		copy.id = NULL;
	}
	pthread_mutex_unlock(&es->mutex);
	return copy;
}

int64_t es_obs_seq(struct es_store *es, const char *owner)
{
	return obs_get(es, owner).seq_no;
}

bool es_obs_reaped(struct es_store *es, const char *owner)
{
	return obs_get(es, owner).reaped;
}

void es_strv_free(char **v, size_t n)
{
	size_t i;

	if (!v)
		return;
	for (i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

int es_dead_owners(struct es_store *es, char ***out, size_t *n)
{
	char **v;
	size_t i, k = 0;
	int err = 0;

	pthread_mutex_lock(&es->mutex);
	v = calloc(es->nobs + 1, sizeof(*v));
	for (i = 0; v && i < es->nobs; i++) {
		if (!es->obs[i].dead)
			continue;
		v[k] = strdup(es->obs[i].id);
		if (!v[k]) {
			err = -ENOMEM;
			break;
		}
		k++;
	}
	pthread_mutex_unlock(&es->mutex);
	if (!v || err) {
		es_strv_free(v, k);
		*out = NULL;
		*n = 0;
		return -ENOMEM;
	}
	*out = v;
	*n = k;
	return 0;
}

int es_judge_owners(struct es_store *es, char *const *owners, size_t n, bool *dead)
{
	cJSON *root, *d;
	size_t i = 0;

	if (n == 0)
		return 0;
	root = es_mget(&es->cl, ES_OWNER_PREFIX, owners, n);
	if (!root)
		return -EAGAIN;
	cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(root, "docs"))
	{
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(d, "_source");
		bool found = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "found"));

		if (i >= n)
			break;
		dead[i] = es_obs_record(es, owners[i], found ? es_jint(d, "_seq_no", 0) : -1,
					es_jint(src, "ttl_ms", 0));
		i++;
	}
	cJSON_Delete(root);
	return i == n ? 0 : -EAGAIN;
}

void es_takeover(struct es_store *es, const char *owner, char *const *extra, size_t n)
{
	char *shown = es_docs_owner_display(owner);
	struct buf b = BUF_INIT;
	size_t nlocks = 0, i;
	bool stored = es_client_scripts_stored(&es->cl);

	tl_log(LOG_WARNING,
	       "owner '%s' (%s) holds locks but its lease has not been renewed for 2 x lease_ttl: "
	       "taking its locks over",
	       owner, shown ? shown : "?");
	free(shown);
	for (i = 0; i < n; i++)
		es_docs_evict(&b, extra[i], owner, stored);
	if (b.len || b.err)
		es_send_idempotent(es, &b);
	buf_free(&b);
	if (es_reap_owner(es, owner, false, &nlocks) == 0) {
		struct es_observed *o;

		pthread_mutex_lock(&es->mutex);
		o = obs_find_locked(es, owner, true);
		if (o)
			o->reaped = true;
		pthread_mutex_unlock(&es->mutex);
	}
}

/* True when one of the keys of object member NAME of SRC is a holder id
 * of OWNER ("<owner>#<ticket>"). */
static bool names_holder_of(const cJSON *src, const char *name, const char *owner)
{
	const cJSON *e;
	size_t n = strlen(owner);

	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(src, name))
		if (e->string && strncmp(e->string, owner, n) == 0 && e->string[n] == '#')
			return true;
	return false;
}

bool es_doc_names_owner(const cJSON *src, const char *owner)
{
	const char *o = es_jstr(src, "owner");

	return (o && strcmp(o, owner) == 0) || names_holder_of(src, "holders", owner) ||
	       names_holder_of(src, "waiters", owner);
}

int es_reap_owner(struct es_store *es, const char *owner, bool drop_intents, size_t *nlocks)
{
	struct buf b = BUF_INIT;
	cJSON *q = NULL, *root;
	const cJSON *hit;
	char *id, *kid;
	size_t nitems = 0;
	int err = 0;
	bool stored = es_client_scripts_stored(&es->cl);

	*nlocks = 0;
	/* At a conflict (take-over) only what the owner's intents and its
	 * exclusive locks name (a term query); an operator's reap reads every
	 * document, so that shares and waiter marks that no intent names go
	 * too (holders and waiters are not indexed). */
	if (!drop_intents) {
		q = cJSON_CreateObject();
		cJSON_AddStringToObject(cJSON_AddObjectToObject(q, "term"), "owner", owner);
	}
	root = es_search_all(&es->cl, q);
	if (!root)
		return -ENOLCK;
	cJSON_ArrayForEach(hit, es_hits(root))
	{
		const char *hid = es_jstr(hit, "_id");
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(hit, "_source");

		if (!hid || !es_doc_names_owner(src, owner))
			continue;
		if (strncmp(hid, ES_INTENT_PREFIX, strlen(ES_INTENT_PREFIX)) == 0) {
			/* every key the owner's plan named */
			char **keys = NULL;
			size_t nk = 0, j;

			if (es_docs_intent_keys(src, es->strategy, &keys, &nk) != 0)
				nk = 0;
			for (j = 0; j < nk; j++) {
				if (path_text_lock_id(keys[j], &kid) == 0) {
					es_docs_evict(&b, kid, owner, stored);
					free(kid);
					nitems++;
				}
				free(keys[j]);
			}
			free(keys);
			if (drop_intents) {
				es_docs_delete(&b, hid);
				nitems++;
			}
		} else if (es_docs_is_lock_id(hid)) {
			es_docs_evict(&b, hid, owner, stored);
			nitems++;
		}
	}
	cJSON_Delete(root);
	if (nitems) {
		cJSON *resp = NULL;

		err = es_bulk_send(&es->cl, &b, &resp);
		if (err == 0) {
			cJSON_ArrayForEach(hit, cJSON_GetObjectItemCaseSensitive(resp, "items"))
			{
				const char *res = es_jstr(hit->child, "result");

				if (res && strcmp(hit->child->string, "update") == 0 &&
				    (strcmp(res, "updated") == 0 || strcmp(res, "deleted") == 0))
					(*nlocks)++;
			}
		}
		cJSON_Delete(resp);
	}
	buf_free(&b);
	if (err)
		return -ENOLCK;
	id = es_docs_owner_id(owner);
	if (id)
		es_delete(&es->cl, id, NULL, true);
	free(id);
	tl_log(LOG_NOTICE, "reaped owner '%s': %zu lock documents changed", owner, *nlocks);
	return 0;
}
