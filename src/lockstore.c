/* lockstore.c - store selection and the one errno mapping, see lockstore.h */
#include <config.h>

#include <errno.h>
#include <stdlib.h>

#include "options.h"
#include "lockstore.h"
#include "lockstore_i.h"

int lockstore_open(const struct tl_config *cfg, struct lockstore **out)
{
	*out = NULL;
	switch (cfg->lock_store) {
	case TL_STORE_MEM:
		return lockstore_mem_open(cfg, out);
	case TL_STORE_ES:
		return lockstore_es_open(cfg, out);
	case TL_STORE_COUNT:
		break;
	}
	return -EINVAL;
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
	};
}
