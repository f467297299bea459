/* test_lockstore_mem.c - the embedded store: modes, marks, listing */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/lockplan.h"
#include "lock/lockstore.h"
#include "unit.h"

static struct tl_config cfg;
static struct lockstore *st;

static void setup(void)
{
	st = unit_mem_store(&cfg);
}

static void teardown(void)
{
	lockstore_close(st);
	config_free(&cfg);
}

static struct tl_plan *rplan(const char *from, const char *to)
{
	struct tl_plan *p = NULL;

	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, from, to, 0, NULL, 0, &p), 0);
	return p;
}

static void holder(struct tl_holder *h, uint64_t ticket)
{
	memset(h, 0, sizeof(*h));
	h->ticket = ticket;
	h->pid = 42;
	snprintf(h->id, sizeof(h->id), "test#%llu", (unsigned long long)ticket);
}

static size_t nlocks(void)
{
	struct tl_lock_info *v;
	size_t n;

	ck_assert_int_eq(st->ops->list(st, "/", &v, &n), 0);
	lockstore_free_list(v, n);
	return n;
}

/* The waiter marks on KEY, 0 when it is not listed. */
static unsigned int waiters_on(const char *key)
{
	struct tl_lock_info *v;
	unsigned int w = 0;
	size_t n, i;

	ck_assert_int_eq(st->ops->list(st, "/", &v, &n), 0);
	for (i = 0; i < n; i++)
		if (strcmp(v[i].key, key) == 0)
			w = v[i].waiters;
	lockstore_free_list(v, n);
	return w;
}

START_TEST(test_lockstore_mem__shared_compatible_exclusive_not)
{
	struct tl_plan *a = rplan("/d/x", "/d/y"), *b = rplan("/d/z", "/d/w"), *c = rplan("/d", "/e");
	struct tl_holder ha, hb, hc;
	struct tl_conflict why;

	holder(&ha, 1);
	holder(&hb, 2);
	holder(&hc, 3);
	ck_assert_int_eq(st->ops->try_acquire(st, a, &ha, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, b, &hb, &why), 0); /* shared /d twice */
	memset(&why, 0, sizeof(why));
	ck_assert_int_eq(st->ops->try_acquire(st, c, &hc, &why), -EAGAIN);
	ck_assert_str_eq(why.key, "/d");
	ck_assert_ptr_nonnull(strstr(why.holder, "shared"));
	st->ops->abandon(st, c, &hc);
	ck_assert_int_eq(st->ops->release(st, a, &ha), 0);
	ck_assert_int_eq(st->ops->release(st, b, &hb), 0);
	ck_assert_uint_eq(nlocks(), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, c, &hc, &why), 0);
	/* now /d is exclusive: a rename below it is refused */
	ck_assert_int_eq(st->ops->try_acquire(st, a, &ha, &why), -EAGAIN);
	st->ops->abandon(st, a, &ha);
	ck_assert_int_eq(st->ops->release(st, c, &hc), 0);
	ck_assert_uint_eq(nlocks(), 0);
	lockplan_free(a);
	lockplan_free(b);
	lockplan_free(c);
}
END_TEST

START_TEST(test_lockstore_mem__delegations_marked_in_listings)
{
	struct tl_plan *dp = NULL, *rp = rplan("/e/x", "/e/y");
	struct tl_holder hd, hr;
	struct tl_conflict why;
	struct tl_lock_info *v;
	size_t n, i, marked = 0;

	ck_assert(lockstore_holder_is_delegation("host:1:ab#d7"));
	ck_assert(!lockstore_holder_is_delegation("host:1:ab#7"));
	ck_assert(!lockstore_holder_is_delegation("host:1:ab#d"));
	ck_assert(!lockstore_holder_is_delegation("host:1:ab#d7x"));
	ck_assert(!lockstore_holder_is_delegation("#d7"));
	ck_assert(!lockstore_holder_is_delegation("(no owner)"));
	ck_assert(!lockstore_holder_is_delegation(NULL));
	ck_assert_int_eq(lockplan_entry(TL_STRATEGY_TREE, "/d", &dp), 0);
	holder(&hd, 7);
	hd.delegation = true;
	snprintf(hd.id, sizeof(hd.id), "test#d7");
	holder(&hr, 8);
	ck_assert_int_eq(st->ops->try_acquire(st, dp, &hd, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, rp, &hr, &why), 0);
	ck_assert_int_eq(lockstore_list(st, "/", &v, &n), 0);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(v[i].users, -1);
		ck_assert_int_eq(v[i].served, -1);
		ck_assert_ptr_null(v[i].deleg_state);
		if (v[i].delegation) {
			marked++;
			ck_assert_str_eq(v[i].key, "/d");
			ck_assert_str_eq(v[i].holders, "pid 42, test#d7");
		}
	}
	ck_assert_uint_eq(marked, 1);
	lockstore_free_list(v, n);
	ck_assert_int_eq(st->ops->release(st, dp, &hd), 0);
	ck_assert_int_eq(st->ops->release(st, rp, &hr), 0);
	lockplan_free(dp);
	lockplan_free(rp);
}
END_TEST

START_TEST(test_lockstore_mem__all_or_nothing)
{
	struct tl_plan *a = rplan("/p/q", "/r/s"), *b = rplan("/r/s", "/t");
	struct tl_holder ha, hb;
	struct tl_conflict why;

	holder(&ha, 1);
	holder(&hb, 2);
	ck_assert_int_eq(st->ops->try_acquire(st, b, &hb, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, a, &ha, &why), -EAGAIN);
	st->ops->abandon(st, a, &ha);
	/* nothing of a's plan is held: /p and /p/q are free */
	{
		struct tl_plan *c = rplan("/p", "/u");
		struct tl_holder hc;

		holder(&hc, 3);
		ck_assert_int_eq(st->ops->try_acquire(st, c, &hc, &why), 0);
		ck_assert_int_eq(st->ops->release(st, c, &hc), 0);
		lockplan_free(c);
	}
	ck_assert_int_eq(st->ops->release(st, b, &hb), 0);
	ck_assert_uint_eq(nlocks(), 0);
	lockplan_free(a);
	lockplan_free(b);
}
END_TEST

/* An older exclusive waiter keeps younger shared requests out; an older
 * shared request is not held back by a younger waiter. */
START_TEST(test_lockstore_mem__waiter_marks)
{
	struct tl_plan *small = rplan("/big/f1", "/big/f2"), *big = rplan("/big", "/big2"),
		       *young = rplan("/big/f3", "/big/f4");
	struct tl_holder hs, hbig, hy, hold;
	struct tl_conflict why;

	holder(&hs, 1);
	holder(&hbig, 2);
	holder(&hy, 3);
	ck_assert_int_eq(st->ops->try_acquire(st, small, &hs, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, big, &hbig, &why), -EAGAIN);
	ck_assert_uint_eq(waiters_on("/big"), 1);
	/* younger: refused although /big is only held shared */
	ck_assert_int_eq(st->ops->try_acquire(st, young, &hy, &why), -EAGAIN);
	ck_assert_str_eq(why.key, "/big");
	ck_assert_ptr_nonnull(strstr(why.holder, "older waiting"));
	/* older than the waiter (ticket 0): not held back by its mark */
	holder(&hold, 0);
	ck_assert_int_eq(st->ops->try_acquire(st, young, &hold, &why), 0);
	ck_assert_int_eq(st->ops->release(st, young, &hold), 0);
	ck_assert_int_eq(st->ops->release(st, small, &hs), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, big, &hbig, &why), 0);
	ck_assert_uint_eq(waiters_on("/big"), 1); /* the young one's mark only */
	ck_assert_ptr_null(hbig.priv);
	ck_assert_int_eq(st->ops->release(st, big, &hbig), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, young, &hy, &why), 0);
	ck_assert_int_eq(st->ops->release(st, young, &hy), 0);
	ck_assert_uint_eq(nlocks(), 0);
	lockplan_free(small);
	lockplan_free(big);
	lockplan_free(young);
}
END_TEST

START_TEST(test_lockstore_mem__abandon_clears_marks)
{
	struct tl_plan *a = rplan("/x/y", "/x/z"), *b = rplan("/x", "/w");
	struct tl_holder ha, hb;
	struct tl_conflict why;

	holder(&ha, 1);
	holder(&hb, 2);
	ck_assert_int_eq(st->ops->try_acquire(st, a, &ha, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, b, &hb, &why), -EAGAIN);
	st->ops->abandon(st, b, &hb);
	ck_assert_uint_eq(waiters_on("/x"), 0);
	ck_assert_ptr_null(hb.priv);
	ck_assert_int_eq(st->ops->release(st, a, &ha), 0);
	ck_assert_uint_eq(nlocks(), 0); /* no entry kept alive by a stale mark */
	lockplan_free(a);
	lockplan_free(b);
}
END_TEST

/* Keys longer than PATH_MAX conflict and release like short ones. */
START_TEST(test_lockstore_mem__long_keys)
{
	char *deep = malloc(3 * 4096 + 1), *a_from, *b_from;
	struct tl_plan *a, *b;
	struct tl_holder ha, hb;
	struct tl_conflict why;
	size_t i;

	for (i = 0; i < 3 * 4096; i++)
		deep[i] = (i % 100 == 0) ? '/' : 'd';
	deep[3 * 4096] = '\0';
	ck_assert_int_ge(asprintf(&a_from, "%s/x", deep), 0);
	ck_assert_int_ge(asprintf(&b_from, "%s/x/y", deep), 0);
	a = rplan(a_from, "/elsewhere");
	b = rplan(b_from, "/other");
	holder(&ha, 1);
	holder(&hb, 2);
	ck_assert_int_eq(st->ops->try_acquire(st, a, &ha, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, b, &hb, &why), -EAGAIN); /* X on a_from */
	st->ops->abandon(st, b, &hb);
	ck_assert_int_eq(st->ops->release(st, a, &ha), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, b, &hb, &why), 0);
	ck_assert_int_eq(st->ops->release(st, b, &hb), 0);
	ck_assert_uint_eq(nlocks(), 0);
	lockplan_free(a);
	lockplan_free(b);
	free(a_from);
	free(b_from);
	free(deep);
}
END_TEST

/* A document plan: FROM, NBELOW entries below it named PREFIX%02d, TO. */
static struct tl_plan *dplan(const char *from, const char *prefix, size_t nbelow, const char *to)
{
	char *below[64];
	struct tl_plan *p = NULL;
	size_t i;

	ck_assert_uint_le(nbelow, 64);
	for (i = 0; i < nbelow; i++)
		ck_assert_int_ge(asprintf(&below[i], "%s/%s%02zu", from, prefix, i), 0);
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_DOCUMENT, from, to, 0,
					 (const char *const *)below, nbelow, &p), 0);
	for (i = 0; i < nbelow; i++)
		free(below[i]);
	return p;
}

/* Plans of many keys (more than the store compares pair by pair) conflict
 * with small plans and with each other on exactly the keys they share. */
START_TEST(test_lockstore_mem__many_keys)
{
	struct tl_plan *big = dplan("/src", "f", 40, "/dst"),
		       *big2 = dplan("/other", "g", 40, "/src/f07"),
		       *big3 = dplan("/third", "h", 40, "/fourth"),
		       *small = rplan("/src/f39", "/x"), *small2 = rplan("/third/h05", "/v"),
		       *free1 = rplan("/y/z", "/w");
	struct tl_holder hb, hb2, hb3, hs, hs2, hf;
	struct tl_conflict why;
	struct tl_lock_info *v;
	size_t n, i;

	holder(&hb, 1);
	holder(&hb2, 2);
	holder(&hb3, 3);
	holder(&hs, 4);
	holder(&hs2, 5);
	holder(&hf, 6);
	ck_assert_uint_eq(big->n, 42);
	/* a small plan held, a big one wanting one of its keys */
	ck_assert_int_eq(st->ops->try_acquire(st, small2, &hs2, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, big3, &hb3, &why), -EAGAIN);
	ck_assert_str_eq(why.key, "/third"); /* its first conflicting key */
	st->ops->abandon(st, big3, &hb3);
	ck_assert_int_eq(st->ops->release(st, small2, &hs2), 0);
	/* a big plan held: a small one under it, a big one sharing one key */
	ck_assert_int_eq(st->ops->try_acquire(st, big, &hb, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, small, &hs, &why), -EAGAIN);
	ck_assert_str_eq(why.key, "/src");
	ck_assert_ptr_nonnull(strstr(why.holder, "exclusive"));
	ck_assert_int_eq(st->ops->try_acquire(st, big2, &hb2, &why), -EAGAIN);
	ck_assert_str_eq(why.key, "/src/f07");
	ck_assert_uint_eq(waiters_on("/src/f07"), 1);
	ck_assert_uint_eq(waiters_on("/src/f39"), 1);
	/* disjoint ones, big and small, pass */
	ck_assert_int_eq(st->ops->try_acquire(st, big3, &hb3, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, free1, &hf, &why), 0);
	ck_assert_int_eq(st->ops->list(st, "/src", &v, &n), 0);
	ck_assert_uint_eq(n, 41); /* /src and the 40 below it */
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(v[i].mode, TL_EXCLUSIVE);
		ck_assert_uint_eq(v[i].count, 1);
		ck_assert_ptr_nonnull(strstr(v[i].holders, "test#1"));
	}
	lockstore_free_list(v, n);
	ck_assert_int_eq(st->ops->release(st, big, &hb), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, big2, &hb2, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, small, &hs, &why), 0);
	ck_assert_ptr_null(hb2.priv);
	ck_assert_ptr_null(hs.priv);
	ck_assert_int_eq(st->ops->release(st, small, &hs), 0);
	ck_assert_int_eq(st->ops->release(st, big2, &hb2), 0);
	ck_assert_int_eq(st->ops->release(st, big3, &hb3), 0);
	ck_assert_int_eq(st->ops->release(st, free1, &hf), 0);
	ck_assert_uint_eq(nlocks(), 0);
	lockplan_free(big);
	lockplan_free(big2);
	lockplan_free(big3);
	lockplan_free(small);
	lockplan_free(small2);
	lockplan_free(free1);
}
END_TEST

START_TEST(test_lockstore_mem__list)
{
	struct tl_plan *a = rplan("/l/m n", "/l/o");
	struct tl_holder ha;
	struct tl_conflict why;
	struct tl_lock_info *v;
	size_t n, i, excl = 0;

	holder(&ha, 7);
	ck_assert_int_eq(st->ops->try_acquire(st, a, &ha, &why), 0);
	ck_assert_int_eq(st->ops->list(st, "/l", &v, &n), 0);
	ck_assert_uint_eq(n, 3);
	for (i = 0; i < n; i++) {
		ck_assert_ptr_nonnull(strstr(v[i].holders, "test#7"));
		ck_assert_int_ge(v[i].age_ms, 0);
		excl += v[i].mode == TL_EXCLUSIVE;
	}
	ck_assert_uint_eq(excl, 2);
	lockstore_free_list(v, n);
	ck_assert_int_eq(st->ops->list(st, "/other", &v, &n), 0);
	ck_assert_uint_eq(n, 0);
	lockstore_free_list(v, n);
	ck_assert_int_eq(st->ops->release(st, a, &ha), 0);
	lockplan_free(a);
}
END_TEST

/* Endpoint plans (what a rename hands this store: no items) are held,
 * refused and listed as their full plans are, beside full plans and entry
 * plans, and the refusal names the contended key and its holder. */
START_TEST(test_lockstore_mem__endpoint_plans)
{
	struct tl_plan a, b, *full = rplan("/e/f/g", "/e/h"), *entry = NULL;
	struct tl_holder ha, hb, hf, he;
	struct tl_conflict why;
	struct tl_lock_info *v;
	size_t n, i;

	ck_assert_uint_ne(st->ops->caps & TL_CAP_ENDPOINT_PLANS, 0);
	ck_assert_int_eq(lockplan_rename_endpoints("/e/f/x", "/e/y", 0, &a), 0);
	ck_assert_int_eq(lockplan_rename_endpoints("/e/f", "/z", 0, &b), 0);
	ck_assert_int_eq(lockplan_entry(TL_STRATEGY_TREE, "/e/f/x/new", &entry), 0);
	holder(&ha, 1);
	holder(&hb, 2);
	holder(&hf, 3);
	holder(&he, 4);
	ck_assert_int_eq(st->ops->try_acquire(st, &a, &ha, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, full, &hf, &why), 0); /* /e, /e/f shared */
	/* the listing shows a's keys as its full plan has them */
	ck_assert_int_eq(st->ops->list(st, "/", &v, &n), 0);
	ck_assert_uint_eq(n, 6); /* /e /e/f /e/f/x /e/y /e/f/g /e/h */
	for (i = 0; i < n; i++)
		if (strcmp(v[i].key, "/e/f") == 0) {
			ck_assert_int_eq(v[i].mode, TL_SHARED);
			ck_assert_uint_eq(v[i].count, 2);
		} else if (strcmp(v[i].key, "/e/f/x") == 0) {
			ck_assert_int_eq(v[i].mode, TL_EXCLUSIVE);
			ck_assert_ptr_nonnull(strstr(v[i].holders, "test#1"));
		}
	lockstore_free_list(v, n);
	/* moving /e/f waits for both: its key is shared by them */
	memset(&why, 0, sizeof(why));
	ck_assert_int_eq(st->ops->try_acquire(st, &b, &hb, &why), -EAGAIN);
	ck_assert_str_eq(why.key, "/e/f");
	ck_assert_ptr_nonnull(strstr(why.holder, "shared, and others"));
	ck_assert_uint_eq(waiters_on("/e/f"), 1);
	ck_assert_uint_eq(waiters_on("/z"), 1);
	/* an entry below a's source waits for a, and also behind the older
	 * waiter b, which wants /e/f exclusive */
	ck_assert_int_eq(st->ops->try_acquire(st, entry, &he, &why), -EAGAIN);
	ck_assert_int_eq(st->ops->release(st, &a, &ha), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, entry, &he, &why), -EAGAIN);
	ck_assert_str_eq(why.key, "/e/f");
	ck_assert_ptr_nonnull(strstr(why.holder, "waiting"));
	ck_assert_int_eq(st->ops->release(st, full, &hf), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, &b, &hb, &why), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, entry, &he, &why), -EAGAIN);
	ck_assert_int_eq(st->ops->release(st, &b, &hb), 0);
	ck_assert_int_eq(st->ops->try_acquire(st, entry, &he, &why), 0);
	ck_assert_int_eq(st->ops->release(st, entry, &he), 0);
	ck_assert_uint_eq(nlocks(), 0);
	lockplan_free(full);
	lockplan_free(entry);
}
END_TEST

Suite *make_suite_lockstore_mem(void)
{
	Suite *s = suite_create("lockstore_mem");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_lockstore_mem__shared_compatible_exclusive_not);
	tcase_add_test(tc, test_lockstore_mem__all_or_nothing);
	tcase_add_test(tc, test_lockstore_mem__waiter_marks);
	tcase_add_test(tc, test_lockstore_mem__abandon_clears_marks);
	tcase_add_test(tc, test_lockstore_mem__list);
	tcase_add_test(tc, test_lockstore_mem__delegations_marked_in_listings);
	tcase_add_test(tc, test_lockstore_mem__long_keys);
	tcase_add_test(tc, test_lockstore_mem__many_keys);
	tcase_add_test(tc, test_lockstore_mem__endpoint_plans);
	suite_add_tcase(s, tc);
	return s;
}
