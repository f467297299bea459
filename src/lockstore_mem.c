/* lockstore_mem.c - the embedded lock store: an in-process table
 *
 * One entry per key that is held or waited for:
 *
 *   state of a key        shared request        exclusive request
 *   free                  granted               granted
 *   shared (n holders)    granted (n+1)         refused
 *   exclusive             refused               refused
 *   + older waiter mark   refused if the mark   refused
 *                         is exclusive
 *
 * A refused request marks every key of its plan with its ticket and mode
 * (see lockstore.h, "Fairness"), then sleeps on the store's condition
 * variable until the change counter moves (any release or abandon), so
 * waiters are woken instead of polling and no wake-up is lost between the
 * refusal and the sleep (the counter is read under the mutex at refusal).
 *
 * Leases are trivially the process: when it dies, its table dies with it.
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

#include "lockstore.h"
#include "lockstore_i.h"
#include "path.h"
#include "tlclock.h"

struct mem_waiter {
	uint64_t ticket;
	enum tl_lock_mode mode;
};

struct mem_entry {
	struct mem_entry *next;
	uint64_t hash;
	unsigned int shared;     /* shared holders */
	bool excl;               /* held exclusive */
	int64_t since_ms;        /* wall clock when it became held */
	uint32_t holder_pid;     /* the latest holder, for listings: its pid */
	char holder_id[sizeof(((struct tl_holder *)0)->id)]; /* and its id */
	struct mem_waiter *w;    /* waiter marks */
	size_t nw, wcap;
	size_t keycap;           /* bytes allocated for KEY */
	char key[];              /* one allocation with the entry */
};

/* Freed entries kept for reuse (an uncontended rename makes and frees one
 * per key of its plan): at most MEM_SPARE_MAX, with room for keys of at
 * least MEM_KEY_MIN bytes. */
#define MEM_SPARE_MAX 64
#define MEM_KEY_MIN 96

/* Plans this long keep their entry pointers on the stack. */
#define MEM_PLAN_STACK 32

struct mem_store {
	struct lockstore base;
	pthread_mutex_t mutex;
	pthread_cond_t cond;     /* signalled when gen moves */
	uint64_t gen;            /* protected by mutex */
	struct mem_entry **buckets; /* protected by mutex */
	size_t nbuckets;
	size_t count;            /* protected by mutex */
	struct mem_entry *spare; /* protected by mutex; chained by next */
	size_t nspare;           /* protected by mutex */
};

static uint64_t key_hash(const char *k)
{
	uint64_t h = UINT64_C(14695981039346656037);

	for (; *k; k++) {
		h ^= (unsigned char)*k;
		h *= UINT64_C(1099511628211);
	}
	return h;
}

/* Must be called with mutex held. */
static int table_grow(struct mem_store *s)
{
	size_t n = s->nbuckets * 2, i;
	struct mem_entry **b = calloc(n, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (i = 0; i < s->nbuckets; i++) {
		struct mem_entry *e = s->buckets[i], *next;

		for (; e; e = next) {
			next = e->next;
			e->next = b[e->hash & (n - 1)];
			b[e->hash & (n - 1)] = e;
		}
	}
	free(s->buckets);
	s->buckets = b;
	s->nbuckets = n;
	return 0;
}

/* Must be called with mutex held. */
static struct mem_entry *entry_find(struct mem_store *s, const char *key, uint64_t h)
{
	struct mem_entry *e = s->buckets[h & (s->nbuckets - 1)];

	for (; e; e = e->next)
		if (e->hash == h && strcmp(e->key, key) == 0)
			return e;
	return NULL;
}

/* Must be called with mutex held. Makes the entry of KEY (hash H), known
 * to be missing. Returns NULL when out of memory. */
static struct mem_entry *entry_new(struct mem_store *s, const char *key, uint64_t h)
{
	size_t len = strlen(key), cap;
	struct mem_entry *e;

	if (s->count >= s->nbuckets)
		table_grow(s); /* a failed grow only makes chains longer */
	e = s->spare;
	if (e && e->keycap > len) {
		s->spare = e->next;
		s->nspare--;
		cap = e->keycap;
	} else {
		cap = len + 1 > MEM_KEY_MIN ? len + 1 : MEM_KEY_MIN;
		e = malloc(sizeof(*e) + cap);
		if (!e)
			return NULL;
	}
	/* field by field: the holder id's bytes need no clearing */
	e->shared = 0;
	e->excl = false;
	e->since_ms = 0;
	e->holder_pid = 0;
	e->holder_id[0] = '\0';
	e->w = NULL;
	e->nw = 0;
	e->wcap = 0;
	e->keycap = cap;
	memcpy(e->key, key, len + 1);
	e->hash = h;
	e->next = s->buckets[h & (s->nbuckets - 1)];
	s->buckets[h & (s->nbuckets - 1)] = e;
	s->count++;
	return e;
}

/* Must be called with mutex held. Returns NULL when out of memory. */
static struct mem_entry *entry_get(struct mem_store *s, const char *key)
{
	uint64_t h = key_hash(key);
	struct mem_entry *e = entry_find(s, key, h);

	return e ? e : entry_new(s, key, h);
}

/* Frees E when nothing holds or waits for it. Must be called with mutex
 * held. */
static void entry_put(struct mem_store *s, struct mem_entry *e)
{
	struct mem_entry **pp;

	if (e->excl || e->shared || e->nw)
		return;
	for (pp = &s->buckets[e->hash & (s->nbuckets - 1)]; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			break;
		}
	}
	s->count--;
	free(e->w);
	if (s->nspare < MEM_SPARE_MAX) {
		e->next = s->spare;
		s->spare = e;
		s->nspare++;
	} else {
		free(e);
	}
}

static bool modes_conflict(enum tl_lock_mode a, enum tl_lock_mode b)
{
	return a == TL_EXCLUSIVE || b == TL_EXCLUSIVE;
}

/* Why KEY in MODE cannot be granted to TICKET now, or NULL-equivalent
 * (returns false) when it can. Must be called with mutex held. */
static bool entry_blocks(const struct mem_entry *e, enum tl_lock_mode mode, uint64_t ticket,
			 struct tl_conflict *why)
{
	size_t i;

	if (e->excl || (mode == TL_EXCLUSIVE && e->shared)) {
		snprintf(why->holder, sizeof(why->holder), "pid %u, %.80s (%s%s)", e->holder_pid,
			 e->holder_id, e->excl ? "exclusive" : "shared", e->shared > 1 ? ", and others" : "");
		why->held_ms = tl_wall_ms() - e->since_ms;
		return true;
	}
	for (i = 0; i < e->nw; i++) {
		if (e->w[i].ticket < ticket && modes_conflict(e->w[i].mode, mode)) {
			snprintf(why->holder, sizeof(why->holder), "an older waiting request #%" PRIu64,
				 e->w[i].ticket);
			why->held_ms = -1;
			return true;
		}
	}
	return false;
}

/* Must be called with mutex held. */
static void waiter_drop(struct mem_entry *e, uint64_t ticket)
{
	size_t i;

	for (i = 0; i < e->nw; i++) {
		if (e->w[i].ticket == ticket) {
			e->w[i] = e->w[--e->nw];
			return;
		}
	}
}

/* Must be called with mutex held. */
static void waiter_add(struct mem_entry *e, uint64_t ticket, enum tl_lock_mode mode)
{
	size_t i;

	for (i = 0; i < e->nw; i++)
		if (e->w[i].ticket == ticket)
			return;
	if (e->nw == e->wcap) {
		size_t cap = e->wcap ? e->wcap * 2 : 4;
		struct mem_waiter *w = realloc(e->w, cap * sizeof(*w));

		if (!w)
			return; /* no mark: fairness degrades, safety does not */
		e->w = w;
		e->wcap = cap;
	}
	e->w[e->nw].ticket = ticket;
	e->w[e->nw].mode = mode;
	e->nw++;
}

/* What this store keeps of a holder that left waiter marks (h->priv; none
 * while it left no marks). */
struct mem_hold {
	uint64_t gen; /* s->gen when it was refused */
};

/* Drops H's marks from every key of PLAN. Must be called with mutex held. */
static void marks_drop(struct mem_store *s, const struct tl_plan *plan, struct tl_holder *h)
{
	size_t i;

	if (!h->priv)
		return;
	for (i = 0; i < plan->n; i++) {
		uint64_t hh = key_hash(plan->items[i].key);
		struct mem_entry *e = entry_find(s, plan->items[i].key, hh);

		if (e) {
			waiter_drop(e, h->ticket);
			entry_put(s, e);
		}
	}
	free(h->priv);
	h->priv = NULL;
	s->gen++;
	pthread_cond_broadcast(&s->cond);
}

static int mem_try_acquire(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h,
			   struct tl_conflict *why)
{
	struct mem_store *s = (struct mem_store *)st;
	struct mem_entry *stack[MEM_PLAN_STACK], **got = stack;
	uint64_t stack_hash[MEM_PLAN_STACK], *hash = stack_hash;
	size_t i, idlen;
	int64_t now_ms = -1;
	int err = 0;

	if (plan->n > MEM_PLAN_STACK) {
		got = malloc(plan->n * sizeof(*got));
		hash = malloc(plan->n * sizeof(*hash));
		if (!got || !hash) {
			err = -ENOMEM;
			goto out_free;
		}
	}
	/* hashed outside the mutex */
	for (i = 0; i < plan->n; i++)
		hash[i] = key_hash(plan->items[i].key);
	pthread_mutex_lock(&s->mutex);
	for (i = 0; i < plan->n; i++) {
		const struct tl_lock_item *it = &plan->items[i];
		struct mem_entry *e = entry_find(s, it->key, hash[i]);

		got[i] = e;
		if (e && entry_blocks(e, it->mode, h->ticket, why)) {
			snprintf(why->key, sizeof(why->key), "%s", it->key);
			err = -EAGAIN;
			break;
		}
	}
	if (err) {
		struct mem_hold *mh = h->priv ? h->priv : calloc(1, sizeof(*mh));

		if (!mh)
			goto out_unlock; /* no marks: fairness degrades, safety does not */
		/* mark every key, so no younger request overtakes us anywhere */
		for (i = 0; i < plan->n; i++) {
			struct mem_entry *e = entry_get(s, plan->items[i].key);

			if (e)
				waiter_add(e, h->ticket, plan->items[i].mode);
		}
		mh->gen = s->gen;
		h->priv = mh;
		goto out_unlock;
	}
	for (i = 0; i < plan->n; i++) {
		if (!got[i])
			got[i] = entry_new(s, plan->items[i].key, hash[i]);
		if (!got[i]) {
			err = -ENOMEM;
			goto out_unwind;
		}
	}
	idlen = strnlen(h->id, sizeof(h->id) - 1);
	for (i = 0; i < plan->n; i++) {
		struct mem_entry *e = got[i];

		if (!e->excl && !e->shared) {
			if (now_ms < 0)
				now_ms = tl_wall_ms();
			e->since_ms = now_ms;
		}
		if (plan->items[i].mode == TL_EXCLUSIVE)
			e->excl = true;
		else
			e->shared++;
		e->holder_pid = h->pid;
		memcpy(e->holder_id, h->id, idlen);
		e->holder_id[idlen] = '\0';
	}
	marks_drop(s, plan, h);
	goto out_unlock;

out_unwind:
	for (i = 0; i < plan->n; i++)
		if (got[i])
			entry_put(s, got[i]);
out_unlock:
	pthread_mutex_unlock(&s->mutex);
out_free:
	if (got != stack)
		free(got);
	if (hash != stack_hash)
		free(hash);
	return err;
}

static int mem_wait(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h,
		    unsigned int attempt, const struct timespec *deadline)
{
	struct mem_store *s = (struct mem_store *)st;
	const struct mem_hold *mh = h->priv;
	int err = 0;

	pthread_mutex_lock(&s->mutex);
	/* without marks (out of memory) for the next change of any lock */
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

	pthread_mutex_lock(&s->mutex);
	marks_drop(s, plan, h);
	pthread_mutex_unlock(&s->mutex);
}

static int mem_release(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h)
{
	struct mem_store *s = (struct mem_store *)st;
	uint64_t stack_hash[MEM_PLAN_STACK], *hash = NULL;
	size_t i;

	if (plan->n <= MEM_PLAN_STACK)
		hash = stack_hash; /* hashed outside the mutex */
	for (i = 0; hash && i < plan->n; i++)
		hash[i] = key_hash(plan->items[i].key);
	pthread_mutex_lock(&s->mutex);
	for (i = plan->n; i-- > 0;) {
		const struct tl_lock_item *it = &plan->items[i];
		struct mem_entry *e = entry_find(s, it->key, hash ? hash[i] : key_hash(it->key));

		if (!e)
			continue; /* cannot happen for a plan we granted */
		if (it->mode == TL_EXCLUSIVE)
			e->excl = false;
		else if (e->shared)
			e->shared--;
		entry_put(s, e);
	}
	s->gen++;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->mutex);
	return 0;
}

static int mem_list(struct lockstore *st, const char *prefix, struct tl_lock_info **out, size_t *n)
{
	struct mem_store *s = (struct mem_store *)st;
	struct tl_lock_info *v = NULL;
	int64_t now = tl_wall_ms();
	size_t i, k = 0;
	int err = -ENOMEM;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&s->mutex);
	if (s->count) {
		v = calloc(s->count, sizeof(*v));
		if (!v)
			goto out_unlock;
	}
	for (i = 0; i < s->nbuckets; i++) {
		struct mem_entry *e;

		for (e = s->buckets[i]; e; e = e->next) {
			if (prefix && strcmp(prefix, "/") != 0 && strcmp(prefix, e->key) != 0 &&
			    !path_is_ancestor(prefix, e->key))
				continue;
			v[k].key = strdup(e->key);
			if (e->excl || e->shared) {
				if (asprintf(&v[k].holders, "pid %u, %s", e->holder_pid,
					     e->holder_id) < 0)
					v[k].holders = NULL;
			} else {
				v[k].holders = strdup("-");
			}
			if (!v[k].key || !v[k].holders) {
				k++;
				lockstore_free_list(v, k);
				v = NULL;
				goto out_unlock;
			}
			v[k].mode = e->excl ? TL_EXCLUSIVE : TL_SHARED;
			v[k].count = e->excl ? 1 : e->shared;
			v[k].age_ms = e->excl || e->shared ? now - e->since_ms : -1;
			v[k].waiters = (unsigned)e->nw;
			k++;
		}
	}
	err = 0;
out_unlock:
	pthread_mutex_unlock(&s->mutex);
	if (!err) {
		*out = v;
		*n = k;
	}
	return err;
}

static void mem_close(struct lockstore *st)
{
	struct mem_store *s = (struct mem_store *)st;
	size_t i;

	if (!s)
		return;
	for (i = 0; i < s->nbuckets; i++) {
		struct mem_entry *e = s->buckets[i], *next;

		for (; e; e = next) {
			next = e->next;
			free(e->w);
			free(e);
		}
	}
	while (s->spare) {
		struct mem_entry *e = s->spare;

		s->spare = e->next;
		free(e);
	}
	free(s->buckets);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->mutex);
	free(s);
}

static const struct lockstore_ops mem_ops = {
	.name = "mem",
	.try_acquire = mem_try_acquire,
	.wait = mem_wait,
	.abandon = mem_abandon,
	.release = mem_release,
	.list = mem_list,
	.close = mem_close,
};

int lockstore_mem_open(const struct tl_config *cfg, struct lockstore **out)
{
	pthread_condattr_t ca;
	struct mem_store *s;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->nbuckets = 64;
	s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
	if (!s->buckets) {
		free(s);
		return -ENOMEM;
	}
	pthread_mutex_init(&s->mutex, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	s->base.ops = &mem_ops;
	s->base.cfg = cfg;
	*out = &s->base;
	return 0;
}
