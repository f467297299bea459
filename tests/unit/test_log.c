/* test_log.c - escaping of user text in log lines */
#include <config.h>

#include <check.h>
#include <string.h>

#include "log.h"
#include "unit.h"

static const char *esc(const char *in, size_t size)
{
	static char out[256];

	tl_log_escape(out, size, in);
	return out;
}

START_TEST(test_log__escapes_controls_backslash_and_bad_utf8)
{
	ck_assert_str_eq(esc("plain /a/b c", 256), "plain /a/b c");
	ck_assert_str_eq(esc("a\nfake: line", 256), "a\\x0afake: line");
	ck_assert_str_eq(esc("\r\t\x1b[2J\x7f", 256), "\\x0d\\x09\\x1b[2J\\x7f");
	/* the literal text "\x0a" differs from an escaped newline */
	ck_assert_str_eq(esc("c\\x0a", 256), "c\\\\x0a");
	/* valid UTF-8 stays; invalid bytes, overlongs, surrogates, C1 do not */
	ck_assert_str_eq(esc("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 256),
			 "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
	ck_assert_str_eq(esc("\xff\xc3", 256), "\\xff\\xc3");
	ck_assert_str_eq(esc("\xc0\xaf", 256), "\\xc0\\xaf");
	ck_assert_str_eq(esc("\xed\xa0\x80", 256), "\\xed\\xa0\\x80");
	ck_assert_str_eq(esc("\xc2\x9b", 256), "\\xc2\\x9b");
}
END_TEST

START_TEST(test_log__truncates_on_whole_escapes)
{
	char out[6];

	ck_assert_uint_eq(tl_log_escape(out, sizeof(out), "ab\ncd"), 2);
	ck_assert_str_eq(out, "ab");
	ck_assert_uint_eq(tl_log_escape(out, sizeof(out), "abcdefgh"), 5);
	ck_assert_str_eq(out, "abcde");
	ck_assert_uint_eq(tl_log_escape(out, 1, "abc"), 0);
	ck_assert_str_eq(out, "");
}
END_TEST

Suite *make_suite_log(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("escape");

	tcase_add_test(tc, test_log__escapes_controls_backslash_and_bad_utf8);
	tcase_add_test(tc, test_log__truncates_on_whole_escapes);
	suite_add_tcase(s, tc);
	return s;
}
