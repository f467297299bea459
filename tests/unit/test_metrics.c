/* test_metrics.c - the Prometheus exposition of metrics.c */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "unit.h"

/* SRC rendered into a new string (caller frees). */
static char *render(const struct tl_metrics_src *src)
{
	char *data = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&data, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(metrics_format(f, src), 0);
	fclose(f);
	return data;
}

START_TEST(test_metrics__histogram_is_cumulative_in_seconds)
{
	struct tl_stats s;
	struct tl_store_metrics sm;
	struct tl_metrics_src src = {.mountpoint = "/m", .owner = "h", .store = "mem",
				     .strategy = "tree", .lock_timeout = 30, .stats = &s,
				     .store_m = &sm};
	char *out;

	memset(&s, 0, sizeof(s));
	lockstore_metrics_init(&sm);
	stats_record_wait(&s, 16);      /* exactly 16 us: in le="1.6e-05" */
	stats_record_wait(&s, 17);      /* in le="6.4e-05" */
	stats_record_wait(&s, 2000000); /* 2 s: in le="4.194304" */
	out = render(&src);
	ck_assert_ptr_nonnull(strstr(out, "# TYPE treelockfs_lock_wait_seconds histogram\n"));
	ck_assert_ptr_nonnull(strstr(
		out, "treelockfs_lock_wait_seconds_bucket{mountpoint=\"/m\",owner=\"h\",le=\"1.6e-05\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(
		out, "treelockfs_lock_wait_seconds_bucket{mountpoint=\"/m\",owner=\"h\",le=\"6.4e-05\"} 2\n"));
	ck_assert_ptr_nonnull(strstr(
		out, "treelockfs_lock_wait_seconds_bucket{mountpoint=\"/m\",owner=\"h\",le=\"1.048576\"} 2\n"));
	ck_assert_ptr_nonnull(strstr(
		out, "treelockfs_lock_wait_seconds_bucket{mountpoint=\"/m\",owner=\"h\",le=\"4.194304\"} 3\n"));
	ck_assert_ptr_nonnull(strstr(
		out, "treelockfs_lock_wait_seconds_bucket{mountpoint=\"/m\",owner=\"h\",le=\"+Inf\"} 3\n"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_lock_wait_seconds_sum{mountpoint=\"/m\",owner=\"h\"} 2.000033\n"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_lock_wait_seconds_count{mountpoint=\"/m\",owner=\"h\"} 3\n"));
	/* the mem store has no lease, no request durations */
	ck_assert_ptr_null(strstr(out, "treelockfs_lease_fresh"));
	ck_assert_ptr_null(strstr(out, "treelockfs_store_request_duration_seconds"));
	free(out);
}
END_TEST

START_TEST(test_metrics__results_and_labels)
{
	struct tl_stats s;
	struct tl_store_metrics sm;
	struct tl_metrics_src src = {.mountpoint = "/a \"b\"\\c\nd", .owner = "h", .store = "es",
				     .strategy = "tree", .lock_timeout = 2.5, .stats = &s,
				     .store_m = &sm};
	char *out;

	memset(&s, 0, sizeof(s));
	lockstore_metrics_init(&sm);
	sm.lease_fresh = 1;
	sm.lease_age_ms = 1500;
	stats_record_rename(&s, 0, 10);
	stats_record_rename(&s, -ENOTEMPTY, 10);
	stats_record_rename(&s, -EIO, 10);
	out = render(&src);
	ck_assert_ptr_nonnull(strstr(out, "mountpoint=\"/a \\\"b\\\"\\\\c\\nd\""));
	ck_assert_ptr_nonnull(strstr(out, ",result=\"ok\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(out, ",result=\"EEXIST\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(out, ",result=\"other\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(out, ",result=\"EBUSY\"} 0\n"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_lease_age_seconds{mountpoint="));
	ck_assert_ptr_nonnull(strstr(out, "\"} 1.5\n"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_lock_timeout_seconds{"));
	free(out);
}
END_TEST

Suite *make_suite_metrics(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_metrics__histogram_is_cumulative_in_seconds);
	tcase_add_test(tc, test_metrics__results_and_labels);
	suite_add_tcase(s, tc);
	return s;
}
