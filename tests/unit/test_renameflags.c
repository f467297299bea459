/* test_renameflags.c - which rename flags a backing filesystem refuses:
 * RENAME_EXCHANGE at once, RENAME_NOREPLACE once the same rename without
 * it succeeds, per filesystem */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <stdio.h>

#include "fs/renameflags.h"
#include "unit.h"

START_TEST(test_renameflags__exchange_refused_at_once)
{
	struct renameflags rf = {0};

	ck_assert(!renameflags_refused(&rf, 5, RENAME_EXCHANGE));
	renameflags_learn(&rf, 5, RENAME_EXCHANGE, -EINVAL, "/a", "/b");
	ck_assert(renameflags_refused(&rf, 5, RENAME_EXCHANGE));
	ck_assert(!renameflags_refused(&rf, 6, RENAME_EXCHANGE)); /* another filesystem */
	ck_assert(!renameflags_refused(&rf, 5, RENAME_NOREPLACE));
	ck_assert(!renameflags_refused(&rf, 5, 0)); /* a plain rename never */
}
END_TEST

/* EINVAL for an exchange of a directory with an entry inside it is the
 * rename's, not the filesystem's */
START_TEST(test_renameflags__exchange_into_own_subtree_is_no_refusal)
{
	struct renameflags rf = {0};

	renameflags_learn(&rf, 5, RENAME_EXCHANGE, -EINVAL, "/a", "/a/b");
	renameflags_learn(&rf, 5, RENAME_EXCHANGE, -EINVAL, "/a/b/c", "/a");
	ck_assert(!renameflags_refused(&rf, 5, RENAME_EXCHANGE));
	renameflags_learn(&rf, 5, RENAME_EXCHANGE, -ENOENT, "/a", "/b");
	ck_assert(!renameflags_refused(&rf, 5, RENAME_EXCHANGE));
}
END_TEST

/* RENAME_NOREPLACE refused with EINVAL is a suspect until the same rename
 * without flags succeeds on the same filesystem (mv's fallback) */
START_TEST(test_renameflags__noreplace_refused_once_the_fallback_succeeds)
{
	struct renameflags rf = {0};

	renameflags_learn(&rf, 5, RENAME_NOREPLACE, -EINVAL, "/a", "/b");
	ck_assert(!renameflags_refused(&rf, 5, RENAME_NOREPLACE));
	renameflags_learn(&rf, 5, 0, 0, "/x", "/y");  /* another rename */
	renameflags_learn(&rf, 6, 0, 0, "/a", "/b");  /* another filesystem */
	renameflags_learn(&rf, 5, 0, -EINVAL, "/a", "/b"); /* the fallback failed too */
	renameflags_learn(&rf, 5, 0, 0, "/b", "/a");  /* the other way round */
	ck_assert(!renameflags_refused(&rf, 5, RENAME_NOREPLACE));
	renameflags_learn(&rf, 5, 0, 0, "/a", "/b");
	ck_assert(renameflags_refused(&rf, 5, RENAME_NOREPLACE));
	ck_assert(!renameflags_refused(&rf, 5, RENAME_EXCHANGE));
	ck_assert(!renameflags_refused(&rf, 6, RENAME_NOREPLACE));
	/* the suspect was used up: one more success learns nothing new */
	renameflags_learn(&rf, 7, 0, 0, "/a", "/b");
	ck_assert(!renameflags_refused(&rf, 7, RENAME_NOREPLACE));
}
END_TEST

/* A later suspect replaces the earlier one */
START_TEST(test_renameflags__last_suspect_counts)
{
	struct renameflags rf = {0};

	renameflags_learn(&rf, 5, RENAME_NOREPLACE, -EINVAL, "/a", "/b");
	renameflags_learn(&rf, 5, RENAME_NOREPLACE, -EINVAL, "/c", "/d");
	renameflags_learn(&rf, 5, 0, 0, "/a", "/b");
	ck_assert(!renameflags_refused(&rf, 5, RENAME_NOREPLACE));
	renameflags_learn(&rf, 5, 0, 0, "/c", "/d");
	ck_assert(renameflags_refused(&rf, 5, RENAME_NOREPLACE));
}
END_TEST

Suite *make_suite_renameflags(void)
{
	Suite *s = suite_create("renameflags");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_renameflags__exchange_refused_at_once);
	tcase_add_test(tc, test_renameflags__exchange_into_own_subtree_is_no_refusal);
	tcase_add_test(tc, test_renameflags__noreplace_refused_once_the_fallback_succeeds);
	tcase_add_test(tc, test_renameflags__last_suspect_counts);
	suite_add_tcase(s, tc);
	return s;
}
