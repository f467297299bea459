/* tlclock.h - the clock readings every module takes
 *
 * Monotonic time for deadlines, backoff and lease ages (never compared
 * between hosts); wall-clock time only for what is shown to people or
 * stored for display (lock ages, intents). These functions can't fail.
 */
#ifndef TREELOCKFS_BASE_TLCLOCK_H
#define TREELOCKFS_BASE_TLCLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t tl_clock_us(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Microseconds and milliseconds of CLOCK_MONOTONIC. */
static inline int64_t tl_mono_us(void)
{
	return tl_clock_us(CLOCK_MONOTONIC);
}

static inline int64_t tl_mono_ms(void)
{
	return tl_clock_us(CLOCK_MONOTONIC) / 1000;
}

/* Milliseconds since the epoch (CLOCK_REALTIME). */
static inline int64_t tl_wall_ms(void)
{
	return tl_clock_us(CLOCK_REALTIME) / 1000;
}

#endif /* TREELOCKFS_BASE_TLCLOCK_H */
