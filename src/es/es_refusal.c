/* es_refusal.c - the refusal path of an acquire in the es store: which
 * refused items are ours after all, who blocks, take-over of dead owners,
 * rollback and waiter marks
 *
 * A refused attempt (es_acquire.c), as a chart of its requests:
 *
 *   _mget the refused documents --gone--> retry the item soon (EAGAIN)
 *                               --holds our holder id--> ours (an earlier
 *                                 ambiguous success); all ours: held (0)
 *                               --held by others--> their owners judged
 *                                 (es_judge_owners(): _mget of their lease
 *                                 documents); dead ones taken over
 *                                 (es_takeover()) or, once reaped, evicted
 *   then ONE _bulk: roll back what was sent, mark waiters, evict; when it
 *   fails the rollback is sent alone (es_send_idempotent(): retried, then
 *   kept for the heartbeat)
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/tlclock.h"
#include "es/es_batch.h"
#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/es_internal.h"
#include "es/es_kept.h"
#include "es/es_owners.h"
#include "lock/lockplan.h"
#include "lock/lockstore.h"

/* Adds OWNER to the set OWNERS (N of them, CAP allocated) unless present
 * or SELF. Returns 0 or -ENOMEM. */
static int owner_add(char ***owners, size_t *n, size_t *cap, const char *owner, const char *self)
{
	size_t k;
	char **v;

	if (strcmp(owner, self) == 0)
		return 0;
	for (k = 0; k < *n; k++)
		if (strcmp((*owners)[k], owner) == 0)
			return 0;
	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 8;
		v = realloc(*owners, *cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		*owners = v;
	}
	(*owners)[*n] = strdup(owner);
	if (!(*owners)[*n])
		return -ENOMEM;
	(*n)++;
	return 0;
}

/* Collects into OWNERS the owners blocking R in lock document source SRC
 * (plan key I), and describes the first one in WHY unless DESCRIBED. */
static int blockers_of(const cJSON *src, const struct es_req *r, size_t i, char ***owners,
		       size_t *n, size_t *cap, struct tl_conflict *why, bool *described)
{
	const char *type = es_jstr(src, "lock_type");
	const cJSON *hs = cJSON_GetObjectItemCaseSensitive(src, "holders");
	const cJSON *ws = cJSON_GetObjectItemCaseSensitive(src, "waiters");
	const cJSON *e;
	char desc[128] = "";
	int err = 0;

	cJSON_ArrayForEach(e, hs)
	{
		char *o = es_docs_owner_of_holder(e->string);
		char *shown = o ? es_docs_owner_display(o) : NULL;

		if (!o || !shown)
			err = -ENOMEM;
		else
			err = err ? err : owner_add(owners, n, cap, o, r->owner);
		if (!*desc && shown)
			snprintf(desc, sizeof(desc), "%s", shown);
		free(shown);
		free(o);
	}
	if (type && strcmp(type, "exclusive") == 0 && es_jstr(src, "owner"))
		err = err ? err : owner_add(owners, n, cap, es_jstr(src, "owner"), r->owner);
	cJSON_ArrayForEach(e, ws)
	{
		const char *wo = es_jstr(e, "owner");
		char *shown;

		if (!wo || strcmp(wo, r->owner) == 0)
			continue;
		err = err ? err : owner_add(owners, n, cap, wo, r->owner);
		if (!*desc) {
			shown = es_docs_owner_display(wo);
			snprintf(desc, sizeof(desc), "%s (waiting)", shown ? shown : "?");
			free(shown);
		}
	}
	if (!*described) {
		*described = true;
		snprintf(why->key, sizeof(why->key), "%s", r->plan->items[i].key);
		if (!*desc)
			snprintf(desc, sizeof(desc), "a client without owner (guide-style lock)");
		snprintf(why->holder, sizeof(why->holder), "%s%s", desc,
			 type && strcmp(type, "exclusive") == 0 ? " (exclusive)" : " (shared)");
		if (es_jint(src, "since", -1) > 0)
			why->held_ms = tl_wall_ms() - es_jint(src, "since", 0);
	}
	return err;
}

int es_on_refusal(struct es_store *es, struct es_req *r, const struct tl_holder *h,
		  enum es_item_state *st, struct tl_conflict *why)
{
	int64_t deadline = es_hold_deadline(h);
	size_t n = r->plan->n, nref = 0, i, nown = 0, cap = 0, j;
	size_t *ref = calloc(n ? n : 1, sizeof(*ref));
	char **owners = NULL, **refids = calloc(n ? n : 1, sizeof(*refids));
	bool *dead = NULL, described = false;
	cJSON *root = NULL, *d;
	struct buf b = BUF_INIT;
	size_t rollback_len;
	int err = -EAGAIN;

	if (!ref || !refids) {
		err = -ENOLCK;
		goto out;
	}
	r->stored = es_client_scripts_stored(&es->cl);
	for (i = 0; i < n; i++)
		if (st[i] == ES_ITEM_REFUSED) {
			refids[nref] = r->ids[i];
			ref[nref++] = i;
		}
	root = es_mget(&es->cl, NULL, refids, nref, deadline);
	if (!root) {
		err = -ENOLCK;
		goto out_rollback;
	}
	j = 0;
	cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(root, "docs"))
	{
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(d, "_source");
		const cJSON *hs = cJSON_GetObjectItemCaseSensitive(src, "holders");

		if (j >= nref)
			break;
		i = ref[j++];
		if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "found"))) {
			st[i] = ES_ITEM_RETRY; /* released since: try again at once */
			continue;
		}
		if (cJSON_GetObjectItemCaseSensitive(hs, r->holder)) {
			st[i] = ES_ITEM_OK; /* our own earlier, ambiguous success */
			continue;
		}
		if (blockers_of(src, r, i, &owners, &nown, &cap, why, &described))
			tl_log(LOG_WARNING, "out of memory while judging the holders of '%s'",
			       r->plan->items[i].key);
	}
	for (i = 0; i < n && st[i] != ES_ITEM_REFUSED; i++)
		;
	if (i == n) {
		bool all = true;

		for (i = 0; i < n; i++)
			if (st[i] != ES_ITEM_OK)
				all = false;
		if (all) {
			err = 0;
			goto out;
		}
		/* some were released meanwhile: roll back and retry soon */
	}
	dead = calloc(nown ? nown : 1, sizeof(*dead));
	if (nown && dead && es_judge_owners(es, owners, nown, dead, deadline) == 0) {
		for (i = 0; i < nown; i++) {
			if (!dead[i])
				continue;
			if (!es_obs_reaped(es, owners[i]))
				es_takeover(es, owners[i], refids, nref, deadline);
			else
				for (j = 0; j < nref; j++)
					es_docs_evict(&b, refids[j], owners[i], r->stored);
		}
	}

out_rollback:
	/* roll back (idempotent: noop where we hold nothing) and mark; the
	 * intent stays while we wait, so a reap finds our marks too */
	r->stored = es_client_scripts_stored(&es->cl);
	for (i = r->sent; i-- > 0;)
		es_docs_release(&b, r->ids[i], r->holder, r->stored);
	rollback_len = b.len;
	/* The marks go with the rollback in one request, and are never kept
	 * for a resend: a mark applied late, after this holder gave up and
	 * unmarked, would stand in the way of later renames until it
	 * expires; a lost one costs only this waiter its place. Marked from
	 * now on, whatever the answer (a request that timed out may have been
	 * applied), so that abandon() unmarks (a noop where none landed). */
	for (i = 0; i < n; i++)
		es_docs_mark(&b, r, i);
	((struct es_hold *)h->priv)->marked = true;
	cJSON_Delete(root);
	root = NULL;
	if (es_batch_send(&es->batch, &b, deadline, &root) != 0 && rollback_len) {
		/* the rollback alone, kept for the heartbeat if need be */
		b.len = rollback_len;
		b.data[rollback_len] = '\0';
		if (es_send_idempotent(es, &b, deadline) != 0)
			err = -ENOLCK;
	}
out:
	es_strv_free(owners, nown);
	free(dead);
	cJSON_Delete(root);
	buf_free(&b);
	free(refids);
	free(ref);
	return err;
}
