/* es_kept.c - release-like bulks that must reach the store, and the
 * releases kept for a resend, see es_kept.h
 *
 * A kept release, as a chart:
 *
 *   es_send_idempotent() --fails after its retries (es_retry.h level 3)-->
 *     kept --due (ES_PENDING_FIRST_MS, doubling to the heartbeat's period)-->
 *     resent by the heartbeat (es_kept_flush()) --ok--> resent once more a
 *     request timeout later (a request that timed out may still run
 *     after it) --> dropped
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "es/es_batch.h"
#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/es_internal.h"
#include "es/es_kept.h"
#include "es/es_retry.h"
#include "base/log.h"
#include "base/tlclock.h"

/* Under es->mutex: when the heartbeat thread resends what is kept. FRESH:
 * a release was just kept (first resend soon, and wake the thread);
 * otherwise a resend failed or is not yet due: back off. */
static void pending_schedule_locked(struct es_store *es, bool fresh)
{
	int64_t period = es_heartbeat_period(es);

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

void es_kept_flush(struct es_store *es)
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
		if (p->not_before > now || es_batch_send(&es->batch, &b, 0, &root) != 0) {
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
 * (es_batch_send_detached()): what es_send_idempotent() would keep after
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
	/* kept as sent: es_kept_flush() sends it inline should the stored
	 * scripts have gone missing */
	keep(es, sent);
}

/* Level 3 of es_retry.h. */
static int send_idempotent(struct es_store *es, struct buf *b, bool may_detach, int64_t deadline)
{
	cJSON *root = NULL;
	int err = -EAGAIN, attempt;

	for (attempt = 0; attempt < ES_ITEM_RETRIES; attempt++) {
		/* past the rename's deadline: the heartbeat resends it */
		if (attempt && !es_retry_pause(deadline, attempt))
			break;
		if (attempt == 0 && may_detach)
			err = es_batch_send_detached(&es->batch, b, deadline, &root, detached_done, es);
		else
			err = es_batch_send(&es->batch, b, deadline, &root);
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

int es_send_idempotent(struct es_store *es, struct buf *b, int64_t deadline)
{
	return send_idempotent(es, b, false, deadline);
}

int es_send_release(struct es_store *es, struct buf *b, int64_t deadline)
{
	return send_idempotent(es, b, true, deadline);
}

void es_kept_free(struct es_store *es)
{
	struct es_pending *p, *next;

	for (p = es->pending; p; p = next) {
		next = p->next;
		free(p->body);
		free(p);
	}
	es->pending = NULL;
}
