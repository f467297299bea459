/* lockstore.c - the registry of backends, store selection and the one
 * errno mapping, see lockstore.h; a store's base, see lockstore_impl.h */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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

bool lockstore_holder_is_delegation(const char *id)
{
	const char *hash = id ? strrchr(id, '#') : NULL;

	if (!hash || hash == id || hash[1] != 'd' || !hash[2])
		return false;
	return strspn(hash + 2, "0123456789") == strlen(hash + 2);
}

int lockstore_list(struct lockstore *st, const char *prefix, struct tl_lock_info **out,
		   size_t *n)
{
	size_t i;
	int err;

	*out = NULL;
	*n = 0;
	err = st->ops->list(st, prefix, out, n);
	if (err)
		return err;
	for (i = 0; i < *n; i++) {
		struct tl_lock_info *li = &(*out)[i];

		/* an exclusive lock's holders end with its one holder id
		 * (the mem store's start with the process id) */
		li->delegation = li->mode == TL_EXCLUSIVE &&
				 lockstore_holder_is_delegation(li->holders);
		li->users = -1;
		li->served = -1;
		li->deleg_state = NULL;
	}
	return 0;
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
