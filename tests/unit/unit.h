/* unit.h - the suites of the one check binary (tests/unit/unit) */
#ifndef TREELOCKFS_UNIT_H
#define TREELOCKFS_UNIT_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>

#include "options.h"

Suite *make_suite_path(void);
Suite *make_suite_lockplan(void);
Suite *make_suite_lockmgr(void);
Suite *make_suite_lockstore_mem(void);
Suite *make_suite_options(void);
Suite *make_suite_httpc(void);
Suite *make_suite_lockstore_es(void);
Suite *make_suite_es_docs(void);
Suite *make_suite_buf(void);
Suite *make_suite_log(void);

#endif /* TREELOCKFS_UNIT_H */
