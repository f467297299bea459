/* lockstore_es.c - tree locks in an Elasticsearch / OpenSearch index
 *
 * The vtable: try-acquire, the refusal path, release, abandon, list, open,
 * close. Around it, one meaning per file (es_i.h draws who calls whom):
 * es_lease.c (this mount's lease), es_owners.c (other owners: take-over,
 * reap), es_kept.c (release-like bulks that must arrive, kept ones),
 * es_retry.h (who retries what: the one chart), es_batch.c (group
 * commit), es_client.c (one request), es_index.c (cluster check,
 * bootstrap), es_docs.c (documents and bulk items, pure), es_scripts.h
 * (Painless), es_options.c (the backend's options), es_store_admin.c
 * (treelockctl).
 *
 * One index (es_index, default treelockfs-locks) holds three kinds of
 * documents. Ids never collide: lock keys start with '/', or are "global",
 * "bytes:/..." (keys that are not UTF-8, escaped: path_key_text()) or
 * "sha256:<hex>" (path_lock_id(), for ids over 512 bytes); the others
 * start with "owner:" or "intent:". Every key in a document (path, from,
 * to, keys) is its text: JSON carries UTF-8 only.
 *
 *   lock  /a/b   {"lock_type":"exclusive", ["path":"/a/b",] "owner":O,
 *                 "holder":H, "process_id":H, "holders":{H:1}, "since":ms,
 *                 "pid":n, ["waiters":{...}]}
 *                {"lock_type":"shared", "lock_count":N, ["path":"/a",]
 *                 "holders":{H1:1, H2:1}, "since":ms, ["waiters":{...}]}
 *                waiters: {H: {"owner":O, "mode":"exclusive"|"shared",
 *                              "age":start_ms, "tmo":ms}}
 *                "path" only where the id is not the key's text (hashed
 *                ids); older releases wrote it always. A shared document
 *                is "since" the start_ms of the holder that made it
 *   owner        {"type":"owner", "owner":O, "name":"host", "pid":n,
 *                 "started":ms, "renewed":ms, "ttl_ms":n}
 *   intent       {"type":"intent", "owner":O, "name":.., "from":..,
 *   intent:H      "to":.., "start":ms, "pid":n, ["keys":[...]]}
 *                "keys" only where the plan of from and to does not give
 *                them (es_docs_intent_keys()); older releases wrote them
 *                and "holder":H always
 *
 * O, the owner id, is "<owner name>:<pid>:<nonce>", one per mount (per
 * lease). H, a holder, is "<O>#<ticket>", one per rename. "holders" counts
 * shares per holder, so a dead owner's shares are removed without touching
 * the others' and a retried request is never counted twice (the scripts
 * are idempotent: a holder already present is a noop). lock_count is the
 * guide's field: the number of shares, including those of guide-style
 * clients that do not name themselves.
 *
 * Guide interoperability. A lock taken with the guide's requests (create
 * {"lock_type":"exclusive"}, or update + upsert {"lock_type":"shared",
 * "lock_count":1} + "if exclusive throw; lock_count++") is a document of the
 * same shape without holders; our scripts refuse on it like on ours, and
 * the guide's requests are refused by our documents: create finds the id
 * taken, its script sees lock_type exclusive. Its release script
 * ("--lock_count == 0 -> delete") works on our shared documents. A
 * document with only waiter marks is {"lock_type":"shared","lock_count":0}.
 *
 * Requests, each a fixed Painless source with parameters (never built
 * from strings), stored in the cluster at mount and named by id, or inline
 * where storing is refused or a stored one is not ours, checked again at
 * every heartbeat (es_index_scripts()):
 *
 *   acquire (ONE _bulk)  intent index, then per key in plan order:
 *                        X first attempt: create (the guide's exclusive)
 *                        X after a refusal: update SCRIPT_ACQ_X, scripted
 *                        upsert
 *                        S: update SCRIPT_ACQ_S, scripted upsert (the
 *                        script makes the shared document, count 1)
 *   release (ONE _bulk)  per key, longest first: update SCRIPT_RELEASE
 *                        (drops H; deletes the document when no share and
 *                        no waiter is left), then delete the intent
 *   refusal              _mget the refused documents (is it ours after
 *                        all? who blocks?), _mget the blockers' owner
 *                        documents, then ONE _bulk: roll back (release),
 *                        mark waiters (SCRIPT_MARK), evict dead owners
 *                        (SCRIPT_EVICT)
 *
 * So an uncontended rename costs exactly two requests whatever its depth.
 * Renames of one mount that send at the same moment share requests: a
 * _bulk submitted while another is in flight waits in es_batch's queue,
 * and the next free sender takes the whole queue as one _bulk (group
 * commit, es_batch_send()). Each rename still builds, reads and judges only
 * its own items (all-or-nothing, rollback, waiter marks, as above); a
 * failure of the whole request is each of its renames' own failure; the
 * request's timeout is the earliest deadline among them, and a rename
 * still queued at its deadline fails alone without being sent. A release
 * that would have to queue is handed to the client's sender thread and
 * the rename returns: its locks stay in the store a little longer (safe:
 * only later), it leaves with the next request, and what fails there is
 * kept and resent as below. An acquire of documents whose release is still
 * in flight waits for its answer; queued together, the release goes first
 * in the same request. A rename alone still waits for its release.
 * A script refusal is HTTP 400 wrapping script_exception, not 409.
 *
 * Per key and holder, the state chart:
 *
 *        free --acquire ok--> held --release--> free
 *          |                   ^
 *          +--refused--> waiting (mark) --acquire ok (mark dropped)
 *                          |
 *                          +--gave up (abandon: mark dropped) --> free
 *   held by a dead owner --evict (observer, at conflict)--> free
 *
 * Fairness: a request is refused on a key held in an incompatible mode, or
 * marked by an older live waiter (smaller start_ms, then holder id) in an
 * incompatible mode. A mark is stale once older than its own timeout
 * ("tmo": the waiter's lock_timeout plus one lease) measured against the
 * requester's start time, or when its owner is known dead. A directory
 * rename refused by shared holders below thus waits only for the renames
 * that held the directory when it was marked.
 *
 * Leases (dead holders). Every lease_ttl/3 a heartbeat thread re-indexes
 * the owner document with if_seq_no/if_primary_term. An observer (any
 * mount refused on a key, or treelockctl) remembers the first time it saw
 * each owner's _seq_no on its own monotonic clock; an owner is dead when
 * its document is gone or its _seq_no has not moved for 2 x lease_ttl.
 * The holder itself stops acting (lease_fresh() false, the rename fails
 * with ENOLCK) once its last successful renewal was SENT more than
 * 1 x lease_ttl ago. The renewal an observer saw last was sent before the
 * observer saw it, so the holder fences itself at least lease_ttl before
 * anybody can judge it dead: a live mount, even one whose store is slow, is
 * never robbed, provided a rename finishes within lease_ttl after its
 * lease check. No clock is compared between hosts. Take-over happens when
 * a request is refused: the blockers' owners are judged then, dead ones are
 * evicted from the blocking documents (SCRIPT_EVICT checks the owner id in
 * the script, so a live holder's share is never removed) and every lock
 * named by the dead owner's intents, then its lease document goes. Its
 * intents stay, for treelockctl intents. A mount that finds its own lease
 * document gone (a reap), or that renews it only after it lapsed (others
 * may be evicting it at that very moment), takes a new owner id and counts
 * the renames it holds under the old one as fenced.
 *
 * Bound: a rename blocked by a dead holder proceeds at most 2 x lease_ttl
 * + lease_ttl/3 + one backoff step (200 ms) after the holder died.
 *
 * Errors: conflict -> -EAGAIN; 429, 5xx, timeouts and unreachable nodes
 * are retried here (only the items that failed, three times, 100 and
 * 200 ms apart: level 2 of es_retry.h's chart) and then -ENOLCK (lockmgr
 * retries on its deadline); after an ambiguous failure the documents are
 * re-read (_mget) and compared with our holder id before anything is
 * decided; 401/403 and a 400 to our own request are
 * -EACCES, logged with the status (and the body for a 400). A release that
 * cannot be sent is kept and resent by the heartbeat thread (es_kept.h).
 *
 * Deadlines: lock_timeout bounds the whole rename: every request made for
 * a holder (acquire, refusal, take-over, rollback, abandon, release) gets
 * its deadline (tl_holder.deadline_us) as an argument and is capped by
 * what is left of it; once it has passed, cleanup requests get
 * ES_GRACE_MS and what still fails is kept for the heartbeat.
 *
 * Lock order: store->mutex is a leaf; it is never held across a request.
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "es/es_batch.h"
#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/es_internal.h"
#include "es/es_index.h"
#include "es/es_kept.h"
#include "es/es_lease.h"
#include "es/es_owners.h"
#include "es/es_retry.h"
#include "es/httpc.h"
#include "lock/lockplan.h"
#include "lock/lockstore.h"
#include "lock/lockstore_impl.h"
#include "base/log.h"
#include "config/config.h"
#include "base/path.h"
#include "base/tlclock.h"

/* Per-holder scratch (tl_holder.priv). */
struct es_hold {
	char holder[ES_ID_MAX + 24]; /* holder id "<owner id>#<ticket>" of the last attempt */
	unsigned int epoch;
	bool held;
	bool marked; /* waiter marks left in the index */
};

static const struct lockstore_ops es_ops;

static struct es_store *es_of(struct lockstore *st)
{
	return (struct es_store *)st;
}

struct es_store *es_store_of(struct lockstore *st)
{
	return st && st->ops == &es_ops ? es_of(st) : NULL;
}

/* The deadline of holder H in monotonic ms (0: none), passed to every
 * request made on its behalf. */
static int64_t hold_deadline(const struct tl_holder *h)
{
	return h->deadline_us ? h->deadline_us / 1000 : 0;
}

/* ---- acquire ------------------------------------------------------------------ */

static void ids_free(char **ids, size_t n)
{
	es_strv_free(ids, n);
}

static int ids_make(const struct tl_plan *plan, char ***out)
{
	char **ids = calloc(plan->n ? plan->n : 1, sizeof(*ids));
	size_t i;
	int err;

	*out = NULL;
	if (!ids)
		return -ENOMEM;
	for (i = 0; i < plan->n; i++) {
		err = path_lock_id(plan->items[i].key, &ids[i]);
		if (err) {
			ids_free(ids, plan->n);
			return err;
		}
	}
	*out = ids;
	return 0;
}

static struct es_hold *hold_get(struct tl_holder *h)
{
	if (!h->priv)
		h->priv = calloc(1, sizeof(struct es_hold));
	return h->priv;
}

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

/* The refusal path: decides which refused items are ours after all
 * (ambiguous earlier attempts), who blocks, takes over dead owners, rolls
 * back and leaves waiter marks. Returns 0 when it turns out everything is
 * held, -EAGAIN (conflict), -ENOLCK. */
static int on_refusal(struct es_store *es, struct es_req *r, const struct tl_holder *h,
		      enum es_item_state *st, struct tl_conflict *why)
{
	int64_t deadline = hold_deadline(h);
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

/* An item builder of es_docs.h that drops HOLDER from document ID. */
typedef void es_holder_item_fn(struct buf *b, const char *id, const char *holder, bool stored);

/* Appends to B what lets HOLDER go of the documents IDS[0..N): ITEM for
 * each (longest key first with REVERSE, as a plan is released), then the
 * deletion of its intent; the scripts travel as the client sends them
 * now. The shared opening of release, rollback and abandon. */
static void holder_items(struct es_store *es, struct buf *b, char *const *ids, size_t n,
			 const char *holder, es_holder_item_fn *item, bool reverse)
{
	bool stored = es_client_scripts_stored(&es->cl);
	size_t i;

	for (i = 0; i < n; i++)
		item(b, ids[reverse ? n - 1 - i : i], holder, stored);
	es_docs_intent_delete(b, holder);
}

/* Rolls back everything of request R (after a failure). */
static void rollback(struct es_store *es, const struct es_req *r, int64_t deadline)
{
	struct buf b = BUF_INIT;

	holder_items(es, &b, r->ids, r->sent, r->holder, es_docs_release, true);
	es_send_idempotent(es, &b, deadline);
	buf_free(&b);
}

static int es_try_acquire(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h,
			  struct tl_conflict *why)
{
	struct es_store *es = es_of(st);
	int64_t deadline = hold_deadline(h);
	struct es_hold *hold = hold_get(h);
	enum es_item_state *state = NULL;
	char owner[ES_ID_MAX], **ids = NULL, **dead = NULL;
	struct es_req r = {.plan = plan, .start_ms = h->start_ms, .pid = h->pid};
	struct buf b = BUF_INIT;
	cJSON *root = NULL;
	bool fresh, any_refused, intent_ok = false;
	bool sent = false; /* a request of ours may have reached the store */
	size_t sent_upto = 0; /* the items before it may have reached it */
	size_t i, ndead = 0;
	int err = -ENOMEM, round, index_err;

	if (!hold)
		return -ENOMEM;
	pthread_mutex_lock(&es->mutex);
	index_err = es->index_err;
	fresh = es_lease_fresh_locked(es, tl_mono_ms());
	snprintf(owner, sizeof(owner), "%s", es->owner);
	hold->epoch = es->epoch;
	if (!fresh && !es->warned_stale) {
		es->warned_stale = true;
		tl_log(LOG_ERR, "owner '%s' has no fresh lease (last renewal over %.1f s ago): "
		       "refusing to take locks", es->owner, (double)es->ttl_ms / 1000);
	}
	pthread_mutex_unlock(&es->mutex);
	if (index_err)
		return -EACCES; /* logged by the heartbeat; ENOLCK at once */
	if (!fresh)
		return -ENOLCK;
	snprintf(hold->holder, sizeof(hold->holder), "%s#%" PRIu64, owner, h->ticket);
	r.owner = owner;
	r.holder = hold->holder;
	r.marked = hold->marked;
	r.tmo_ms = es->tmo_ms;
	err = ids_make(plan, &ids);
	if (err)
		return err;
	r.ids = ids;
	err = -ENOMEM;
	state = calloc(plan->n ? plan->n : 1, sizeof(*state));
	if (!state)
		goto out;
	for (i = 0; i < plan->n; i++)
		state[i] = ES_ITEM_RETRY;

	any_refused = false;
	for (round = 0; round < ES_ITEM_RETRIES && !any_refused; round++) {
		size_t next = 0, first, cnt, k;
		cJSON *it;

		/* level 2 of es_retry.h; near lock_timeout lockmgr decides */
		if (round && !es_retry_pause(deadline, round))
			break;
		es_strv_free(dead, ndead);
		dead = NULL;
		ndead = 0;
		err = es_dead_owners(es, &dead, &ndead);
		if (err)
			goto out_rollback;
		r.dead = dead;
		r.ndead = ndead;
		/* the plan in chunks of ES_BULK_MAX_ITEMS, in order (a large
		 * document-strategy plan); the first refused chunk ends the
		 * attempt, and what was taken is rolled back */
		while (!any_refused && (next < plan->n || !intent_ok)) {
			buf_free(&b);
			r.now_ms = tl_wall_ms();
			r.stored = es_client_scripts_stored(&es->cl);
			if (!intent_ok)
				es_docs_intent(&b, &r, es->name);
			for (first = next, cnt = 0; next < plan->n && cnt < ES_BULK_MAX_ITEMS - 1;
			     next++)
				if (state[next] == ES_ITEM_RETRY) {
					es_docs_acquire(&b, &r, next);
					cnt++;
				}
			if (!cnt && intent_ok)
				break;
			/* a whole request that failed may have been applied:
			 * the retry is safe (scripts are idempotent; a create
			 * that 409s is checked against our holder id in
			 * on_refusal()) */
			err = es_batch_send(&es->batch, &b, deadline, &root);
			if (err == -ETIMEDOUT)
				break; /* not sent, and the deadline has passed */
			sent = true;
			if (next > sent_upto)
				sent_upto = next;
			if (err == -EAGAIN)
				break; /* the next round resends what is not known */
			if (err)
				goto out_rollback;
			it = cJSON_GetObjectItemCaseSensitive(root, "items")->child;
			if (!intent_ok) {
				intent_ok = es_item_state(&es->cl, it, NULL) == ES_ITEM_OK;
				it = it ? it->next : NULL;
			}
			for (i = first; i < next; i++) {
				long status;

				if (state[i] != ES_ITEM_RETRY)
					continue;
				state[i] = es_item_state(&es->cl, it, &status);
				if (state[i] == ES_ITEM_FATAL) {
					char *t = cJSON_PrintUnformatted(it);

					tl_log(LOG_ERR,
					       "lock store rejected lock '%s' (HTTP %ld): %.1000s",
					       plan->items[i].key, status, t ? t : "?");
					free(t);
					err = -EACCES;
					goto out_rollback;
				}
				if (state[i] == ES_ITEM_REFUSED)
					any_refused = true;
				it = it ? it->next : NULL;
			}
			cJSON_Delete(root);
			root = NULL;
		}
		for (k = 0, i = 0; i < plan->n; i++)
			if (state[i] == ES_ITEM_RETRY)
				k++;
		if (k == 0 && intent_ok)
			break;
	}
	for (i = 0; i < plan->n && state[i] != ES_ITEM_REFUSED; i++)
		;
	if (i < plan->n) {
		r.sent = sent_upto;
		err = on_refusal(es, &r, h, state, why);
		if (err == 0)
			goto out_held;
		goto out;
	}
	for (i = 0; i < plan->n; i++)
		if (state[i] != ES_ITEM_OK) {
			err = -ENOLCK;
			goto out_rollback;
		}

out_held:
	err = 0;
	hold->held = true;
	pthread_mutex_lock(&es->mutex);
	if (hold->epoch == es->epoch)
		es->held_cur++;
	else
		es->held_old++;
	pthread_mutex_unlock(&es->mutex);
	goto out;

out_rollback:
	/* nothing to undo when no request of ours left (queued until the
	 * deadline, or failed while being built) */
	if (sent) {
		r.sent = sent_upto;
		rollback(es, &r, deadline);
	}
	if (err != -EACCES)
		err = -ENOLCK;
out:
	cJSON_Delete(root);
	buf_free(&b);
	free(state);
	es_strv_free(dead, ndead);
	ids_free(ids, plan->n);
	return err;
}

static void hold_done(struct es_store *es, struct tl_holder *h)
{
	struct es_hold *hold = h->priv;

	if (hold && hold->held) {
		pthread_mutex_lock(&es->mutex);
		if (hold->epoch == es->epoch) {
			if (es->held_cur)
				es->held_cur--;
		} else if (es->held_old) {
			es->held_old--;
		}
		pthread_mutex_unlock(&es->mutex);
	}
	free(hold);
	h->priv = NULL;
}

/* Builds into B the items that let holder H go of PLAN's documents
 * (holder_items()). Returns 0, -ENOMEM. */
static int plan_items(struct es_store *es, struct buf *b, const struct tl_plan *plan,
		      const struct es_hold *hold, es_holder_item_fn *item, bool reverse)
{
	char **ids = NULL;
	int err = ids_make(plan, &ids);

	if (err)
		return err;
	holder_items(es, b, ids, plan->n, hold->holder, item, reverse);
	ids_free(ids, plan->n);
	return 0;
}

/* The deadline of the release bulk B of holder H: its own time, not what
 * the acquire left of lock_timeout (a rename of a large directory that
 * took most of it would get one chunk's grace, and leave the other chunks'
 * locks to the heartbeat's resends): lock_timeout per chunk of
 * ES_BULK_MAX_ITEMS, each request still capped by es_timeout_ms. */
static int64_t release_deadline(struct es_store *es, const struct tl_holder *h,
				const struct buf *b)
{
	long chunks = b->err ? 1 : es_bulk_count(b->data, b->len) / ES_BULK_MAX_ITEMS + 1;
	int64_t own = tl_mono_ms() + (int64_t)(es->base.cfg->lock_timeout * 1000) * chunks;
	int64_t dl = hold_deadline(h);

	return dl > own ? dl : own;
}

static int es_release(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h)
{
	struct es_store *es = es_of(st);
	struct es_hold *hold = h->priv;
	struct buf b = BUF_INIT;
	int err;

	if (!hold)
		return 0;
	err = plan_items(es, &b, plan, hold, es_docs_release, true);
	if (!err)
		err = es_send_release(es, &b, release_deadline(es, h, &b));
	if (err == -EINPROGRESS)
		err = 0; /* kept, resent soon (logged): the store's to finish */
	buf_free(&b);
	hold_done(es, h);
	return err;
}

static void es_abandon(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h)
{
	struct es_store *es = es_of(st);
	struct es_hold *hold = h->priv;
	struct buf b = BUF_INIT;

	if (hold && hold->marked && plan_items(es, &b, plan, hold, es_docs_unmark, false) == 0)
		es_send_idempotent(es, &b, hold_deadline(h));
	buf_free(&b);
	if (hold)
		hold->held = false;
	hold_done(es, h);
}

static bool es_lease_fresh(struct lockstore *st)
{
	struct es_store *es = es_of(st);
	bool fresh;

	pthread_mutex_lock(&es->mutex);
	fresh = es_lease_fresh_locked(es, tl_mono_ms()) && es->held_old == 0;
	pthread_mutex_unlock(&es->mutex);
	return fresh;
}

static void es_shutdown(struct lockstore *st, int64_t end_ms)
{
	httpc_set_end(es_of(st)->cl.http, end_ms);
}

static uint64_t es_requests(struct lockstore *st)
{
	return httpc_requests(es_of(st)->cl.http);
}

/* Counters of the HTTP client; the lease and what was seen of other owners
 * under the mutex, never across a request. */
static void es_metrics(struct lockstore *st, struct tl_store_metrics *m)
{
	struct es_store *es = es_of(st);
	struct httpc_counters hc;
	int64_t now = tl_mono_ms();
	size_t i;

	httpc_counters(es->cl.http, &hc);
	m->requests = hc.requests;
	m->failures = hc.failures;
	m->bytes_sent = hc.bytes_sent;
	m->bytes_received = hc.bytes_received;
	m->request_seconds = hc.seconds;
	m->served_us = hc.served_us;
	pthread_mutex_lock(&es->mutex);
	if (es->started) {
		m->lease_age_ms = es->renewed_ms > 0 ? now - es->renewed_ms : -1;
		m->lease_fresh = es_lease_fresh_locked(es, now) && es->held_old == 0;
	}
	m->owners_alive = m->owners_dead = 0;
	for (i = 0; i < es->nobs; i++) {
		if (es->obs[i].dead)
			m->owners_dead++;
		else if (es->obs[i].seq_no >= 0)
			m->owners_alive++;
	}
	pthread_mutex_unlock(&es->mutex);
}

static int es_start(struct lockstore *st)
{
	int err = es_lease_start(es_of(st));

	/* after the lease: releases handed off before it would have no
	 * store to go to */
	if (!err)
		err = es_batch_start_sender(&es_of(st)->batch);
	return err;
}

/* ---- listing --------------------------------------------------------------------- */

/* KEY's path without the PATH_BYTES_PREFIX of a key text (escaping is per
 * component, so ancestry holds between the escaped paths too). */
static const char *text_path(const char *key)
{
	size_t l = strlen(PATH_BYTES_PREFIX);

	return strncmp(key, PATH_BYTES_PREFIX, l) == 0 ? key + l : key;
}

/* Keys are listed as their text (path_key_text()), as the documents hold
 * them; PREFIX is a key and matches the texts below it. */
static int es_list(struct lockstore *st, const char *prefix, struct tl_lock_info **out, size_t *n)
{
	struct es_store *es = es_of(st);
	struct tl_lock_info *list = NULL;
	cJSON *root = NULL;
	const cJSON *hit;
	size_t cnt = 0, cap = 0;
	char *ptext = NULL;

	*out = NULL;
	*n = 0;
	if (prefix && path_key_text(prefix, &ptext) != 0)
		return -ENOMEM;
	/* the releases of renames that returned are answered first: the list
	 * shows no lock this mount has let go of */
	es_batch_drain(&es->batch);
	root = es_search_all(&es->cl, NULL, 0);
	if (!root) {
		free(ptext);
		return -ENOLCK;
	}
	cJSON_ArrayForEach(hit, es_hits(root))
	{
		const char *id = es_jstr(hit, "_id");
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(hit, "_source");
		const char *key = es_jstr(src, "path"), *type = es_jstr(src, "lock_type");
		const cJSON *e;
		struct tl_lock_info *li;
		struct buf hb = BUF_INIT;
		unsigned int holders = 0;

		if (!id || !es_docs_is_lock_id(id))
			continue;
		if (!key)
			key = id;
		if (ptext && strcmp(ptext, "/") != 0 && strcmp(key, ptext) != 0 &&
		    !path_is_ancestor(text_path(ptext), text_path(key)))
			continue;
		if (cnt == cap) {
			struct tl_lock_info *nl;

			cap = cap ? 2 * cap : 16;
			nl = realloc(list, cap * sizeof(*list));
			if (!nl)
				break;
			list = nl;
		}
		li = &list[cnt];
		memset(li, 0, sizeof(*li));
		li->key = strdup(key);
		li->mode = type && strcmp(type, "exclusive") == 0 ? TL_EXCLUSIVE : TL_SHARED;
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(src, "holders"))
		{
			if (holders++)
				buf_adds(&hb, ", ");
			buf_adds(&hb, e->string);
		}
		if (!holders && li->mode == TL_EXCLUSIVE)
			buf_adds(&hb, es_jstr(src, "process_id") ? es_jstr(src, "process_id")
								  : "(no owner)");
		li->holders = buf_detach(&hb, NULL);
		li->count = li->mode == TL_EXCLUSIVE
				    ? 1
				    : (unsigned int)es_jint(src, "lock_count", holders);
		li->age_ms = es_jint(src, "since", -1) > 0 ? tl_wall_ms() - es_jint(src, "since", 0)
							   : -1;
		li->waiters = (unsigned int)cJSON_GetArraySize(
			cJSON_GetObjectItemCaseSensitive(src, "waiters"));
		cnt++;
	}
	cJSON_Delete(root);
	free(ptext);
	*out = list;
	*n = cnt;
	return 0;
}

/* ---- open, close ---------------------------------------------------------------- */

/* Cluster check and index bootstrap: one start attempt. */
static int open_step(struct es_store *es, bool for_ctl, int64_t deadline)
{
	int err;

	err = es_index_check_cluster(&es->cl, es->version, sizeof(es->version), &es->opensearch,
				     deadline);
	if (err)
		return err;
	return es_index_bootstrap(&es->cl, es->strategy, for_ctl, deadline);
}

/* Warns, once at start, where the lock index or the cluster lacks what the
 * store relies on (es_docs_settings_findings()). A warning, not a refusal:
 * these are the operator's settings, changed at any time while mounts run
 * (a check at start cannot hold them), and what they risk (locks lost
 * with a node or its disk) is the cluster's state, fixed on the cluster
 * with no remount. */
static void warn_settings(struct es_store *es)
{
	char buf[1024], *line, *save = NULL;
	int n = es_index_settings_findings(&es->cl, buf, sizeof(buf));

	if (n == -EACCES)
		tl_log(LOG_NOTICE, "cannot check the settings of lock index '%s' (%s); "
		       "treelockctl check reports them", es->cl.index, buf);
	if (n <= 0)
		return;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		tl_log(LOG_WARNING, "lock index '%s': %s", es->cl.index, line);
}

static void es_close(struct lockstore *st)
{
	struct es_store *es = es_of(st);

	if (!es)
		return;
	/* releases handed off go first: what fails there is kept, and the
	 * lease's stop resends what is kept */
	es_batch_stop_sender(&es->batch);
	es_lease_stop(es);
	es_batch_close(&es->batch);
	es_client_close(&es->cl);
	es_owners_free(es);
	pthread_cond_destroy(&es->cond);
	pthread_mutex_destroy(&es->mutex);
	free(es);
}

int es_open(const struct tl_config *cfg, struct lockstore **out, bool for_ctl)
{
	const struct es_options *eo = es_options_of(cfg);
	struct httpc_config hc = {0};
	struct es_store *es;
	pthread_condattr_t ca;
	int err = -ENOMEM;

	*out = NULL;
	if (!eo)
		return -EINVAL;
	if (cfg->owner && strlen(cfg->owner) > ES_NAME_MAX) {
		tl_log(LOG_ERR, "invalid owner '%s': longer than %d bytes", cfg->owner, ES_NAME_MAX);
		return -EINVAL;
	}
	es = calloc(1, sizeof(*es));
	if (!es)
		return -ENOMEM;
	es->base.ops = &es_ops;
	es->base.cfg = cfg;
	pthread_mutex_init(&es->mutex, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&es->cond, &ca);
	pthread_condattr_destroy(&ca);
	es->strategy = cfg->lock_strategy;
	es->ttl_ms = (int64_t)((cfg->lease_ttl > 0 ? cfg->lease_ttl : TL_DEFAULT_LEASE_TTL) * 1000);
	es->tmo_ms = (int64_t)(cfg->lock_timeout * 1000) + es->ttl_ms;
	es->timeout_ms = eo->timeout_ms ? eo->timeout_ms : ES_DEFAULT_TIMEOUT_MS;
	/* treelockctl reports at once unless asked to wait */
	es->start_timeout = for_ctl && !eo->start_timeout_s ? 0 : eo->start_timeout;
	if (cfg->owner && *cfg->owner) {
		snprintf(es->name, sizeof(es->name), "%s", cfg->owner);
	} else {
		gethostname(es->name, sizeof(es->name) - 1);
		if (!es->name[0])
			snprintf(es->name, sizeof(es->name), "localhost");
	}
	es_lease_new_owner_id_locked(es); /* no thread runs yet */

	hc.urls = eo->url;
	hc.user = eo->user;
	hc.password = eo->password;
	hc.api_key = eo->api_key;
	hc.cacert = eo->cacert;
	hc.insecure = eo->insecure;
	hc.timeout_ms = es->timeout_ms;
	hc.opaque_id = es->owner;
	/* eo->inflight: es_inflight=, or its default (es_options.c) */
	err = es_client_open(&es->cl, &hc, eo->index && *eo->index ? eo->index : ES_DEFAULT_INDEX);
	if (err)
		goto out_close;
	es->cl.scripts_inline_only = eo->scripts_inline;
	/* 0: no group commit (no_es_group_commit) */
	es_batch_open(&es->batch, &es->cl, eo->group_commit ? eo->inflight : 0);
	if (eo->insecure)
		tl_log(LOG_WARNING, "es_insecure: TLS certificates of the lock store are not verified");
	es->cleartext_creds = (eo->user || eo->api_key) && es_opts_cleartext(eo);
	if (es->cleartext_creds && !for_ctl)
		tl_log(LOG_WARNING, "es_allow_insecure: the password or API key of the lock store "
		       "travels unencrypted (http://): anyone on the path can read and reuse it");
	err = es_start_retry(es, "open the lock store", open_step, for_ctl);
	if (err)
		goto out_close;
	if (!for_ctl)
		warn_settings(es);
	*out = &es->base;
	return 0;

out_close:
	es_close(&es->base);
	return err;
}

int es_store_open(const struct tl_config *cfg, struct lockstore **out)
{
	return es_open(cfg, out, false);
}

static const struct lockstore_ops es_ops = {
	.name = "es",
	.caps = TL_CAP_OTHER_WRITERS,
	.start = es_start,
	.try_acquire = es_try_acquire,
	.wait = NULL,
	.abandon = es_abandon,
	.release = es_release,
	.lease_fresh = es_lease_fresh,
	.list = es_list,
	.shutdown = es_shutdown,
	.requests = es_requests,
	.metrics = es_metrics,
	.close = es_close,
};
