/* lockstore.c - the registry of backends, store selection and the one
 * errno mapping, see lockstore.h; a store's base, see lockstore_impl.h */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "config/config.h"
#include "lock/lockstore.h"
#include "es/es_store.h"
#include "lock/lockstore_impl.h"

const struct lockstore_backend lockstore_backends[TL_STORE_COUNT] = {
	[TL_STORE_MEM] = {.name = "mem", .options = NULL, .open = lockstore_mem_open},
	[TL_STORE_ES] = {.name = "es", .options = &es_store_options, .open = es_store_open},
};

int lockstore_open(const struct tl_config *cfg, struct lockstore **out)
{
	*out = NULL;
	if (cfg->lock_store >= TL_STORE_COUNT)
		return -EINVAL;
	return lockstore_backends[cfg->lock_store].open(cfg, out);
}

void lockstore_base_init(struct lockstore *st, const struct lockstore_ops *ops,
			 const struct tl_config *cfg, pthread_mutex_t *mutex, pthread_cond_t *cond)
{
	pthread_condattr_t ca;

	st->ops = ops;
	st->cfg = cfg;
	pthread_mutex_init(mutex, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &ca);
	pthread_condattr_destroy(&ca);
}

void lockstore_base_free(struct lockstore *st, pthread_mutex_t *mutex, pthread_cond_t *cond)
{
	pthread_cond_destroy(cond);
	pthread_mutex_destroy(mutex);
	free(st);
}

void lockstore_close(struct lockstore *st)
{
	if (st)
		st->ops->close(st);
}

void lockstore_free_list(struct tl_lock_info *list, size_t n)
{
	size_t i;

	if (!list)
		return;
	for (i = 0; i < n; i++) {
		free(list[i].key);
		free(list[i].holders);
	}
	free(list);
}

int lockstore_errno(int store_err)
{
	switch (store_err) {
	case 0:
		return 0;
	case -EAGAIN:
		return -EBUSY;
	default:
		return -ENOLCK;
	}
}

void lockstore_metrics_init(struct tl_store_metrics *m)
{
	*m = (struct tl_store_metrics){
		.lease_age_ms = -1,
		.lease_fresh = -1,
		.owners_alive = -1,
		.owners_dead = -1,
		.served_us = -1,
		.store_down = -1,
	};
}
