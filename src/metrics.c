/* metrics.c - Prometheus text exposition of the daemon's counters, see
 * metrics.h */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "tlclock.h"

/* Histogram buckets written: 2^b us for b = FIRST, FIRST + STEP, ... LAST */
#define HIST_FIRST 4
#define HIST_STEP 2
#define HIST_LAST 34

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

/* H as a Prometheus histogram NAME in seconds. The counts are read once
 * each; the count is their sum, so that +Inf equals _count even while
 * other threads record. */
static void histogram(FILE *f, const struct tl_metrics_src *src, const char *name,
		      const char *help, const struct tl_hist *h)
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
	for (b = 0; b <= HIST_LAST; b++) {
		cum += counts[b];
		if (b < HIST_FIRST || (b - HIST_FIRST) % HIST_STEP)
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
	counter(f, src, "treelockfs_entry_ops_total",
		"Namespace operations planned with lock_scope=namespace.",
		stats_get(&s->entry_ops));
	counter(f, src, "treelockfs_lock_acquisitions_total",
		"Lock plans acquired (renames and entry operations).", stats_get(&s->acquired));
	counter(f, src, "treelockfs_lock_conflicts_total",
		"Attempts the lock store refused because another holder had a key.",
		stats_get(&s->conflicts));
	counter(f, src, "treelockfs_lock_waits_total",
		"Lock plans that had to wait at least once.", stats_get(&s->waits));
	counter(f, src, "treelockfs_lock_timeouts_total",
		"Lock plans given up after lock_timeout (EBUSY).", stats_get(&s->timeouts));
	counter(f, src, "treelockfs_fenced_total",
		"Renames refused because this mount's lease was no longer fresh.",
		stats_get(&s->fenced));
	counter(f, src, "treelockfs_lock_store_errors_total",
		"Lock operations that failed in the lock store (ENOLCK).", stats_get(&s->errors));
	counter(f, src, "treelockfs_store_down_refusals_total",
		"Lock plans refused at once (ENOLCK) because the lock store was down.",
		stats_get(&s->store_down_refusals));
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

	counter(f, src, "treelockfs_store_requests_total",
		"Requests sent to the lock store (each attempt; 0 for the mem store).",
		sm->requests);
	counter(f, src, "treelockfs_store_request_failures_total",
		"Lock store requests that got no answer: refused, timed out, cut or too big.",
		sm->failures);
	counter(f, src, "treelockfs_store_sent_bytes_total",
		"Request body bytes sent to the lock store.", sm->bytes_sent);
	counter(f, src, "treelockfs_store_received_bytes_total",
		"Response body bytes received from the lock store.", sm->bytes_received);
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

int metrics_write_file(const char *path, int (*render)(void *arg, FILE *f), void *arg)
{
	size_t plen = strlen(path);
	char *tmp = malloc(plen + 8);
	FILE *f = NULL;
	int fd, err;

	if (!tmp)
		return -ENOMEM;
	/* beside PATH, so that the rename stays in one filesystem; created
	 * with O_EXCL, so a planted name (a symlink) is never followed */
	snprintf(tmp, plen + 8, "%s.XXXXXX", path);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd == -1) {
		err = -errno;
		goto out_free;
	}
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
	if (rename(tmp, path) == -1) {
		err = -errno;
		goto out_unlink;
	}
	free(tmp);
	return 0;

out_unlink:
	if (f)
		fclose(f);
	if (fd != -1)
		close(fd);
	unlink(tmp);
out_free:
	free(tmp);
	return err;
}

/* Writes once; logs a failure when it differs from the last one, and the
 * recovery. */
static void writer_once(struct metrics_writer *w)
{
	int err = metrics_write_file(w->path, w->render, w->arg);

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

int metrics_writer_start(struct metrics_writer *w, const char *path, unsigned int interval_s,
			 int (*render)(void *arg, FILE *f), void *arg)
{
	pthread_condattr_t ca;
	int err;

	memset(w, 0, sizeof(*w));
	w->path = strdup(path);
	if (!w->path)
		return -ENOMEM;
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
		free(w->path);
		w->path = NULL;
		return err;
	}
	w->running = true;
	return 0;
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
	if (unlink(w->path) == -1 && errno != ENOENT)
		tl_log(LOG_WARNING, "cannot remove metrics_file '%s': %s", w->path, strerror(errno));
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->mutex);
	free(w->path);
	w->path = NULL;
}
