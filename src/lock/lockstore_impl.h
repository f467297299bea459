/* lockstore_impl.h - what the backends share: their constructors (for
 * lockstore.c's registry), and the making and freeing of a store's base,
 * its mutex and its condition. Included by lockstore.c and the backends
 * only. */
#ifndef TREELOCKFS_LOCK_LOCKSTORE_IMPL_H
#define TREELOCKFS_LOCK_LOCKSTORE_IMPL_H

#include <pthread.h>

#include "lock/lockstore.h"

int lockstore_mem_open(const struct tl_config *cfg, struct lockstore **out);
int es_store_open(const struct tl_config *cfg, struct lockstore **out);

/* Makes a new store's base ST (its OPS and CFG), its MUTEX, and COND, a
 * condition whose timed waits run on CLOCK_MONOTONIC (as every deadline of
 * a store does). This function can't fail. */
void lockstore_base_init(struct lockstore *st, const struct lockstore_ops *ops,
			 const struct tl_config *cfg, pthread_mutex_t *mutex, pthread_cond_t *cond);

/* Destroys the MUTEX and COND of lockstore_base_init() and frees ST, the
 * store (allocated whole, its base first), once no thread uses them. */
void lockstore_base_free(struct lockstore *st, pthread_mutex_t *mutex, pthread_cond_t *cond);

#endif /* TREELOCKFS_LOCK_LOCKSTORE_IMPL_H */
