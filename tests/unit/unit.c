/* unit.c - runs every unit suite; TAP on stdout when CK_TAP_LOG_FILE_NAME=-
 * (set by make check), so automake's tap-driver counts each test. */
#include <config.h>

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "lock/lockstore.h"
#include "es/es_internal.h"
#include "base/log.h"
#include "unit.h"

void unit_es_url(struct tl_config *cfg, const char *url)
{
	struct es_options *es = config_store_opts(cfg, TL_STORE_ES);

	free(es->url);
	es->url = strdup(url);
	ck_assert_ptr_nonnull(es->url);
}

void unit_store_config(struct tl_config *cfg, enum tl_store_kind store, const char *es_url)
{
	ck_assert_int_eq(config_init(cfg), 0);
	cfg->lock_store = store;
	cfg->lock_strategy = TL_STRATEGY_TREE;
	free(cfg->owner);
	cfg->owner = strdup("hostA");
	cfg->lease_ttl = 10;
	cfg->lock_timeout = 5;
	if (store == TL_STORE_ES) {
		struct es_options *es = config_store_opts(cfg, TL_STORE_ES);

		unit_es_url(cfg, es_url);
		free(es->index);
		es->index = strdup("locks");
		es->timeout_ms = 2000;
	}
	ck_assert_int_eq(config_validate(cfg), 0);
}

struct lockstore *unit_mem_store(struct tl_config *cfg)
{
	struct lockstore *st = NULL;

	unit_store_config(cfg, TL_STORE_MEM, NULL);
	ck_assert_int_eq(lockstore_open(cfg, &st), 0);
	return st;
}

int main(void)
{
	SRunner *sr;
	int failed;

	/* Keep expected error lines of the code under test out of the TAP
	 * stream's way; TREELOCKFS_TEST_LOG=7 shows everything. */
	tl_log_init("unit", getenv("TREELOCKFS_TEST_LOG") ? atoi(getenv("TREELOCKFS_TEST_LOG"))
							  : LOG_CRIT);
	sr = srunner_create(make_suite_path());
	srunner_add_suite(sr, make_suite_fs_keys());
	srunner_add_suite(sr, make_suite_renameflags());
	srunner_add_suite(sr, make_suite_lockplan());
	srunner_add_suite(sr, make_suite_lockmgr());
	srunner_add_suite(sr, make_suite_lockstore_mem());
	srunner_add_suite(sr, make_suite_options());
	srunner_add_suite(sr, make_suite_buf());
	srunner_add_suite(sr, make_suite_escape());
	srunner_add_suite(sr, make_suite_metrics());
	srunner_add_suite(sr, make_suite_mountchain());
	srunner_add_suite(sr, make_suite_lockwait());
	srunner_add_suite(sr, make_suite_es_docs());
	srunner_add_suite(sr, make_suite_es_fsdoc());
	srunner_add_suite(sr, make_suite_httpc());
	srunner_add_suite(sr, make_suite_lockstore_es());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
