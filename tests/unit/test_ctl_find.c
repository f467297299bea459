/* test_ctl_find.c - treelockctl find's tests: arguments, find's rounding,
 * globs as wildcards, the query (ctl_find.h) */
#include <config.h>

#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl_find.h"
#include "unit.h"

#define DAY 86400LL
#define NS 1000000000LL

static struct ctl_num num(const char *arg, bool size)
{
	struct ctl_num n;

	ck_assert_int_eq(ctl_find_num(arg, size, &n), 0);
	return n;
}

START_TEST(test_ctl_find__size_rounds_up_in_units)
{
	struct ctl_num n;
	int64_t lo, hi;

	/* 1 block of 512 is 1..512 bytes; 0 bytes is 0 blocks */
	n = num("1", true);
	ck_assert_int_eq(n.unit, 512);
	ck_assert(!ctl_find_size_match(&n, 0));
	ck_assert(ctl_find_size_match(&n, 1));
	ck_assert(ctl_find_size_match(&n, 512));
	ck_assert(!ctl_find_size_match(&n, 513));
	/* -1M: less than one unit: only the empty */
	n = num("-1M", true);
	ck_assert(ctl_find_size_match(&n, 0));
	ck_assert(!ctl_find_size_match(&n, 1));
	n = num("-0k", true);
	ck_assert(!ctl_find_size_range(&n, &lo, &hi));
	n = num("+1k", true);
	ck_assert(!ctl_find_size_match(&n, 1024));
	ck_assert(ctl_find_size_match(&n, 1025));
	ck_assert(ctl_find_size_range(&n, &lo, &hi));
	ck_assert_int_eq(lo, 1025);
	ck_assert_int_eq(hi, -1);
	n = num("2k", true);
	ck_assert(ctl_find_size_range(&n, &lo, &hi));
	ck_assert_int_eq(lo, 1025);
	ck_assert_int_eq(hi, 2048);
	n = num("3c", true);
	ck_assert(ctl_find_size_match(&n, 3));
	ck_assert(!ctl_find_size_match(&n, 4));
	ck_assert_int_eq(num("1G", true).unit, 1 << 30);
	ck_assert_int_eq(num("1w", true).unit, 2);
	ck_assert_int_eq(ctl_find_num("1x", true, &n), -EINVAL);
	ck_assert_int_eq(ctl_find_num("1k", false, &n), -EINVAL);
	ck_assert_int_eq(ctl_find_num("k", true, &n), -EINVAL);
	ck_assert_int_eq(ctl_find_num("", true, &n), -EINVAL);
	ck_assert_int_eq(ctl_find_num("+-1", true, &n), -EINVAL);
}
END_TEST

START_TEST(test_ctl_find__mtime_rounds_days_down)
{
	int64_t now = 1000 * DAY * NS + 5 * NS, lo, hi;
	struct ctl_num n = num("0", false);

	/* 0: less than 24 h ago */
	ck_assert(ctl_find_mtime_match(&n, now, now / NS - 10, 0));
	ck_assert(!ctl_find_mtime_match(&n, now, now / NS - DAY, 0));
	n = num("1", false);
	ck_assert(ctl_find_mtime_match(&n, now, now / NS - DAY, 0));
	ck_assert(ctl_find_mtime_match(&n, now, now / NS - 2 * DAY + 1, 0));
	ck_assert(!ctl_find_mtime_match(&n, now, now / NS - 2 * DAY, 0));
	/* +1: 2 days or more */
	n = num("+1", false);
	ck_assert(!ctl_find_mtime_match(&n, now, now / NS - 2 * DAY + 1, 0));
	ck_assert(ctl_find_mtime_match(&n, now, now / NS - 2 * DAY, 0));
	/* -1: less than a day; a change in the future too */
	n = num("-1", false);
	ck_assert(ctl_find_mtime_match(&n, now, now / NS + 100, 0));
	ck_assert(!ctl_find_mtime_match(&n, now, now / NS - DAY, 0));
	/* the query's window holds the exact one */
	n = num("1", false);
	ctl_find_mtime_range(&n, now, &lo, &hi);
	ck_assert(lo <= now / NS - 2 * DAY + 1 && hi >= now / NS - DAY);
	ck_assert(lo >= now / NS - 2 * DAY - 2 && hi <= now / NS - DAY + 2);
}
END_TEST

START_TEST(test_ctl_find__globs_as_wildcards)
{
	bool lit;
	char *w;

	bool exact;

	w = ctl_find_wildcard("*.txt", &lit, &exact);
	ck_assert(exact);
	ck_assert_str_eq(w, "*.txt");
	ck_assert(!lit);
	free(w);
	w = ctl_find_wildcard("a\\*b", &lit, NULL);
	ck_assert_str_eq(w, "a*b");
	ck_assert(lit);
	free(w);
	w = ctl_find_wildcard("a\\*b?", &lit, NULL);
	ck_assert_str_eq(w, "a\\*b?");
	ck_assert(!lit);
	free(w);
	w = ctl_find_wildcard("x\\\\y*", &lit, NULL);
	ck_assert_str_eq(w, "x\\\\y*");
	free(w);
	w = ctl_find_wildcard("plain", &lit, NULL);
	ck_assert_str_eq(w, "plain");
	ck_assert(lit);
	free(w);
	/* a class is one character of any: judged after the query */
	w = ctl_find_wildcard("f[12]*", &lit, &exact);
	ck_assert_str_eq(w, "f?*");
	ck_assert(!lit && !exact);
	free(w);
	w = ctl_find_wildcard("[]a]x[!b-c]y[[:digit:]]", NULL, &exact);
	ck_assert_str_eq(w, "?x?y?");
	ck_assert(!exact);
	free(w);
	/* a '[' without its end is itself */
	w = ctl_find_wildcard("a[b", &lit, &exact);
	ck_assert_str_eq(w, "a[b");
	ck_assert(lit && exact);
	free(w);
}
END_TEST

START_TEST(test_ctl_find__arguments)
{
	char *ok[] = {"-name", "*.c", "-type", "f,d", "-size", "+2k", "-mtime", "-3",
		      "-user", "0", "--json", "--limit", "7", "-path", "/m/*"};
	char *bad_type[] = {"-type", "fx"};
	char *bad_type2[] = {"-type", "f,"};
	char *missing[] = {"-name"};
	char *unknown[] = {"-newer", "x"};
	char *user[] = {"-user", "no-such-user-here"};
	char err[200];
	struct ctl_find f;

	ck_assert_int_eq(ctl_find_parse(15, ok, &f, err, sizeof(err)), 0);
	ck_assert_uint_eq(f.ntests, 6);
	ck_assert(f.json);
	ck_assert_uint_eq(f.limit, 7);
	ck_assert_int_eq(f.tests[0].kind, CTL_T_NAME);
	ck_assert_str_eq(f.tests[1].types, "fd");
	ck_assert_int_eq(f.tests[2].num.cmp, CTL_CMP_GT);
	ck_assert_int_eq(f.tests[2].num.unit, 1024);
	ck_assert_int_eq(f.tests[3].num.cmp, CTL_CMP_LT);
	ck_assert_int_eq(f.tests[4].uid, 0);
	ck_assert_int_eq(f.tests[5].kind, CTL_T_PATH);
	ctl_find_free(&f);
	ck_assert_int_eq(ctl_find_parse(2, bad_type, &f, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "-type"));
	ck_assert_int_eq(ctl_find_parse(2, bad_type2, &f, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(ctl_find_parse(1, missing, &f, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "missing argument"));
	ck_assert_int_eq(ctl_find_parse(2, unknown, &f, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "unknown test"));
	ck_assert_int_eq(ctl_find_parse(2, user, &f, err, sizeof(err)), -EINVAL);
}
END_TEST

/* The query of ARGV as compact JSON (caller frees). */
static char *query_of(int argc, char **argv, const char *start)
{
	struct ctl_find f;
	char err[200], *text;
	cJSON *q;

	ck_assert_int_eq(ctl_find_parse(argc, argv, &f, err, sizeof(err)), 0);
	q = ctl_find_query(&f, start, "/mnt", 100 * DAY * NS);
	ck_assert_ptr_nonnull(q);
	text = cJSON_PrintUnformatted(q);
	cJSON_Delete(q);
	ctl_find_free(&f);
	return text;
}

START_TEST(test_ctl_find__query)
{
	char *a1[] = {"-name", "*.txt", "-type", "f", "-size", "-1M", "-user", "7"};
	char *a2[] = {"-name", "f[12]", "-path", "/mnt/a/*", "-path", "*/x"};
	char *q;

	q = query_of(8, a1, "/a");
	ck_assert_ptr_nonnull(strstr(q, "{\"wildcard\":{\"name\":\"*.txt\"}}"));
	/* names that are not UTF-8 are judged after the query */
	ck_assert_ptr_nonnull(strstr(q, "{\"prefix\":{\"name\":\"bytes:\"}}"));
	ck_assert_ptr_nonnull(strstr(q, "{\"terms\":{\"type\":[\"f\"]}}"));
	ck_assert_ptr_nonnull(strstr(q, "{\"range\":{\"size\":{\"gte\":0,\"lte\":0}}}"));
	ck_assert_ptr_nonnull(strstr(q, "{\"term\":{\"uid\":7}}"));
	ck_assert_ptr_nonnull(strstr(q, "{\"prefix\":{\"path\":\"/a/\"}}"));
	free(q);
	q = query_of(6, a2, "/");
	/* a class: one character of any; a -path under MNT: its rest on the
	 * key; one that is not: none */
	ck_assert_ptr_nonnull(strstr(q, "{\"wildcard\":{\"name\":\"f?\"}}"));
	ck_assert_ptr_nonnull(strstr(q, "{\"wildcard\":{\"path\":\"/a/*\"}}"));
	ck_assert_ptr_null(strstr(q, "*/x"));
	free(q);
}
END_TEST

START_TEST(test_ctl_find__match)
{
	char *a[] = {"-name", "f[12]*", "-path", "/mnt/a/*", "-type", "f"};
	struct es_fsentry e = {.key = "/a/f1.txt", .type = 'f', .size = 3};
	struct ctl_find f;
	char err[200];

	ck_assert_int_eq(ctl_find_parse(6, a, &f, err, sizeof(err)), 0);
	ck_assert(ctl_find_match(&f, &e, "/mnt/a/f1.txt", 0));
	ck_assert(!ctl_find_match(&f, &e, "/mnt/a/f3.txt", 0));
	ck_assert(!ctl_find_match(&f, &e, "/mnt/b/f1.txt", 0));
	e.type = 'd';
	ck_assert(!ctl_find_match(&f, &e, "/mnt/a/f1.txt", 0));
	ctl_find_free(&f);
}
END_TEST

Suite *make_suite_ctl_find(void)
{
	Suite *s = suite_create("ctl_find");
	TCase *tc = tcase_create("ctl_find");

	tcase_add_test(tc, test_ctl_find__size_rounds_up_in_units);
	tcase_add_test(tc, test_ctl_find__mtime_rounds_days_down);
	tcase_add_test(tc, test_ctl_find__globs_as_wildcards);
	tcase_add_test(tc, test_ctl_find__arguments);
	tcase_add_test(tc, test_ctl_find__query);
	tcase_add_test(tc, test_ctl_find__match);
	suite_add_tcase(s, tc);
	return s;
}
