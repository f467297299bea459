/* unit.h - the suites of the one check binary (tests/unit/unit) */
#ifndef TREELOCKFS_UNIT_H
#define TREELOCKFS_UNIT_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>

/* Our option module's header. Named by path because <config.h> is
 * autoconf's and the include path finds that one first from here. */
#include "../../src/config.h"

Suite *make_suite_path(void);
Suite *make_suite_lockplan(void);
Suite *make_suite_lockmgr(void);
Suite *make_suite_lockstore_mem(void);
Suite *make_suite_config(void);
Suite *make_suite_httpc(void);
Suite *make_suite_lockstore_es(void);
Suite *make_suite_sha256(void);

#endif /* TREELOCKFS_UNIT_H */
