/* stats.c - lock manager counters, see stats.h */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>

#include "stats.h"

void stats_add(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

uint64_t stats_get(const uint64_t *counter)
{
	return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

void stats_record_wait(struct tl_stats *s, uint64_t us)
{
	unsigned b = 0;

	while (b < STATS_BUCKETS - 1 && (UINT64_C(1) << b) <= us)
		b++;
	stats_add(&s->wait_hist[b], 1);
}

uint64_t stats_wait_quantile(const struct tl_stats *s, double q)
{
	uint64_t total = 0, seen = 0, want;
	unsigned b;

	for (b = 0; b < STATS_BUCKETS; b++)
		total += stats_get(&s->wait_hist[b]);
	if (total == 0)
		return 0;
	want = (uint64_t)(q * (double)total);
	if (want >= total)
		want = total - 1;
	for (b = 0; b < STATS_BUCKETS; b++) {
		seen += stats_get(&s->wait_hist[b]);
		if (seen > want)
			return UINT64_C(1) << b;
	}
	return UINT64_C(1) << (STATS_BUCKETS - 1);
}

size_t stats_format(const struct tl_stats *s, uint64_t store_requests, char *buf, size_t size)
{
	int n;

	n = snprintf(buf, size,
		     "renames %" PRIu64 "\n"
		     "entry_ops %" PRIu64 "\n"
		     "acquired %" PRIu64 "\n"
		     "conflicts %" PRIu64 "\n"
		     "waits %" PRIu64 "\n"
		     "wait_p50_us %" PRIu64 "\n"
		     "wait_p99_us %" PRIu64 "\n"
		     "timeouts %" PRIu64 "\n"
		     "errors %" PRIu64 "\n"
		     "fenced %" PRIu64 "\n"
		     "store_requests %" PRIu64 "\n",
		     stats_get(&s->renames), stats_get(&s->entry_ops), stats_get(&s->acquired),
		     stats_get(&s->conflicts), stats_get(&s->waits), stats_wait_quantile(s, 0.5),
		     stats_wait_quantile(s, 0.99), stats_get(&s->timeouts), stats_get(&s->errors),
		     stats_get(&s->fenced), store_requests);
	if (n < 0)
		return 0;
	return (size_t)n < size ? (size_t)n : size - 1;
}
