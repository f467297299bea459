/* lockstore_mem.c - the embedded lock store: the plans it holds, in a list
 *
 * The store keeps no table of keys. It keeps the plans that hold their
 * locks (HELD) and the plans that were refused and still want them
 * (WAITING), each as a pointer to the caller's plan and holder, which stay
 * valid and in place until release or abandon (lockstore.h). Two plans
 * conflict when they share a key that either of them wants exclusive:
 *
 *   state of a key        shared request        exclusive request
 *   free                  granted               granted
 *   shared (n holders)    granted (n+1)         refused
 *   exclusive             refused               refused
 *   + older waiter        refused if it wants   refused
 *                         the key exclusive
 *
 * A request is refused when its plan conflicts with a held plan, or with
 * an older waiting one (lockstore.h, "Fairness"). It then joins WAITING
 * and sleeps on the store's condition variable until the change counter
 * moves (any release or abandon), so waiters are woken instead of polling
 * and no wake-up is lost between the refusal and the sleep (the counter is
 * read under the mutex at refusal).
 *
 * Why a list and not a table of keys: a rename holds about half a dozen
 * keys and a mount has few renames in flight at once (the kernel
 * serialises the renames of a mount between directories), so comparing a
 * plan with the held ones touches a few cache lines, where a table touches
 * a bucket and an entry per key on acquire and again on release. The daemon
 * spends most of its time in the kernel, which leaves its own data out of
 * the caches: lines not touched are what a rename saves. A release only
 * takes the plan off the list. Keys are compared by length before bytes.
 * A plan of more than MEM_PAIRS_MAX keys (the document strategy's walk
 * below a directory) carries the sorted hashes of its keys, so that no
 * comparison goes pair by pair over it.
 *
 * Tree plans are compared by their endpoints alone (lockplan_tree_conflict():
 * two such plans conflict when an endpoint of one is an endpoint of the
 * other or above one), a handful of prefix comparisons whatever the depth.
 * So a rename can hand the store an endpoint plan, which carries no items
 * (TL_CAP_ENDPOINT_PLANS) and costs no sort, copy or allocation to make;
 * a listing makes the full plan of each such plan when it is asked for.
 *
 * Leases are trivially the process: when it dies, its locks die with it.
 *
 * Lock order: store->mutex is a leaf; it is never held across a syscall
 * other than the condition wait, nor while calling out of this file.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lock/lockstore.h"
#include "lock/lockstore_impl.h"
#include "base/path.h"
#include "base/tlclock.h"

/* Plans of more keys than this are compared through mem_rec.byhash. */
#define MEM_PAIRS_MAX 16

struct mem_hkey {
	uint64_t hash;
	size_t idx;                 /* the item of the plan with that hash */
};

/* A plan that holds its locks, or waits for them. */
struct mem_rec {
	uint64_t ticket;            /* its holder's */
	const struct tl_plan *plan; /* the caller's, as given */
	const struct tl_holder *h;  /* the caller's: pid and id, for listings */
	int64_t since_ms;           /* held: wall clock when it was granted */
	struct mem_hkey *byhash;    /* more than MEM_PAIRS_MAX items: their
				     * hashes, sorted; else NULL */
};

struct mem_recs {
	struct mem_rec *v;
	size_t n, cap;
};

struct mem_store {
	struct lockstore base;
	pthread_mutex_t mutex;
	pthread_cond_t cond;     /* signalled when gen moves */
	uint64_t gen;            /* protected by mutex */
	struct mem_recs held;    /* protected by mutex */
	struct mem_recs waiting; /* protected by mutex */
};

/* What this store keeps of a holder that waits (h->priv; none while it
 * is not refused). */
struct mem_hold {
	uint64_t gen; /* s->gen when it was refused */
};

static uint64_t key_hash(const char *k, size_t len)
{
	uint64_t h = UINT64_C(14695981039346656037);
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= (unsigned char)k[i];
		h *= UINT64_C(1099511628211);
	}
	return h;
}

static int hkey_cmp(const void *pa, const void *pb)
{
	const struct mem_hkey *a = pa, *b = pb;

	if (a->hash != b->hash)
		return a->hash < b->hash ? -1 : 1;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* The sorted hashes of PLAN's keys when it has more than MEM_PAIRS_MAX
 * and is not a tree plan, into *OUT (else NULL). Returns 0 or -ENOMEM. */
static int byhash_make(const struct tl_plan *plan, struct mem_hkey **out)
{
	struct mem_hkey *v;
	size_t i;

	*out = NULL;
	if (plan->strategy == TL_STRATEGY_TREE || plan->n <= MEM_PAIRS_MAX)
		return 0; /* tree plans compare by their endpoints */
	v = malloc(plan->n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (i = 0; i < plan->n; i++) {
		v[i].hash = key_hash(plan->items[i].key, plan->items[i].len);
		v[i].idx = i;
	}
	qsort(v, plan->n, sizeof(*v), hkey_cmp);
	*out = v;
	return 0;
}

/* The first entry of R->byhash with hash H or above. */
static size_t byhash_lower(const struct mem_rec *r, uint64_t h)
{
	size_t lo = 0, hi = r->plan->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r->byhash[mid].hash < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool same_key(const struct tl_lock_item *a, const struct tl_lock_item *b)
{
	return a->len == b->len && memcmp(a->key, b->key, a->len) == 0;
}

static bool items_conflict(const struct tl_lock_item *a, const struct tl_lock_item *b)
{
	return (a->mode == TL_EXCLUSIVE || b->mode == TL_EXCLUSIVE) && same_key(a, b);
}

/* R's item with the key of IT, or NULL. */
static const struct tl_lock_item *rec_item(const struct mem_rec *r, const struct tl_lock_item *it)
{
	const struct tl_plan *p = r->plan;
	size_t j;

	if (r->byhash) {
		uint64_t h = key_hash(it->key, it->len);

		for (j = byhash_lower(r, h); j < p->n && r->byhash[j].hash == h; j++)
			if (same_key(&p->items[r->byhash[j].idx], it))
				return &p->items[r->byhash[j].idx];
		return NULL;
	}
	for (j = 0; j < p->n; j++)
		if (same_key(&p->items[j], it))
			return &p->items[j];
	return NULL;
}

/* The first item of P's plan, in plan order and below LIMIT, that conflicts
 * with an item of Q's plan; LIMIT when none does. */
static size_t first_conflict(const struct mem_rec *p, const struct mem_rec *q, size_t limit)
{
	const struct tl_plan *a = p->plan, *b = q->plan;
	size_t i, j, best = limit;

	if (p->byhash && q->byhash) {
		/* both sorted by hash: one merge */
		for (i = j = 0; i < a->n && j < b->n;) {
			uint64_t h = p->byhash[i].hash;
			size_t k;

			if (h < q->byhash[j].hash) {
				i++;
				continue;
			}
			if (h > q->byhash[j].hash) {
				j++;
				continue;
			}
			for (k = j; k < b->n && q->byhash[k].hash == h; k++)
				if (p->byhash[i].idx < best &&
				    items_conflict(&a->items[p->byhash[i].idx],
						   &b->items[q->byhash[k].idx]))
					best = p->byhash[i].idx;
			i++;
		}
		return best;
	}
	if (p->byhash) {
		/* Q is small: look each of its keys up in P */
		for (j = 0; j < b->n; j++) {
			uint64_t h = key_hash(b->items[j].key, b->items[j].len);

			for (i = byhash_lower(p, h); i < a->n && p->byhash[i].hash == h; i++)
				if (p->byhash[i].idx < best &&
				    items_conflict(&a->items[p->byhash[i].idx], &b->items[j]))
					best = p->byhash[i].idx;
		}
		return best;
	}
	for (i = 0; i < limit; i++) {
		const struct tl_lock_item *q_it;

		if (!q->byhash) {
			for (j = 0; j < b->n; j++)
				if (items_conflict(&a->items[i], &b->items[j]))
					return i;
			continue;
		}
		q_it = rec_item(q, &a->items[i]);
		if (q_it && items_conflict(&a->items[i], q_it))
			return i;
	}
	return limit;
}

static bool is_tree(const struct mem_rec *r)
{
	return r->plan->strategy == TL_STRATEGY_TREE;
}

/* True when tree plan T locks a key of Q's items that either wants
 * exclusive; sets *KEY, *LEN to it. */
static bool tree_items_conflict(const struct tl_plan *t, const struct tl_plan *q, const char **key,
				size_t *len)
{
	size_t j;

	for (j = 0; j < q->n; j++) {
		int m = lockplan_tree_mode(t, q->items[j].key, q->items[j].len);

		if (m == 2 || (m == 1 && q->items[j].mode == TL_EXCLUSIVE)) {
			*key = q->items[j].key;
			*len = q->items[j].len;
			return true;
		}
	}
	return false;
}

/* What refuses a plan: the contended key (LEN bytes, not NUL-terminated
 * at LEN), and for plans compared item by item the first such item in
 * plan order (AT; the plan's n while there is none). */
struct mem_clash {
	size_t at;
	const char *key;
	size_t len;
};

/* True when P's plan and Q's conflict where C has found no earlier
 * conflict (item plans: before C->at); C then says where. Tree plans
 * compare by their endpoints (lockplan_tree_conflict()), which also serves
 * the endpoint plans that carry no items; the first conflict found
 * stands. */
static bool recs_conflict(const struct mem_rec *p, const struct mem_rec *q, struct mem_clash *c)
{
	const char *key;
	size_t len, k;

	if (is_tree(p) || is_tree(q)) {
		bool hit = is_tree(p) && is_tree(q)
				   ? lockplan_tree_conflict(p->plan, q->plan, &key, &len)
			   : is_tree(p) ? tree_items_conflict(p->plan, q->plan, &key, &len)
					: tree_items_conflict(q->plan, p->plan, &key, &len);

		if (!hit)
			return false;
		c->at = 0; /* nothing earlier to look for */
		c->key = key;
		c->len = len;
		return true;
	}
	k = first_conflict(p, q, c->at);
	if (k >= c->at)
		return false;
	c->at = k;
	c->key = p->plan->items[k].key;
	c->len = p->plan->items[k].len;
	return true;
}

static struct mem_rec *recs_find(struct mem_recs *rs, uint64_t ticket)
{
	size_t i;

	for (i = 0; i < rs->n; i++)
		if (rs->v[i].ticket == ticket)
			return &rs->v[i];
	return NULL;
}

/* Appends a copy of R. Returns 0 or -ENOMEM. */
static int recs_add(struct mem_recs *rs, const struct mem_rec *r)
{
	if (rs->n == rs->cap) {
		size_t cap = rs->cap ? rs->cap * 2 : 16;
		struct mem_rec *v = realloc(rs->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		rs->v = v;
		rs->cap = cap;
	}
	rs->v[rs->n++] = *r;
	return 0;
}

/* Takes R (one of RS) off RS; its byhash stays the caller's. */
static void recs_del(struct mem_recs *rs, struct mem_rec *r)
{
	*r = rs->v[--rs->n];
}

/* The state of KEY (LEN bytes) among the held plans: any exclusive
 * holder, how many shared ones, when the earliest of them was granted. */
static void key_state(const struct mem_store *s, const char *key, size_t len, bool *excl,
		      unsigned int *shared, int64_t *since_ms)
{
	const struct tl_lock_item it = {.key = (char *)key, .len = (unsigned int)len};
	size_t i;

	*excl = false;
	*shared = 0;
	*since_ms = INT64_MAX;
	for (i = 0; i < s->held.n; i++) {
		const struct mem_rec *r = &s->held.v[i];
		const struct tl_lock_item *mine;
		int mode;

		if (is_tree(r)) {
			mode = lockplan_tree_mode(r->plan, key, len);
		} else {
			mine = rec_item(r, &it);
			mode = !mine ? 0 : mine->mode == TL_EXCLUSIVE ? 2 : 1;
		}
		if (!mode)
			continue;
		if (mode == 2)
			*excl = true;
		else
			(*shared)++;
		if (r->since_ms < *since_ms)
			*since_ms = r->since_ms;
	}
}

/* Fills WHY for a refusal on the key of C, because of BY (held, or an
 * older waiter when WAITING). Must be called with mutex held. */
static void why_refused(const struct mem_store *s, const struct mem_clash *c,
			const struct mem_rec *by, bool waiting, struct tl_conflict *why)
{
	unsigned int shared;
	int64_t since;
	bool excl;

	snprintf(why->key, sizeof(why->key), "%.*s", (int)c->len, c->key);
	if (waiting) {
		snprintf(why->holder, sizeof(why->holder), "an older waiting request #%" PRIu64,
			 by->ticket);
		why->held_ms = -1;
		return;
	}
	key_state(s, c->key, c->len, &excl, &shared, &since);
	snprintf(why->holder, sizeof(why->holder), "pid %u, %.80s (%s%s)", by->h->pid, by->h->id,
		 excl ? "exclusive" : "shared", shared > 1 ? ", and others" : "");
	why->held_ms = tl_wall_ms() - since;
}

/* Wakes every waiter: a lock was released or a waiter left. Must be
 * called with mutex held. */
static void changed(struct mem_store *s)
{
	s->gen++;
	pthread_cond_broadcast(&s->cond);
}

static int mem_try_acquire(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h,
			   struct tl_conflict *why)
{
	struct mem_store *s = (struct mem_store *)st;
	struct mem_rec me = {.ticket = h->ticket, .plan = plan, .h = h}, *mine, *by = NULL;
	struct mem_clash c = {.at = plan->n};
	struct mem_hold *mh;
	bool by_waiter = false;
	size_t i;
	int err;

	/* sorted outside the mutex (a retry drops it for the one it keeps) */
	err = byhash_make(plan, &me.byhash);
	if (err)
		return err;
	pthread_mutex_lock(&s->mutex);
	mine = recs_find(&s->waiting, h->ticket); /* refused before */
	if (mine) {
		free(me.byhash);
		me = *mine;
	}
	for (i = 0; i < s->held.n && c.at; i++)
		if (recs_conflict(&me, &s->held.v[i], &c))
			by = &s->held.v[i];
	for (i = 0; i < s->waiting.n && c.at; i++) {
		struct mem_rec *w = &s->waiting.v[i];

		if (w->ticket >= me.ticket)
			continue; /* younger waiters (and ourselves) do not hold us back */
		if (recs_conflict(&me, w, &c)) {
			by = w;
			by_waiter = true;
		}
	}
	if (by) {
		why_refused(s, &c, by, by_waiter, why);
		/* as a waiter, no younger request overtakes us on any key;
		 * without memory for that, fairness degrades, safety does not */
		if (!mine && recs_add(&s->waiting, &me))
			free(me.byhash);
		mh = h->priv ? h->priv : calloc(1, sizeof(*mh));
		if (mh) {
			mh->gen = s->gen;
			h->priv = mh;
		}
		err = -EAGAIN;
		goto out_unlock;
	}
	/* granted at the first try: when the manager started asking */
	me.since_ms = mine || !h->start_ms ? tl_wall_ms() : h->start_ms;
	err = recs_add(&s->held, &me);
	if (err) {
		if (!mine)
			free(me.byhash);
		goto out_unlock; /* a waiter stays one until abandon */
	}
	if (mine) {
		recs_del(&s->waiting, mine); /* its byhash went to HELD */
		changed(s);
	}
	free(h->priv);
	h->priv = NULL;
out_unlock:
	pthread_mutex_unlock(&s->mutex);
	return err;
}

static int mem_wait(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h,
		    unsigned int attempt, const struct timespec *deadline)
{
	struct mem_store *s = (struct mem_store *)st;
	const struct mem_hold *mh = h->priv;
	int err = 0;

	pthread_mutex_lock(&s->mutex);
	/* without a gen to compare (out of memory) for the next change */
	while (!mh || s->gen == mh->gen) {
		int rc = pthread_cond_timedwait(&s->cond, &s->mutex, deadline);

		if (rc == ETIMEDOUT) {
			err = -ETIMEDOUT;
			break;
		}
		if (!mh)
			break;
	}
	pthread_mutex_unlock(&s->mutex);
	return err;
}

static void mem_abandon(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h)
{
	struct mem_store *s = (struct mem_store *)st;
	struct mem_rec *mine;

	pthread_mutex_lock(&s->mutex);
	mine = recs_find(&s->waiting, h->ticket);
	if (mine) {
		free(mine->byhash);
		recs_del(&s->waiting, mine);
		changed(s);
	}
	free(h->priv);
	h->priv = NULL;
	pthread_mutex_unlock(&s->mutex);
}

static int mem_release(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h)
{
	struct mem_store *s = (struct mem_store *)st;
	struct mem_hkey *byhash = NULL;
	struct mem_rec *mine;

	pthread_mutex_lock(&s->mutex);
	mine = recs_find(&s->held, h->ticket);
	if (mine) { /* always, for a plan we granted */
		byhash = mine->byhash;
		recs_del(&s->held, mine);
		changed(s);
	}
	pthread_mutex_unlock(&s->mutex);
	free(byhash);
	return 0;
}

/* One key of one plan, for a listing. */
struct mem_row {
	const struct tl_lock_item *it;
	const struct mem_rec *r;
	bool held;
};

static int row_cmp(const void *pa, const void *pb)
{
	const struct mem_row *a = pa, *b = pb;
	int c = strcmp(a->it->key, b->it->key);

	return c ? c : (int)b->held - (int)a->held;
}

static bool listed(const char *prefix, const char *key)
{
	return !prefix || strcmp(prefix, "/") == 0 || strcmp(prefix, key) == 0 ||
	       path_is_ancestor(prefix, key);
}

/* A plan in a listing: its record, and the plan whose keys are listed
 * (an endpoint plan's full plan, made for the listing and freed after). */
struct mem_listed {
	const struct mem_rec *r;
	const struct tl_plan *p;
	struct tl_plan *full;
};

/* Appends the plans of RS to L (*N). Returns 0 or -ENOMEM. */
static int listed_add(const struct mem_recs *rs, struct mem_listed *l, size_t *n)
{
	size_t i;

	for (i = 0; i < rs->n; i++, (*n)++) {
		l[*n].r = &rs->v[i];
		l[*n].p = rs->v[i].plan;
		l[*n].full = NULL;
		if (!l[*n].p->items) {
			if (lockplan_tree_full(l[*n].p, &l[*n].full))
				return -ENOMEM;
			l[*n].p = l[*n].full;
		}
	}
	return 0;
}

/* The listing line OUT (zeroed, but its key) of the rows [A, B) of one key
 * (held rows first). */
static int info_make(const struct mem_row *a, const struct mem_row *b, int64_t now,
		     struct tl_lock_info *out)
{
	const struct mem_rec *latest = NULL;
	unsigned int shared = 0, excl = 0;
	int64_t since = INT64_MAX;

	for (; a < b; a++) {
		if (!a->held) {
			out->waiters++;
			continue;
		}
		if (a->it->mode == TL_EXCLUSIVE)
			excl++;
		else
			shared++;
		if (!latest || a->r->ticket > latest->ticket)
			latest = a->r;
		if (a->r->since_ms < since)
			since = a->r->since_ms;
	}
	out->mode = excl ? TL_EXCLUSIVE : TL_SHARED;
	out->count = excl ? 1 : shared;
	out->age_ms = latest ? now - since : -1;
	if (latest) {
		if (asprintf(&out->holders, "pid %u, %s", latest->h->pid, latest->h->id) < 0)
			out->holders = NULL;
	} else {
		out->holders = strdup("-");
	}
	return out->holders ? 0 : -ENOMEM;
}

static int mem_list(struct lockstore *st, const char *prefix, struct tl_lock_info **out, size_t *n)
{
	struct mem_store *s = (struct mem_store *)st;
	struct mem_listed *l = NULL;
	struct mem_row *rows = NULL;
	struct tl_lock_info *v = NULL;
	int64_t now = tl_wall_ms();
	size_t i, j, np = 0, nheld, nrows = 0, total = 0, k = 0;
	int err = -ENOMEM;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&s->mutex);
	nheld = s->held.n;
	i = s->held.n + s->waiting.n;
	if (i) {
		l = malloc(i * sizeof(*l));
		if (!l)
			goto out_unlock;
	}
	if (listed_add(&s->held, l, &np) || listed_add(&s->waiting, l, &np))
		goto out_unlock;
	for (i = 0; i < np; i++)
		total += l[i].p->n;
	if (total) {
		rows = malloc(total * sizeof(*rows));
		if (!rows)
			goto out_unlock;
	}
	for (i = 0; i < np; i++)
		for (j = 0; j < l[i].p->n; j++)
			if (listed(prefix, l[i].p->items[j].key)) {
				rows[nrows].it = &l[i].p->items[j];
				rows[nrows].r = l[i].r;
				rows[nrows].held = i < nheld;
				nrows++;
			}
	if (nrows) {
		qsort(rows, nrows, sizeof(*rows), row_cmp);
		v = calloc(nrows, sizeof(*v));
		if (!v)
			goto out_unlock;
	}
	for (i = 0; i < nrows; i = j) {
		for (j = i + 1; j < nrows && strcmp(rows[j].it->key, rows[i].it->key) == 0; j++)
			;
		v[k].key = strdup(rows[i].it->key);
		if (!v[k].key || info_make(&rows[i], &rows[j], now, &v[k])) {
			lockstore_free_list(v, k + 1);
			v = NULL;
			goto out_unlock;
		}
		k++;
	}
	err = 0;
out_unlock:
	pthread_mutex_unlock(&s->mutex);
	free(rows);
	for (i = 0; i < np; i++)
		lockplan_free(l[i].full);
	free(l);
	if (!err) {
		*out = v;
		*n = k;
	}
	return err;
}

static void recs_free(struct mem_recs *rs)
{
	size_t i;

	for (i = 0; i < rs->n; i++)
		free(rs->v[i].byhash);
	free(rs->v);
}

static void mem_close(struct lockstore *st)
{
	struct mem_store *s = (struct mem_store *)st;

	if (!s)
		return;
	recs_free(&s->held);
	recs_free(&s->waiting);
	lockstore_base_free(&s->base, &s->mutex, &s->cond);
}

static const struct lockstore_ops mem_ops = {
	.name = "mem",
	.caps = TL_CAP_ENDPOINT_PLANS,
	.try_acquire = mem_try_acquire,
	.wait = mem_wait,
	.abandon = mem_abandon,
	.release = mem_release,
	.list = mem_list,
	.close = mem_close,
};

int lockstore_mem_open(const struct tl_config *cfg, struct lockstore **out)
{
	struct mem_store *s;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	lockstore_base_init(&s->base, &mem_ops, cfg, &s->mutex, &s->cond);
	*out = &s->base;
	return 0;
}
