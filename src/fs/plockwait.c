/* plockwait.c - lock waits that hold no request thread, see plockwait.h
 *
 * States of one wait (all changes under set->mutex):
 *
 *   prepared --run--> running --call returned--> answering --done()--> ended
 *   (linked)          (linked, in_call)          (unlinked)            (freed
 *                                                                       at refs 0)
 *
 * A cancel sets w->cancel. A prepared wait sees it before its first call;
 * a running one is sent PLOCKWAIT_SIGNAL until its call has returned: one
 * signal can land just before the thread enters the call and be lost, so
 * the canceller repeats it, waiting on set->changed between tries.
 * Cancellers that wait take a reference so that W outlives their wait.
 *
 * Lock order: set->mutex is a leaf, never held across the blocking call,
 * done() or pthread_create().
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>

#include "fs/plockwait.h"
#include "base/log.h"
#include "base/tlclock.h"

/* A wait's thread needs little: the call, done() (a reply) and a log line. */
#define PLOCKWAIT_STACK (256 * 1024)

struct plockwait {
	struct plockwait *next;      /* in set->waits while linked */
	struct plockwait_set *set;
	struct plockwait_params p;
	pthread_t thread;
	int cancel;                 /* 0, or the errno a cancel asked for */
	bool running;               /* its thread exists */
	bool linked;
	bool ended;                 /* done() returned */
	unsigned int refs;          /* its thread's (or the preparer's), plus
				     * one per waiting canceller */
};

static void kick_handler(int sig)
{
	(void)sig; /* only to make the call return EINTR */
}

int plockwait_init(struct plockwait_set *s, unsigned int per_user, unsigned int total)
{
	struct sigaction sa;
	pthread_condattr_t ca;
	sigset_t set;

	memset(s, 0, sizeof(*s));
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = kick_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART: the call must return */
	if (sigaction(PLOCKWAIT_SIGNAL, &sa, NULL) == -1)
		return -errno;
	sigemptyset(&set);
	sigaddset(&set, PLOCKWAIT_SIGNAL);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	pthread_mutex_init(&s->mutex, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->changed, &ca);
	pthread_condattr_destroy(&ca);
	s->per_user = per_user;
	s->total = total;
	s->ready = true;
	return 0;
}

static void unlink_locked(struct plockwait_set *s, struct plockwait *w)
{
	struct plockwait **pp;

	for (pp = &s->waits; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	}
	w->linked = false;
	s->count--;
}

/* Drops one reference of W (set->mutex held); true when W must be freed
 * by the caller after unlocking. */
static bool put_locked(struct plockwait *w)
{
	return --w->refs == 0;
}

/* The blocking call, repeated after a signal until it ends or W is
 * cancelled. Returns 0 or -errno. */
static int wait_call(struct plockwait *w)
{
	struct flock lk;
	int res;

	for (;;) {
		if (__atomic_load_n(&w->cancel, __ATOMIC_ACQUIRE))
			return -EINTR;
		if (w->p.kind == PLOCKWAIT_FLOCK) {
			res = flock(w->p.fd, w->p.flock_op) == -1 ? -errno : 0;
		} else {
			lk = w->p.lk;
			res = fcntl(w->p.fd, F_OFD_SETLKW, &lk) == -1 ? -errno : 0;
		}
		if (res != -EINTR)
			return res;
	}
}

static void *wait_main(void *arg)
{
	struct plockwait *w = arg;
	struct plockwait_set *s = w->set;
	sigset_t set;
	bool last;
	int res;

	sigemptyset(&set);
	sigaddset(&set, PLOCKWAIT_SIGNAL);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	res = wait_call(w);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	pthread_mutex_lock(&s->mutex);
	if (res == -EINTR && w->cancel)
		res = -w->cancel;
	unlink_locked(s, w);
	pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->mutex);

	w->p.done(res, w->p.arg);

	pthread_mutex_lock(&s->mutex);
	w->ended = true;
	s->alive--;
	last = put_locked(w);
	pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->mutex);
	if (last)
		free(w);
	return NULL;
}

static unsigned int user_count_locked(struct plockwait_set *s, uid_t uid)
{
	unsigned int n = 0;

	for (struct plockwait *w = s->waits; w; w = w->next)
		n += w->p.uid == uid;
	return n;
}

int plockwait_prepare(struct plockwait_set *s, const struct plockwait_params *p,
		     struct plockwait **out)
{
	struct plockwait *w;
	const char *which = NULL;
	unsigned int count, mine;
	int64_t now;
	bool warn;

	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->set = s;
	w->p = *p;
	w->refs = 1;
	pthread_mutex_lock(&s->mutex);
	if (s->count >= s->total)
		which = "lock_waiters";
	else if (user_count_locked(s, p->uid) >= s->per_user)
		which = "lock_waiters_per_user";
	if (which) {
		now = tl_mono_us();
		warn = !s->warned_us || now - s->warned_us >= 10000000;
		if (warn)
			s->warned_us = now;
		count = s->count;
		mine = user_count_locked(s, p->uid);
		pthread_mutex_unlock(&s->mutex);
		if (warn)
			tl_log(LOG_WARNING, "refusing a lock wait of uid %u with ENOLCK: %u waits "
					    "of the mount, %u of that user (%s)",
			       (unsigned)p->uid, count, mine, which);
		free(w);
		return -ENOLCK;
	}
	w->next = s->waits;
	s->waits = w;
	w->linked = true;
	s->count++;
	s->alive++;
	pthread_mutex_unlock(&s->mutex);
	*out = w;
	return 0;
}

/* Sends W's thread the signal until its call has returned; W is linked
 * and running, set->mutex held (released while waiting). */
static void kick_until_out_locked(struct plockwait_set *s, struct plockwait *w)
{
	struct timespec ts;
	long ns = 1000000; /* 1 ms, doubled up to 64 ms */
	bool last;

	w->refs++;
	while (w->linked) {
		pthread_kill(w->thread, PLOCKWAIT_SIGNAL);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += ns;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->changed, &s->mutex, &ts);
		if (ns < 64000000)
			ns *= 2;
	}
	last = put_locked(w);
	if (last)
		free(w); /* its thread is past its last use of W */
}

int plockwait_run(struct plockwait_set *s, struct plockwait *w)
{
	pthread_attr_t attr;
	pthread_t t;
	bool last;
	int err;

	/* ours until the end of this function: the thread may end and drop
	 * its own before we look at W again */
	pthread_mutex_lock(&s->mutex);
	w->refs++;
	pthread_mutex_unlock(&s->mutex);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, PLOCKWAIT_STACK);
	err = pthread_create(&t, &attr, wait_main, w);
	pthread_attr_destroy(&attr);
	pthread_mutex_lock(&s->mutex);
	if (err) {
		unlink_locked(s, w);
		s->alive--;
		pthread_cond_broadcast(&s->changed);
		pthread_mutex_unlock(&s->mutex);
		tl_log(LOG_WARNING, "cannot start a lock wait: %s", strerror(err));
		free(w);
		return -ENOLCK;
	}
	/* the thread may be past its first look at w->cancel: a cancel that
	 * came meanwhile must be sent to it */
	if (w->linked) {
		w->thread = t;
		w->running = true;
		if (w->cancel)
			kick_until_out_locked(s, w);
	}
	last = put_locked(w);
	pthread_mutex_unlock(&s->mutex);
	if (last)
		free(w);
	return 0;
}

static struct plockwait *find_key_locked(struct plockwait_set *s, const void *key)
{
	for (struct plockwait *w = s->waits; w; w = w->next)
		if (w->p.key == key)
			return w;
	return NULL;
}

void plockwait_cancel_key(struct plockwait_set *s, const void *key, int err)
{
	struct plockwait *w;

	if (!s->ready)
		return;
	pthread_mutex_lock(&s->mutex);
	w = find_key_locked(s, key);
	if (w) {
		if (!w->cancel)
			__atomic_store_n(&w->cancel, err, __ATOMIC_RELEASE);
		if (w->running)
			kick_until_out_locked(s, w);
	}
	pthread_mutex_unlock(&s->mutex);
}

/* Cancels every wait that MATCH (ALL, or tag TAG) with ERR and returns
 * when each has been answered. */
static void cancel_matching(struct plockwait_set *s, bool all, uint64_t tag, int err)
{
	struct plockwait *w;
	bool last;

	pthread_mutex_lock(&s->mutex);
again:
	for (w = s->waits; w; w = w->next) {
		if (!all && w->p.tag != tag)
			continue;
		if (!w->cancel)
			__atomic_store_n(&w->cancel, err, __ATOMIC_RELEASE);
		if (!w->running)
			continue; /* it ends as soon as it runs */
		w->refs++;
		kick_until_out_locked(s, w);
		while (!w->ended)
			pthread_cond_wait(&s->changed, &s->mutex);
		last = put_locked(w);
		if (last)
			free(w);
		goto again; /* the list changed meanwhile */
	}
	pthread_mutex_unlock(&s->mutex);
}

void plockwait_cancel_tag(struct plockwait_set *s, uint64_t tag, int err)
{
	if (s->ready)
		cancel_matching(s, false, tag, err);
}

void plockwait_destroy(struct plockwait_set *s)
{
	if (!s->ready)
		return;
	cancel_matching(s, true, 0, EINTR);
	pthread_mutex_lock(&s->mutex);
	while (s->alive)
		pthread_cond_wait(&s->changed, &s->mutex);
	pthread_mutex_unlock(&s->mutex);
	pthread_cond_destroy(&s->changed);
	pthread_mutex_destroy(&s->mutex);
	s->ready = false;
}

unsigned int plockwait_count(struct plockwait_set *s)
{
	unsigned int n;

	if (!s->ready)
		return 0;
	pthread_mutex_lock(&s->mutex);
	n = s->count;
	pthread_mutex_unlock(&s->mutex);
	return n;
}
