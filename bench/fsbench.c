/* fsbench.c - metadata workload driver of bench/run (built at run time)
 *
 *   fsbench setup BACKING NBIG NPROC_MAX NFILES_MP
 *       untimed: the 10,000-file directory and the per-process rename trees,
 *       made directly in the backing directory before it is mounted
 *   fsbench meta ROOT NFILES BIG_MAX BIG_SECONDS [SETTLE]
 *       timed, one process: create, stat, rename within a directory, rename
 *       across directories, unlink (NFILES files in a tree of depth 3-5),
 *       then renames of the big directory, two at a time, until BIG_MAX or
 *       BIG_SECONDS;
 *       with SETTLE, that many seconds pass (untimed) between create and
 *       stat, so that a mount's cached entries have expired whatever the
 *       speed of its creates
 *   fsbench mp ROOT MODE LAYOUT NPROC SECONDS
 *       timed, NPROC processes renaming for SECONDS: MODE same|cross,
 *       LAYOUT disjoint|shared (see bench/README.md)
 *   fsbench depth ROOT DEPTH COUNT
 *       COUNT renames of one file inside a directory DEPTH levels deep
 *   fsbench metax NFILES BIG_MAX BIG_SECONDS SETTLE CHUNK ROOT...
 *       meta over several roots at once, taking turns every CHUNK files
 *       (rename_bigdir: every BIG_CHUNK renames); prints name@K for root K
 *   fsbench mpx MODE LAYOUT NPROC SECONDS SLICE ROOT...
 *       mp over several roots at once: every process works on one root for
 *       SLICE seconds, then on the next, all processes on the same root at
 *       the same moment, until each root has had SECONDS; name@K for root K
 *
 * With FSBENCH_NO_RENAMES=1 in the environment, meta and metax run create,
 * stat and unlink only (no rename phase, no big directory): bench/fsindex.
 *
 * The x forms are what bench/run's interleaved rounds use: the roots take
 * turns every few milliseconds (in a Williams order, see turn_root()), so a
 * burst of load from the machine's neighbours, which lasts longer than
 * that, weighs on every root alike.
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
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FILES_PER_DIR 100
#define MAX_ROOTS 16
#define BIG_CHUNK 16 /* renames of the big directory per turn (even) */

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

/* The turns: a Williams design over N roots (N rows for even N, 2N for odd
 * N), row after row. In it each root comes right after each other root
 * equally often and holds each place equally often, so what one root's turn
 * leaves behind (dirty pages, a daemon's cold caches) weighs on all alike. */
static int design[2 * MAX_ROOTS][MAX_ROOTS], design_rows;

static void make_design(int n)
{
	int first[MAX_ROOTS], lo = 1, hi = n - 1, k = 1, i, j;

	first[0] = 0;
	while (k < n) {
		first[k++] = lo++;
		if (k < n)
			first[k++] = hi--;
	}
	for (i = 0; i < n; i++)
		for (j = 0; j < n; j++)
			design[i][j] = (first[j] + i) % n;
	design_rows = n;
	if (n % 2) {
		for (i = 0; i < n; i++)
			for (j = 0; j < n; j++)
				design[n + i][j] = design[i][n - 1 - j];
		design_rows = 2 * n;
	}
}

/* The root whose turn is turn number T (of N roots). */
static int turn_root(long t, int n)
{
	return design[(t / n) % design_rows][t % n];
}

static int roots_of(int argc, int first)
{
	int n = argc - first;

	if (n < 1 || n > MAX_ROOTS) {
		fprintf(stderr, "fsbench: 1 to %d roots\n", MAX_ROOTS);
		exit(2);
	}
	return n;
}

enum { PH_CREATE, PH_STAT, PH_SAME, PH_CROSS, PH_UNLINK, PH_N };
static const char *const phase_name[PH_N] = {"create", "stat", "rename_same", "rename_cross",
					      "unlink"};

/* Phase PH on files [LO, HI) of ROOT. */
/* FSBENCH_NO_RENAMES: create, stat and unlink only. */
static int no_renames;

static void meta_chunk(int ph, const char *root, long lo, long hi, long nleaves)
{
	char a[4096], b[4096];
	struct stat st;
	long i;

	for (i = lo; i < hi; i++) {
		switch (ph) {
		case PH_CREATE:
			file_path(root, i, nleaves, "f", 0, a, sizeof(a));
			create_file(a);
			break;
		case PH_STAT:
			file_path(root, i, nleaves, "f", 0, a, sizeof(a));
			if (stat(a, &st) == -1)
				die("cannot stat", a);
			break;
		case PH_SAME:
		case PH_CROSS:
			file_path(root, i, nleaves, ph == PH_SAME ? "f" : "r", 0, a, sizeof(a));
			file_path(root, i, nleaves, "r", ph == PH_SAME ? 0 : 1, b, sizeof(b));
			if (rename(a, b) == -1)
				die("cannot rename", a);
			break;
		default:
			if (no_renames)
				file_path(root, i, nleaves, "f", 0, a, sizeof(a));
			else
				file_path(root, i, nleaves, "r", 1, a, sizeof(a));
			if (unlink(a) == -1)
				die("cannot unlink", a);
		}
	}
}

/* metax, or with TAG false meta (one root, CHUNK = N, no @K). */
static void do_metax(long n, long big_max, double big_sec, double settle, long chunk, int nr,
		     char **roots, int tag)
{
	long nleaves = (n + FILES_PER_DIR - 1) / FILES_PER_DIR, i, t, big_ops[MAX_ROOTS] = {0};
	long big_turn = nr > 1 ? BIG_CHUNK : 2; /* even: big/a stays where it was */
	double sec[PH_N][MAX_ROOTS] = {{0}}, big_t[MAX_ROOTS] = {0}, t0;
	char a[4096], b[4096], name[64];
	int ph, r, k, busy;

	make_design(nr);
	if (chunk < 1)
		chunk = 1;
	for (r = 0; r < nr; r++)
		for (i = 0; i < nleaves; i++) {
			leaf_dir(roots[r], i, a, sizeof(a));
			mkdir_p(a);
		}
	no_renames = getenv("FSBENCH_NO_RENAMES") && atoi(getenv("FSBENCH_NO_RENAMES"));
	for (ph = 0; ph < PH_N; ph++) {
		if (no_renames && (ph == PH_SAME || ph == PH_CROSS))
			continue;
		if (ph == PH_STAT && settle > 0) {
			struct timespec ts = {.tv_sec = (time_t)settle,
					      .tv_nsec = (long)((settle - (double)(time_t)settle) * 1e9)};

			while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
				;
		}
		for (i = 0, t = 0; i < n; i += chunk) {
			long hi = i + chunk < n ? i + chunk : n;

			for (k = 0; k < nr; k++, t++) {
				r = turn_root(t, nr);
				t0 = now();
				meta_chunk(ph, roots[r], i, hi, nleaves);
				sec[ph][r] += now() - t0;
			}
		}
	}
	for (r = 0; r < nr; r++)
		for (ph = 0; ph < PH_N; ph++) {
			if (no_renames && (ph == PH_SAME || ph == PH_CROSS))
				continue;
			snprintf(name, sizeof(name), tag ? "%s@%d" : "%s", phase_name[ph], r);
			result(name, n, sec[ph][r]);
		}
	/* the big directory: turns of BIG_TURN renames each until every root
	 * has had BIG_MAX renames or BIG_SECONDS (at least one turn each) */
	for (t = 0, busy = !no_renames; busy; ) {
		busy = 0;
		for (k = 0; k < nr; k++, t++) {
			r = turn_root(t, nr);
			if (big_ops[r] && (big_ops[r] >= big_max || big_t[r] >= big_sec))
				continue;
			busy = 1;
			snprintf(a, sizeof(a), "%s/big/a", roots[r]);
			snprintf(b, sizeof(b), "%s/big/b", roots[r]);
			t0 = now();
			for (i = 0; i < big_turn; i++)
				if (rename(i % 2 ? b : a, i % 2 ? a : b) == -1)
					die("cannot rename", i % 2 ? b : a);
			big_t[r] += now() - t0;
			big_ops[r] += big_turn;
		}
	}
	for (r = 0; r < nr && !no_renames; r++) {
		snprintf(name, sizeof(name), tag ? "rename_bigdir@%d" : "rename_bigdir", r);
		result(name, big_ops[r], big_t[r]);
	}
}

/* One root's side of an mpx worker. */
struct mp_side {
	char a[4096], b[4096], pre[32];
	long nfiles, ops, warm; /* renames made; of them in the warm-up */
	unsigned char *where;
	double busy;
};

static void mp_side_open(struct mp_side *s, const char *root, const char *layout, int p)
{
	char x[4096];
	struct stat st;

	mp_dirs(root, layout, p, s->a, s->b, sizeof(s->a));
	snprintf(s->pre, sizeof(s->pre), strcmp(layout, "shared") == 0 ? "p%dq" : "q", p);
	for (s->nfiles = 0;; s->nfiles++) {
		snprintf(x, sizeof(x), "%s/%s%ld", s->a, s->pre, s->nfiles);
		if (lstat(x, &st) == -1)
			break;
	}
	if (s->nfiles == 0) {
		errno = ENOENT;
		die("no files in", s->a);
	}
	s->where = calloc((size_t)s->nfiles, 1);
	if (!s->where)
		die("cannot allocate for", s->a);
	s->ops = s->warm = 0;
	s->busy = 0;
}

/* The next rename of S: a/X -> a/X.r -> a/X (same) or a/X -> b/X -> a/X
 * (cross), round robin over its files. */
static void mp_side_step(struct mp_side *s, int cross)
{
	char x[4096], y[4096];
	long k = s->ops % s->nfiles;

	snprintf(x, sizeof(x), "%s/%s%ld%s", s->a, s->pre, k, (!cross && s->where[k]) ? ".r" : "");
	if (cross) {
		snprintf(y, sizeof(y), "%s/%s%ld", s->b, s->pre, k);
		if (rename(s->where[k] ? y : x, s->where[k] ? x : y) == -1)
			die("cannot rename", s->where[k] ? y : x);
	} else {
		snprintf(y, sizeof(y), "%s/%s%ld%s", s->a, s->pre, k, s->where[k] ? "" : ".r");
		if (rename(x, y) == -1)
			die("cannot rename", x);
	}
	s->where[k] ^= 1;
	s->ops++;
}

static void mp_side_restore(struct mp_side *s, int cross)
{
	char x[4096], y[4096];
	long i;

	for (i = 0; i < s->nfiles; i++) {
		if (!s->where[i])
			continue;
		snprintf(x, sizeof(x), "%s/%s%ld", s->a, s->pre, i);
		if (cross)
			snprintf(y, sizeof(y), "%s/%s%ld", s->b, s->pre, i);
		else
			snprintf(y, sizeof(y), "%s/%s%ld.r", s->a, s->pre, i);
		if (rename(y, x) == -1)
			die("cannot rename", y);
	}
}

/* One mpx worker: once it has found its files, says so on READY_FD and
 * waits for GO_FD to close; then, from *START until *START + NTURNS *
 * SLICE, works on the root whose turn it is. Each rename, and the time
 * from the end of the one before, counts for the root it started on; a
 * rename that runs past the end of a turn still counts whole for its own
 * root. The first WARM turns (one per root when there are several) are a
 * warm-up and count for nothing: the first root would otherwise have the
 * start (cold workers, faults on fresh pages) to itself. Writes one line
 * of "ops busy" per root to OUT, then puts every file back (untimed). */
static void mpx_worker(int nr, char **roots, const char *mode, const char *layout, int p,
		       const volatile double *start, int ready_fd, int go_fd, long nturns,
		       long warm, double slice, int out_fd)
{
	static struct mp_side side[MAX_ROOTS];
	struct timespec ts;
	int cross = strcmp(mode, "cross") == 0, r;
	double t0, end, prev, t;
	char line[MAX_ROOTS * 48], c = 0;
	size_t len = 0;

	for (r = 0; r < nr; r++)
		mp_side_open(&side[r], roots[r], layout, p);
	if (write(ready_fd, &c, 1) != 1 || read(go_fd, &c, 1) != 0)
		die("cannot wait for the start", "-");
	t0 = *start;
	end = t0 + (double)nturns * slice;
	ts.tv_sec = (time_t)t0;
	ts.tv_nsec = (long)((t0 - (double)(time_t)t0) * 1e9);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	for (prev = now(); prev < end; prev = t) {
		long turn = (long)((prev - t0) / slice);

		r = turn_root(turn, nr);
		mp_side_step(&side[r], cross);
		t = now();
		if (turn < warm) {
			side[r].warm++;
			continue;
		}
		side[r].busy += t - prev;
	}
	for (r = 0; r < nr; r++)
		len += (size_t)snprintf(line + len, sizeof(line) - len, "%ld %.6f%c",
					side[r].ops - side[r].warm,
					side[r].busy, r == nr - 1 ? '\n' : ' ');
	if (write(out_fd, line, len) != (ssize_t)len) /* one write: the lines do not mix */
		die("cannot report to", "the parent");
	for (r = 0; r < nr; r++)
		mp_side_restore(&side[r], cross);
	exit(0);
}

/* mpx, or with TAG false mp (one root, SLICE = SECONDS, no @K). */
static void do_mpx(const char *mode, const char *layout, int nproc, double sec, double slice,
		   int nr, char **roots, int tag)
{
	long warm = nr > 1 ? nr : 0, ops[MAX_ROOTS] = {0}, nturns, v;
	double busy[MAX_ROOTS] = {0}, b;
	volatile double *start;
	int out[2], ready[2], go[2], p, r, status, failed = 0;
	char name[64], c;
	FILE *f;

	make_design(nr);
	if (slice <= 0)
		die("bad slice", "-");
	/* a whole number of turns per root, at least one, after the warm-up */
	nturns = (long)(sec / slice + 0.5);
	nturns = (nturns < 1 ? 1 : nturns) * nr + warm;
	if (pipe(out) == -1 || pipe(ready) == -1 || pipe(go) == -1)
		die("cannot make a pipe", "-");
	/* the start time, set once every worker has found its files (on a
	 * slow mount that takes a while: no worker may miss the first turns) */
	start = mmap(NULL, sizeof(*start), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (start == MAP_FAILED)
		die("cannot map", "-");
	for (p = 0; p < nproc; p++) {
		pid_t pid = fork();

		if (pid == -1)
			die("cannot fork", "-");
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(out[0]);
			close(ready[0]);
			close(go[1]);
			mpx_worker(nr, roots, mode, layout, p, start, ready[1], go[0], nturns, warm,
				   slice, out[1]);
		}
	}
	close(out[1]);
	close(ready[1]);
	close(go[0]);
	for (p = 0; p < nproc; p++)
		if (read(ready[0], &c, 1) != 1)
			break; /* a worker died: it is counted below */
	*start = now() + 0.002;
	close(go[1]);
	close(ready[0]);
	f = fdopen(out[0], "r");
	for (p = 0; p < nproc; p++)
		for (r = 0; r < nr; r++) {
			if (fscanf(f, "%ld %lf", &v, &b) != 2) {
				failed = 1;
				break;
			}
			ops[r] += v;
			busy[r] += b;
		}
	fclose(f);
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed = 1;
	if (failed) {
		fprintf(stderr, "fsbench: a worker failed\n");
		exit(1);
	}
	/* ops/s of all processes together: every process had the root for
	 * about the same time, its mean is the root's share of the run */
	for (r = 0; r < nr; r++) {
		snprintf(name, sizeof(name), tag ? "mp_%s_%s_%d@%d" : "mp_%s_%s_%d", mode, layout,
			 nproc, r);
		result(name, ops[r], busy[r] / nproc);
	}
}

int main(int argc, char **argv)
{
	if (argc == 6 && strcmp(argv[1], "setup") == 0)
		do_setup(argv[2], atol(argv[3]), atoi(argv[4]), atol(argv[5]));
	else if ((argc == 6 || argc == 7) && strcmp(argv[1], "meta") == 0)
		do_metax(atol(argv[3]), atol(argv[4]), atof(argv[5]), argc == 7 ? atof(argv[6]) : 0,
			 atol(argv[3]), 1, argv + 2, 0);
	else if (argc == 7 && strcmp(argv[1], "mp") == 0)
		do_mpx(argv[3], argv[4], atoi(argv[5]), atof(argv[6]), atof(argv[6]), 1, argv + 2, 0);
	else if (argc == 5 && strcmp(argv[1], "depth") == 0)
		do_depth(argv[2], atoi(argv[3]), atol(argv[4]));
	else if (argc >= 8 && strcmp(argv[1], "metax") == 0)
		do_metax(atol(argv[2]), atol(argv[3]), atof(argv[4]), atof(argv[5]), atol(argv[6]),
			 roots_of(argc, 7), argv + 7, 1);
	else if (argc >= 8 && strcmp(argv[1], "mpx") == 0)
		do_mpx(argv[2], argv[3], atoi(argv[4]), atof(argv[5]), atof(argv[6]),
		       roots_of(argc, 7), argv + 7, 1);
	else {
		fprintf(stderr, "usage: see the comment at the top of fsbench.c\n");
		return 2;
	}
	return 0;
}
