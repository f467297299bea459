/* stats.h - counters of the lock manager, shown in .treelockfs/stats
 *
 * Counters are atomics; wait times go to a fixed log2 histogram of
 * microseconds, from which p50/p99 are read. Thread-safe, lock-free,
 * allocation-free.
 */
#ifndef TREELOCKFS_STATS_H
#define TREELOCKFS_STATS_H

#include <stddef.h>
#include <stdint.h>

#define STATS_BUCKETS 40

struct tl_stats {
	uint64_t renames;      /* renames planned (any strategy) */
	uint64_t entry_ops;    /* namespace ops planned (lock_scope=namespace) */
	uint64_t acquired;     /* plans acquired */
	uint64_t conflicts;    /* refusals by the store */
	uint64_t waits;        /* plans that had to wait at least once */
	uint64_t timeouts;     /* EBUSY after lock_timeout */
	uint64_t errors;       /* ENOLCK: store failures, lost lease */
	uint64_t fenced;       /* renames refused because our lease was stale */
	uint64_t wait_hist[STATS_BUCKETS]; /* bucket i: wait < 2^i us */
};

void stats_add(uint64_t *counter, uint64_t n);
uint64_t stats_get(const uint64_t *counter);

/* Records one wait of US microseconds. */
void stats_record_wait(struct tl_stats *s, uint64_t us);

/* The Q-quantile (0..1) of the recorded waits in microseconds (upper bound
 * of its bucket), 0 when none. */
uint64_t stats_wait_quantile(const struct tl_stats *s, double q);

/* Formats S as "name value" lines into BUF. Returns the length written
 * (truncated to SIZE - 1). */
size_t stats_format(const struct tl_stats *s, uint64_t store_requests, char *buf, size_t size);

#endif /* TREELOCKFS_STATS_H */
