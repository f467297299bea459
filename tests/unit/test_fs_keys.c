/* test_fs_keys.c - lock keys on a real temporary tree: a path, a renamed
 * directory, a directory moved by another writer, paths deeper than
 * PATH_MAX, hostile names, the memo and what makes it forget, the walk of
 * the document strategy; each by readlink(), by getcwd() coming home and
 * by getcwd() staying */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs/fs_keys.h"
#include "unit.h"

static char tmpdir[64];
static int backing = -1;
static struct keys k;

/* How keys are found: one readlink() (no home), getcwd() coming back
 * home, getcwd() staying where a key put the thread. */
enum way { BY_READLINK, BY_GETCWD_HOME, BY_GETCWD_STAY, WAYS };

static void setup(void)
{
	strcpy(tmpdir, "/tmp/tlkeysXXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	backing = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(backing, 0);
	memset(&k, 0, sizeof(k));
}

/* rm -rf of the tree, from "/": this process's working directory may
 * stay in a directory of it (BY_GETCWD_STAY), which then keeps its inode
 * (so that no later directory can take its st_ino while a thread-local
 * names it) */
static void teardown(void)
{
	pid_t pid;
	int status;

	keys_destroy(&k);
	close(backing);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (chdir("/") == 0)
			execlp("rm", "rm", "-rf", tmpdir, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* keys_init() over the temporary tree, then the home WAY wants. */
static void keys_start(enum way way, bool other_writers, double memo_ttl_s)
{
	keys_destroy(&k);
	ck_assert_int_eq(keys_init(&k, backing, other_writers, memo_ttl_s), 0);
	if (way != BY_READLINK)
		keys_set_home(&k, open("/", O_PATH | O_DIRECTORY | O_CLOEXEC),
			      way == BY_GETCWD_STAY);
}

/* Makes directory REL (below the backing root, parents first) */
static void mk(const char *rel)
{
	ck_assert_int_eq(mkdirat(backing, rel, 0700), 0);
}

static void touch(const char *rel)
{
	int fd = openat(backing, rel, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);

	ck_assert_int_ge(fd, 0);
	close(fd);
}

static void mv(const char *from, const char *to)
{
	ck_assert_int_eq(renameat(backing, from, backing, to), 0);
}

/* Directory REL ("." for the root) as the key functions take it, with
 * MEMO (may be NULL); close D->fd after. */
static void dir_at(const char *rel, struct keys_dir *d, struct keys_memo *memo)
{
	struct stat st;

	d->fd = openat(backing, rel, O_PATH | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(d->fd, 0);
	ck_assert_int_eq(fstat(d->fd, &st), 0);
	d->dev = st.st_dev;
	d->ino = st.st_ino;
	d->memo = memo;
}

/* Asserts that NAME's key in D is WANT. */
static void key_is(const struct keys_dir *d, const char *name, const char *want)
{
	struct keys_buf b;

	ck_assert_int_eq(keys_of(&k, d, name, &b, NULL), 0);
	ck_assert_str_eq(b.s, want);
	keys_buf_free(&b);
}

START_TEST(test_fs_keys__key_of_a_path)
{
	struct keys_dir root, d;
	struct keys_buf b, s;
	size_t dlen;

	keys_start((enum way)_i, false, 0);
	mk("a");
	mk("a/b");
	dir_at(".", &root, NULL);
	dir_at("a/b", &d, NULL);
	key_is(&d, "f", "/a/b/f");
	key_is(&d, NULL, "/a/b");
	key_is(&root, "x", "/x");
	key_is(&root, NULL, "/");
	ck_assert_int_eq(keys_of(&k, &d, "f", &b, &dlen), 0);
	ck_assert_uint_eq(dlen, 4);
	ck_assert_int_eq(keys_sibling(b.s, dlen, "g", &s), 0);
	ck_assert_str_eq(s.s, "/a/b/g");
	keys_buf_free(&b);
	keys_buf_free(&s);
	close(d.fd);
	close(root.fd);
}
END_TEST

/* getcwd() moves the thread's working directory: back home, or it stays
 * and says so (keys_thread_at()); another thread's never moves */
START_TEST(test_fs_keys__getcwd_comes_home_or_stays)
{
	struct keys_dir d, e;
	char cwd[PATH_MAX];

	mk("a");
	mk("e");
	dir_at("a", &d, NULL);
	dir_at("e", &e, NULL);
	keys_start(BY_GETCWD_HOME, false, 0);
	key_is(&d, "f", "/a/f");
	ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
	ck_assert_str_eq(cwd, "/");
	ck_assert(!keys_thread_at(&d));
	keys_start(BY_GETCWD_STAY, false, 0);
	key_is(&d, "f", "/a/f");
	ck_assert(keys_thread_at(&d));
	ck_assert(!keys_thread_at(&e));
	key_is(&e, "g", "/e/g");
	ck_assert(keys_thread_at(&e));
	ck_assert(!keys_thread_at(&d));
	close(d.fd);
	close(e.fd);
}
END_TEST

START_TEST(test_fs_keys__key_of_a_renamed_directory)
{
	struct keys_dir d;

	keys_start((enum way)_i, false, 0);
	mk("a");
	mk("a/b");
	dir_at("a/b", &d, NULL);
	key_is(&d, "f", "/a/b/f");
	mv("a", "c");
	key_is(&d, "f", "/c/b/f");
	mv("c/b", "b2");
	key_is(&d, "f", "/b2/f");
	close(d.fd);
}
END_TEST

/* Another writer (another host over the same storage) moves a key's
 * directory after the keys were made: with other writers possible the
 * check looks again and refuses; fresh keys name the new place. */
START_TEST(test_fs_keys__moved_under_the_mounts_feet)
{
	struct keys_dir d, y;
	struct keys_buf from, to;
	uint64_t gen;

	keys_start((enum way)_i, true, 0);
	mk("a");
	mk("a/x");
	mk("y");
	dir_at("a/x", &d, NULL);
	dir_at("y", &y, NULL);
	gen = keys_generation(&k);
	ck_assert_int_eq(keys_of(&k, &d, "f", &from, NULL), 0);
	ck_assert_int_eq(keys_of(&k, &y, "g", &to, NULL), 0);
	ck_assert(keys_still_valid(&k, gen, &d, from.s, &y, to.s));
	mv("a", "b"); /* not through us: nothing noted */
	ck_assert(!keys_still_valid(&k, gen, &d, from.s, &y, to.s));
	ck_assert(!keys_still_valid(&k, gen, &y, to.s, &d, from.s));
	ck_assert(!keys_still_valid(&k, gen, &d, from.s, &d, from.s)); /* one directory */
	keys_buf_free(&from);
	ck_assert_int_eq(keys_of(&k, &d, "f", &from, NULL), 0);
	ck_assert_str_eq(from.s, "/b/x/f");
	ck_assert(keys_still_valid(&k, gen, &d, from.s, &y, to.s));
	/* a directory put back where it was, but another one: not the same */
	mk("a");
	mk("a/x");
	keys_buf_free(&from);
	ck_assert_int_eq(keys_of(&k, &d, "f", &from, NULL), 0);
	mv("b", "b_old");
	mv("a", "b");
	ck_assert(!keys_still_valid(&k, gen, &d, from.s, &y, to.s));
	keys_buf_free(&from);
	keys_buf_free(&to);
	close(d.fd);
	close(y.fd);
}
END_TEST

/* Without other writers only renames through this mount move keys: the
 * renames noted since the keys were made tell whether one of them did. */
START_TEST(test_fs_keys__only_noted_renames_without_other_writers)
{
	struct keys_dir d, y;
	struct keys_buf from, to;
	uint64_t gen;
	int i;

	keys_start((enum way)_i, false, 0);
	mk("a");
	mk("a/x");
	mk("y");
	dir_at("a/x", &d, NULL);
	dir_at("y", &y, NULL);
	gen = keys_generation(&k);
	ck_assert_int_eq(keys_of(&k, &d, "f", &from, NULL), 0);
	ck_assert_int_eq(keys_of(&k, &y, "g", &to, NULL), 0);
	/* a rename elsewhere, noted: the keys stand */
	mk("o");
	mv("o", "p");
	keys_renamed(&k, "/o", "/p");
	ck_assert_uint_eq(keys_generation(&k), gen + 1);
	ck_assert(keys_still_valid(&k, gen, &d, from.s, &y, to.s));
	/* an ancestor of FROM's directory, noted: looked at, refused */
	mv("a", "b");
	keys_renamed(&k, "/a", "/b");
	ck_assert(!keys_still_valid(&k, gen, &d, from.s, &y, to.s));
	/* more renames than the window keeps: looked at */
	mv("b", "a");
	gen = keys_generation(&k);
	for (i = 0; i < KEYS_RECENT + 1; i++)
		keys_renamed(&k, "/p", "/q");
	ck_assert(keys_still_valid(&k, gen, &d, from.s, &y, to.s)); /* looked: still there */
	mv("a", "b");
	ck_assert(!keys_still_valid(&k, gen, &d, from.s, &y, to.s));
	keys_buf_free(&from);
	keys_buf_free(&to);
	close(d.fd);
	close(y.fd);
}
END_TEST

/* Directories nested deeper than PATH_MAX: the keys, their check and the
 * walk of the document strategy, one component at a time */
#define DEEP_LEVELS 24
START_TEST(test_fs_keys__deeper_than_path_max)
{
	char name[256], want[DEEP_LEVELS * 256 + 64];
	struct keys_dir d, top;
	struct keys_buf from;
	struct keys_list below = {0};
	struct stat st;
	size_t len = 0;
	int fd, next, i;
	uint64_t gen;

	keys_start((enum way)_i, true, 0);
	fd = dup(backing);
	for (i = 0; i < DEEP_LEVELS; i++) {
		snprintf(name, sizeof(name), "%02d%0240d", i, 0);
		ck_assert_int_eq(mkdirat(fd, name, 0700), 0);
		next = openat(fd, name, O_PATH | O_DIRECTORY | O_CLOEXEC);
		ck_assert_int_ge(next, 0);
		close(fd);
		fd = next;
		len += (size_t)snprintf(want + len, sizeof(want) - len, "/%s", name);
	}
	ck_assert_uint_gt(len, PATH_MAX);
	ck_assert_int_eq(fstat(fd, &st), 0);
	d.fd = fd;
	d.dev = st.st_dev;
	d.ino = st.st_ino;
	d.memo = NULL;
	next = openat(fd, "f1", O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	ck_assert_int_ge(next, 0);
	close(next);
	snprintf(want + len, sizeof(want) - len, "/f");
	key_is(&d, "f", want);
	gen = keys_generation(&k);
	ck_assert_int_eq(keys_of(&k, &d, "f", &from, NULL), 0);
	ck_assert(keys_still_valid(&k, gen, &d, from.s, &d, from.s));
	/* the walk below the directory that holds the deepest one */
	want[len] = '\0';
	*strrchr(want, '/') = '\0';
	ck_assert_int_eq(keys_below(&k, want, &below), 0);
	ck_assert_uint_eq(below.n, 2); /* the deepest directory and its file */
	want[strlen(want)] = '/';
	snprintf(want + len, sizeof(want) - len, "/f1");
	ck_assert(strcmp(below.v[0], want) == 0 || strcmp(below.v[1], want) == 0);
	keys_list_free(&below);
	/* moved at the top: refused */
	snprintf(name, sizeof(name), "%02d%0240d", 0, 0);
	dir_at(name, &top, NULL);
	mv(name, "moved");
	ck_assert(!keys_still_valid(&k, gen, &d, from.s, &d, from.s));
	keys_buf_free(&from);
	key_is(&top, NULL, "/moved");
	memcpy(want, "/moved", 6);
	memmove(want + 6, want + 1 + strlen(name), strlen(want + 1 + strlen(name)) + 1);
	*strrchr(want, '/') = '\0';
	key_is(&d, NULL, want);
	close(top.fd);
	close(fd);
}
END_TEST

/* Names with a newline, bytes that are not UTF-8, a backslash, and a
 * directory really named "x (deleted)" (what readlink() shows for a
 * removed one) */
START_TEST(test_fs_keys__hostile_names)
{
	static const char *const names[] = {"new\nline", "\xff\xfe", "back\\slash",
					     "x (deleted)", " lead and trail ", "-", "\t"};
	struct keys_dir d;
	struct keys_list below = {0};
	char want[64], key[64];
	size_t i;

	keys_start((enum way)_i, true, 0);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		uint64_t gen = keys_generation(&k);
		struct keys_buf b;

		mk(names[i]);
		dir_at(names[i], &d, NULL);
		snprintf(want, sizeof(want), "/%s/a\nb", names[i]);
		ck_assert_int_eq(keys_of(&k, &d, "a\nb", &b, NULL), 0);
		ck_assert_mem_eq(b.s, want, strlen(want) + 1);
		ck_assert(keys_still_valid(&k, gen, &d, b.s, &d, b.s));
		keys_buf_free(&b);
		snprintf(key, sizeof(key), "%s/f\n", names[i]);
		touch(key);
		snprintf(key, sizeof(key), "/%s", names[i]);
		ck_assert_int_eq(keys_below(&k, key, &below), 0);
		ck_assert_uint_eq(below.n, 1);
		snprintf(want, sizeof(want), "/%s/f\n", names[i]);
		ck_assert_str_eq(below.v[0], want);
		keys_list_free(&below);
		memset(&below, 0, sizeof(below));
		close(d.fd);
	}
}
END_TEST

/* A removed directory has no key, also when readlink() would show its old
 * path with " (deleted)" */
START_TEST(test_fs_keys__removed_directory_is_enoent)
{
	struct keys_dir d;
	struct keys_buf b;

	keys_start((enum way)_i, false, 0);
	mk("gone");
	dir_at("gone", &d, NULL);
	ck_assert_int_eq(unlinkat(backing, "gone", AT_REMOVEDIR), 0);
	ck_assert_int_eq(keys_of(&k, &d, "f", &b, NULL), -ENOENT);
	ck_assert_ptr_null(b.s);
	close(d.fd);
}
END_TEST

/* The memo: used without other writers (a rename made directly on the
 * backing does not show within its time), forgotten after a rename
 * through the mount of the directory or an ancestor, kept across other
 * renames, forgotten when the window overflows or by keys_memo_forget(),
 * never used with other writers */
START_TEST(test_fs_keys__memo_forgets_after_a_rename)
{
	struct keys_memo memo = {0};
	struct keys_dir d;
	int i;

	keys_start((enum way)_i, false, 60);
	mk("a");
	mk("a/b");
	mk("o");
	dir_at("a/b", &d, &memo);
	key_is(&d, "f", "/a/b/f");
	ck_assert_ptr_nonnull(memo.path);
	ck_assert_str_eq(memo.path, "/a/b");
	mv("a", "c"); /* directly on the backing: the memo still says /a/b */
	key_is(&d, "f", "/a/b/f");
	keys_renamed(&k, "/o", "/p"); /* elsewhere: kept */
	key_is(&d, "f", "/a/b/f");
	keys_renamed(&k, "/a", "/c"); /* an ancestor: forgotten */
	key_is(&d, "f", "/c/b/f");
	ck_assert_str_eq(memo.path, "/c/b");
	mv("c/b", "b");
	keys_renamed(&k, "/c/b", "/b"); /* the directory itself */
	key_is(&d, "f", "/b/f");
	mv("b", "b2");
	for (i = 0; i < KEYS_RECENT + 1; i++) /* more than the window keeps */
		keys_renamed(&k, "/o", "/p");
	key_is(&d, "f", "/b2/f");
	mv("b2", "b3");
	keys_memo_forget(&k, &memo);
	ck_assert_ptr_null(memo.path);
	key_is(&d, "f", "/b3/f");
	keys_memo_free(&memo);

	/* with other writers nothing is remembered */
	keys_start((enum way)_i, true, 60);
	key_is(&d, "f", "/b3/f");
	ck_assert_ptr_null(memo.path);
	mv("b3", "b4");
	key_is(&d, "f", "/b4/f");
	close(d.fd);
}
END_TEST

/* The memo keeps its time: once it is over, the path is found again */
START_TEST(test_fs_keys__memo_expires)
{
	struct keys_memo memo = {0};
	struct keys_dir d;

	keys_start((enum way)_i, false, 0.05);
	mk("a");
	dir_at("a", &d, &memo);
	key_is(&d, "f", "/a/f");
	mv("a", "c");
	ck_assert_int_eq(usleep(60000), 0);
	key_is(&d, "f", "/c/f");
	keys_memo_free(&memo);
	close(d.fd);
}
END_TEST

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The document strategy's walk: every entry below, nothing of the start,
 * nothing for a file or a missing directory */
START_TEST(test_fs_keys__below)
{
	struct keys_list l = {0};

	keys_start(BY_READLINK, false, 0);
	mk("a");
	mk("a/sub");
	mk("a/sub/deeper");
	touch("a/f");
	touch("a/sub/g");
	ck_assert_int_eq(keys_below(&k, "/a", &l), 0);
	ck_assert_uint_eq(l.n, 4);
	qsort(l.v, l.n, sizeof(l.v[0]), cmp_str);
	ck_assert_str_eq(l.v[0], "/a/f");
	ck_assert_str_eq(l.v[1], "/a/sub");
	ck_assert_str_eq(l.v[2], "/a/sub/deeper");
	ck_assert_str_eq(l.v[3], "/a/sub/g");
	keys_list_free(&l);
	memset(&l, 0, sizeof(l));
	ck_assert_int_eq(keys_below(&k, "/a/f", &l), 0);
	ck_assert_uint_eq(l.n, 0);
	keys_list_free(&l);
	memset(&l, 0, sizeof(l));
	ck_assert_int_eq(keys_below(&k, "/missing", &l), 0);
	ck_assert_uint_eq(l.n, 0);
	keys_list_free(&l);
}
END_TEST

Suite *make_suite_fs_keys(void)
{
	Suite *s = suite_create("fs_keys");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_fs_keys__key_of_a_path, 0, WAYS);
	tcase_add_test(tc, test_fs_keys__getcwd_comes_home_or_stays);
	tcase_add_loop_test(tc, test_fs_keys__key_of_a_renamed_directory, 0, WAYS);
	tcase_add_loop_test(tc, test_fs_keys__moved_under_the_mounts_feet, 0, WAYS);
	tcase_add_loop_test(tc, test_fs_keys__only_noted_renames_without_other_writers, 0, WAYS);
	tcase_add_loop_test(tc, test_fs_keys__deeper_than_path_max, 0, WAYS);
	tcase_add_loop_test(tc, test_fs_keys__hostile_names, 0, WAYS);
	tcase_add_loop_test(tc, test_fs_keys__removed_directory_is_enoent, 0, WAYS);
	tcase_add_loop_test(tc, test_fs_keys__memo_forgets_after_a_rename, 0, WAYS);
	tcase_add_loop_test(tc, test_fs_keys__memo_expires, 0, WAYS);
	tcase_add_test(tc, test_fs_keys__below);
	suite_add_tcase(s, tc);
	return s;
}
