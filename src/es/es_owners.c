/* es_owners.c - other owners of the es store: what this mount saw of
 * their leases, take-over and reap, see es_owners.h
 *
 * One owner, as an observer sees it (its own monotonic clock; no clock is
 * compared between hosts):
 *
 *   unknown --lease document read--> seen (seq_no, first_ms)
 *   seen --seq_no moved--> seen (first_ms = now)
 *   seen --seq_no still, 2 x its lease_ttl after first_ms--> dead
 *   seen --document gone--> dead
 *   dead --take-over at a conflict, or treelockctl reap--> reaped
 *   dead, reaped --seq_no moved (it renewed after all)--> seen
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "es/es_batch.h"
#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/es_fsindex.h"
#include "es/es_internal.h"
#include "es/es_kept.h"
#include "es/es_owners.h"
#include "base/log.h"
#include "base/path.h"
#include "base/tlclock.h"

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

int es_judge_owners(struct es_store *es, char *const *owners, size_t n, bool *dead,
		    int64_t deadline)
{
	cJSON *root, *d;
	size_t i = 0;

	if (n == 0)
		return 0;
	root = es_mget(&es->cl, ES_OWNER_PREFIX, owners, n, deadline);
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

void es_takeover(struct es_store *es, const char *owner, char *const *extra, size_t n,
		 int64_t deadline)
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
		es_send_idempotent(es, &b, deadline);
	buf_free(&b);
	if (es_reap_owner(es, owner, 0, &nlocks, deadline) == 0) {
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

int es_reap_owner(struct es_store *es, const char *owner, unsigned int how, size_t *nlocks,
		  int64_t deadline)
{
	bool drop_intents = how & ES_REAP_DROP_INTENTS;
	size_t nintents = 0;
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
	if (!(how & ES_REAP_EVERY_DOC)) {
		q = cJSON_CreateObject();
		cJSON_AddStringToObject(cJSON_AddObjectToObject(q, "term"), "owner", owner);
	}
	root = es_search_all(&es->cl, q, deadline);
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
			/* fs index: what the dead owner's rename moved and may
			 * not have indexed */
			if (es->fsi && !(how & ES_REAP_SELF))
				es_fsindex_repair(es->fsi, es_jstr(src, "from"), es_jstr(src, "to"));
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
				nintents++;
			}
		} else if (es_docs_is_lock_id(hid)) {
			es_docs_evict(&b, hid, owner, stored);
			nitems++;
		}
	}
	cJSON_Delete(root);
	if (nitems) {
		cJSON *resp = NULL;

		err = es_batch_send(&es->batch, &b, deadline, &resp);
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
		es_delete(&es->cl, id, NULL, true, deadline);
	free(id);
	if (!(how & ES_REAP_SELF))
		tl_log(LOG_NOTICE, "reaped owner '%s': %zu lock documents changed", owner, *nlocks);
	else if (*nlocks || nintents)
		tl_log(LOG_NOTICE, "at exit: released %zu lock documents and %zu intents this mount "
		       "had left in the lock store", *nlocks, nintents);
	return 0;
}

void es_owners_free(struct es_store *es)
{
	size_t i;

	for (i = 0; i < es->nobs; i++)
		free(es->obs[i].id);
	es->nobs = 0;
}
