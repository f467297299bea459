/* lockstore_i.h - backend constructors, shared by lockstore.c and the
 * backends only. */
#ifndef TREELOCKFS_LOCKSTORE_I_H
#define TREELOCKFS_LOCKSTORE_I_H

#include "lockstore.h"

int lockstore_mem_open(const struct tl_config *cfg, struct lockstore **out);
int lockstore_es_open(const struct tl_config *cfg, struct lockstore **out);

#endif /* TREELOCKFS_LOCKSTORE_I_H */
