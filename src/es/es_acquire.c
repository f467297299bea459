/* es_acquire.c - taking and releasing a plan's locks in the es store: the
 * guide's protocol, with waiter marks, take-over of dead owners and fencing
 *
 * The vtable's try-acquire, release and abandon (es_internal.h); a refused
 * attempt goes on in es_refusal.c. The documents these requests act on are
 * drawn at the top of es_store.c.
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
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/path.h"
#include "base/tlclock.h"
#include "config/config.h"
#include "es/es_batch.h"
#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/es_fsindex.h"
#include "es/es_internal.h"
#include "es/es_kept.h"
#include "es/es_lease.h"
#include "es/es_owners.h"
#include "es/es_retry.h"
#include "lock/lockplan.h"
#include "lock/lockstore.h"

/* ---- acquire ------------------------------------------------------------------ */

static void ids_free(char **ids, size_t n)
{
	es_strv_free(ids, n);
}

/* The lock document ids of PLAN's keys, in plan order, as a new array of
 * new strings in *OUT (ids_free()). Returns 0 or -ENOMEM. */
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

/* H's scratch, made at its first attempt; NULL when out of memory. */
static struct es_hold *hold_get(struct tl_holder *h)
{
	if (!h->priv)
		h->priv = calloc(1, sizeof(struct es_hold));
	return h->priv;
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

/* One attempt of es_try_acquire(): what its steps share. */
struct acq {
	struct es_store *es;
	const struct tl_plan *plan;
	struct es_hold *hold;
	int64_t deadline;
	char owner[ES_ID_MAX];     /* this mount's owner id at the lease check */
	struct es_req r;
	char **ids;                /* lock document ids, plan order */
	enum es_item_state *state; /* per plan item */
	char **dead;               /* owner ids known dead this round */
	size_t ndead;
	struct buf b;              /* the chunk being sent */
	cJSON *root;               /* its answer */
	bool intent_ok;            /* our intent document is in */
	bool refused;              /* an item was refused */
	bool sent;                 /* a request of ours may have reached the store */
	size_t sent_upto;          /* the items before it may have reached it */
};

/* Reads, under the mutex, the lease this attempt acts under: this mount's
 * owner id into A->owner and its epoch into the holder's scratch; a stale
 * lease is logged once. Returns 0, -EACCES (the index is not ours), -ENOLCK
 * (no fresh lease). */
static int acq_lease(struct acq *a)
{
	struct es_store *es = a->es;
	bool fresh;
	int index_err;

	pthread_mutex_lock(&es->mutex);
	index_err = es->index_err;
	fresh = es_lease_fresh_locked(es, tl_mono_ms());
	snprintf(a->owner, sizeof(a->owner), "%s", es->owner);
	a->hold->epoch = es->epoch;
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
	return 0;
}

/* Names holder H (owner id and ticket) and makes the request of A: the
 * plan's document ids, every item still to try. Returns 0 or -ENOMEM. */
static int acq_prepare(struct acq *a, const struct tl_holder *h)
{
	size_t i;
	int err;

	/* a delegation says so in its id; the owner is still what precedes
	 * the last '#' (es_docs_owner_of_holder()) */
	snprintf(a->hold->holder, sizeof(a->hold->holder), "%s#%s%" PRIu64, a->owner,
		 h->delegation ? "d" : "", h->ticket);
	a->r.owner = a->owner;
	a->r.holder = a->hold->holder;
	a->r.marked = a->hold->marked;
	a->r.tmo_ms = a->es->tmo_ms;
	err = ids_make(a->plan, &a->ids);
	if (err)
		return err;
	a->r.ids = a->ids;
	a->state = calloc(a->plan->n ? a->plan->n : 1, sizeof(*a->state));
	if (!a->state)
		return -ENOMEM;
	for (i = 0; i < a->plan->n; i++)
		a->state[i] = ES_ITEM_RETRY;
	return 0;
}

/* fs index: waits while a release of ours parked for its index writes
 * holds one of A's documents in a conflicting mode (es_fsindex.h). */
static void wait_parked(struct acq *a)
{
	bool *excl = calloc(a->plan->n ? a->plan->n : 1, sizeof(*excl));
	size_t i;

	if (!excl)
		return;
	for (i = 0; i < a->plan->n; i++)
		excl[i] = a->plan->items[i].mode == TL_EXCLUSIVE;
	es_fsindex_wait_parked(a->es->fsi, a->ids, excl, a->plan->n, a->deadline);
	free(excl);
}

/* Learns the owners known dead now, whose waiter marks the scripts ignore.
 * Returns 0 or -ENOMEM. */
static int acq_dead_owners(struct acq *a)
{
	int err;

	es_strv_free(a->dead, a->ndead);
	a->dead = NULL;
	a->ndead = 0;
	err = es_dead_owners(a->es, &a->dead, &a->ndead);
	if (err)
		return err;
	a->r.dead = a->dead;
	a->r.ndead = a->ndead;
	return 0;
}

/* Builds into A->b the next chunk: the intent until it is in, then the
 * items from *NEXT still to try, up to ES_BULK_MAX_ITEMS - 1 of them;
 * *NEXT moves past the items looked at. Returns how many items it holds
 * (the intent not counted). This function can't fail (a failed buffer is
 * es_batch_send()'s -ENOMEM). */
static size_t chunk_build(struct acq *a, size_t *next)
{
	size_t cnt = 0;

	buf_free(&a->b);
	a->r.now_ms = tl_wall_ms();
	a->r.stored = es_client_scripts_stored(&a->es->cl);
	if (!a->intent_ok)
		es_docs_intent(&a->b, &a->r, a->es->name);
	for (; *next < a->plan->n && cnt < ES_BULK_MAX_ITEMS - 1; (*next)++)
		if (a->state[*next] == ES_ITEM_RETRY) {
			es_docs_acquire(&a->b, &a->r, *next);
			cnt++;
		}
	return cnt;
}

/* Sends the chunk in A->b, whose items end before plan item NEXT, and
 * counts it as possibly sent unless it never left. Returns
 * es_batch_send()'s result: 0 (the answer in A->root), -ETIMEDOUT (not
 * sent, and the deadline has passed), -EAGAIN (may have been applied), or
 * another -errno. */
static int chunk_send(struct acq *a, size_t next)
{
	/* a whole request that failed may have been applied: the retry is
	 * safe (scripts are idempotent; a create that 409s is checked
	 * against our holder id in es_on_refusal()) */
	int err = es_batch_send(&a->es->batch, &a->b, a->deadline, &a->root);

	if (err == -ETIMEDOUT)
		return err;
	a->sent = true;
	if (next > a->sent_upto)
		a->sent_upto = next;
	return err;
}

/* Reads the answer A->root to the chunk of plan items [FIRST, NEXT): the
 * intent's state (while it was not in) and each item's. Returns 0, or
 * -EACCES when the store rejected an item (logged). */
static int chunk_read(struct acq *a, size_t first, size_t next)
{
	cJSON *it = cJSON_GetObjectItemCaseSensitive(a->root, "items")->child;
	size_t i;

	if (!a->intent_ok) {
		a->intent_ok = es_item_state(&a->es->cl, it, NULL) == ES_ITEM_OK;
		it = it ? it->next : NULL;
	}
	for (i = first; i < next; i++) {
		long status;

		if (a->state[i] != ES_ITEM_RETRY)
			continue;
		a->state[i] = es_item_state(&a->es->cl, it, &status);
		if (a->state[i] == ES_ITEM_FATAL) {
			char *t = cJSON_PrintUnformatted(it);

			tl_log(LOG_ERR, "lock store rejected lock '%s' (HTTP %ld): %.1000s",
			       a->plan->items[i].key, status, t ? t : "?");
			free(t);
			return -EACCES;
		}
		if (a->state[i] == ES_ITEM_REFUSED)
			a->refused = true;
		it = it ? it->next : NULL;
	}
	cJSON_Delete(a->root);
	a->root = NULL;
	return 0;
}

/* One round of es_retry.h's level 2: the owners known dead, then the plan
 * in chunks of ES_BULK_MAX_ITEMS, in order (a large document-strategy
 * plan); the first refused chunk ends the attempt, and what was taken is
 * rolled back. A chunk that failed as a whole ends the round: the next one
 * resends what is not known. Returns 0 (the items' states tell the rest),
 * or the error that rolls the attempt back: -EACCES, -ENOLCK, -ENOMEM. */
static int acq_round(struct acq *a)
{
	size_t next = 0, first;
	int err;

	err = acq_dead_owners(a);
	if (err)
		return err;
	while (!a->refused && (next < a->plan->n || !a->intent_ok)) {
		first = next;
		if (!chunk_build(a, &next) && a->intent_ok)
			break;
		err = chunk_send(a, next);
		if (err == -ETIMEDOUT || err == -EAGAIN)
			break; /* the next round resends what is not known */
		if (err)
			return err;
		err = chunk_read(a, first, next);
		if (err)
			return err;
	}
	return 0;
}

/* True when the intent is in and no item is left to try. */
static bool acq_settled(const struct acq *a)
{
	size_t i;

	for (i = 0; i < a->plan->n; i++)
		if (a->state[i] == ES_ITEM_RETRY)
			return false;
	return a->intent_ok;
}

/* True when every item of A is held. */
static bool acq_all_held(const struct acq *a)
{
	size_t i;

	for (i = 0; i < a->plan->n; i++)
		if (a->state[i] != ES_ITEM_OK)
			return false;
	return true;
}

/* Counts holder HOLD as holding, in the lease epoch it acquired under (a
 * lease lost since fences it: es_lease_fresh()). This function can't
 * fail. */
static void hold_taken(struct es_store *es, struct es_hold *hold)
{
	hold->held = true;
	pthread_mutex_lock(&es->mutex);
	if (hold->epoch == es->epoch)
		es->held_cur++;
	else
		es->held_old++;
	pthread_mutex_unlock(&es->mutex);
}

/* The driver: the lease check, then rounds of chunks until every item has
 * an answer, then the refusal path or the count of a holder that holds;
 * on a failure what may have reached the store is rolled back. */
int es_try_acquire(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h,
		   struct tl_conflict *why)
{
	struct acq a = {
		.es = es_of(st),
		.plan = plan,
		.deadline = es_hold_deadline(h),
		.hold = hold_get(h),
		.r = {.plan = plan, .start_ms = h->start_ms, .pid = h->pid},
		.b = BUF_INIT,
	};
	int err, round;

	if (!a.hold)
		return -ENOMEM;
	err = acq_lease(&a);
	if (err)
		return err;
	err = acq_prepare(&a, h);
	if (err)
		goto out;
	if (a.es->fsi)
		wait_parked(&a);
	for (round = 0; round < ES_ITEM_RETRIES && !a.refused; round++) {
		/* level 2 of es_retry.h; near lock_timeout lockmgr decides */
		if (round && !es_retry_pause(a.deadline, round))
			break;
		err = acq_round(&a);
		if (err)
			goto out_rollback;
		if (acq_settled(&a))
			break;
	}
	if (a.refused) {
		a.r.sent = a.sent_upto;
		err = es_on_refusal(a.es, &a.r, h, a.state, why);
		if (err == 0)
			hold_taken(a.es, a.hold);
		goto out;
	}
	if (!acq_all_held(&a)) {
		err = -ENOLCK;
		goto out_rollback;
	}
	err = 0;
	hold_taken(a.es, a.hold);
	goto out;

out_rollback:
	/* nothing to undo when no request of ours left (queued until the
	 * deadline, or failed while being built) */
	if (a.sent) {
		a.r.sent = a.sent_upto;
		rollback(a.es, &a.r, a.deadline);
	}
	if (err != -EACCES)
		err = -ENOLCK;
out:
	cJSON_Delete(a.root);
	buf_free(&a.b);
	free(a.state);
	es_strv_free(a.dead, a.ndead);
	ids_free(a.ids, plan->n);
	return err;
}

/* ---- release, abandon --------------------------------------------------------- */

/* Forgets holder H: no longer counted as holding (hold_taken()), its
 * scratch freed. This function can't fail. */
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
	int64_t dl = es_hold_deadline(h);

	return dl > own ? dl : own;
}

/* fs index: parks the release B of holder H until the index writes of
 * its rename (a delegation: of every rename noted before it) were
 * answered. Returns true when parked. */
static bool park(struct es_store *es, const struct tl_plan *plan, const struct tl_holder *h,
		 const struct buf *b)
{
	uint64_t seq = h->delegation ? es_fsindex_last(es->fsi) : h->index_seq;
	bool *excl = calloc(plan->n ? plan->n : 1, sizeof(*excl));
	char **ids = NULL;
	bool parked = false;
	size_t i;

	if (seq && excl && ids_make(plan, &ids) == 0) {
		for (i = 0; i < plan->n; i++)
			excl[i] = plan->items[i].mode == TL_EXCLUSIVE;
		parked = es_fsindex_park(es->fsi, seq, b, ids, excl, plan->n) == 1;
		ids_free(ids, plan->n);
	}
	free(excl);
	return parked;
}

int es_release(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h)
{
	struct es_store *es = es_of(st);
	struct es_hold *hold = h->priv;
	struct buf b = BUF_INIT;
	int err;

	if (!hold)
		return 0;
	err = plan_items(es, &b, plan, hold, es_docs_release, true);
	if (!err && es->fsi && (h->index_seq || h->delegation) && park(es, plan, h, &b)) {
		buf_free(&b);
		hold_done(es, h);
		return 0;
	}
	if (!err)
		err = es_send_release(es, &b, release_deadline(es, h, &b));
	if (err == -EINPROGRESS)
		err = 0; /* kept, resent soon (logged): the store's to finish */
	buf_free(&b);
	hold_done(es, h);
	return err;
}

void es_abandon(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h)
{
	struct es_store *es = es_of(st);
	struct es_hold *hold = h->priv;
	struct buf b = BUF_INIT;

	if (hold && hold->marked && plan_items(es, &b, plan, hold, es_docs_unmark, false) == 0)
		es_send_idempotent(es, &b, es_hold_deadline(h));
	buf_free(&b);
	if (hold)
		hold->held = false;
	hold_done(es, h);
}
