/* metrics.c - Prometheus text exposition of the daemon's counters, see
 * metrics.h */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/metrics.h"
#include "base/tlclock.h"

/* Histogram buckets written: 2^b us for b = first, first + step, ...
 * last; HIST_ for durations of any length, RECALL_ for a delegation's
 * recall wait (256 us, a release queued at once when no rename uses the
 * delegation, to 16.8 s) */
#define HIST_FIRST 4
#define HIST_STEP 2
#define HIST_LAST 34
#define RECALL_FIRST 8
#define RECALL_STEP 1
#define RECALL_LAST 24

void metrics_put_label(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '\\')
			fputs("\\\\", f);
		else if (*s == '"')
			fputs("\\\"", f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

/* The labels every sample carries, then EXTRA ("name=\"v\"", or NULL). */
static void labels(FILE *f, const struct tl_metrics_src *src, const char *extra)
{
	fputs("{mountpoint=\"", f);
	metrics_put_label(f, src->mountpoint);
	fputs("\",owner=\"", f);
	metrics_put_label(f, src->owner);
	fputc('"', f);
	if (extra) {
		fputc(',', f);
		fputs(extra, f);
	}
	fputc('}', f);
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_u(FILE *f, const struct tl_metrics_src *src, const char *name,
		     const char *extra, uint64_t v)
{
	fputs(name, f);
	labels(f, src, extra);
	fprintf(f, " %" PRIu64 "\n", v);
}

static void sample_d(FILE *f, const struct tl_metrics_src *src, const char *name,
		     const char *extra, double v)
{
	fputs(name, f);
	labels(f, src, extra);
	/* a time since the epoch keeps its milliseconds */
	fprintf(f, v >= 1e6 || v <= -1e6 ? " %.3f\n" : " %.9g\n", v);
}

/* A counter family of one sample. */
static void counter(FILE *f, const struct tl_metrics_src *src, const char *name,
		    const char *help, uint64_t v)
{
	family(f, name, "counter", help);
	sample_u(f, src, name, NULL, v);
}

static void gauge(FILE *f, const struct tl_metrics_src *src, const char *name, const char *help,
		  double v)
{
	family(f, name, "gauge", help);
	sample_d(f, src, name, NULL, v);
}

/* A counter family of one sample, its value the uint64_t at OFFSET of
 * the struct it is read from (counters()). */
struct counter_row {
	const char *name;
	const char *help;
	size_t offset;
};

/* the lock manager's counters, of struct tl_stats */
static const struct counter_row lock_counters[] = {
	{"treelockfs_entry_ops_total", "Namespace operations planned with lock_scope=namespace.",
	 offsetof(struct tl_stats, entry_ops)},
	{"treelockfs_lock_acquisitions_total",
	 "Lock plans acquired (renames and entry operations).",
	 offsetof(struct tl_stats, acquired)},
	{"treelockfs_lock_conflicts_total",
	 "Attempts the lock store refused because another holder had a key.",
	 offsetof(struct tl_stats, conflicts)},
	{"treelockfs_lock_waits_total", "Lock plans that had to wait at least once.",
	 offsetof(struct tl_stats, waits)},
	{"treelockfs_lock_timeouts_total", "Lock plans given up after lock_timeout (EBUSY).",
	 offsetof(struct tl_stats, timeouts)},
	{"treelockfs_fenced_total",
	 "Renames refused because this mount's lease was no longer fresh.",
	 offsetof(struct tl_stats, fenced)},
	{"treelockfs_lock_store_errors_total",
	 "Lock operations that failed in the lock store (ENOLCK).",
	 offsetof(struct tl_stats, errors)},
	{"treelockfs_store_down_refusals_total",
	 "Lock plans refused at once (ENOLCK) because the lock store was down.",
	 offsetof(struct tl_stats, store_down_refusals)},
};

/* the lock store's counters, of struct tl_store_metrics */
static const struct counter_row store_counters[] = {
	{"treelockfs_store_requests_total",
	 "Requests sent to the lock store (each attempt; 0 for the mem store).",
	 offsetof(struct tl_store_metrics, requests)},
	{"treelockfs_store_request_failures_total",
	 "Lock store requests that got no answer: refused, timed out, cut or too big.",
	 offsetof(struct tl_store_metrics, failures)},
	{"treelockfs_store_sent_bytes_total", "Request body bytes sent to the lock store.",
	 offsetof(struct tl_store_metrics, bytes_sent)},
	{"treelockfs_store_received_bytes_total",
	 "Response body bytes received from the lock store.",
	 offsetof(struct tl_store_metrics, bytes_received)},
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The N counters of ROWS, read from the struct at BASE (stats_get(): the
 * live tl_stats is written by other threads meanwhile). */
static void counters(FILE *f, const struct tl_metrics_src *src, const struct counter_row *rows,
		     size_t n, const void *base)
{
	size_t i;

	for (i = 0; i < n; i++)
		counter(f, src, rows[i].name, rows[i].help,
			stats_get((const uint64_t *)((const char *)base + rows[i].offset)));
}

/* H as a Prometheus histogram NAME in seconds, its buckets 2^b us for
 * b = FIRST, FIRST + STEP, ... LAST. The counts are read once each; the
 * count is their sum, so that +Inf equals _count even while other threads
 * record. */
static void histogram_of(FILE *f, const struct tl_metrics_src *src, const char *name,
			 const char *help, const struct tl_hist *h, unsigned first,
			 unsigned step, unsigned last)
{
	uint64_t counts[STATS_BUCKETS], cum = 0, total = 0;
	char le[48], series[128];
	unsigned b;

	for (b = 0; b < STATS_BUCKETS; b++) {
		counts[b] = stats_get(&h->bucket[b]);
		total += counts[b];
	}
	family(f, name, "histogram", help);
	snprintf(series, sizeof(series), "%s_bucket", name);
	for (b = 0; b <= last; b++) {
		cum += counts[b];
		if (b < first || (b - first) % step)
			continue;
		snprintf(le, sizeof(le), "le=\"%.9g\"", (double)(UINT64_C(1) << b) / 1e6);
		sample_u(f, src, series, le, cum);
	}
	sample_u(f, src, series, "le=\"+Inf\"", total);
	snprintf(series, sizeof(series), "%s_sum", name);
	sample_d(f, src, series, NULL, (double)stats_get(&h->sum_us) / 1e6);
	snprintf(series, sizeof(series), "%s_count", name);
	sample_u(f, src, series, NULL, total);
}

/* H as a histogram of durations of any length (HIST_*). */
static void histogram(FILE *f, const struct tl_metrics_src *src, const char *name,
		      const char *help, const struct tl_hist *h)
{
	histogram_of(f, src, name, help, h, HIST_FIRST, HIST_STEP, HIST_LAST);
}

/* The delegations' families (delegations=on). */
static void delegations(FILE *f, const struct tl_metrics_src *src,
			const struct tl_deleg_counters *dc)
{
	counter(f, src, "treelockfs_delegations_granted_total",
		"Directory delegations this mount took.", dc->granted);
	counter(f, src, "treelockfs_delegations_recalled_total",
		"Directory delegations recalled because another mount asked.", dc->recalled);
	counter(f, src, "treelockfs_delegations_idle_returned_total",
		"Directory delegations given back because no rename used them for "
		"delegation_idle.", dc->idle_returned);
	gauge(f, src, "treelockfs_delegations_held",
	      "Directory delegations this mount holds now (recalled ones until given back).",
	      (double)dc->held);
	counter(f, src, "treelockfs_renames_local_total",
		"Renames locked in this mount's own memory, under its delegations.",
		dc->renames_local);
	histogram_of(f, src, "treelockfs_delegation_recall_wait_seconds",
		     "From another mount's asking for a delegation being noticed to its "
		     "release.",
		     dc->recall_wait, RECALL_FIRST, RECALL_STEP, RECALL_LAST);
}

int metrics_format(FILE *f, const struct tl_metrics_src *src)
{
	const struct tl_stats *s = src->stats;
	const struct tl_store_metrics *sm = src->store_m;
	char extra[160];
	unsigned r;

	family(f, "treelockfs_info", "gauge",
	       "The mount's lock store and strategy, and the version of treelockfs (always 1).");
	fputs("treelockfs_info", f);
	snprintf(extra, sizeof(extra), "store=\"%s\",strategy=\"%s\",version=\"%s\"", src->store,
		 src->strategy, PACKAGE_VERSION);
	labels(f, src, extra);
	fputs(" 1\n", f);
	gauge(f, src, "treelockfs_start_time_seconds",
	      "When the mount started, in seconds since the Unix epoch.",
	      (double)src->start_time_ms / 1000);
	gauge(f, src, "treelockfs_lock_timeout_seconds",
	      "The mount's lock_timeout: how long a rename waits for its locks.",
	      src->lock_timeout);

	family(f, "treelockfs_renames_total", "counter",
	       "Renames answered, by result: ok, or the error returned.");
	for (r = 0; r < TL_RES_COUNT; r++) {
		snprintf(extra, sizeof(extra), "result=\"%s\"", stats_result_name((enum tl_result)r));
		sample_u(f, src, "treelockfs_renames_total", extra, stats_get(&s->results[r]));
	}
	counters(f, src, lock_counters, ARRAY_LEN(lock_counters), s);
	if (sm->store_down >= 0)
		gauge(f, src, "treelockfs_store_down",
		      "1 while the lock store is held down (renames fail at once), else 0.",
		      sm->store_down);
	gauge(f, src, "treelockfs_locks_held", "Lock plans of this mount holding their locks now.",
	      (double)stats_get(&s->held));
	gauge(f, src, "treelockfs_lock_waiters", "Lock plans of this mount waiting for locks now.",
	      (double)stats_get(&s->waiting));
	histogram(f, src, "treelockfs_lock_wait_seconds",
		  "How long lock plans that waited waited, until granted or given up.", &s->wait);
	histogram(f, src, "treelockfs_rename_duration_seconds",
		  "How long renames took in the daemon, from request to answer.", &s->rename);
	if (src->deleg)
		delegations(f, src, src->deleg);

	counters(f, src, store_counters, ARRAY_LEN(store_counters), sm);
	if (sm->request_seconds)
		histogram(f, src, "treelockfs_store_request_duration_seconds",
			  "How long lock store requests took, answered or not.",
			  sm->request_seconds);
	if (sm->lease_fresh >= 0) {
		gauge(f, src, "treelockfs_lease_age_seconds",
		      "Since this mount's lease was last renewed (-1: not yet).",
		      sm->lease_age_ms < 0 ? -1 : (double)sm->lease_age_ms / 1000);
		gauge(f, src, "treelockfs_lease_fresh",
		      "1 while this mount's lease is fresh, 0 while it is fenced.",
		      sm->lease_fresh);
	}
	if (sm->owners_alive >= 0) {
		family(f, "treelockfs_owners", "gauge",
		       "Other mounts of the lock store this mount has observed, by state.");
		sample_u(f, src, "treelockfs_owners", "state=\"alive\"", (uint64_t)sm->owners_alive);
		sample_u(f, src, "treelockfs_owners", "state=\"dead\"", (uint64_t)sm->owners_dead);
	}
	gauge(f, src, "treelockfs_file_lock_waiters",
	      "flock() and fcntl() lock requests through the mount waiting now.",
	      src->data.file_lock_waiters);
	gauge(f, src, "treelockfs_inode_descriptors",
	      "Inodes the kernel knows that hold a descriptor on the backing file now.",
	      (double)src->data.inode_fds);
	counter(f, src, "treelockfs_inode_prunes_total",
		"Inodes the kernel was asked to forget, to keep descriptors for everyone.",
		src->data.inode_prunes);
	if (src->data.passthrough_opens)
		counter(f, src, "treelockfs_passthrough_opens_total",
			"Files opened with their reads and writes passed to the backing file "
			"by the kernel.",
			stats_get(src->data.passthrough_opens));
	if (src->data.passthrough_fallbacks)
		counter(f, src, "treelockfs_passthrough_fallbacks_total",
			"Files that could not be passed through and are served by the daemon.",
			stats_get(src->data.passthrough_fallbacks));
	return ferror(f) ? -EIO : 0;
}

/* Whether the daemon trusts directory ST on the way to the file, OWN
 * when it is the file's own directory (see metrics_dir_open()); when not,
 * says why in WHY, naming SHOWN. */
static bool dir_trusted(const struct stat *st, bool own, const char *shown, char *why,
			size_t size)
{
	unsigned int mode = (unsigned int)(st->st_mode & 07777);
	uid_t uid = geteuid();

	if (own && st->st_uid != 0 && st->st_uid != uid) {
		snprintf(why, size, "'%s' is owned by uid %u: the file's directory must be root's "
				    "or this daemon's (uid %u)", shown, (unsigned)st->st_uid,
			 (unsigned)uid);
		return false;
	}
	if (mode & S_ISVTX)
		return true;
	if (mode & S_IWOTH) {
		snprintf(why, size, "'%s' is writable by others (mode %04o) and not sticky", shown,
			 mode);
		return false;
	}
	if (own && (mode & S_IWGRP) && st->st_gid != 0 && st->st_gid != getegid()) {
		snprintf(why, size, "'%s' is writable by its group gid %u (mode %04o) and not sticky",
			 shown, (unsigned)st->st_gid, mode);
		return false;
	}
	return true;
}

int metrics_dir_open(const char *path, char *why, size_t size)
{
	const char *slash = strrchr(path, '/');
	char *shown = NULL, *comp;
	size_t end, len, n;
	struct stat st;
	int fd, next, err;

	if (size)
		why[0] = '\0';
	if (path[0] != '/' || !slash[1] || strcmp(slash + 1, ".") == 0 ||
	    strcmp(slash + 1, "..") == 0) {
		snprintf(why, size, "expected an absolute path to a file");
		return -EINVAL;
	}
	end = (size_t)(slash - path);
	/* "/", then PATH's directories one by one: SHOWN is the part walked */
	shown = malloc(end + 2);
	if (!shown) {
		snprintf(why, size, "%s", strerror(ENOMEM));
		return -ENOMEM;
	}
	strcpy(shown, "/");
	fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd == -1) {
		err = -errno;
		snprintf(why, size, "'/': %s", strerror(-err));
		goto out_free;
	}
	for (len = 1;;) {
		if (fstat(fd, &st) != 0) {
			err = -errno;
			snprintf(why, size, "'%s': %s", shown, strerror(-err));
			goto out_close;
		}
		while (len < end && path[len] == '/')
			len++;
		if (!dir_trusted(&st, len >= end, shown, why, size)) {
			err = -EPERM;
			goto out_close;
		}
		if (len >= end)
			break;
		/* the next component, appended to what was walked */
		n = strcspn(path + len, "/");
		comp = shown + strlen(shown);
		if (comp[-1] != '/')
			*comp++ = '/';
		memcpy(comp, path + len, n);
		comp[n] = '\0';
		len += n;
		next = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next == -1) {
			err = -errno;
			/* O_PATH | O_NOFOLLOW opens a link itself: O_DIRECTORY refuses it */
			if (err == -ELOOP ||
			    (err == -ENOTDIR && fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			     S_ISLNK(st.st_mode))) {
				err = -ELOOP;
				snprintf(why, size, "'%s' is a symbolic link (give the path it "
						    "leads to)", shown);
			} else if (err == -ENOTDIR) {
				snprintf(why, size, "'%s' is not a directory", shown);
			} else {
				snprintf(why, size, "'%s': %s", shown, strerror(-err));
			}
			goto out_close;
		}
		close(fd);
		fd = next;
	}
	free(shown);
	return fd;

out_close:
	close(fd);
out_free:
	free(shown);
	return err;
}

/* Six characters for a temporary name: from getrandom(), or, where it
 * cannot answer, from the clock and a counter (O_EXCL keeps any name
 * safe; randomness only keeps others from taking it first). */
static void random_suffix(char out[7])
{
	static const char chars[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	static unsigned int counter;
	unsigned char r[6];
	size_t i;

	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		uint64_t v = (uint64_t)tl_mono_us() ^
			     ((uint64_t)__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) << 40);

		for (i = 0; i < sizeof(r); i++, v >>= 8)
			r[i] = (unsigned char)v;
	}
	for (i = 0; i < sizeof(r); i++)
		out[i] = chars[r[i] % (sizeof(chars) - 1)];
	out[6] = '\0';
}

/* Tries for a new temporary name this many times before giving up. */
#define TMP_TRIES 100

int metrics_write_at(int dir_fd, const char *name, int (*render)(void *arg, FILE *f), void *arg)
{
	char tmp[NAME_MAX + 1], suffix[7];
	FILE *f = NULL;
	int fd = -1, err, i;

	if (!name[0] || strchr(name, '/'))
		return -EINVAL;
	/* beside NAME, so that the rename stays in one filesystem; created
	 * with O_EXCL, so a planted name (a symlink) is never followed */
	for (i = 0; i < TMP_TRIES && fd == -1; i++) {
		random_suffix(suffix);
		if ((size_t)snprintf(tmp, sizeof(tmp), "%s.%s", name, suffix) >= sizeof(tmp))
			return -ENAMETOOLONG;
		fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd == -1 && errno != EEXIST)
			return -errno;
	}
	if (fd == -1)
		return -EEXIST;
	if (fchmod(fd, 0644) == -1) {
		err = -errno;
		goto out_unlink;
	}
	err = -ENOMEM;
	f = fdopen(fd, "w");
	if (!f)
		goto out_unlink;
	fd = -1;
	err = render(arg, f);
	if (err)
		goto out_unlink;
	if (fclose(f) != 0) {
		f = NULL;
		err = -errno;
		goto out_unlink;
	}
	f = NULL;
	if (renameat(dir_fd, tmp, dir_fd, name) == -1) {
		err = -errno;
		goto out_unlink;
	}
	return 0;

out_unlink:
	if (f)
		fclose(f);
	if (fd != -1)
		close(fd);
	unlinkat(dir_fd, tmp, 0);
	return err;
}

/* Writes once; logs a failure when it differs from the last one, and the
 * recovery. */
static void writer_once(struct metrics_writer *w)
{
	int err = metrics_write_at(w->dir_fd, w->name, w->render, w->arg);

	if (err && err != w->last_err)
		tl_log(LOG_WARNING, "cannot write metrics_file '%s': %s", w->path, strerror(-err));
	else if (!err && w->last_err)
		tl_log(LOG_NOTICE, "metrics_file '%s' written again", w->path);
	w->last_err = err;
}

static void *writer_main(void *arg)
{
	struct metrics_writer *w = arg;
	struct timespec due;

	clock_gettime(CLOCK_MONOTONIC, &due);
	pthread_mutex_lock(&w->mutex);
	while (!w->stop) {
		due.tv_sec += w->interval_s;
		while (!w->stop && pthread_cond_timedwait(&w->cond, &w->mutex, &due) != ETIMEDOUT)
			;
		if (w->stop)
			break;
		pthread_mutex_unlock(&w->mutex);
		writer_once(w);
		pthread_mutex_lock(&w->mutex);
	}
	pthread_mutex_unlock(&w->mutex);
	return NULL;
}

int metrics_writer_start(struct metrics_writer *w, int dir_fd, const char *path,
			 unsigned int interval_s, int (*render)(void *arg, FILE *f), void *arg)
{
	pthread_condattr_t ca;
	int err;

	memset(w, 0, sizeof(*w));
	w->dir_fd = dir_fd;
	w->path = strdup(path);
	if (!w->path) {
		err = -ENOMEM;
		goto out_close;
	}
	w->name = strrchr(w->path, '/') ? strrchr(w->path, '/') + 1 : w->path;
	w->interval_s = interval_s ? interval_s : 1;
	w->render = render;
	w->arg = arg;
	pthread_mutex_init(&w->mutex, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	writer_once(w);
	err = -pthread_create(&w->thread, NULL, writer_main, w);
	if (err) {
		tl_log(LOG_ERR, "cannot start the metrics writer: %s", strerror(-err));
		pthread_cond_destroy(&w->cond);
		pthread_mutex_destroy(&w->mutex);
		goto out_close;
	}
	w->running = true;
	return 0;

out_close:
	/* what was written once goes with the writer that failed */
	if (w->path)
		unlinkat(dir_fd, w->name, 0);
	close(dir_fd);
	free(w->path);
	w->path = NULL;
	w->dir_fd = -1;
	return err;
}

void metrics_writer_stop(struct metrics_writer *w)
{
	if (!w->running)
		return;
	pthread_mutex_lock(&w->mutex);
	w->stop = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->mutex);
	pthread_join(w->thread, NULL);
	w->running = false;
	/* in the directory opened at the start, whatever its path leads to now */
	if (unlinkat(w->dir_fd, w->name, 0) == -1 && errno != ENOENT)
		tl_log(LOG_WARNING, "cannot remove metrics_file '%s': %s", w->path, strerror(errno));
	close(w->dir_fd);
	w->dir_fd = -1;
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->mutex);
	free(w->path);
	w->path = NULL;
}
