/* test_metrics.c - the Prometheus exposition of metrics.c */
#include <config.h>

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/metrics.h"
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

START_TEST(test_metrics__delegations_only_when_on)
{
	struct tl_stats s;
	struct tl_store_metrics sm;
	struct tl_hist wait;
	struct tl_deleg_counters dc = {.granted = 3, .recalled = 2, .idle_returned = 5, .held = 1,
				       .renames_local = 40, .recall_wait = &wait};
	struct tl_metrics_src src = {.mountpoint = "/m", .owner = "h", .store = "es",
				     .strategy = "tree", .lock_timeout = 30, .stats = &s,
				     .store_m = &sm};
	char *out;

	memset(&s, 0, sizeof(s));
	memset(&wait, 0, sizeof(wait));
	lockstore_metrics_init(&sm);
	out = render(&src);
	ck_assert_ptr_null(strstr(out, "deleg"));
	free(out);
	src.deleg = &dc;
	stats_hist_record(&wait, 200);     /* in le="0.000256" */
	stats_hist_record(&wait, 700000);  /* 0.7 s: in le="1.048576" */
	out = render(&src);
	ck_assert_ptr_nonnull(strstr(out, "# TYPE treelockfs_delegations_granted_total counter\n"
					  "treelockfs_delegations_granted_total{mountpoint=\"/m\","
					  "owner=\"h\"} 3\n"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_delegations_recalled_total{mountpoint=\"/m\","
					  "owner=\"h\"} 2\n"));
	ck_assert_ptr_nonnull(strstr(out, "# TYPE treelockfs_delegations_idle_returned_total counter\n"
					  "treelockfs_delegations_idle_returned_total{mountpoint=\"/m\","
					  "owner=\"h\"} 5\n"));
	ck_assert_ptr_nonnull(strstr(out, "# TYPE treelockfs_delegations_held gauge\n"
					  "treelockfs_delegations_held{mountpoint=\"/m\",owner=\"h\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_renames_local_total{mountpoint=\"/m\","
					  "owner=\"h\"} 40\n"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_delegation_recall_wait_seconds_bucket{mountpoint="
					  "\"/m\",owner=\"h\",le=\"0.000256\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_delegation_recall_wait_seconds_bucket{mountpoint="
					  "\"/m\",owner=\"h\",le=\"0.524288\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_delegation_recall_wait_seconds_bucket{mountpoint="
					  "\"/m\",owner=\"h\",le=\"1.048576\"} 2\n"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_delegation_recall_wait_seconds_bucket{mountpoint="
					  "\"/m\",owner=\"h\",le=\"16.777216\"} 2\n"));
	ck_assert_ptr_null(strstr(out, "treelockfs_delegation_recall_wait_seconds_bucket{mountpoint="
				       "\"/m\",owner=\"h\",le=\"0.000128\"}"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_delegation_recall_wait_seconds_sum{mountpoint="
					  "\"/m\",owner=\"h\"} 0.7002\n"));
	ck_assert_ptr_nonnull(strstr(out, "treelockfs_delegation_recall_wait_seconds_count{mountpoint="
					  "\"/m\",owner=\"h\"} 2\n"));
	free(out);
}
END_TEST

/* ---- metrics_file: the directory opened once ---------------------------------------- */

static char tmpdir[64];

static void files_setup(void)
{
	strcpy(tmpdir, "/tmp/tlmetricsXXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void files_teardown(void)
{
	pid_t pid = fork();
	int status;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execlp("rm", "rm", "-rf", tmpdir, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* tmpdir/REL, in a static buffer of its own per SLOT (0..3) */
static const char *at(int slot, const char *rel)
{
	static char p[4][256];

	snprintf(p[slot], sizeof(p[slot]), "%s/%s", tmpdir, rel);
	return p[slot];
}

static int render_text(void *arg, FILE *f)
{
	fputs(arg, f);
	return ferror(f) ? -EIO : 0;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
}

/* PATH's content (up to 255 bytes), "" when it cannot be read */
static const char *content(const char *path)
{
	static char buf[256];
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

/* The names in directory PATH, sorted, joined by ' ' */
static const char *names(const char *path)
{
	static char out[512];
	struct dirent **list;
	int n = scandir(path, &list, NULL, alphasort), i;

	ck_assert_int_ge(n, 0);
	out[0] = '\0';
	for (i = 0; i < n; i++) {
		if (strcmp(list[i]->d_name, ".") != 0 && strcmp(list[i]->d_name, "..") != 0) {
			if (out[0])
				strcat(out, " ");
			strcat(out, list[i]->d_name);
		}
		free(list[i]);
	}
	free(list);
	return out;
}

static mode_t mode_of(const char *path)
{
	struct stat st;

	ck_assert_int_eq(lstat(path, &st), 0);
	return st.st_mode & 07777;
}

/* The directory of the file is the one opened at the start: after its
 * path was made a symbolic link to another directory holding a file of
 * the same name, writes, the removal at the stop and every temporary
 * file stay in the directory opened, and the other file is untouched. */
START_TEST(test_metrics__file_stays_in_the_directory_opened)
{
	struct metrics_writer w;
	char why[512];
	int fd;

	ck_assert_int_eq(mkdir(at(0, "d"), 0755), 0);
	ck_assert_int_eq(mkdir(at(0, "victim"), 0700), 0);
	write_file(at(0, "victim/x.prom"), "keep", 0600);
	fd = metrics_dir_open(at(0, "d/x.prom"), why, sizeof(why));
	ck_assert_msg(fd >= 0, "%s", why);
	ck_assert_int_eq(metrics_writer_start(&w, fd, at(0, "d/x.prom"), 3600, render_text,
					      "first\n"),
			 0);
	ck_assert_str_eq(content(at(0, "d/x.prom")), "first\n");
	ck_assert_uint_eq(mode_of(at(0, "d/x.prom")), 0644);
	/* the directory swapped for a link to the victim's */
	ck_assert_int_eq(rename(at(0, "d"), at(1, "d.orig")), 0);
	ck_assert_int_eq(symlink("victim", at(0, "d")), 0);
	ck_assert_int_eq(metrics_write_at(w.dir_fd, w.name, render_text, "second\n"), 0);
	ck_assert_str_eq(content(at(0, "d.orig/x.prom")), "second\n");
	ck_assert_str_eq(names(at(0, "d.orig")), "x.prom");
	metrics_writer_stop(&w);
	ck_assert_str_eq(names(at(0, "d.orig")), "");
	ck_assert_str_eq(content(at(0, "victim/x.prom")), "keep");
	ck_assert_uint_eq(mode_of(at(0, "victim/x.prom")), 0600);
	ck_assert_str_eq(names(at(0, "victim")), "x.prom");
}
END_TEST

/* A planted name is replaced, never followed; temporaries are new files
 * that do not stay behind. */
START_TEST(test_metrics__write_at_replaces_a_planted_name)
{
	char why[512];
	int fd;

	ck_assert_int_eq(mkdir(at(0, "d"), 0755), 0);
	write_file(at(0, "victim"), "keep", 0600);
	ck_assert_int_eq(symlink(at(0, "victim"), at(1, "d/x.prom")), 0);
	fd = metrics_dir_open(at(0, "d/x.prom"), why, sizeof(why));
	ck_assert_msg(fd >= 0, "%s", why);
	ck_assert_int_eq(metrics_write_at(fd, "x.prom", render_text, "s\n"), 0);
	ck_assert_str_eq(content(at(0, "d/x.prom")), "s\n");
	ck_assert_str_eq(content(at(0, "victim")), "keep");
	ck_assert_str_eq(names(at(0, "d")), "x.prom");
	ck_assert_int_eq(metrics_write_at(fd, "a/b", render_text, "s\n"), -EINVAL);
	close(fd);
}
END_TEST

/* Refused at the start, each with what is wrong: a symbolic link on the
 * way, what is no directory, a directory others may write to (unless
 * sticky), a name that is no file. */
START_TEST(test_metrics__dir_open_refuses_what_it_cannot_trust)
{
	char why[512];
	int fd;

	ck_assert_int_eq(mkdir(at(0, "real"), 0755), 0);
	ck_assert_int_eq(symlink("real", at(0, "link")), 0);
	ck_assert_int_eq(metrics_dir_open(at(0, "link/x.prom"), why, sizeof(why)), -ELOOP);
	ck_assert_msg(strstr(why, "link' is a symbolic link"), "%s", why);
	/* a link as the last directory, and one further up */
	ck_assert_int_eq(mkdir(at(0, "real/sub"), 0755), 0);
	ck_assert_int_eq(metrics_dir_open(at(0, "link/sub/x.prom"), why, sizeof(why)), -ELOOP);

	write_file(at(0, "file"), "", 0644);
	ck_assert_int_eq(metrics_dir_open(at(0, "file/x.prom"), why, sizeof(why)), -ENOTDIR);
	ck_assert_msg(strstr(why, "file' is not a directory"), "%s", why);
	ck_assert_int_eq(metrics_dir_open(at(0, "none/x.prom"), why, sizeof(why)), -ENOENT);
	ck_assert_msg(strstr(why, "none': No such file"), "%s", why);

	ck_assert_int_eq(mkdir(at(0, "open"), 0755), 0);
	ck_assert_int_eq(chmod(at(0, "open"), 0777), 0);
	ck_assert_int_eq(metrics_dir_open(at(0, "open/x.prom"), why, sizeof(why)), -EPERM);
	ck_assert_msg(strstr(why, "open' is writable by others (mode 0777) and not sticky"), "%s",
		      why);
	/* below it too: the directory could be swapped while being opened */
	ck_assert_int_eq(mkdir(at(0, "open/sub"), 0755), 0);
	ck_assert_int_eq(metrics_dir_open(at(0, "open/sub/x.prom"), why, sizeof(why)), -EPERM);
	ck_assert_int_eq(chmod(at(0, "open"), 01777), 0);
	fd = metrics_dir_open(at(0, "open/sub/x.prom"), why, sizeof(why));
	ck_assert_msg(fd >= 0, "%s", why);
	close(fd);

	ck_assert_int_eq(metrics_dir_open("rel/x.prom", why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(metrics_dir_open(at(0, "real/"), why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(metrics_dir_open(at(0, "real/.."), why, sizeof(why)), -EINVAL);
	/* a file in "/" and a path with "//" and "." */
	fd = metrics_dir_open("/x.prom", why, sizeof(why));
	ck_assert_msg(fd >= 0, "%s", why);
	close(fd);
	fd = metrics_dir_open(at(0, "real//./sub/x.prom"), why, sizeof(why));
	ck_assert_msg(fd >= 0, "%s", why);
	close(fd);
}
END_TEST

/* The file's own directory must be root's or ours, and not writable by a
 * group other than root's or ours; the directories above it may be
 * another user's (who can rename in them, but not redirect a walk that
 * follows no link). */
START_TEST(test_metrics__dir_open_trusts_only_our_own_directory)
{
	const uid_t nobody = 65534;
	char why[512];
	int fd;

	if (geteuid() != 0)
		return; /* chown(2) to another user needs root */
	ck_assert_int_eq(mkdir(at(0, "theirs"), 0755), 0);
	ck_assert_int_eq(mkdir(at(0, "theirs/ours"), 0755), 0);
	ck_assert_int_eq(chown(at(0, "theirs"), nobody, nobody), 0);
	ck_assert_int_eq(metrics_dir_open(at(0, "theirs/x.prom"), why, sizeof(why)), -EPERM);
	ck_assert_msg(strstr(why, "theirs' is owned by uid 65534: the file's directory must be "
				  "root's or this daemon's (uid 0)"),
		      "%s", why);
	fd = metrics_dir_open(at(0, "theirs/ours/x.prom"), why, sizeof(why));
	ck_assert_msg(fd >= 0, "%s", why);
	close(fd);
	/* sticky does not make another user's directory ours */
	ck_assert_int_eq(chmod(at(0, "theirs"), 01777), 0);
	ck_assert_int_eq(metrics_dir_open(at(0, "theirs/x.prom"), why, sizeof(why)), -EPERM);

	ck_assert_int_eq(mkdir(at(0, "grp"), 0755), 0);
	ck_assert_int_eq(chown(at(0, "grp"), 0, nobody), 0);
	ck_assert_int_eq(chmod(at(0, "grp"), 0775), 0);
	ck_assert_int_eq(metrics_dir_open(at(0, "grp/x.prom"), why, sizeof(why)), -EPERM);
	ck_assert_msg(strstr(why, "grp' is writable by its group gid 65534 (mode 0775)"), "%s",
		      why);
	ck_assert_int_eq(chown(at(0, "grp"), 0, 0), 0);
	ck_assert_int_eq(chmod(at(0, "grp"), 0775), 0);
	fd = metrics_dir_open(at(0, "grp/x.prom"), why, sizeof(why));
	ck_assert_msg(fd >= 0, "%s", why);
	close(fd);
}
END_TEST

Suite *make_suite_metrics(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_metrics__histogram_is_cumulative_in_seconds);
	tcase_add_test(tc, test_metrics__results_and_labels);
	tcase_add_test(tc, test_metrics__delegations_only_when_on);
	suite_add_tcase(s, tc);
	tc = tcase_create("metrics_file");
	tcase_add_checked_fixture(tc, files_setup, files_teardown);
	tcase_add_test(tc, test_metrics__file_stays_in_the_directory_opened);
	tcase_add_test(tc, test_metrics__write_at_replaces_a_planted_name);
	tcase_add_test(tc, test_metrics__dir_open_refuses_what_it_cannot_trust);
	tcase_add_test(tc, test_metrics__dir_open_trusts_only_our_own_directory);
	suite_add_tcase(s, tc);
	return s;
}
