/* unit.h - the suites of the one check binary (tests/unit/unit) */
#ifndef TREELOCKFS_UNIT_H
#define TREELOCKFS_UNIT_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>

#include "config/config.h"

/* The store fixture every suite shares: fills CFG (config_init()) for
 * STORE with the tests' settings and validates it: strategy tree,
 * lock_timeout 5 s, lease_ttl 10 s, owner "hostA"; for es also index
 * "locks" at ES_URL and requests that time out after 2 s. Fails the test
 * on error; free with config_free(). */
void unit_store_config(struct tl_config *cfg, enum tl_store_kind store, const char *es_url);

/* Points an es configuration at URL (another node, or none). */
void unit_es_url(struct tl_config *cfg, const char *url);

/* unit_store_config() for the mem store, and the store opened over it. */
struct lockstore *unit_mem_store(struct tl_config *cfg);

Suite *make_suite_path(void);
Suite *make_suite_fs_keys(void);
Suite *make_suite_renameflags(void);
Suite *make_suite_lockplan(void);
Suite *make_suite_lockmgr(void);
Suite *make_suite_lockstore_mem(void);
Suite *make_suite_options(void);
Suite *make_suite_httpc(void);
Suite *make_suite_lockstore_es(void);
Suite *make_suite_es_docs(void);
Suite *make_suite_es_fsdoc(void);
Suite *make_suite_buf(void);
Suite *make_suite_escape(void);
Suite *make_suite_metrics(void);
Suite *make_suite_mountchain(void);
Suite *make_suite_lockwait(void);

#endif /* TREELOCKFS_UNIT_H */
