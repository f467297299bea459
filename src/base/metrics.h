/* metrics.h - the daemon's metrics in Prometheus's text exposition format
 *
 * metrics_format() writes one scrape: every family with its HELP and TYPE
 * lines, every sample labelled with the mount point and the owner name
 * (no label takes unbounded values: no paths, no holder ids). Durations
 * are histograms in seconds over the log2 buckets of stats.h, written at
 * every second power of two from 16 us to about 4.8 h, then +Inf; the
 * recall wait of delegations at every power of two from 256 us to 16.8 s
 * (its bound, delegation_recall, is 1 s by default).
 *
 * metrics_writer_*() keep a file in node_exporter's textfile collector
 * convention: rendered every interval into a temporary file beside it and
 * renamed over it, so a reader sees a whole scrape or the one before. The
 * file's directory is opened once, before the writer starts
 * (metrics_dir_open()), and every later create, rename and unlink is made
 * relative to that descriptor: whoever replaces a directory on the path
 * by a symbolic link afterwards redirects nothing.
 *
 * Thread rules: metrics_format() reads atomics and may run on any thread;
 * a writer is started and stopped by one thread.
 */
#ifndef TREELOCKFS_BASE_METRICS_H
#define TREELOCKFS_BASE_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lock/lockdeleg.h"
#include "lock/lockstore.h"
#include "base/stats.h"

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
	const struct tl_deleg_counters *deleg; /* delegations=on, else NULL */
};

/* Writes SRC's metrics to F. Returns 0 or -EIO (F failed). */
int metrics_format(FILE *f, const struct tl_metrics_src *src);

/* Writes S with '\', '"' and newline escaped as a label value must be. */
void metrics_put_label(FILE *f, const char *s);

struct metrics_writer {
	char *path;                  /* the file node_exporter reads, for messages */
	const char *name;            /* its last component, inside path */
	int dir_fd;                  /* its directory, O_PATH (metrics_dir_open()) */
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

/* Opens the directory of PATH (absolute, its last component a file name)
 * for metrics_writer_start(), walking it from "/" one component at a time
 * without following a symbolic link, and checks that the daemon may trust
 * what it reached. The file's own directory must be owned by root or by
 * the daemon's effective user and be writable by nobody else: no write
 * permission for others, nor for its group unless that group is root's
 * or the daemon's effective group. The directories above it may be other
 * users' (Debian's /var/lib/prometheus is the prometheus user's): their
 * owners can only rename what is in them, the walk follows no link and
 * the directory reached is judged, and once it is open no rename
 * matters; but none may be writable by others, as then anyone could.
 * The sticky bit (as on /tmp: nobody removes or renames what is not
 * theirs) lifts the rules on write permission. Returns the O_PATH
 * descriptor (close-on-exec), or -errno with WHY (SIZE bytes, always
 * NUL-terminated when SIZE > 0) saying what is wrong, to follow "cannot
 * use metrics_file 'PATH': ": -ELOOP a symbolic link, -ENOTDIR not a
 * directory, -EPERM not trusted, -EINVAL PATH is not absolute or names
 * no file, -ENOMEM, or the errno of the open that failed (-ENOENT,
 * -EACCES, ...). */
int metrics_dir_open(const char *path, char *why, size_t size);

/* Writes the file once (a failure is logged) and then every INTERVAL_S
 * seconds from a thread of its own. DIR_FD is PATH's directory from
 * metrics_dir_open(); the writer owns it from here on (closed by
 * metrics_writer_stop(), or here on failure). PATH is absolute. Returns 0
 * or -errno (no thread then; nothing to stop). */
int metrics_writer_start(struct metrics_writer *w, int dir_fd, const char *path,
			 unsigned int interval_s, int (*render)(void *arg, FILE *f), void *arg);

/* Stops the thread and removes the file from the directory opened at the
 * start: the metrics of a mount that is gone are not reported as if it
 * were still there. Accepts a writer never started. */
void metrics_writer_stop(struct metrics_writer *w);

/* Renders and replaces NAME (a file name, no '/') in directory DIR_FD
 * once, atomically: into a new file NAME.XXXXXX (six random characters;
 * O_CREAT | O_EXCL, so a planted name is never followed or written to),
 * mode 0644, then renamed over NAME. Returns 0 or -errno. */
int metrics_write_at(int dir_fd, const char *name, int (*render)(void *arg, FILE *f), void *arg);

#endif /* TREELOCKFS_BASE_METRICS_H */
