/* stats.c - lock manager counters, see stats.h */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "base/stats.h"

void stats_add(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

void stats_sub(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_sub(counter, n, __ATOMIC_RELAXED);
}

uint64_t stats_get(const uint64_t *counter)
{
	return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

void stats_hist_record(struct tl_hist *h, uint64_t us)
{
	unsigned b = 0;

	while (b < STATS_BUCKETS - 1 && (UINT64_C(1) << b) < us)
		b++;
	stats_add(&h->bucket[b], 1);
	stats_add(&h->sum_us, us);
}

uint64_t stats_hist_count(const struct tl_hist *h)
{
	uint64_t total = 0;
	unsigned b;

	for (b = 0; b < STATS_BUCKETS; b++)
		total += stats_get(&h->bucket[b]);
	return total;
}

uint64_t stats_hist_quantile(const struct tl_hist *h, double q)
{
	uint64_t total = stats_hist_count(h), seen = 0, want;
	unsigned b;

	if (total == 0)
		return 0;
	want = (uint64_t)(q * (double)total);
	if (want >= total)
		want = total - 1;
	for (b = 0; b < STATS_BUCKETS; b++) {
		seen += stats_get(&h->bucket[b]);
		if (seen > want)
			return UINT64_C(1) << b;
	}
	return UINT64_C(1) << (STATS_BUCKETS - 1);
}

void stats_record_wait(struct tl_stats *s, uint64_t us)
{
	stats_hist_record(&s->wait, us);
}

uint64_t stats_wait_quantile(const struct tl_stats *s, double q)
{
	return stats_hist_quantile(&s->wait, q);
}

enum tl_result stats_result_of(int res)
{
	switch (res) {
	case 0:
		return TL_RES_OK;
	case -ENOENT:
		return TL_RES_ENOENT;
	case -EBUSY:
		return TL_RES_EBUSY;
	case -ENOLCK:
		return TL_RES_ENOLCK;
	case -EACCES:
	case -EPERM:
		return TL_RES_EACCES;
	case -EEXIST:
	case -ENOTEMPTY:
		return TL_RES_EEXIST;
	case -EXDEV:
		return TL_RES_EXDEV;
	case -EINVAL:
		return TL_RES_EINVAL;
	default:
		return TL_RES_OTHER;
	}
}

const char *stats_result_name(enum tl_result r)
{
	static const char *const names[TL_RES_COUNT] = {
		[TL_RES_OK] = "ok",	    [TL_RES_ENOENT] = "ENOENT", [TL_RES_EBUSY] = "EBUSY",
		[TL_RES_ENOLCK] = "ENOLCK", [TL_RES_EACCES] = "EACCES", [TL_RES_EEXIST] = "EEXIST",
		[TL_RES_EXDEV] = "EXDEV",   [TL_RES_EINVAL] = "EINVAL", [TL_RES_OTHER] = "other",
	};

	return (unsigned)r < TL_RES_COUNT ? names[r] : "other";
}

void stats_record_rename(struct tl_stats *s, int res, uint64_t us)
{
	stats_add(&s->results[stats_result_of(res)], 1);
	stats_hist_record(&s->rename, us);
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
		     "store_down_refusals %" PRIu64 "\n"
		     "store_requests %" PRIu64 "\n",
		     stats_get(&s->renames), stats_get(&s->entry_ops), stats_get(&s->acquired),
		     stats_get(&s->conflicts), stats_get(&s->waits), stats_wait_quantile(s, 0.5),
		     stats_wait_quantile(s, 0.99), stats_get(&s->timeouts), stats_get(&s->errors),
		     stats_get(&s->fenced), stats_get(&s->store_down_refusals), store_requests);
	if (n < 0)
		return 0;
	return (size_t)n < size ? (size_t)n : size - 1;
}
