/* test_lockplan.c - plans for every strategy, as tables
 *
 * Each row: strategy, from, to, and the expected plan written as one
 * string "S:/a X:/a/b ..." in acquisition order.
 */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/lockplan.h"
#include "base/path.h"
#include "unit.h"

static char *plan_str(const struct tl_plan *p)
{
	size_t i, len = 1;
	char *s, *o;

	for (i = 0; i < p->n; i++)
		len += strlen(p->items[i].key) + 3;
	s = malloc(len);
	o = s;
	*o = '\0';
	for (i = 0; i < p->n; i++)
		o += sprintf(o, "%s%c:%s", i ? " " : "",
			     p->items[i].mode == TL_EXCLUSIVE ? 'X' : 'S', p->items[i].key);
	return s;
}

static const struct {
	enum tl_strategy s;
	const char *from, *to, *want;
} rename_cases[] = {
	/* siblings in one directory */
	{TL_STRATEGY_TREE, "/a/x", "/a/y", "S:/a X:/a/x X:/a/y"},
	/* the root is never locked */
	{TL_STRATEGY_TREE, "/x", "/y", "X:/x X:/y"},
	/* the guide's example */
	{TL_STRATEGY_TREE, "/clinton/projects/elasticsearch/README.txt",
	 "/clinton/projects/elasticsearch/README.asciidoc",
	 "S:/clinton S:/clinton/projects S:/clinton/projects/elasticsearch "
	 "X:/clinton/projects/elasticsearch/README.asciidoc "
	 "X:/clinton/projects/elasticsearch/README.txt"},
	{TL_STRATEGY_TREE, "/clinton", "/bill", "X:/bill X:/clinton"},
	/* across directories: ancestors of both */
	{TL_STRATEGY_TREE, "/a/b/x", "/c/y", "S:/a S:/c S:/a/b X:/c/y X:/a/b/x"},
	/* a common part: its ancestors once; a prefix in bytes only is not one */
	{TL_STRATEGY_TREE, "/a/b/c/x", "/a/b/d/y",
	 "S:/a S:/a/b S:/a/b/c S:/a/b/d X:/a/b/c/x X:/a/b/d/y"},
	{TL_STRATEGY_TREE, "/ab/x", "/a/y", "S:/a S:/ab X:/a/y X:/ab/x"},
	{TL_STRATEGY_TREE, "/a/b/x", "/a/bc/y", "S:/a S:/a/b S:/a/bc X:/a/b/x X:/a/bc/y"},
	/* nested: destination inside the source's parent chain; exclusive wins */
	{TL_STRATEGY_TREE, "/a/b", "/a/b/c/d", "S:/a X:/a/b S:/a/b/c X:/a/b/c/d"},
	{TL_STRATEGY_TREE, "/a/b/c", "/a", "X:/a S:/a/b X:/a/b/c"},
	/* exchange plans like a rename */
	{TL_STRATEGY_TREE, "/p/q", "/r/s", "S:/p S:/r X:/p/q X:/r/s"},
	/* the same path */
	{TL_STRATEGY_TREE, "/a/b", "/a/b", "S:/a X:/a/b"},
	/* hostile bytes are just bytes */
	{TL_STRATEGY_TREE, "/d\n1/%2F", "/d\n1/a b", "S:/d\n1 X:/d\n1/%2F X:/d\n1/a b"},
	{TL_STRATEGY_GLOBAL, "/a/b", "/c", "X:global"},
	{TL_STRATEGY_NONE, "/a/b", "/c", ""},
	{TL_STRATEGY_DOCUMENT, "/a/b", "/c", "X:/c X:/a/b"},
};

/* The mode P holds KEY in, or -1 when KEY is not in it. */
static int mode_of(const struct tl_plan *p, const char *key)
{
	size_t i;

	for (i = 0; i < p->n; i++)
		if (strcmp(p->items[i].key, key) == 0)
			return (int)p->items[i].mode;
	return -1;
}

START_TEST(test_lockplan__rename_table)
{
	struct tl_plan *p = NULL;
	char *got;

	ck_assert_int_eq(lockplan_rename(rename_cases[_i].s, rename_cases[_i].from,
					 rename_cases[_i].to, 0, NULL, 0, &p),
			 0);
	got = plan_str(p);
	ck_assert_msg(strcmp(got, rename_cases[_i].want) == 0, "case %d: got '%s', want '%s'", _i,
		      got, rename_cases[_i].want);
	ck_assert_str_eq(p->from, rename_cases[_i].from);
	ck_assert_str_eq(p->to, rename_cases[_i].to);
	free(got);
	lockplan_free(p);
}
END_TEST

START_TEST(test_lockplan__document_walk)
{
	const char *below[] = {"/a/b/f2", "/a/b/d", "/a/b/d/f1"};
	struct tl_plan *p = NULL;
	char *got;

	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_DOCUMENT, "/a/b", "/z", 0, below, 3, &p), 0);
	got = plan_str(p);
	ck_assert_str_eq(got, "X:/z X:/a/b X:/a/b/d X:/a/b/f2 X:/a/b/d/f1");
	free(got);
	lockplan_free(p);
	/* an entry that is not below the source is a caller bug */
	below[0] = "/elsewhere";
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_DOCUMENT, "/a/b", "/z", 0, below, 3, &p),
			 -EINVAL);
	ck_assert_ptr_null(p);
}
END_TEST

START_TEST(test_lockplan__entry_table)
{
	struct tl_plan *p = NULL;
	char *got;

	ck_assert_int_eq(lockplan_entry(TL_STRATEGY_TREE, "/a/b/c", &p), 0);
	got = plan_str(p);
	ck_assert_str_eq(got, "S:/a S:/a/b X:/a/b/c");
	ck_assert_ptr_null(p->to);
	free(got);
	lockplan_free(p);
	ck_assert_int_eq(lockplan_entry(TL_STRATEGY_GLOBAL, "/a", &p), 0);
	ck_assert_uint_eq(p->n, 1);
	ck_assert_str_eq(p->items[0].key, TL_GLOBAL_KEY);
	lockplan_free(p);
	ck_assert_int_eq(lockplan_entry(TL_STRATEGY_NONE, "/a", &p), 0);
	ck_assert_uint_eq(p->n, 0);
	lockplan_free(p);
}
END_TEST

START_TEST(test_lockplan__rejects_unnormal)
{
	struct tl_plan *p = NULL;

	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, "a", "/b", 0, NULL, 0, &p), -EINVAL);
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, "/a/../b", "/b", 0, NULL, 0, &p),
			 -EINVAL);
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, "/a/", "/b", 0, NULL, 0, &p), -EINVAL);
	ck_assert_int_eq(lockplan_entry(TL_STRATEGY_TREE, "//a", &p), -EINVAL);
	ck_assert_ptr_null(p);
}
END_TEST

/* Every plan is sorted by path_cmp and has unique keys, also for long
 * paths of many components. */
START_TEST(test_lockplan__long_paths_sorted_unique)
{
	const size_t max = 3 * PATH_MAX; /* longer than one syscall path */
	char *from = malloc(max), *to = malloc(max);
	struct tl_plan *p = NULL;
	size_t i, n = 0;

	for (i = 0; n + 3 < max - 1; i++) {
		from[n] = '/';
		from[n + 1] = (char)('a' + i % 26);
		n += 2;
	}
	from[n] = '\0';
	strcpy(to, from);
	to[n - 1] = 'Z';
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, from, to, 0, NULL, 0, &p), 0);
	ck_assert_uint_eq(p->n, path_depth(from) + 1);
	for (i = 1; i < p->n; i++)
		ck_assert_int_lt(path_cmp(p->items[i - 1].key, p->items[i].key), 0);
	ck_assert_int_eq(mode_of(p, from), TL_EXCLUSIVE);
	ck_assert_int_eq(mode_of(p, to), TL_EXCLUSIVE);
	ck_assert_int_eq(mode_of(p, "/a"), TL_SHARED);
	ck_assert_int_eq(mode_of(p, "/nope"), -1);
	lockplan_free(p);
	ck_assert_int_eq(lockplan_entry(TL_STRATEGY_TREE, from, &p), 0);
	ck_assert_uint_eq(p->n, path_depth(from));
	ck_assert_int_eq(mode_of(p, from), TL_EXCLUSIVE);
	lockplan_free(p);
	free(from);
	free(to);
}
END_TEST

/* The tree plan of every pair of paths made of the components "a", "ab"
 * and "b" (one to three deep), checked against its definition: each proper
 * ancestor of either key but the root shared, both keys exclusive, a key
 * wanted both ways exclusive, nothing else, sorted by path_cmp, unique. */
static size_t tree_paths(char paths[][16])
{
	static const char *const comp[] = {"a", "ab", "b"};
	size_t n = 0, start = 0, end, i, j;

	for (i = 0; i < 3; i++)
		sprintf(paths[n++], "/%s", comp[i]);
	for (end = n; end < 39; start = end, end = n) /* one level deeper */
		for (i = start; i < end; i++)
			for (j = 0; j < 3; j++)
				sprintf(paths[n++], "%s/%s", paths[i], comp[j]);
	return n;
}

/* The mode KEY must have in the tree plan of FROM -> TO, or -1. */
static int tree_want(const char *from, const char *to, const char *key)
{
	if (strcmp(key, from) == 0 || strcmp(key, to) == 0)
		return TL_EXCLUSIVE;
	if (path_is_ancestor(key, from) || path_is_ancestor(key, to))
		return TL_SHARED;
	return -1;
}

START_TEST(test_lockplan__tree_every_pair)
{
	char paths[39][16];
	size_t n = tree_paths(paths), i, j, k, want;
	struct tl_plan *p = NULL;

	ck_assert_uint_eq(n, 39);
	for (i = 0; i < n; i++) {
		for (j = 0; j < n; j++) {
			ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, paths[i], paths[j], 0,
							 NULL, 0, &p),
					 0);
			for (k = 1; k < p->n; k++)
				ck_assert_msg(path_cmp(p->items[k - 1].key, p->items[k].key) < 0,
					      "%s -> %s: %s before %s", paths[i], paths[j],
					      p->items[k - 1].key, p->items[k].key);
			for (k = 0; k < p->n; k++)
				ck_assert_msg((int)p->items[k].mode ==
						      tree_want(paths[i], paths[j], p->items[k].key),
					      "%s -> %s: %s", paths[i], paths[j], p->items[k].key);
			/* and nothing is missing: every wanted key is among them */
			for (k = 0, want = 0; k < n; k++)
				want += tree_want(paths[i], paths[j], paths[k]) >= 0;
			ck_assert_uint_eq(p->n, want);
			lockplan_free(p);
			ck_assert_int_eq(lockplan_entry(TL_STRATEGY_TREE, paths[i], &p), 0);
			ck_assert_uint_eq(p->n, path_depth(paths[i]));
			for (k = 0; k < p->n; k++)
				ck_assert_int_eq(p->items[k].mode,
						 k + 1 == p->n ? TL_EXCLUSIVE : TL_SHARED);
			for (k = 1; k < p->n; k++)
				ck_assert_int_lt(path_cmp(p->items[k - 1].key, p->items[k].key), 0);
			lockplan_free(p);
		}
	}
}
END_TEST

/* True when full plans A and B share a key that either wants exclusive,
 * item by item: the definition lockplan_tree_conflict() must meet. */
static bool items_conflict(const struct tl_plan *a, const struct tl_plan *b)
{
	size_t i, j;

	for (i = 0; i < a->n; i++)
		for (j = 0; j < b->n; j++)
			if (strcmp(a->items[i].key, b->items[j].key) == 0 &&
			    (a->items[i].mode == TL_EXCLUSIVE || b->items[j].mode == TL_EXCLUSIVE))
				return true;
	return false;
}

/* An endpoint plan stands for its full plan: the same number of keys, the
 * same full plan made from it, the same mode of every key, and against
 * every other tree plan (rename or entry, endpoints or full) the same
 * conflicts, named by a key both lock, one of them exclusive. Over renames
 * between the paths up to two deep (and "/"-level names), and entries on
 * every path up to three deep. */
START_TEST(test_lockplan__endpoints_agree_with_items)
{
	char paths[39][16];
	size_t n = tree_paths(paths), shallow = 12, np = 0, i, j, k, len;
	struct tl_plan *full[12 * 12 + 39], ends[12 * 12 + 39], *made;
	const char *key;

	for (i = 0; i < shallow; i++)
		for (j = 0; j < shallow; j++, np++) {
			ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, paths[i], paths[j], 0,
							 NULL, 0, &full[np]),
					 0);
			ck_assert_int_eq(lockplan_rename_endpoints(paths[i], paths[j], 0, &ends[np]),
					 0);
		}
	for (i = 0; i < n; i++, np++) {
		ck_assert_int_eq(lockplan_entry(TL_STRATEGY_TREE, paths[i], &full[np]), 0);
		ends[np] = *full[np]; /* an entry plan's endpoint is its path */
		ends[np].items = NULL;
	}
	for (i = 0; i < np; i++) {
		ck_assert_ptr_null(ends[i].items);
		ck_assert_uint_eq(ends[i].n, full[i]->n);
		ck_assert_int_eq(lockplan_tree_full(&ends[i], &made), 0);
		ck_assert_uint_eq(made->n, full[i]->n);
		for (k = 0; k < made->n; k++) {
			ck_assert_str_eq(made->items[k].key, full[i]->items[k].key);
			ck_assert_int_eq(made->items[k].mode, full[i]->items[k].mode);
		}
		lockplan_free(made);
		for (k = 0; k < n; k++)
			ck_assert_int_eq(lockplan_tree_mode(&ends[i], paths[k], strlen(paths[k])),
					 mode_of(full[i], paths[k]) + 1);
		ck_assert_int_eq(lockplan_tree_mode(&ends[i], "/", 1), 0);
		for (j = 0; j < np; j++) {
			bool want = items_conflict(full[i], full[j]);

			ck_assert_msg(lockplan_tree_conflict(&ends[i], full[j], &key, &len) == want,
				      "%s -> %s against %s -> %s", full[i]->from,
				      full[i]->to ? full[i]->to : "-", full[j]->from,
				      full[j]->to ? full[j]->to : "-");
			if (!want)
				continue;
			ck_assert_int_gt(lockplan_tree_mode(&ends[i], key, len), 0);
			ck_assert_int_gt(lockplan_tree_mode(&ends[j], key, len), 0);
			ck_assert_int_eq(lockplan_tree_mode(&ends[i], key, len) +
						 lockplan_tree_mode(&ends[j], key, len) > 2,
					 1);
		}
	}
	for (i = 0; i < np; i++)
		lockplan_free(full[i]);
	/* what is not a key is refused, as by lockplan_rename() */
	ck_assert_int_eq(lockplan_rename_endpoints("/a/../b", "/c", 0, &ends[0]), -EINVAL);
	ck_assert_int_eq(lockplan_rename_endpoints("/a", "c", 0, &ends[0]), -EINVAL);
}
END_TEST

START_TEST(test_lockplan__strategy_names)
{
	enum tl_strategy s;

	ck_assert_int_eq(lockplan_strategy_parse("document", &s), 0);
	ck_assert_int_eq(s, TL_STRATEGY_DOCUMENT);
	ck_assert_str_eq(lockplan_strategy_name(TL_STRATEGY_GLOBAL), "global");
	ck_assert_int_eq(lockplan_strategy_parse("Tree", &s), -EINVAL);
	ck_assert_int_eq(lockplan_strategy_parse(NULL, &s), -EINVAL);
}
END_TEST

Suite *make_suite_lockplan(void)
{
	Suite *s = suite_create("lockplan");
	TCase *tc = tcase_create("core");

	tcase_add_loop_test(tc, test_lockplan__rename_table, 0,
			    sizeof(rename_cases) / sizeof(rename_cases[0]));
	tcase_add_test(tc, test_lockplan__document_walk);
	tcase_add_test(tc, test_lockplan__entry_table);
	tcase_add_test(tc, test_lockplan__rejects_unnormal);
	tcase_add_test(tc, test_lockplan__long_paths_sorted_unique);
	tcase_add_test(tc, test_lockplan__tree_every_pair);
	tcase_add_test(tc, test_lockplan__endpoints_agree_with_items);
	tcase_add_test(tc, test_lockplan__strategy_names);
	suite_add_tcase(s, tc);
	return s;
}
