/* test_buf.c - the capped byte buffer */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "unit.h"

START_TEST(test_buf__grows_and_terminates)
{
	struct buf b = BUF_INIT;
	char chunk[700];
	size_t i, len;
	char *s;

	memset(chunk, 'x', sizeof(chunk));
	for (i = 0; i < 10; i++)
		ck_assert_int_eq(buf_add(&b, chunk, sizeof(chunk)), 0);
	ck_assert_uint_eq(b.len, 7000);
	ck_assert_uint_ge(b.cap, 7001);
	ck_assert_int_eq(b.data[7000], '\0');
	ck_assert_int_eq(buf_adds(&b, "end"), 0);
	s = buf_detach(&b, &len);
	ck_assert_uint_eq(len, 7003);
	ck_assert_str_eq(s + 7000, "end");
	ck_assert_ptr_null(b.data);
	ck_assert_uint_eq(b.len, 0);
	free(s);
}
END_TEST

START_TEST(test_buf__cap_fails_and_sticks)
{
	struct buf b;

	buf_init(&b, 5);
	ck_assert_int_eq(buf_adds(&b, "abcd"), 0);
	ck_assert_int_eq(buf_adds(&b, "e"), 0);
	ck_assert_int_eq(buf_adds(&b, "f"), -EMSGSIZE);
	ck_assert_int_eq(b.err, -EMSGSIZE);
	/* failed: later appends are ignored, contents kept */
	ck_assert_int_eq(buf_add(&b, "", 0), -EMSGSIZE);
	ck_assert_str_eq(b.data, "abcde");
	buf_free(&b);
	ck_assert_int_eq(b.err, 0);
	ck_assert_uint_eq(b.max, 5);
	ck_assert_int_eq(buf_adds(&b, "ok"), 0);
	ck_assert_str_eq(b.data, "ok");
	buf_free(&b);
}
END_TEST

START_TEST(test_buf__empty_detach_and_free_null)
{
	struct buf b = BUF_INIT;
	size_t len = 99;
	char *s = buf_detach(&b, &len);

	ck_assert_str_eq(s, "");
	ck_assert_uint_eq(len, 0);
	free(s);
	buf_free(NULL);
	buf_free(&b);
}
END_TEST

START_TEST(test_buf__binary_bytes)
{
	struct buf b = BUF_INIT;
	static const char bytes[] = {'a', '\0', 'b'};

	ck_assert_int_eq(buf_add(&b, bytes, sizeof(bytes)), 0);
	ck_assert_uint_eq(b.len, 3);
	ck_assert_int_eq(memcmp(b.data, bytes, 3), 0);
	buf_free(&b);
}
END_TEST

Suite *make_suite_buf(void)
{
	Suite *s = suite_create("buf");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_buf__grows_and_terminates);
	tcase_add_test(tc, test_buf__cap_fails_and_sticks);
	tcase_add_test(tc, test_buf__empty_detach_and_free_null);
	tcase_add_test(tc, test_buf__binary_bytes);
	suite_add_tcase(s, tc);
	return s;
}
