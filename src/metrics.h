/* metrics.h - the daemon's metrics in Prometheus's text exposition format
 *
 * metrics_format() writes one scrape: every family with its HELP and TYPE
 * lines, every sample labelled with the mount point and the owner name
 * (no label takes unbounded values: no paths, no holder ids). Durations
 * are histograms in seconds over the log2 buckets of stats.h, written at
 * every second power of two from 16 us to about 4.8 h, then +Inf.
 *
 * metrics_writer_*() keep a file in node_exporter's textfile collector
 * convention: rendered every interval into a temporary file beside it and
 * renamed over it, so a reader sees a whole scrape or the one before.
 *
 * Thread rules: metrics_format() reads atomics and may run on any thread;
 * a writer is started and stopped by one thread.
 */
#ifndef TREELOCKFS_METRICS_H
#define TREELOCKFS_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lockstore.h"
#include "stats.h"

/* Where the data path's own counters come from (NULL fields: not shown). */
struct tl_data_counters {
	const uint64_t *passthrough_opens;
	const uint64_t *passthrough_fallbacks;
	unsigned int file_lock_waiters; /* flock()/fcntl() waits now */
	uint64_t inode_fds;             /* inodes holding a descriptor now */
	uint64_t inode_prunes;          /* inodes the kernel was asked to forget */
};

/* One scrape's sources; every pointer stays valid during the call. */
struct tl_metrics_src {
	const char *mountpoint;      /* label "mountpoint" */
	const char *owner;           /* label "owner": the owner= name */
	const char *store;           /* "mem", "es" */
	const char *strategy;        /* "tree", ... */
	double lock_timeout;         /* seconds */
	int64_t start_time_ms;       /* wall clock of the mount's start */
	const struct tl_stats *stats;
	const struct tl_store_metrics *store_m;
	struct tl_data_counters data;
};

/* Writes SRC's metrics to F. Returns 0 or -EIO (F failed). */
int metrics_format(FILE *f, const struct tl_metrics_src *src);

/* Writes S with '\', '"' and newline escaped as a label value must be. */
void metrics_put_label(FILE *f, const char *s);

struct metrics_writer {
	char *path;                  /* the file node_exporter reads */
	unsigned int interval_s;
	/* renders one scrape into F; returns 0 or -errno */
	int (*render)(void *arg, FILE *f);
	void *arg;
	pthread_t thread;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	bool running, stop;          /* protected by mutex */
	int last_err;                /* logged once per change */
};

/* Writes the file once (a failure is logged) and then every INTERVAL_S
 * seconds from a thread of its own. PATH is absolute. Returns 0 or
 * -errno (no thread then; nothing to stop). */
int metrics_writer_start(struct metrics_writer *w, const char *path, unsigned int interval_s,
			 int (*render)(void *arg, FILE *f), void *arg);

/* Stops the thread and removes the file: the metrics of a mount that is
 * gone are not reported as if it were still there. Accepts a writer never
 * started. */
void metrics_writer_stop(struct metrics_writer *w);

/* Renders and replaces PATH once, atomically. Returns 0 or -errno. */
int metrics_write_file(const char *path, int (*render)(void *arg, FILE *f), void *arg);

#endif /* TREELOCKFS_METRICS_H */
