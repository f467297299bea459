/* lockmgr.c - runs lock plans against a store, see lockmgr.h
 *
 *   acquire:  try --ok--> held
 *              |  \--EAGAIN (conflict)--> wait (store's, or backoff) --> try
 *              |  \--ENOLCK (store failed)--> backoff --> try
 *              |  \--EACCES (store refuses us)--> ENOLCK at once
 *              \-- deadline passed --> abandon marks --> EBUSY / ENOLCK
 *                                    (ENOLCK: the store is marked down)
 *
 *   circuit:  up --an acquire failed on the store until its deadline--> down
 *             down: acquires fail at once (ENOLCK), waiting ones give up;
 *                   one probe a second tries the store once (PROBE_US)
 *             down --any answer of the store that is not a failure--> up
 *
 *   hold:     keys --plan (endpoints if the store takes them)--> acquire
 *             --> hold log "acquire" ... hold log "release" --> release
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <unistd.h>

#include "base/buf.h"
#include "base/escape.h"
#include "config/config.h"
#include "lock/lockdeleg.h"
#include "lock/lockmgr.h"
#include "base/log.h"
#include "base/path.h"
#include "base/tlclock.h"

#define BACKOFF_MIN_US 1000
#define BACKOFF_MAX_US 200000
#define WAIT_LOG_MS 1000
/* While the store is down: how often one acquire may try it, and the
 * budget of that one try. Renames in one directory queue behind each
 * other in the kernel, so the budget is what a probe can add to their
 * wait: short, and far above any round trip of a store that answers. */
#define PROBE_EVERY_US 1000000
#define PROBE_US 500000

static struct timespec us_to_ts(int64_t us)
{
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};

	return ts;
}

/* A per-thread xorshift generator for jitter; no locking, no shared state. */
static uint64_t jitter_next(void)
{
	static __thread uint64_t x;

	if (!x)
		x = (uint64_t)tl_mono_us() ^ ((uint64_t)(uintptr_t)&x << 17) ^ 0x9e3779b97f4a7c15u;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return x;
}

/* Sleeps a jittered exponential backoff, never past DEADLINE_US. */
static void backoff_sleep(unsigned int attempt, int64_t deadline_us)
{
	int64_t d = BACKOFF_MIN_US, now = tl_mono_us();
	struct timespec ts;

	while (attempt-- > 0 && d < BACKOFF_MAX_US)
		d *= 2;
	if (d > BACKOFF_MAX_US)
		d = BACKOFF_MAX_US;
	d = d / 2 + (int64_t)(jitter_next() % (uint64_t)(d / 2 + 1));
	if (now + d > deadline_us)
		d = deadline_us - now;
	if (d <= 0)
		return;
	ts = us_to_ts(d);
	nanosleep(&ts, NULL);
}

void lockmgr_init(struct lockmgr *m, struct lockstore *store, double timeout, const char *owner)
{
	memset(m, 0, sizeof(*m));
	m->store = store;
	m->caps = store->ops->caps;
	m->timeout = timeout;
	snprintf(m->owner, sizeof(m->owner), "%s", owner ? owner : "local");
	m->hold_log_fd = -1;
	m->indexing = store->ops->note && store->cfg && store->cfg->fs_index;
}

void lockmgr_set_hold_log(struct lockmgr *m, int fd)
{
	m->hold_log_fd = fd;
}

void lockmgr_set_timeout(struct lockmgr *m, double timeout)
{
	__atomic_store(&m->timeout, &timeout, __ATOMIC_RELAXED);
}

static const char *plan_desc(const struct tl_plan *plan, char *buf, size_t size)
{
	if (plan->to)
		snprintf(buf, size, "rename '%s' -> '%s'", plan->from, plan->to);
	else
		snprintf(buf, size, "change of '%s'", plan->from);
	return buf;
}

/* "OWNER#TICKET" into BUF (SIZE bytes, truncated as snprintf() would), by
 * hand: it runs on every acquire. */
static void holder_id(char *buf, size_t size, const char *owner, uint64_t ticket)
{
	char digits[24];
	size_t n = 0, o = 0;

	do {
		digits[n++] = (char)('0' + ticket % 10);
		ticket /= 10;
	} while (ticket);
	while (*owner && o + 1 < size)
		buf[o++] = *owner++;
	if (o + 1 < size)
		buf[o++] = '#';
	while (n && o + 1 < size)
		buf[o++] = digits[--n];
	buf[o] = '\0';
}

/* ---- the store's circuit ---------------------------------------------- */

bool lockmgr_store_down(const struct lockmgr *m)
{
	return __atomic_load_n(&m->down_us, __ATOMIC_RELAXED) != 0;
}

/* True when the store answered (not a failure) at or after SINCE_US. */
static bool store_served_since(struct lockmgr *m, int64_t since_us)
{
	struct tl_store_metrics sm;

	if (!m->store->ops->metrics)
		return true;
	lockstore_metrics_init(&sm);
	m->store->ops->metrics(m->store, &sm);
	return sm.served_us < 0 || sm.served_us >= since_us;
}

/* Marks the store down after an acquire failed on it for WAITED_US; the
 * first of several such acquires says so. */
static void circuit_open(struct lockmgr *m, int64_t now, int64_t waited_us)
{
	int64_t up = 0;

	__atomic_store_n(&m->probe_us, now, __ATOMIC_RELAXED);
	if (__atomic_compare_exchange_n(&m->down_us, &up, now, false, __ATOMIC_RELAXED,
					__ATOMIC_RELAXED))
		tl_log(LOG_ERR,
		       "the lock store has failed for %" PRId64 " ms: until it answers again, "
		       "renames fail at once with ENOLCK instead of waiting",
		       waited_us / 1000);
}

/* Marks the store up again, when it was down since DOWN. */
static void circuit_close(struct lockmgr *m, int64_t down)
{
	if (down && __atomic_compare_exchange_n(&m->down_us, &down, 0, false, __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
		tl_log(LOG_NOTICE, "the lock store answers again after %" PRId64
		       " ms down: renames take their locks again", (tl_mono_us() - down) / 1000);
}

/* With the store down: true when this acquire may probe it now (the first
 * to ask once PROBE_EVERY_US passed since the last probe). */
static bool circuit_probe(struct lockmgr *m, int64_t now)
{
	int64_t last = __atomic_load_n(&m->probe_us, __ATOMIC_RELAXED);

	return now - last >= PROBE_EVERY_US &&
	       __atomic_compare_exchange_n(&m->probe_us, &last, now, false, __ATOMIC_RELAXED,
					   __ATOMIC_RELAXED);
}

/* Refuses an acquire at once because the store is down. */
static int circuit_refuse(struct lockmgr *m, const struct tl_plan *plan, int64_t start)
{
	static int64_t logged_us;
	int64_t now = tl_mono_us(), last = __atomic_load_n(&logged_us, __ATOMIC_RELAXED);
	char desc[600];

	stats_add(&m->stats.errors, 1);
	stats_add(&m->stats.store_down_refusals, 1);
	/* one line a minute is enough to see it go on */
	if (now - last >= 60 * 1000000 &&
	    __atomic_compare_exchange_n(&logged_us, &last, now, false, __ATOMIC_RELAXED,
					__ATOMIC_RELAXED))
		tl_log(LOG_WARNING, "%s refused after %" PRId64 " ms: the lock store is down "
		       "(%" PRIu64 " refused so far)", plan_desc(plan, desc, sizeof(desc)),
		       (now - start) / 1000, stats_get(&m->stats.store_down_refusals));
	return lockstore_errno(-ENOLCK);
}

int lockmgr_acquire(struct lockmgr *m, const struct tl_plan *plan, uint32_t pid,
		    struct tl_holder *h)
{
	struct lockstore *st = m->store;
	struct tl_conflict why;
	int64_t start = tl_mono_us(), deadline;
	unsigned int attempt = 0;
	bool logged = false;
	char desc[600];
	int err;
	double timeout;
	int64_t down;
	bool probing = false;

	__atomic_load(&m->timeout, &timeout, __ATOMIC_RELAXED);
	deadline = start + (int64_t)(timeout * 1e6);

	memset(h, 0, sizeof(*h));
	h->ticket = __atomic_add_fetch(&m->next_ticket, 1, __ATOMIC_RELAXED);
	h->start_ms = tl_wall_ms();
	h->deadline_us = deadline;
	h->pid = pid;
	holder_id(h->id, sizeof(h->id), m->owner, h->ticket);
	stats_add(plan->to ? &m->stats.renames : &m->stats.entry_ops, 1);
	if (plan->n == 0) {
		stats_add(&m->stats.acquired, 1);
		return 0;
	}
	down = __atomic_load_n(&m->down_us, __ATOMIC_RELAXED);
	if (down) {
		if (store_served_since(m, down)) {
			circuit_close(m, down);
		} else if (circuit_probe(m, start)) {
			/* one try with a short budget; the deadline is back after it */
			probing = true;
			if (start + PROBE_US < deadline)
				h->deadline_us = start + PROBE_US;
		} else {
			return circuit_refuse(m, plan, start);
		}
	}
	for (;;) {
		int64_t now;

		/* what a refusing store fills in; field by field, as this runs
		 * on every attempt */
		why.key[0] = '\0';
		why.holder[0] = '\0';
		why.held_ms = -1;
		if (__atomic_load_n(&m->stopping, __ATOMIC_RELAXED)) {
			/* the mount ends: nothing waits for the store any more */
			if (attempt && st->ops->abandon)
				st->ops->abandon(st, plan, h);
			stats_add(&m->stats.errors, 1);
			tl_log(LOG_NOTICE, "%s given up: the mount is stopping",
			       plan_desc(plan, desc, sizeof(desc)));
			return lockstore_errno(-ENOLCK);
		}
		err = st->ops->try_acquire(st, plan, h, &why);
		if (probing) {
			probing = false;
			h->deadline_us = deadline;
		}
		down = __atomic_load_n(&m->down_us, __ATOMIC_RELAXED);
		if (down && (err != -ENOLCK || store_served_since(m, down))) {
			circuit_close(m, down); /* the store answered */
		} else if (down) {
			/* down (this probe failed, or another acquire gave up
			 * on this outage): so does this acquire */
			if (attempt) {
				if (st->ops->abandon)
					st->ops->abandon(st, plan, h);
				stats_sub(&m->stats.waiting, 1);
				stats_record_wait(&m->stats, (uint64_t)(tl_mono_us() - start));
			}
			return circuit_refuse(m, plan, start);
		}
		if (err == 0)
			break;
		if (err == -EAGAIN)
			stats_add(&m->stats.conflicts, 1);
		if (err != -EAGAIN && err != -ENOLCK) {
			/* refused for good (credentials, a bug): the store logged it */
			if (st->ops->abandon)
				st->ops->abandon(st, plan, h);
			stats_add(&m->stats.errors, 1);
			if (attempt)
				stats_sub(&m->stats.waiting, 1);
			return lockstore_errno(err);
		}
		if (attempt == 0) {
			stats_add(&m->stats.waits, 1);
			stats_add(&m->stats.waiting, 1);
		}
		now = tl_mono_us();
		if (!logged && now - start >= WAIT_LOG_MS * 1000) {
			logged = true;
			if (err == -EAGAIN)
				tl_log(LOG_NOTICE,
				       "%s waits for '%s', held by %s, for %" PRId64 " ms so far",
				       plan_desc(plan, desc, sizeof(desc)), why.key, why.holder,
				       (now - start) / 1000);
			else
				tl_log(LOG_WARNING,
				       "%s waits for the lock store, failing for %" PRId64 " ms so far",
				       plan_desc(plan, desc, sizeof(desc)), (now - start) / 1000);
		}
		if (now >= deadline) {
			if (st->ops->abandon)
				st->ops->abandon(st, plan, h);
			stats_sub(&m->stats.waiting, 1);
			stats_record_wait(&m->stats, (uint64_t)(now - start));
			if (err == -EAGAIN) {
				stats_add(&m->stats.timeouts, 1);
				tl_log(LOG_WARNING,
				       "%s timed out after %" PRId64 " ms: '%s' held by %s",
				       plan_desc(plan, desc, sizeof(desc)), (now - start) / 1000,
				       why.key, why.holder);
				return lockstore_errno(err);
			}
			stats_add(&m->stats.errors, 1);
			tl_log(LOG_ERR, "%s failed after %" PRId64 " ms: lock store unavailable",
			       plan_desc(plan, desc, sizeof(desc)), (now - start) / 1000);
			if (!store_served_since(m, start))
				circuit_open(m, tl_mono_us(), now - start);
			return lockstore_errno(err);
		}
		if (err == -EAGAIN && st->ops->wait) {
			struct timespec dl = us_to_ts(deadline);

			st->ops->wait(st, plan, h, attempt, &dl);
		} else {
			backoff_sleep(attempt, deadline);
		}
		attempt++;
	}
	if (attempt) {
		int64_t waited = tl_mono_us() - start;

		h->waited = true;

		stats_sub(&m->stats.waiting, 1);
		stats_record_wait(&m->stats, (uint64_t)waited);
		/* also a long wait that one wake-up ended (the mem store's
		 * condition wait) and that was never logged while it lasted */
		if (logged || waited >= WAIT_LOG_MS * 1000)
			tl_log(LOG_NOTICE, "%s got its locks after %" PRId64 " ms",
			       plan_desc(plan, desc, sizeof(desc)), waited / 1000);
	}
	stats_add(&m->stats.held, 1);
	stats_add(&m->stats.acquired, 1);
	return 0;
}

int lockmgr_release(struct lockmgr *m, const struct tl_plan *plan, struct tl_holder *h)
{
	char desc[600];
	int err;

	if (plan->n == 0)
		return 0;
	stats_sub(&m->stats.held, 1);
	err = m->store->ops->release(m->store, plan, h);
	if (err) {
		stats_add(&m->stats.errors, 1);
		tl_log(LOG_ERR, "cannot release the locks of %s: %s; they expire with the lease",
		       plan_desc(plan, desc, sizeof(desc)), strerror(-err));
		return lockstore_errno(err);
	}
	return 0;
}

/* M's delegations for a call into them, or NULL (none, or the mount is
 * ending); a non-NULL one is alive until delegs_put(). */
static struct tl_delegs *delegs_get(struct lockmgr *m)
{
	struct tl_delegs *d;

	__atomic_add_fetch(&m->deleg_refs, 1, __ATOMIC_SEQ_CST);
	d = __atomic_load_n(&m->delegs, __ATOMIC_SEQ_CST);
	if (!d)
		__atomic_sub_fetch(&m->deleg_refs, 1, __ATOMIC_SEQ_CST);
	return d;
}

static void delegs_put(struct lockmgr *m)
{
	__atomic_sub_fetch(&m->deleg_refs, 1, __ATOMIC_SEQ_CST);
}

void lockmgr_shutdown(struct lockmgr *m, int64_t end_ms)
{
	int was = 0;

	if (!__atomic_compare_exchange_n(&m->stopping, &was, 1, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		/* a later call: the first one may still be giving delegations
		 * back through the store, which our caller is about to close;
		 * waited for until END_MS at most (the first may be stuck).
		 * Not an exchange: one that set 1 over the first call's 2 (it
		 * had ended) waited until END_MS, 3/4 of lock_timeout, at
		 * every stop where the watch thread came first */
		struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000};

		while (__atomic_load_n(&m->stopping, __ATOMIC_ACQUIRE) != 2 &&
		       tl_mono_ms() < end_ms)
			nanosleep(&ms, NULL);
		return;
	}
	struct tl_delegs *d = __atomic_exchange_n(&m->delegs, NULL, __ATOMIC_SEQ_CST);
	const struct timespec ms = {0, 1000000};

	/* given back while the store still answers; renames that start
	 * from now on take the store path (and wait for the give-back).
	 * Freed once no thread is inside it: a rename giving a delegation
	 * back, a note (one try at a delegation), the stats, a listing, the
	 * metrics; covered renames under way are waited for by
	 * delegs_close() */
	while (d && __atomic_load_n(&m->deleg_refs, __ATOMIC_SEQ_CST))
		nanosleep(&ms, NULL);
	delegs_close(d, end_ms);
	if (m->store->ops->shutdown)
		m->store->ops->shutdown(m->store, end_ms);
	__atomic_store_n(&m->stopping, 2, __ATOMIC_RELEASE);
}

int lockmgr_check_lease(struct lockmgr *m)
{
	if (!m->store->ops->lease_fresh || m->store->ops->lease_fresh(m->store))
		return 0;
	stats_add(&m->stats.fenced, 1);
	return lockstore_errno(-ESTALE);
}

const char *lockmgr_store_name(const struct lockmgr *m)
{
	return m->store->ops->name;
}

int lockmgr_start(struct lockmgr *m)
{
	const struct tl_config *cfg = m->store->cfg;
	int err = 0;

	if (m->store->ops->start)
		err = m->store->ops->start(m->store);
	if (err) {
		tl_log(LOG_ERR, "cannot start the %s lock store: %s", m->store->ops->name,
		       strerror(-err));
		return err;
	}
	if (cfg && cfg->delegations) {
		if (!m->store->ops->wanted || cfg->lock_strategy != TL_STRATEGY_TREE ||
		    cfg->lock_scope != TL_SCOPE_RENAME)
			tl_log(LOG_NOTICE, "delegations=on ignored: they need lock_store=es, "
			       "lock_strategy=tree and lock_scope=rename");
		else if ((err = delegs_open(m, cfg->delegation_recall, cfg->delegation_idle,
					    &m->delegs)) != 0)
			tl_log(LOG_ERR, "delegations off: cannot start them: %s", strerror(-err));
		else
			tl_log(LOG_INFO, "delegations on (recall within %g s, given back "
			       "unused for %g s)", cfg->delegation_recall, cfg->delegation_idle);
	}
	return 0;
}

int lockmgr_list(struct lockmgr *m, const char *prefix, struct tl_lock_info **out, size_t *n)
{
	struct tl_delegs *d;
	size_t i;
	int err = lockstore_list(m->store, prefix, out, n);

	if (err || !(d = delegs_get(m)))
		return err;
	for (i = 0; i < *n; i++) {
		struct tl_lock_info *li = &(*out)[i];
		unsigned int users;
		uint64_t served;

		if (li->delegation &&
		    delegs_describe(d, li->key, li->holders, &users, &served, &li->deleg_state)) {
			li->users = (int)users;
			li->served = (int64_t)served;
		}
	}
	delegs_put(m);
	return 0;
}

bool lockmgr_deleg_counters(struct lockmgr *m, struct tl_deleg_counters *out)
{
	struct tl_delegs *d = delegs_get(m);

	if (!d)
		return false;
	delegs_counters(d, out);
	delegs_put(m);
	return true;
}

void lockmgr_free_list(struct tl_lock_info *list, size_t n)
{
	lockstore_free_list(list, n);
}

void lockmgr_count_unlocked(struct lockmgr *m, bool rename)
{
	stats_add(rename ? &m->stats.renames : &m->stats.entry_ops, 1);
}

const struct tl_stats *lockmgr_stats(const struct lockmgr *m)
{
	return &m->stats;
}

size_t lockmgr_format_stats(struct lockmgr *m, char *buf, size_t size)
{
	const struct lockstore_ops *ops = m->store->ops;
	size_t len = stats_format(&m->stats, ops->requests ? ops->requests(m->store) : 0, buf, size);
	struct tl_delegs *d = delegs_get(m);

	if (d) {
		len = delegs_format(d, buf, size, len);
		delegs_put(m);
	}
	if (ops->format_stats)
		len = ops->format_stats(m->store, buf, size, len);
	return len;
}

void lockmgr_note(struct lockmgr *m, const char *key)
{
	lockmgr_note_ino(m, key, 0);
}

void lockmgr_note_ino(struct lockmgr *m, const char *key, uint64_t ino)
{
	if (m->indexing)
		m->store->ops->note(m->store, key, NULL, TL_NOTE_ENTRY, ino);
}

void lockmgr_note_rename(struct lockmgr *m, struct tl_hold *h, const char *from, const char *to,
			 bool tree)
{
	uint64_t seq;

	if (!m->indexing)
		return;
	if (!tree) {
		m->store->ops->note(m->store, from, NULL, TL_NOTE_ENTRY, 0);
		m->store->ops->note(m->store, to, NULL, TL_NOTE_ENTRY, 0);
		return;
	}
	/* a covered rename (h->via) holds only this mount's memory: the
	 * delegation's own release waits for every ticket noted before it */
	seq = m->store->ops->note(m->store, from, to, TL_NOTE_TREE, 0);
	if (h && !h->via)
		h->holder.index_seq = seq;
}

void lockmgr_count_rename(struct lockmgr *m, int res, int64_t us)
{
	stats_record_rename(&m->stats, res, us > 0 ? (uint64_t)us : 0);
}

void lockmgr_store_metrics(struct lockmgr *m, struct tl_store_metrics *out)
{
	lockstore_metrics_init(out);
	out->requests = m->store->ops->requests ? m->store->ops->requests(m->store) : 0;
	if (m->store->ops->metrics)
		m->store->ops->metrics(m->store, out);
	out->store_down = out->served_us < 0 ? -1 : lockmgr_store_down(m);
}

/* Writes one line of rename hold H to the hold log (lockmgr_set_hold_log()):
 * its keys when ACQUIRE, else RES. */
static void hold_log(struct lockmgr *m, const struct tl_hold *h, bool acquire, int res)
{
	const struct tl_plan *plan = h->plan;
	struct tl_plan *full = NULL;
	struct timespec ts;
	struct buf b;
	char head[160];
	size_t i;

	if (m->hold_log_fd == -1 || !plan->to)
		return;
	if (acquire && !plan->items) {
		/* an endpoint plan: its keys, written out */
		if (lockplan_tree_full(plan, &full)) {
			tl_log(LOG_WARNING, "cannot write hold_log: %s", strerror(ENOMEM));
			return;
		}
		plan = full;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	buf_init(&b, 0);
	snprintf(head, sizeof(head), "%lld%09ld\t%s\t%d\t", (long long)ts.tv_sec, ts.tv_nsec,
		 acquire ? "acquire" : "release", (int)getpid());
	buf_add(&b, head, strlen(head));
	escape_buf(&b, h->holder.id);
	if (acquire) {
		buf_add(&b, "\t", 1);
		escape_buf(&b, plan->from);
		buf_add(&b, "\t", 1);
		escape_buf(&b, plan->to ? plan->to : "");
		for (i = 0; i < plan->n; i++) {
			buf_add(&b, plan->items[i].mode == TL_EXCLUSIVE ? "\tX:" : "\tS:", 3);
			escape_buf(&b, plan->items[i].key);
		}
	} else {
		snprintf(head, sizeof(head), "\t%d", -res);
		buf_add(&b, head, strlen(head));
	}
	buf_add(&b, "\n", 1);
	if (!b.err && write(m->hold_log_fd, b.data, b.len) != (ssize_t)b.len)
		tl_log(LOG_WARNING, "cannot write hold_log: %s", strerror(errno));
	buf_free(&b);
	lockplan_free(full);
}

void lockmgr_log_delegation(struct lockmgr *m, const char *event, const char *holder,
			    const struct tl_plan *plan, const char *why)
{
	struct timespec ts;
	struct buf b;
	char head[96];
	size_t i;

	if (m->hold_log_fd == -1)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	buf_init(&b, 0);
	snprintf(head, sizeof(head), "%lld%09ld\t%s\t%d\t", (long long)ts.tv_sec, ts.tv_nsec,
		 event, (int)getpid());
	buf_add(&b, head, strlen(head));
	escape_buf(&b, holder);
	if (plan) {
		buf_add(&b, "\t", 1);
		escape_buf(&b, plan->from);
		for (i = 0; i < plan->n; i++) {
			buf_add(&b, plan->items[i].mode == TL_EXCLUSIVE ? "\tX:" : "\tS:", 3);
			escape_buf(&b, plan->items[i].key);
		}
	}
	if (why) {
		buf_add(&b, "\t", 1);
		buf_add(&b, why, strlen(why));
	}
	buf_add(&b, "\n", 1);
	if (!b.err && write(m->hold_log_fd, b.data, b.len) != (ssize_t)b.len)
		tl_log(LOG_WARNING, "cannot write hold_log: %s", strerror(errno));
	buf_free(&b);
}

/* Frees the plan of H (not an endpoint plan, which is H's own). */
static void hold_free_plan(struct tl_hold *h)
{
	if (h->plan != &h->ends)
		lockplan_free(h->plan);
	h->plan = NULL;
}

/* Acquires the plan of *H, made by the caller, through H->via (or M);
 * frees it on failure. */
static int hold_acquire(struct lockmgr *m, uint32_t pid, struct tl_hold *h)
{
	int err = lockmgr_acquire(h->via ? h->via : m, h->plan, pid, &h->holder);

	if (err) {
		hold_free_plan(h);
		return err;
	}
	hold_log(m, h, true, 0);
	return 0;
}

int lockmgr_hold_rename(struct lockmgr *m, enum tl_strategy s, const char *from, const char *to,
			unsigned int flags, const char *const *below, size_t nbelow, uint32_t pid,
			struct tl_hold *out)
{
	struct lockmgr *pm = m;
	struct tl_delegs *d;
	int err;

	out->plan = NULL;
	out->via = NULL;
	out->use[0] = out->use[1] = NULL;
	out->delegs = NULL;
	if (s == TL_STRATEGY_TREE && path_is_normal(from) && path_is_normal(to) &&
	    (d = delegs_get(m)) != NULL) {
		if (delegs_route(d, from, to, out->use)) {
			/* covered: the whole plan in this mount's memory */
			out->delegs = d;
			pm = out->via = delegs_local(d);
			stats_add(&m->stats.renames, 1);
		}
		delegs_put(m);
	}
	if (s == TL_STRATEGY_TREE && (pm->caps & TL_CAP_ENDPOINT_PLANS)) {
		/* FROM and TO outlive the plan: they are the caller's until
		 * lockmgr_unhold() */
		err = lockplan_rename_endpoints(from, to, flags, &out->ends);
		if (!err)
			out->plan = &out->ends;
	} else {
		err = lockplan_rename(s, from, to, flags, below, nbelow, &out->plan);
	}
	if (!err)
		err = hold_acquire(m, pid, out);
	if (err && out->via) {
		delegs_done(out->delegs, out->use);
		out->via = NULL;
		out->delegs = NULL;
	}
	return err;
}

int lockmgr_hold_entry(struct lockmgr *m, enum tl_strategy s, const char *key, uint32_t pid,
		       struct tl_hold *out)
{
	int err;

	out->plan = NULL;
	out->via = NULL;
	out->use[0] = out->use[1] = NULL;
	out->delegs = NULL;
	err = lockplan_entry(s, key, &out->plan);
	if (err)
		return err;
	return hold_acquire(m, pid, out);
}

void lockmgr_unhold(struct lockmgr *m, struct tl_hold *h, int res)
{
	struct tl_delegs *d;

	if (!h->plan)
		return;
	hold_log(m, h, false, res);
	lockmgr_release(h->via ? h->via : m, h->plan, &h->holder);
	if (h->via) {
		delegs_done(h->delegs, h->use);
		h->via = NULL;
		h->delegs = NULL;
	} else if (h->plan->to && res == 0 && (d = delegs_get(m)) != NULL) {
		delegs_note(d, h->plan->from, h->plan->to, h->holder.waited);
		delegs_put(m);
	}
	hold_free_plan(h);
}
