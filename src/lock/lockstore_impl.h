/* lockstore_impl.h - backend constructors, shared by lockstore.c and the
 * backends only. */
#ifndef TREELOCKFS_LOCK_LOCKSTORE_IMPL_H
#define TREELOCKFS_LOCK_LOCKSTORE_IMPL_H

#include "lock/lockstore.h"

int lockstore_mem_open(const struct tl_config *cfg, struct lockstore **out);
int es_store_open(const struct tl_config *cfg, struct lockstore **out);

#endif /* TREELOCKFS_LOCK_LOCKSTORE_IMPL_H */
