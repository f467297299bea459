/* stats.h - counters of the lock manager, shown in .treelockfs/stats and
 * .treelockfs/metrics
 *
 * Counters are atomics; durations go to fixed log2 histograms of
 * microseconds (struct tl_hist), from which quantiles are read and which
 * metrics.c writes as Prometheus histograms. Thread-safe, lock-free,
 * allocation-free.
 */
#ifndef TREELOCKFS_BASE_STATS_H
#define TREELOCKFS_BASE_STATS_H

#include <stddef.h>
#include <stdint.h>

#define STATS_BUCKETS 40

/* A histogram of durations in microseconds: bucket i counts the values v
 * with 2^(i-1) < v <= 2^i (bucket 0: v <= 1, the last: everything
 * larger), so that the cumulative count up to bucket i is the number of
 * values <= 2^i us, as a Prometheus bucket "le" counts. */
struct tl_hist {
	uint64_t bucket[STATS_BUCKETS];
	uint64_t sum_us;
};

/* What a rename answered, by class; the labels of
 * treelockfs_renames_total{result=...}. A fixed, small set. */
enum tl_result {
	TL_RES_OK = 0,
	TL_RES_ENOENT,
	TL_RES_EBUSY,     /* lock_timeout passed */
	TL_RES_ENOLCK,    /* lock store failed, or this mount is fenced */
	TL_RES_EACCES,    /* EACCES or EPERM */
	TL_RES_EEXIST,    /* EEXIST or ENOTEMPTY */
	TL_RES_EXDEV,
	TL_RES_EINVAL,
	TL_RES_OTHER,
	TL_RES_COUNT
};

struct tl_stats {
	uint64_t renames;      /* renames planned (any strategy) */
	uint64_t entry_ops;    /* namespace ops planned (lock_scope=namespace) */
	uint64_t acquired;     /* plans acquired */
	uint64_t conflicts;    /* refusals by the store */
	uint64_t waits;        /* plans that had to wait at least once */
	uint64_t timeouts;     /* EBUSY after lock_timeout */
	uint64_t errors;       /* ENOLCK: store failures, lost lease */
	uint64_t fenced;       /* renames refused because our lease was stale */
	uint64_t store_down_refusals; /* plans refused at once: the store was
				       * known down (lockmgr.h) */
	uint64_t held;         /* gauge: plans holding their locks now */
	uint64_t waiting;      /* gauge: plans waiting for their locks now */
	uint64_t results[TL_RES_COUNT]; /* renames answered, by result */
	struct tl_hist wait;   /* how long plans that waited waited */
	struct tl_hist rename; /* how long renames took, answer to answer */
};

void stats_add(uint64_t *counter, uint64_t n);
void stats_sub(uint64_t *counter, uint64_t n);
uint64_t stats_get(const uint64_t *counter);

/* Records one value of US microseconds in H. */
void stats_hist_record(struct tl_hist *h, uint64_t us);

/* The Q-quantile (0..1) of the values in H in microseconds (upper bound of
 * its bucket), 0 when none. */
uint64_t stats_hist_quantile(const struct tl_hist *h, double q);

/* The number of values in H (the sum of its buckets). */
uint64_t stats_hist_count(const struct tl_hist *h);

/* Records one wait of US microseconds. */
void stats_record_wait(struct tl_stats *s, uint64_t us);

/* The Q-quantile (0..1) of the recorded waits in microseconds (upper bound
 * of its bucket), 0 when none. */
uint64_t stats_wait_quantile(const struct tl_stats *s, double q);

/* Counts a rename answered with RES (0 or -errno) after US microseconds. */
void stats_record_rename(struct tl_stats *s, int res, uint64_t us);

/* The class of RES (0 or -errno), and its label ("ok", "ENOENT", ...). */
enum tl_result stats_result_of(int res);
const char *stats_result_name(enum tl_result r);

/* Formats S as "name value" lines into BUF. Returns the length written
 * (truncated to SIZE - 1). */
size_t stats_format(const struct tl_stats *s, uint64_t store_requests, char *buf, size_t size);

#endif /* TREELOCKFS_BASE_STATS_H */
