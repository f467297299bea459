/* unit.c - runs every unit suite; TAP on stdout when CK_TAP_LOG_FILE_NAME=-
 * (set by make check), so automake's tap-driver counts each test. */
#include <config.h>

#include <check.h>
#include <stdlib.h>

#include "log.h"
#include "unit.h"

int main(void)
{
	SRunner *sr;
	int failed;

	/* Keep expected error lines of the code under test out of the TAP
	 * stream's way; TREELOCKFS_TEST_LOG=7 shows everything. */
	tl_log_init("unit", getenv("TREELOCKFS_TEST_LOG") ? atoi(getenv("TREELOCKFS_TEST_LOG"))
							  : LOG_CRIT);
	sr = srunner_create(make_suite_path());
	srunner_add_suite(sr, make_suite_lockplan());
	srunner_add_suite(sr, make_suite_lockmgr());
	srunner_add_suite(sr, make_suite_lockstore_mem());
	srunner_add_suite(sr, make_suite_options());
	srunner_add_suite(sr, make_suite_buf());
	srunner_add_suite(sr, make_suite_log());
	srunner_add_suite(sr, make_suite_es_docs());
	srunner_add_suite(sr, make_suite_httpc());
	srunner_add_suite(sr, make_suite_lockstore_es());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
