/* es_retry.c - the es store's retry pauses and its start retry loop, see
 * es_retry.h (the chart of every retry) */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "es/es_client.h"
#include "es/es_internal.h"
#include "es/es_retry.h"
#include "es/httpc.h"
#include "base/log.h"
#include "base/tlclock.h"

void es_sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	if (ms > 0)
		nanosleep(&ts, NULL);
}

bool es_retry_pause(int64_t deadline, int attempt)
{
	int64_t pause = (int64_t)ES_RETRY_BASE_MS << attempt;

	if (deadline && deadline - tl_mono_ms() <= pause)
		return false;
	es_sleep_ms(pause);
	return true;
}

int es_start_retry(struct es_store *es, const char *what,
		   int (*step)(struct es_store *, bool, int64_t deadline), bool arg)
{
	int64_t t0 = tl_mono_ms(), end = t0 + (int64_t)es->start_timeout * 1000;
	int64_t delay = ES_START_BACKOFF_MS, now;
	char why[256];
	unsigned int attempts = 0;
	int err;

	for (;;) {
		attempts++;
		/* every request of the last attempt is capped by what is
		 * left, as a rename's lock_timeout caps its own */
		err = step(es, arg, es->start_timeout ? end : 0);
		if (err != -EAGAIN)
			break;
		es_client_last_error(&es->cl, why, sizeof(why));
		now = tl_mono_ms();
		if (now + delay >= end)
			break;
		tl_log(LOG_WARNING, "cannot %s yet (attempt %u): %s; retrying in %" PRId64 " ms",
		       what, attempts, *why ? why : "lock store unavailable", delay);
		es_sleep_ms(delay - delay / 4 + (int64_t)(random() % (delay / 2 + 1)));
		delay = delay * 2 > ES_START_BACKOFF_MAX_MS ? ES_START_BACKOFF_MAX_MS : delay * 2;
	}
	if (err == -EAGAIN) {
		tl_log(LOG_ERR,
		       "cannot %s at '%s' (es_start_timeout %u s, %u attempts in %.1f s); "
		       "last error: %s",
		       what, httpc_node_name(es->cl.http, 0), es->start_timeout, attempts,
		       (double)(tl_mono_ms() - t0) / 1000, *why ? why : "lock store unavailable");
		err = -ENOLCK;
	}
	return err;
}
