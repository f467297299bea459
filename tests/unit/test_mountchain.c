/* test_mountchain.c - the chains of directories mounts are served from:
 * parsing, "below" by device and inode, the device of a mount point */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/mountchain.h"
#include "unit.h"

static char tmpdir[64];

static void setup(void)
{
	strcpy(tmpdir, "/tmp/tlchainXXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

/* "MAJOR:MINOR INODE\n" of PATH */
static void line_of(const char *path, char *buf, size_t size)
{
	struct stat st;

	ck_assert_int_eq(stat(path, &st), 0);
	snprintf(buf, size, "%u:%u %" PRIuMAX "\n", major(st.st_dev), minor(st.st_dev),
		 (uintmax_t)st.st_ino);
}

START_TEST(test_mountchain__has_dev)
{
	const char *chain = "0:44 1\n254:0 10071314\n";

	ck_assert(mountchain_has_dev(chain, makedev(0, 44)));
	ck_assert(mountchain_has_dev(chain, makedev(254, 0)));
	ck_assert(!mountchain_has_dev(chain, makedev(0, 45)));
	ck_assert(!mountchain_has_dev("", makedev(0, 44)));
	/* a chain ends at its first line that is not one */
	ck_assert(!mountchain_has_dev("garbage\n0:44 1\n", makedev(0, 44)));
}
END_TEST

START_TEST(test_mountchain__below_compares_directories_not_paths)
{
	char a[128], deep[160], link[160], chain[256], l0[64], l1[64];

	snprintf(a, sizeof(a), "%s/a", tmpdir);
	snprintf(deep, sizeof(deep), "%s/a/b/c", tmpdir);
	snprintf(link, sizeof(link), "%s/link", tmpdir);
	ck_assert_int_eq(mkdir(a, 0700), 0);
	snprintf(chain, sizeof(chain), "%s/a/b", tmpdir);
	ck_assert_int_eq(mkdir(chain, 0700), 0);
	ck_assert_int_eq(mkdir(deep, 0700), 0);
	ck_assert_int_eq(symlink("a/b/c", link), 0);
	line_of("/proc", l0, sizeof(l0));
	line_of(a, l1, sizeof(l1));
	snprintf(chain, sizeof(chain), "%s%s", l0, l1);
	ck_assert(mountchain_below(chain, 1, deep));
	ck_assert(mountchain_below(chain, 1, link)); /* through a symbolic link */
	ck_assert(!mountchain_below(chain, 1, a));   /* strictly below */
	ck_assert(!mountchain_below(chain, 2, deep));
	ck_assert(!mountchain_below(chain, 1, tmpdir));
	ck_assert(!mountchain_below(chain, 1, "/nonexistent/dir"));
}
END_TEST

START_TEST(test_mountchain__of_plain_dir_is_its_own_line)
{
	char *chain = NULL, want[64];
	int fd = open(tmpdir, O_RDONLY | O_DIRECTORY);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(mountchain_of_dir(fd, &chain), 0);
	line_of(tmpdir, want, sizeof(want));
	ck_assert_str_eq(chain, want);
	/* a directory that is no FUSE mount shows no chain */
	ck_assert_int_eq(mountchain_of_mount(fd, &chain), -ENOENT);
	free(chain);
	close(fd);
}
END_TEST

START_TEST(test_mountchain__mount_dev_from_mountinfo)
{
	struct stat st;
	dev_t dev = 0;

	ck_assert_int_eq(stat("/proc", &st), 0);
	ck_assert_int_eq(mountchain_mount_dev("/proc", &dev), 0);
	ck_assert(dev == st.st_dev);
	ck_assert_int_eq(mountchain_mount_dev(tmpdir, &dev), -ENOENT);
}
END_TEST

START_TEST(test_mountchain__mount_find_gives_type_and_root)
{
	struct mountchain_mount m;
	struct stat st;

	ck_assert_int_eq(stat("/proc", &st), 0);
	ck_assert_int_eq(mountchain_mount_find("/proc", &m), 0);
	ck_assert(m.dev == st.st_dev);
	ck_assert_str_eq(m.fstype, "proc");
	ck_assert(m.whole);
	ck_assert_int_eq(mountchain_mount_find(tmpdir, &m), -ENOENT);
	ck_assert_int_eq(mountchain_mount_find("/proc/self", &m), -ENOENT);
}
END_TEST

Suite *make_suite_mountchain(void)
{
	Suite *s = suite_create("mountchain");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_mountchain__has_dev);
	tcase_add_test(tc, test_mountchain__below_compares_directories_not_paths);
	tcase_add_test(tc, test_mountchain__of_plain_dir_is_its_own_line);
	tcase_add_test(tc, test_mountchain__mount_dev_from_mountinfo);
	tcase_add_test(tc, test_mountchain__mount_find_gives_type_and_root);
	suite_add_tcase(s, tc);
	return s;
}
