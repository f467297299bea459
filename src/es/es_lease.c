/* es_lease.c - this mount's lease in the es store, see es_lease.h
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

#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/es_internal.h"
#include "es/es_index.h"
#include "es/es_kept.h"
#include "es/es_lease.h"
#include "es/es_owners.h"
#include "es/es_retry.h"
#include "es/httpc.h"
#include "config/config.h"
#include "base/log.h"
#include "base/tlclock.h"

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
static int lease_reread(struct es_store *es, const char *owner, int64_t deadline)
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
	cc = es_call(&es->cl, "GET", path, NULL, NULL, 0, deadline, &r, true);
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
static int lease_write(struct es_store *es, bool create, int64_t deadline)
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
	cc = es_call(&es->cl, "PUT", path, HTTPC_JSON, body, strlen(body), deadline, &r, true);
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
		err = lease_reread(es, owner, deadline);
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

			err = doc ? es_delete(&es->cl, doc, NULL, true, 0) : -ENOMEM;
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
	int err = es_index_verify(&es->cl, es->strategy, &have, 0), old;

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
	int64_t period = es_heartbeat_period(es);
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
			es_kept_flush(es);
			continue;
		}
		next = tl_mono_ms() + period;
		index_check(es);
		err = lease_write(es, !have_doc, 0);
		if (err)
			next = tl_mono_ms() + period / 3; /* failing: retry sooner */
		pthread_mutex_lock(&es->mutex);
		if (!err && es->lease_missing) {
			es->lease_missing = false;
			tl_log(LOG_NOTICE, "lease of owner '%s' created in the lock store: renames "
			       "take locks again", es->owner);
		}
		pthread_mutex_unlock(&es->mutex);
		if ((err == -ESTALE || err == -ETIME) && have_doc) {
			lease_lost(es, err);
			next = tl_mono_ms(); /* create the new document at once */
		}
		es_kept_flush(es);
		abandoned_flush(es, false);
	}
	return NULL;
}

/* One attempt at creating our lease document (es_start_retry()). When an
 * earlier attempt turns out to have created it (its answer was lost: a 409
 * and a read adopt the document), the next attempt renews it, which makes
 * the lease fresh. */
static int lease_create_step(struct es_store *es, bool unused, int64_t deadline)
{
	bool have;
	int err;

	(void)unused;
	pthread_mutex_lock(&es->mutex);
	have = es->owner_doc;
	pthread_mutex_unlock(&es->mutex);
	err = lease_write(es, !have, deadline);
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
	/* the heartbeat starts either way: it creates the lease once the
	 * store answers (before, a store that did not within es_start_timeout
	 * left the mount without a lease, every rename failing with ENOLCK,
	 * until it was mounted again) */
	if (err)
		tl_log(LOG_ERR, "cannot create the lease of owner '%s' in the lock store yet: "
		       "renames fail with ENOLCK until the heartbeat creates it", es->owner);
	pthread_mutex_lock(&es->mutex);
	es->lease_missing = err != 0;
	pthread_mutex_unlock(&es->mutex);
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
	if (es->started) {
		pthread_mutex_lock(&es->mutex);
		es->stop = true;
		pthread_cond_signal(&es->cond);
		pthread_mutex_unlock(&es->mutex);
		pthread_join(es->hb, NULL);
		es->started = false;
		es_kept_flush(es);
		abandoned_flush(es, true);
		/* a clean unmount leaves nothing behind (what a rename cut
		 * short by the end of the mount took, an intent whose delete
		 * failed) and ends the lease at once; every request thread is
		 * done by now, so nothing of ours is held for real */
		if (es->owner_doc) {
			/* the end of the mount cut what was in flight at the
			 * end of its store budget; the clean-up gets a short
			 * one of its own, within what the stop allows
			 * (lock_timeout, of which 3/4 went to the requests) */
			int64_t end = httpc_end(es->cl.http), now = tl_mono_ms();
			int64_t grace = (int64_t)(es->base.cfg->lock_timeout * 1000) / 8;
			size_t n;

			if (grace < ES_GRACE_MS)
				grace = ES_GRACE_MS;
			if (end && end < now + grace)
				httpc_set_end(es->cl.http, now + grace);

			if (es_reap_owner(es, es->owner, ES_REAP_DROP_INTENTS | ES_REAP_SELF, &n,
					  0) != 0) {
				char *id = es_docs_owner_id(es->owner);

				if (id)
					es_delete(&es->cl, id, NULL, true, 0);
				free(id);
			}
		}
	}
	es_kept_free(es);
}
