/* fsbench.c - metadata workload driver of bench/run (built at run time)
 *
 *   fsbench setup BACKING NBIG NPROC_MAX NFILES_MP
 *       untimed: the 10,000-file directory and the per-process rename trees,
 *       made directly in the backing directory before it is mounted
 *   fsbench meta ROOT NFILES BIG_MAX BIG_SECONDS [SETTLE]
 *       timed, one process: create, stat, rename within a directory, rename
 *       across directories, unlink (NFILES files in a tree of depth 3-5),
 *       then renames of the big directory (at most BIG_MAX or BIG_SECONDS);
 *       with SETTLE, that many seconds pass (untimed) between create and
 *       stat, so that a mount's cached entries have expired whatever the
 *       speed of its creates
 *   fsbench mp ROOT MODE LAYOUT NPROC SECONDS
 *       timed, NPROC processes renaming for SECONDS: MODE same|cross,
 *       LAYOUT disjoint|shared (see bench/README.md)
 *   fsbench depth ROOT DEPTH COUNT
 *       COUNT renames of one file inside a directory DEPTH levels deep
 *
 * Every timed phase prints one line "RESULT name ops seconds". Files are
 * closed as soon as they are created, so the driver itself never holds more
 * than a handful of descriptors. Children die with their parent
 * (PR_SET_PDEATHSIG), so an interrupted run leaves no worker behind.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FILES_PER_DIR 100

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *path)
{
	fprintf(stderr, "fsbench: %s '%s': %s\n", what, path, strerror(errno));
	exit(1);
}

static void result(const char *name, long ops, double sec)
{
	printf("RESULT %s %ld %.6f\n", name, ops, sec);
	fflush(stdout);
}

static void mkdir_p(const char *path)
{
	char buf[4096], *p;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) == -1 && errno != EEXIST)
			die("cannot mkdir", buf);
		*p = '/';
	}
	if (mkdir(buf, 0755) == -1 && errno != EEXIST)
		die("cannot mkdir", buf);
}

/* Leaf directory LEAF of the tree: t/dA/dB/dC, plus /e or /e/f for one in
 * three leaves each, so files sit 3 to 5 directories below t. */
static void leaf_dir(const char *root, long leaf, char *buf, size_t size)
{
	static const char *extra[] = {"", "/e", "/e/f"};

	snprintf(buf, size, "%s/t/d%ld/d%ld/d%ld%s", root, leaf % 6, (leaf / 6) % 5, leaf / 30,
		 extra[leaf % 3]);
}

static void file_path(const char *root, long i, long nleaves, const char *prefix, long shift,
		      char *buf, size_t size)
{
	char dir[4096];

	leaf_dir(root, (i / FILES_PER_DIR + shift) % nleaves, dir, sizeof(dir));
	snprintf(buf, size, "%s/%s%06ld", dir, prefix, i);
}

static void create_file(const char *path)
{
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);

	if (fd == -1)
		die("cannot create", path);
	close(fd);
}

static void do_meta(const char *root, long n, long big_max, double big_sec, double settle)
{
	long nleaves = (n + FILES_PER_DIR - 1) / FILES_PER_DIR, i;
	char a[4096], b[4096];
	struct stat st;
	double t;

	for (i = 0; i < nleaves; i++) {
		leaf_dir(root, i, a, sizeof(a));
		mkdir_p(a);
	}
	t = now();
	for (i = 0; i < n; i++) {
		file_path(root, i, nleaves, "f", 0, a, sizeof(a));
		create_file(a);
	}
	result("create", n, now() - t);
	if (settle > 0) {
		struct timespec ts = {.tv_sec = (time_t)settle,
				      .tv_nsec = (long)((settle - (double)(time_t)settle) * 1e9)};

		while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
			;
	}
	t = now();
	for (i = 0; i < n; i++) {
		file_path(root, i, nleaves, "f", 0, a, sizeof(a));
		if (stat(a, &st) == -1)
			die("cannot stat", a);
	}
	result("stat", n, now() - t);
	t = now();
	for (i = 0; i < n; i++) {
		file_path(root, i, nleaves, "f", 0, a, sizeof(a));
		file_path(root, i, nleaves, "r", 0, b, sizeof(b));
		if (rename(a, b) == -1)
			die("cannot rename", a);
	}
	result("rename_same", n, now() - t);
	t = now();
	for (i = 0; i < n; i++) {
		file_path(root, i, nleaves, "r", 0, a, sizeof(a));
		file_path(root, i, nleaves, "r", 1, b, sizeof(b));
		if (rename(a, b) == -1)
			die("cannot rename", a);
	}
	result("rename_cross", n, now() - t);
	t = now();
	for (i = 0; i < n; i++) {
		file_path(root, i, nleaves, "r", 1, a, sizeof(a));
		if (unlink(a) == -1)
			die("cannot unlink", a);
	}
	result("unlink", n, now() - t);

	/* the big directory, made by setup: big/a <-> big/b */
	snprintf(a, sizeof(a), "%s/big/a", root);
	snprintf(b, sizeof(b), "%s/big/b", root);
	t = now();
	for (i = 0; i < big_max && (i < 3 || now() - t < big_sec); i++) {
		if (rename(i % 2 ? b : a, i % 2 ? a : b) == -1)
			die("cannot rename", i % 2 ? b : a);
	}
	result("rename_bigdir", i, now() - t);
	if (i % 2 && rename(b, a) == -1)
		die("cannot rename", b);
}

/* Directory pair of process P: mp/pP/{a,b} (disjoint) or mp/shared/{a,b}. */
static void mp_dirs(const char *root, const char *layout, int p, char *a, char *b, size_t size)
{
	if (strcmp(layout, "shared") == 0) {
		snprintf(a, size, "%s/mp/shared/a", root);
		snprintf(b, size, "%s/mp/shared/b", root);
	} else {
		snprintf(a, size, "%s/mp/p%d/a", root, p);
		snprintf(b, size, "%s/mp/p%d/b", root, p);
	}
}

static void do_setup(const char *root, long nbig, int nproc, long nmp)
{
	char a[4096], b[4096], f[4096];
	long i;
	int p;

	snprintf(a, sizeof(a), "%s/big/a", root);
	mkdir_p(a);
	for (i = 0; i < nbig; i++) {
		snprintf(f, sizeof(f), "%s/big/a/f%05ld", root, i);
		create_file(f);
	}
	for (p = 0; p < nproc; p++) {
		mp_dirs(root, "disjoint", p, a, b, sizeof(a));
		mkdir_p(a);
		mkdir_p(b);
		for (i = 0; i < nmp; i++) {
			snprintf(f, sizeof(f), "%s/q%ld", a, i);
			create_file(f);
		}
		mp_dirs(root, "shared", p, a, b, sizeof(a));
		mkdir_p(a);
		mkdir_p(b);
		for (i = 0; i < nmp; i++) {
			snprintf(f, sizeof(f), "%s/p%dq%ld", a, p, i);
			create_file(f);
		}
	}
}

/* One worker: renames its files a/X -> a/X.r -> a/X (same) or
 * a/X -> b/X -> a/X (cross), round robin, until SECONDS have passed after
 * the start signal. Writes its count and elapsed time to OUT, then puts
 * its files back (untimed) for the next run. */
static void mp_worker(const char *root, const char *mode, const char *layout, int p, double sec,
		      int start_fd, int out_fd)
{
	char a[4096], b[4096], x[4096], y[4096], pre[32], c;
	long nfiles = 0, i, ops = 0;
	unsigned char *where;
	double t0, t;
	struct stat st;
	int cross = strcmp(mode, "cross") == 0;

	mp_dirs(root, layout, p, a, b, sizeof(a));
	snprintf(pre, sizeof(pre), strcmp(layout, "shared") == 0 ? "p%dq" : "q", p);
	for (;;) {
		snprintf(x, sizeof(x), "%s/%s%ld", a, pre, nfiles);
		if (lstat(x, &st) == -1)
			break;
		nfiles++;
	}
	if (nfiles == 0) {
		errno = ENOENT;
		die("no files in", a);
	}
	where = calloc((size_t)nfiles, 1);
	if (read(start_fd, &c, 1) != 0) {
		/* the parent closes the pipe to start everybody at once */
	}
	t0 = now();
	do {
		for (i = 0; i < 4; i++, ops++) {
			long k = ops % nfiles;

			snprintf(x, sizeof(x), "%s/%s%ld%s", a, pre, k, (!cross && where[k]) ? ".r" : "");
			if (cross) {
				snprintf(y, sizeof(y), "%s/%s%ld", b, pre, k);
				if (rename(where[k] ? y : x, where[k] ? x : y) == -1)
					die("cannot rename", where[k] ? y : x);
			} else {
				snprintf(y, sizeof(y), "%s/%s%ld%s", a, pre, k, where[k] ? "" : ".r");
				if (rename(x, y) == -1)
					die("cannot rename", x);
			}
			where[k] ^= 1;
		}
		t = now() - t0;
	} while (t < sec);
	dprintf(out_fd, "%ld %.6f\n", ops, t);
	/* untimed: put every file back for the next run */
	for (i = 0; i < nfiles; i++) {
		if (!where[i])
			continue;
		snprintf(x, sizeof(x), "%s/%s%ld", a, pre, i);
		if (cross)
			snprintf(y, sizeof(y), "%s/%s%ld", b, pre, i);
		else
			snprintf(y, sizeof(y), "%s/%s%ld.r", a, pre, i);
		if (rename(y, x) == -1)
			die("cannot rename", y);
	}
	exit(0);
}

static void do_mp(const char *root, const char *mode, const char *layout, int nproc, double sec)
{
	int start[2], out[2], p, status, failed = 0;
	long total = 0, ops;
	double tmax = 0, t;
	char name[64];
	FILE *f;

	if (pipe(start) == -1 || pipe(out) == -1)
		die("cannot make a pipe", "-");
	for (p = 0; p < nproc; p++) {
		pid_t pid = fork();

		if (pid == -1)
			die("cannot fork", "-");
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(start[1]);
			close(out[0]);
			mp_worker(root, mode, layout, p, sec, start[0], out[1]);
		}
	}
	close(start[0]);
	close(out[1]);
	usleep(20000);
	close(start[1]);
	f = fdopen(out[0], "r");
	while (fscanf(f, "%ld %lf", &ops, &t) == 2) {
		total += ops;
		if (t > tmax)
			tmax = t;
	}
	fclose(f);
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed = 1;
	if (failed) {
		fprintf(stderr, "fsbench: a worker failed\n");
		exit(1);
	}
	snprintf(name, sizeof(name), "mp_%s_%s_%d", mode, layout, nproc);
	result(name, total, tmax);
}

static void do_depth(const char *root, int depth, long count)
{
	char d[4096], a[4096], b[4096];
	size_t len;
	long i;
	int k;
	double t;

	len = (size_t)snprintf(d, sizeof(d), "%s/depth%d", root, depth);
	for (k = 1; k < depth; k++)
		len += (size_t)snprintf(d + len, sizeof(d) - len, "/l%d", k);
	mkdir_p(d);
	snprintf(a, sizeof(a), "%s/x", d);
	snprintf(b, sizeof(b), "%s/y", d);
	create_file(a);
	t = now();
	for (i = 0; i < count; i++)
		if (rename(i % 2 ? b : a, i % 2 ? a : b) == -1)
			die("cannot rename", i % 2 ? b : a);
	result("depth", count, now() - t);
}

int main(int argc, char **argv)
{
	if (argc == 6 && strcmp(argv[1], "setup") == 0)
		do_setup(argv[2], atol(argv[3]), atoi(argv[4]), atol(argv[5]));
	else if ((argc == 6 || argc == 7) && strcmp(argv[1], "meta") == 0)
		do_meta(argv[2], atol(argv[3]), atol(argv[4]), atof(argv[5]),
			argc == 7 ? atof(argv[6]) : 0);
	else if (argc == 7 && strcmp(argv[1], "mp") == 0)
		do_mp(argv[2], argv[3], argv[4], atoi(argv[5]), atof(argv[6]));
	else if (argc == 5 && strcmp(argv[1], "depth") == 0)
		do_depth(argv[2], atoi(argv[3]), atol(argv[4]));
	else {
		fprintf(stderr, "usage: see the comment at the top of fsbench.c\n");
		return 2;
	}
	return 0;
}
