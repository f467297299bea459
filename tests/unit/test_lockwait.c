/* test_lockwait.c - lock waits on threads of their own: grant, cancel, bounds
 *
 * Two open file descriptions of one file conflict with each other (flock()
 * and OFD locks belong to the description), so one process can play the
 * holder and the waiter.
 */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "fs/plockwait.h"
#include "unit.h"

/* What done() saw. */
struct outcome {
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	bool called;
	int calls;
	int res;
};

#define OUTCOME_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, 0}

static void record(int res, void *arg)
{
	struct outcome *o = arg;

	pthread_mutex_lock(&o->mutex);
	o->called = true;
	o->calls++;
	o->res = res;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->mutex);
}

/* Waits up to SECONDS for done(); returns whether it came. */
static bool wait_outcome(struct outcome *o, int seconds)
{
	struct timespec ts;
	bool called;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += seconds;
	pthread_mutex_lock(&o->mutex);
	while (!o->called && pthread_cond_timedwait(&o->cond, &o->mutex, &ts) == 0)
		;
	called = o->called;
	pthread_mutex_unlock(&o->mutex);
	return called;
}

static bool called_now(struct outcome *o)
{
	bool called;

	pthread_mutex_lock(&o->mutex);
	called = o->called;
	pthread_mutex_unlock(&o->mutex);
	return called;
}

static int open_tmp(char *path)
{
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	return fd;
}

static int reopen(const char *path)
{
	int fd = open(path, O_RDWR);

	ck_assert_int_ge(fd, 0);
	return fd;
}

static struct plockwait_params flock_params(int fd, uid_t uid, const void *key,
					   struct outcome *o)
{
	struct plockwait_params p = {.kind = PLOCKWAIT_FLOCK, .fd = fd, .flock_op = LOCK_EX,
				    .uid = uid, .tag = (uint64_t)fd, .key = key,
				    .done = record, .arg = o};
	return p;
}

static void start(struct plockwait_set *s, const struct plockwait_params *p)
{
	struct plockwait *w;

	ck_assert_int_eq(plockwait_prepare(s, p, &w), 0);
	ck_assert_int_eq(plockwait_run(s, w), 0);
}

START_TEST(test_lockwait__granted_when_holder_unlocks)
{
	char path[] = "/tmp/plockwait-XXXXXX";
	struct outcome o = OUTCOME_INIT;
	struct plockwait_set s;
	struct plockwait_params p;
	int holder = open_tmp(path), waiter = reopen(path), probe = reopen(path);

	ck_assert_int_eq(plockwait_init(&s, 8, 8), 0);
	ck_assert_int_eq(flock(holder, LOCK_EX | LOCK_NB), 0);
	p = flock_params(waiter, 1000, &o, &o);
	start(&s, &p);
	/* the lock is held: no answer can come before the unlock */
	ck_assert(!wait_outcome(&o, 1));
	ck_assert_uint_eq(plockwait_count(&s), 1);
	ck_assert_int_eq(flock(holder, LOCK_UN), 0);
	ck_assert(wait_outcome(&o, 30));
	ck_assert_int_eq(o.res, 0);
	/* the waiter's description holds it now */
	ck_assert_int_eq(flock(probe, LOCK_EX | LOCK_NB), -1);
	ck_assert_int_eq(errno, EWOULDBLOCK);
	plockwait_destroy(&s);
	ck_assert_int_eq(o.calls, 1);
	unlink(path);
}
END_TEST

START_TEST(test_lockwait__ofd_granted_and_cancelled)
{
	char path[] = "/tmp/plockwait-XXXXXX";
	struct outcome o1 = OUTCOME_INIT, o2 = OUTCOME_INIT;
	struct flock wr = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
	struct flock un = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
	struct plockwait_set s;
	struct plockwait_params p = {.kind = PLOCKWAIT_OFD, .uid = 1, .lk = wr, .done = record};
	int holder = open_tmp(path), w1 = reopen(path), w2 = reopen(path);

	ck_assert_int_eq(plockwait_init(&s, 8, 8), 0);
	ck_assert_int_eq(fcntl(holder, F_OFD_SETLK, &wr), 0);
	p.fd = w1;
	p.key = &o1;
	p.arg = &o1;
	start(&s, &p);
	p.fd = w2;
	p.key = &o2;
	p.arg = &o2;
	start(&s, &p);
	/* the first is cancelled while it waits: EINTR */
	plockwait_cancel_key(&s, &o1, EINTR);
	ck_assert(wait_outcome(&o1, 30));
	ck_assert_int_eq(o1.res, -EINTR);
	ck_assert(!called_now(&o2));
	/* the second gets it when the holder lets go */
	ck_assert_int_eq(fcntl(holder, F_OFD_SETLK, &un), 0);
	ck_assert(wait_outcome(&o2, 30));
	ck_assert_int_eq(o2.res, 0);
	/* and the cancelled one holds nothing: w1 conflicts with w2 only */
	ck_assert_int_eq(fcntl(w2, F_OFD_SETLK, &un), 0);
	ck_assert_int_eq(fcntl(holder, F_OFD_SETLK, &wr), 0);
	plockwait_destroy(&s);
	unlink(path);
}
END_TEST

START_TEST(test_lockwait__cancel_before_run_ends_at_once)
{
	char path[] = "/tmp/plockwait-XXXXXX";
	struct outcome o = OUTCOME_INIT;
	struct plockwait_set s;
	struct plockwait_params p;
	struct plockwait *w;
	int holder = open_tmp(path), waiter = reopen(path);

	ck_assert_int_eq(plockwait_init(&s, 8, 8), 0);
	ck_assert_int_eq(flock(holder, LOCK_EX | LOCK_NB), 0);
	p = flock_params(waiter, 1, &o, &o);
	ck_assert_int_eq(plockwait_prepare(&s, &p, &w), 0);
	/* an interrupt that came before the wait started */
	plockwait_cancel_key(&s, &o, EINTR);
	ck_assert_int_eq(plockwait_run(&s, w), 0);
	ck_assert(wait_outcome(&o, 30));
	ck_assert_int_eq(o.res, -EINTR);
	plockwait_destroy(&s);
	unlink(path);
}
END_TEST

START_TEST(test_lockwait__cancel_tag_returns_answered)
{
	char path[] = "/tmp/plockwait-XXXXXX";
	struct outcome o[3] = {OUTCOME_INIT, OUTCOME_INIT, OUTCOME_INIT};
	struct plockwait_set s;
	struct plockwait_params p;
	int holder = open_tmp(path), a = reopen(path), b = reopen(path);

	ck_assert_int_eq(plockwait_init(&s, 8, 8), 0);
	ck_assert_int_eq(flock(holder, LOCK_EX | LOCK_NB), 0);
	p = flock_params(a, 1, &o[0], &o[0]);
	start(&s, &p);
	p = flock_params(a, 1, &o[1], &o[1]);
	start(&s, &p);
	p = flock_params(b, 1, &o[2], &o[2]);
	start(&s, &p);
	plockwait_cancel_tag(&s, (uint64_t)a, EBADF);
	/* both waits of A are answered when it returns, B's goes on */
	ck_assert(called_now(&o[0]) && called_now(&o[1]));
	ck_assert_int_eq(o[0].res, -EBADF);
	ck_assert_int_eq(o[1].res, -EBADF);
	ck_assert(!called_now(&o[2]));
	ck_assert_uint_eq(plockwait_count(&s), 1);
	/* the end of the set answers what is left */
	plockwait_destroy(&s);
	ck_assert(called_now(&o[2]));
	ck_assert_int_eq(o[2].res, -EINTR);
	ck_assert_int_eq(o[2].calls, 1);
	unlink(path);
}
END_TEST

START_TEST(test_lockwait__bounds_refuse_with_enolck)
{
	char path[] = "/tmp/plockwait-XXXXXX";
	struct outcome o[5] = {OUTCOME_INIT, OUTCOME_INIT, OUTCOME_INIT, OUTCOME_INIT,
			       OUTCOME_INIT};
	struct plockwait_set s;
	struct plockwait_params p;
	struct plockwait *w;
	int holder = open_tmp(path), fd = reopen(path);

	ck_assert_int_eq(plockwait_init(&s, 2, 3), 0);
	ck_assert_int_eq(flock(holder, LOCK_EX | LOCK_NB), 0);
	p = flock_params(fd, 7, &o[0], &o[0]);
	start(&s, &p);
	p = flock_params(fd, 7, &o[1], &o[1]);
	start(&s, &p);
	/* a third of user 7: over its bound */
	p = flock_params(fd, 7, &o[2], &o[2]);
	ck_assert_int_eq(plockwait_prepare(&s, &p, &w), -ENOLCK);
	/* another user may still wait, until the mount's bound */
	p = flock_params(fd, 8, &o[3], &o[3]);
	start(&s, &p);
	p = flock_params(fd, 9, &o[4], &o[4]);
	ck_assert_int_eq(plockwait_prepare(&s, &p, &w), -ENOLCK);
	ck_assert_uint_eq(plockwait_count(&s), 3);
	/* a wait that ended makes room */
	plockwait_cancel_key(&s, &o[0], EINTR);
	ck_assert(wait_outcome(&o[0], 30));
	p = flock_params(fd, 7, &o[2], &o[2]);
	start(&s, &p);
	plockwait_destroy(&s);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(o[i].calls, 1);
	ck_assert_int_eq(o[4].calls, 0);
	unlink(path);
}
END_TEST

/* An unlock and a cancel at the same moment, many times: the outcome says
 * what the waiter holds, whichever came first. */
START_TEST(test_lockwait__grant_and_cancel_race_outcome_tells_truth)
{
	char path[] = "/tmp/plockwait-XXXXXX";
	struct plockwait_set s;
	struct plockwait_params p;
	int holder = open_tmp(path), waiter = reopen(path), probe = reopen(path);
	int granted = 0, cancelled = 0;

	ck_assert_int_eq(plockwait_init(&s, 8, 8), 0);
	for (int i = 0; i < 300; i++) {
		struct outcome o = OUTCOME_INIT;
		int res;

		ck_assert_int_eq(flock(holder, LOCK_EX | LOCK_NB), 0);
		p = flock_params(waiter, 1, &o, &o);
		start(&s, &p);
		if (i % 2)
			usleep(i % 7 * 100);
		ck_assert_int_eq(flock(holder, LOCK_UN), 0);
		plockwait_cancel_key(&s, &o, EINTR);
		ck_assert(wait_outcome(&o, 30));
		res = flock(probe, LOCK_EX | LOCK_NB);
		if (o.res == 0) {
			granted++;
			ck_assert_int_eq(res, -1); /* the waiter holds it */
			ck_assert_int_eq(flock(waiter, LOCK_UN), 0);
		} else {
			cancelled++;
			ck_assert_int_eq(o.res, -EINTR);
			ck_assert_int_eq(res, 0); /* the waiter holds nothing */
			ck_assert_int_eq(flock(probe, LOCK_UN), 0);
		}
	}
	ck_assert_int_eq(granted + cancelled, 300);
	plockwait_destroy(&s);
	unlink(path);
}
END_TEST

Suite *make_suite_lockwait(void)
{
	Suite *s = suite_create("plockwait");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_lockwait__granted_when_holder_unlocks);
	tcase_add_test(tc, test_lockwait__ofd_granted_and_cancelled);
	tcase_add_test(tc, test_lockwait__cancel_before_run_ends_at_once);
	tcase_add_test(tc, test_lockwait__cancel_tag_returns_answered);
	tcase_add_test(tc, test_lockwait__bounds_refuse_with_enolck);
	tcase_add_test(tc, test_lockwait__grant_and_cancel_race_outcome_tells_truth);
	suite_add_tcase(s, tc);
	return s;
}
