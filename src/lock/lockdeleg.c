/* lockdeleg.c - directory delegations, see lockdeleg.h
 *
 *   (none) --2nd rename within D in 1 s routed, one try ok--> HELD (its first user)
 *   HELD --covered rename--> HELD (users+1 ... users-1)
 *   HELD --no user for delegation_idle, seen by the poller--> RECALLED
 *   HELD --recall (other owner's mark, stale lease, own conflict, end)-->
 *        RECALLED: no new users
 *   RECALLED --last user gone--> RELEASING (store release) --> (none)
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/path.h"
#include "base/tlclock.h"
#include "lock/lockdeleg.h"
#include "lock/lockmgr.h"
#include "lock/lockstore_impl.h"

#define NOTE_WINDOW_US 1000000   /* two renames within D in this: delegate */
#define COOLDOWN_MIN_US (30 * 1000000LL)
#define COOLDOWN_MAX_US (600 * 1000000LL)
#define REFUSED_PAUSE_US 1000000 /* after a refused try or an own give-back */
#define MAX_DELEGS 64
#define NSLOTS 64                /* directories remembered (notes, cooldowns) */

enum deleg_state { DELEG_HELD, DELEG_RECALLED, DELEG_RELEASING };

struct tl_deleg {
	char *dir;
	struct tl_plan *plan;      /* lockplan_entry(tree, dir) */
	struct tl_holder holder;
	unsigned int users;
	uint64_t served;           /* covered renames that used it */
	enum deleg_state state;
	int64_t recall_us;         /* monotonic: when another owner's recall was seen */
	int64_t used_us;           /* monotonic: granted, or a user came or went */
	struct tl_deleg *next;
};

/* What is remembered of a directory: renames noted, cooldown. */
struct deleg_slot {
	char *dir;
	int64_t last_us;           /* the last rename noted */
	unsigned int count;        /* renames within NOTE_WINDOW_US of each other */
	int64_t until_us;          /* no delegation before (a cooldown, a pause) */
	int64_t cool_us;           /* the end of the last cooldown (not of a
				    * pause after a refused try) */
	int64_t backoff_us;        /* the next cooldown after a recall */
};

struct tl_delegs {
	struct lockmgr *m;
	struct lockstore *store;   /* m's */
	struct lockstore *local_store;
	struct lockmgr local;
	int64_t poll_us;
	int64_t idle_us;           /* given back when unused this long */
	pthread_mutex_t mutex;
	pthread_cond_t cond;       /* CLOCK_MONOTONIC */
	/* protected by mutex: */
	struct tl_deleg *list;
	size_t n;
	struct deleg_slot slots[NSLOTS];
	bool stop;
	pthread_t poller;
	bool polling;
	/* counters (atomic) */
	uint64_t granted, recalled, idle_returned, renames_local, recall_wait_us, recall_wait_max_us,
		recalls_timed;
	struct tl_hist recall_wait; /* the same waits, for the metrics */
};

bool deleg_covers(const char *dir, const char *key)
{
	size_t n = strlen(dir);

	if (n == 1)
		return key[0] == '/' && key[1] != '\0';
	return strncmp(dir, key, n) == 0 && key[n] == '/';
}

bool deleg_conflicts(const char *dir, const char *key)
{
	return strcmp(dir, key) == 0 || deleg_covers(dir, key) || deleg_covers(key, dir);
}

static void cond_init_mono(pthread_cond_t *c)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

/* The slot of DIR, made (the least recently noted one replaced) when
 * MAKE; NULL when none or out of memory. Under the mutex. */
static struct deleg_slot *slot_of(struct tl_delegs *d, const char *dir, size_t len, bool make)
{
	struct deleg_slot *s, *old = &d->slots[0];
	size_t i;
	char *copy;

	for (i = 0; i < NSLOTS; i++) {
		s = &d->slots[i];
		if (s->dir && strlen(s->dir) == len && memcmp(s->dir, dir, len) == 0)
			return s;
		if (!s->dir || (old->dir && s->last_us < old->last_us && s->until_us < old->until_us))
			old = s;
	}
	if (!make || !(copy = strndup(dir, len)))
		return NULL;
	free(old->dir);
	memset(old, 0, sizeof(*old));
	old->dir = copy;
	return old;
}

/* The held delegation strictly covering KEY, or NULL. Under the mutex. */
static struct tl_deleg *covering(struct tl_delegs *d, const char *key)
{
	struct tl_deleg *g;

	for (g = d->list; g; g = g->next)
		if (g->state == DELEG_HELD && deleg_covers(g->dir, key))
			return g;
	return NULL;
}

/* Releases delegation G (state RELEASING, no users) in the store, unlinks
 * and frees it. Called and returns with the mutex held; drops it across
 * the request. */
static void release_locked(struct tl_delegs *d, struct tl_deleg *g, int64_t end_us)
{
	struct tl_deleg **pp;
	double timeout;
	int64_t now, deadline;
	int err;

	pthread_mutex_unlock(&d->mutex);
	__atomic_load(&d->m->timeout, &timeout, __ATOMIC_RELAXED);
	now = tl_mono_us();
	deadline = now + (int64_t)(timeout * 1e6);
	if (end_us && end_us < deadline)
		deadline = end_us;
	g->holder.deadline_us = deadline;
	lockmgr_log_delegation(d->m, "return", g->holder.id, NULL, NULL);
	err = d->store->ops->release(d->store, g->plan, &g->holder);
	if (err)
		tl_log(LOG_ERR, "cannot give back the delegation of '%s': %s; it expires with "
		       "the lease", g->dir, strerror(-err));
	else
		tl_log(LOG_INFO, "delegation of '%s' given back", g->dir);
	now = tl_mono_us();
	if (g->recall_us) {
		uint64_t w = (uint64_t)(now - g->recall_us), max;

		__atomic_add_fetch(&d->recall_wait_us, w, __ATOMIC_RELAXED);
		__atomic_add_fetch(&d->recalls_timed, 1, __ATOMIC_RELAXED);
		stats_hist_record(&d->recall_wait, w);
		max = __atomic_load_n(&d->recall_wait_max_us, __ATOMIC_RELAXED);
		while (w > max && !__atomic_compare_exchange_n(&d->recall_wait_max_us, &max, w,
							       false, __ATOMIC_RELAXED,
							       __ATOMIC_RELAXED))
			;
	}
	pthread_mutex_lock(&d->mutex);
	for (pp = &d->list; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	d->n--;
	pthread_cond_broadcast(&d->cond);
	free(g->dir);
	lockplan_free(g->plan);
	free(g);
}

/* Recalls G (WHY: for the hold log): no new users; released at once when
 * it has none. Under the mutex; may drop it (then the list may have
 * changed: returns true). */
static bool recall_locked(struct tl_delegs *d, struct tl_deleg *g, int64_t end_us,
			  const char *why)
{
	if (g->state == DELEG_HELD) {
		g->state = DELEG_RECALLED;
		lockmgr_log_delegation(d->m, "recall", g->holder.id, NULL, why);
	}
	if (g->state == DELEG_RECALLED && g->users == 0) {
		g->state = DELEG_RELEASING;
		release_locked(d, g, end_us);
		return true;
	}
	return false;
}

static void try_delegate(struct tl_delegs *d, const char *dir);

/* The directory whose delegation rename FROM -> TO earns (a copy), or
 * NULL: it is the parent of an endpoint, this rename would be the second
 * within NOTE_WINDOW_US there (delegs_note()), a delegation of it may be
 * tried now, and with it both endpoints would be covered. Under the
 * mutex. */
static char *earned_locked(struct tl_delegs *d, const char *from, const char *to, int64_t now)
{
	const char *keys[2] = {from, to};
	int i, j, n = to ? 2 : 1;

	if (d->n >= MAX_DELEGS || d->stop)
		return NULL;
	for (i = 0; i < n; i++) {
		size_t len = path_parent_len(keys[i], strlen(keys[i]));
		struct deleg_slot *s;
		struct tl_deleg *g;

		if (len <= 1 /* "/" is never delegated */ ||
		    !(s = slot_of(d, keys[i], len, false)) ||
		    now - s->last_us >= NOTE_WINDOW_US || now < s->until_us)
			continue;
		for (g = d->list; g; g = g->next)
			if (deleg_conflicts(g->dir, s->dir))
				break;
		if (g)
			continue;
		for (j = 0; j < n; j++)
			if (!deleg_covers(s->dir, keys[j]) && !covering(d, keys[j]))
				break;
		if (j == n)
			return strdup(s->dir);
	}
	return NULL;
}

bool delegs_route(struct tl_delegs *d, const char *from, const char *to, struct tl_deleg *use[2])
{
	struct lockstore *st = d->store;
	bool fresh = !st->ops->lease_fresh || st->ops->lease_fresh(st);
	bool tried = false;
	struct tl_deleg *g;
	char *dir;

	use[0] = use[1] = NULL;
	pthread_mutex_lock(&d->mutex);
	while (fresh) {
		struct tl_deleg *a = covering(d, from), *b = to ? covering(d, to) : a;
		int64_t now = tl_mono_us();

		if (a && b) {
			a->users++;
			a->served++;
			a->used_us = now;
			use[0] = a;
			if (b != a) {
				b->users++;
				b->served++;
				b->used_us = now;
				use[1] = b;
			}
			pthread_mutex_unlock(&d->mutex);
			return true;
		}
		/* the rename that earns a delegation is its first user; a
		 * refused try is the one delegs_note() would have made */
		if (tried || !(dir = earned_locked(d, from, to, now)))
			break;
		pthread_mutex_unlock(&d->mutex);
		try_delegate(d, dir);
		free(dir);
		tried = true;
		pthread_mutex_lock(&d->mutex);
	}
	/* the store path: first give back what its locks would meet */
	for (;;) {
		for (g = d->list; g; g = g->next)
			if (deleg_conflicts(g->dir, from) || (to && deleg_conflicts(g->dir, to)))
				break;
		if (!g)
			break;
		if (g->state == DELEG_HELD) {
			/* not taken again at once: the renames that gave it
			 * back would pay for it each time */
			struct deleg_slot *s = slot_of(d, g->dir, strlen(g->dir), true);

			if (s && s->until_us < tl_mono_us() + REFUSED_PAUSE_US)
				s->until_us = tl_mono_us() + REFUSED_PAUSE_US;
		}
		if (!recall_locked(d, g, 0, "own"))
			pthread_cond_wait(&d->cond, &d->mutex); /* its users, or its release */
	}
	pthread_mutex_unlock(&d->mutex);
	return false;
}

struct lockmgr *delegs_local(struct tl_delegs *d)
{
	__atomic_add_fetch(&d->renames_local, 1, __ATOMIC_RELAXED);
	return &d->local;
}

void delegs_done(struct tl_delegs *d, struct tl_deleg *use[2])
{
	int i;

	pthread_mutex_lock(&d->mutex);
	for (i = 0; i < 2; i++) {
		if (!use[i])
			continue;
		use[i]->users--;
		use[i]->used_us = tl_mono_us();
		if (use[i]->users == 0 && use[i]->state == DELEG_RECALLED)
			recall_locked(d, use[i], 0, NULL);
		else if (use[i]->users == 0)
			pthread_cond_broadcast(&d->cond);
		use[i] = NULL;
	}
	pthread_mutex_unlock(&d->mutex);
}

/* Starts (or extends) the cooldown of slot S at NOW: COOLDOWN_MIN_US,
 * doubling at each call up to COOLDOWN_MAX_US. Under the mutex. */
static void cool_locked(struct deleg_slot *s, int64_t now)
{
	s->backoff_us = s->backoff_us ? 2 * s->backoff_us : COOLDOWN_MIN_US;
	if (s->backoff_us > COOLDOWN_MAX_US)
		s->backoff_us = COOLDOWN_MAX_US;
	s->cool_us = now + s->backoff_us;
	if (s->until_us < s->cool_us)
		s->until_us = s->cool_us;
}

/* True when a delegation of DIR (LEN bytes) may be tried now; notes the
 * rename (one that WAITED starts DIR's cooldown, unless one runs). Under
 * the mutex. */
static bool note_locked(struct tl_delegs *d, const char *dir, size_t len, int64_t now,
			bool waited)
{
	struct deleg_slot *s = slot_of(d, dir, len, true);
	struct tl_deleg *g;

	if (!s)
		return false;
	/* not only when no pause runs: the rename that waited had usually
	 * tried the grant when it was routed, and that refusal started a
	 * pause of its own (REFUSED_PAUSE_US), after which the directory
	 * would be delegated again and recalled at the other host's next turn */
	if (waited && now >= s->cool_us)
		cool_locked(s, now);
	if (now - s->last_us < NOTE_WINDOW_US)
		s->count++;
	else
		s->count = 1;
	s->last_us = now;
	if (s->count < 2 || now < s->until_us || d->n >= MAX_DELEGS || d->stop)
		return false;
	for (g = d->list; g; g = g->next)
		if (deleg_conflicts(g->dir, s->dir))
			return false;
	return true;
}

/* One try at a delegation of DIR. */
static void try_delegate(struct tl_delegs *d, const char *dir)
{
	struct lockmgr *m = d->m;
	struct lockstore *st = d->store;
	struct tl_deleg *g = calloc(1, sizeof(*g));
	struct tl_conflict why;
	double timeout;
	int err;

	if (!g || !(g->dir = strdup(dir)) || lockplan_entry(TL_STRATEGY_TREE, dir, &g->plan)) {
		if (g)
			free(g->dir);
		free(g);
		return;
	}
	__atomic_load(&m->timeout, &timeout, __ATOMIC_RELAXED);
	g->holder.ticket = __atomic_add_fetch(&m->next_ticket, 1, __ATOMIC_RELAXED);
	g->holder.start_ms = tl_wall_ms();
	g->holder.deadline_us = tl_mono_us() + (int64_t)(timeout * 1e6);
	g->holder.delegation = true;
	snprintf(g->holder.id, sizeof(g->holder.id), "%s#d%" PRIu64, m->owner, g->holder.ticket);
	memset(&why, 0, sizeof(why));
	err = st->ops->try_acquire(st, g->plan, &g->holder, &why);
	pthread_mutex_lock(&d->mutex);
	if (err == 0 && !d->stop) {
		for (struct tl_deleg *o = d->list; o; o = o->next)
			if (deleg_conflicts(o->dir, dir))
				err = -EEXIST; /* another thread took one meanwhile */
	}
	if (err == 0 && !d->stop) {
		lockmgr_log_delegation(m, "delegate", g->holder.id, g->plan, NULL);
		g->state = DELEG_HELD;
		g->used_us = tl_mono_us();
		g->next = d->list;
		d->list = g;
		d->n++;
		__atomic_add_fetch(&d->granted, 1, __ATOMIC_RELAXED);
		pthread_cond_broadcast(&d->cond);
		pthread_mutex_unlock(&d->mutex);
		tl_log(LOG_INFO, "delegation of '%s' granted", dir);
		return;
	}
	{
		struct deleg_slot *s = slot_of(d, dir, strlen(dir), true);

		if (s && s->until_us < tl_mono_us() + REFUSED_PAUSE_US)
			s->until_us = tl_mono_us() + REFUSED_PAUSE_US;
	}
	pthread_mutex_unlock(&d->mutex);
	if (err == 0 || err == -EEXIST)
		st->ops->release(st, g->plan, &g->holder);
	else if (st->ops->abandon)
		st->ops->abandon(st, g->plan, &g->holder);
	free(g->dir);
	lockplan_free(g->plan);
	free(g);
}

void delegs_note(struct tl_delegs *d, const char *from, const char *to, bool waited)
{
	const char *keys[2] = {from, to};
	size_t len[2] = {0, 0};
	char *want[2] = {NULL, NULL};
	int64_t now = tl_mono_us();
	int i, n = to ? 2 : 1;

	for (i = 0; i < n; i++)
		len[i] = path_parent_len(keys[i], strlen(keys[i]));
	if (n == 2 && len[0] == len[1] && memcmp(from, to, len[0]) == 0)
		n = 1; /* one directory: noted once */
	pthread_mutex_lock(&d->mutex);
	for (i = 0; i < n; i++)
		if (len[i] > 1 /* "/" is never delegated */ &&
		    note_locked(d, keys[i], len[i], now, waited))
			want[i] = strndup(keys[i], len[i]);
	pthread_mutex_unlock(&d->mutex);
	for (i = 0; i < 2; i++) {
		if (want[i])
			try_delegate(d, want[i]);
		free(want[i]);
	}
}

/* The poller's round: gives back the delegations no rename used for
 * idle_us (no cooldown: no other owner asked); asks the store whether
 * another owner waits for what the others hold; recalls those (and all
 * when the lease is not fresh). */
static void poll_round(struct tl_delegs *d)
{
	struct lockstore *st = d->store;
	bool fresh = !st->ops->lease_fresh || st->ops->lease_fresh(st);
	const char **keys = NULL;
	enum tl_lock_mode *modes = NULL;
	bool *wanted = NULL;
	struct tl_deleg *g;
	size_t n = 0, k, i;
	int err = -ENOMEM;

	pthread_mutex_lock(&d->mutex);
	if (!fresh) {
		for (;;) {
			for (g = d->list; g && g->state != DELEG_HELD; g = g->next)
				;
			if (!g)
				break;
			tl_log(LOG_WARNING, "delegation of '%s' dropped: this mount's lease is "
			       "not fresh", g->dir);
			recall_locked(d, g, 0, "lease");
		}
		pthread_mutex_unlock(&d->mutex);
		return;
	}
	for (;;) {
		int64_t now = tl_mono_us();

		for (g = d->list; g; g = g->next)
			if (g->state == DELEG_HELD && g->users == 0 && now - g->used_us >= d->idle_us)
				break;
		if (!g)
			break;
		tl_log(LOG_INFO, "delegation of '%s' unused for %.1f s: giving it back", g->dir,
		       (double)(now - g->used_us) / 1e6);
		__atomic_add_fetch(&d->idle_returned, 1, __ATOMIC_RELAXED);
		recall_locked(d, g, 0, "idle");
	}
	for (g = d->list; g; g = g->next)
		if (g->state == DELEG_HELD)
			n += g->plan->n;
	if (n && st->ops->wanted) {
		keys = calloc(n, sizeof(*keys));
		modes = calloc(n, sizeof(*modes));
		wanted = calloc(n, sizeof(*wanted));
	}
	/* copies: a delegation may be given back while the request runs */
	if (keys && modes && wanted) {
		k = 0;
		err = 0;
		for (g = d->list; g && !err; g = g->next) {
			if (g->state != DELEG_HELD)
				continue;
			for (i = 0; i < g->plan->n; i++, k++) {
				keys[k] = strdup(g->plan->items[i].key);
				modes[k] = g->plan->items[i].mode;
				if (!keys[k])
					err = -ENOMEM;
			}
		}
		n = k;
	}
	pthread_mutex_unlock(&d->mutex);
	if (!err && n)
		err = st->ops->wanted(st, keys, modes, n, wanted);
	if (!err && n) {
		int64_t now = tl_mono_us();

		pthread_mutex_lock(&d->mutex);
		for (;;) {
			for (g = d->list; g; g = g->next) {
				if (g->state != DELEG_HELD)
					continue;
				for (k = 0; k < n; k++)
					if (wanted[k] && (strcmp(keys[k], g->dir) == 0 ||
							  deleg_covers(keys[k], g->dir)))
						break;
				if (k < n)
					break;
			}
			if (!g)
				break;
			{
				struct deleg_slot *s = slot_of(d, g->dir, strlen(g->dir), true);

				if (s)
					cool_locked(s, now);
			}
			tl_log(LOG_INFO, "delegation of '%s' recalled: another owner (or a rename of ours in the store) waits", g->dir);
			__atomic_add_fetch(&d->recalled, 1, __ATOMIC_RELAXED);
			g->recall_us = now;
			recall_locked(d, g, 0, "wanted");
		}
		pthread_mutex_unlock(&d->mutex);
	}
	for (k = 0; keys && k < n; k++)
		free((char *)keys[k]);
	free(keys);
	free(modes);
	free(wanted);
}

static void *poller_main(void *arg)
{
	struct tl_delegs *d = arg;
	struct timespec ts;
	int64_t wake;

	pthread_mutex_lock(&d->mutex);
	while (!d->stop) {
		if (!d->list) {
			pthread_cond_wait(&d->cond, &d->mutex);
			continue;
		}
		wake = tl_mono_us() + d->poll_us;
		ts.tv_sec = wake / 1000000;
		ts.tv_nsec = (wake % 1000000) * 1000;
		while (!d->stop && tl_mono_us() < wake)
			pthread_cond_timedwait(&d->cond, &d->mutex, &ts);
		if (d->stop)
			break;
		pthread_mutex_unlock(&d->mutex);
		poll_round(d);
		pthread_mutex_lock(&d->mutex);
	}
	pthread_mutex_unlock(&d->mutex);
	return NULL;
}

int delegs_open(struct lockmgr *m, double recall_s, double idle_s, struct tl_delegs **out)
{
	struct tl_delegs *d = calloc(1, sizeof(*d));
	double timeout;
	int err;

	*out = NULL;
	if (!d)
		return -ENOMEM;
	d->m = m;
	d->store = m->store;
	/* a waiter sees the give-back at its next try: its backoff doubles
	 * up to 200 ms (lockmgr.c), so it may sleep about as long again as
	 * it waited, 200 ms at most: half the bound for the poller leaves
	 * room for that from 0.5 s on, below it a third does */
	d->poll_us = (int64_t)(recall_s * 1e6 / (recall_s >= 0.5 ? 2 : 3));
	if (d->poll_us < 10000)
		d->poll_us = 10000;
	d->idle_us = (int64_t)(idle_s * 1e6);
	err = lockstore_mem_open(m->store->cfg, &d->local_store);
	if (err) {
		free(d);
		return err;
	}
	__atomic_load(&m->timeout, &timeout, __ATOMIC_RELAXED);
	lockmgr_init(&d->local, d->local_store, timeout, m->owner);
	/* holder ids unique in the process (the hold log): the local
	 * tickets count from far above the store's */
	d->local.next_ticket = UINT64_C(1) << 62;
	pthread_mutex_init(&d->mutex, NULL);
	cond_init_mono(&d->cond);
	err = pthread_create(&d->poller, NULL, poller_main, d);
	if (err) {
		lockstore_close(d->local_store);
		pthread_mutex_destroy(&d->mutex);
		pthread_cond_destroy(&d->cond);
		free(d);
		return -err;
	}
	d->polling = true;
	*out = d;
	return 0;
}

void delegs_close(struct tl_delegs *d, int64_t end_ms)
{
	size_t i;

	if (!d)
		return;
	pthread_mutex_lock(&d->mutex);
	d->stop = true;
	pthread_cond_broadcast(&d->cond);
	while (d->list) {
		struct tl_deleg *g = d->list;

		if (!recall_locked(d, g, end_ms * 1000, "end"))
			pthread_cond_wait(&d->cond, &d->mutex);
	}
	pthread_mutex_unlock(&d->mutex);
	if (d->polling)
		pthread_join(d->poller, NULL);
	for (i = 0; i < NSLOTS; i++)
		free(d->slots[i].dir);
	lockstore_close(d->local_store);
	pthread_mutex_destroy(&d->mutex);
	pthread_cond_destroy(&d->cond);
	free(d);
}

void delegs_counters(struct tl_delegs *d, struct tl_deleg_counters *out)
{
	pthread_mutex_lock(&d->mutex);
	out->held = d->n;
	pthread_mutex_unlock(&d->mutex);
	out->granted = __atomic_load_n(&d->granted, __ATOMIC_RELAXED);
	out->recalled = __atomic_load_n(&d->recalled, __ATOMIC_RELAXED);
	out->idle_returned = __atomic_load_n(&d->idle_returned, __ATOMIC_RELAXED);
	out->renames_local = __atomic_load_n(&d->renames_local, __ATOMIC_RELAXED);
	out->recall_wait = &d->recall_wait;
}

bool delegs_describe(struct tl_delegs *d, const char *key_text, const char *id,
		     unsigned int *users, uint64_t *served, const char **state)
{
	static const char *const names[] = {
		[DELEG_HELD] = "held", [DELEG_RECALLED] = "recalled",
		[DELEG_RELEASING] = "releasing"};
	const char *hash = strrchr(id, '#');
	struct tl_deleg *g;
	char ticket[32];

	if (!hash)
		return false;
	pthread_mutex_lock(&d->mutex);
	for (g = d->list; g; g = g->next) {
		char *text = NULL;
		bool same;

		snprintf(ticket, sizeof(ticket), "#d%" PRIu64, g->holder.ticket);
		if (strcmp(hash, ticket) != 0 || path_key_text(g->dir, &text) != 0)
			continue;
		same = strcmp(text, key_text) == 0;
		free(text);
		if (same)
			break;
	}
	if (g) {
		*users = g->users;
		*served = g->served;
		*state = names[g->state];
	}
	pthread_mutex_unlock(&d->mutex);
	return g != NULL;
}

size_t delegs_format(struct tl_delegs *d, char *buf, size_t size, size_t len)
{
	size_t held;
	int n;

	if (len >= size)
		return len;
	pthread_mutex_lock(&d->mutex);
	held = d->n;
	pthread_mutex_unlock(&d->mutex);
	n = snprintf(buf + len, size - len,
		     "delegations_granted %" PRIu64 "\n"
		     "delegations_recalled %" PRIu64 "\n"
		     "delegations_idle_returned %" PRIu64 "\n"
		     "delegations_held %zu\n"
		     "renames_local %" PRIu64 "\n"
		     "recall_wait_total_us %" PRIu64 "\n"
		     "recall_wait_max_us %" PRIu64 "\n",
		     __atomic_load_n(&d->granted, __ATOMIC_RELAXED),
		     __atomic_load_n(&d->recalled, __ATOMIC_RELAXED),
		     __atomic_load_n(&d->idle_returned, __ATOMIC_RELAXED), held,
		     __atomic_load_n(&d->renames_local, __ATOMIC_RELAXED),
		     __atomic_load_n(&d->recall_wait_us, __ATOMIC_RELAXED),
		     __atomic_load_n(&d->recall_wait_max_us, __ATOMIC_RELAXED));
	if (n < 0)
		return len;
	return len + ((size_t)n < size - len ? (size_t)n : size - len - 1);
}
