/* es_listing.c - listing the es store's locks: the vtable's list, for
 * .treelockfs/locks and treelockctl locks
 *
 * One _search of the whole index, read as it stands: a listing takes no
 * lock and starts no lease.
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/path.h"
#include "base/tlclock.h"
#include "es/es_batch.h"
#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/es_internal.h"
#include "lock/lockplan.h"
#include "lock/lockstore.h"

/* KEY's path without the PATH_BYTES_PREFIX of a key text (escaping is per
 * component, so ancestry holds between the escaped paths too). */
static const char *text_path(const char *key)
{
	size_t l = strlen(PATH_BYTES_PREFIX);

	return strncmp(key, PATH_BYTES_PREFIX, l) == 0 ? key + l : key;
}

/* Keys are listed as their text (path_key_text()), as the documents hold
 * them; PREFIX is a key and matches the texts below it. */
int es_list(struct lockstore *st, const char *prefix, struct tl_lock_info **out, size_t *n)
{
	struct es_store *es = es_of(st);
	struct tl_lock_info *list = NULL;
	cJSON *root = NULL;
	const cJSON *hit;
	size_t cnt = 0, cap = 0;
	char *ptext = NULL;

	*out = NULL;
	*n = 0;
	if (prefix && path_key_text(prefix, &ptext) != 0)
		return -ENOMEM;
	/* the releases of renames that returned are answered first: the list
	 * shows no lock this mount has let go of */
	es_batch_drain(&es->batch);
	root = es_search_all(&es->cl, NULL, 0);
	if (!root) {
		free(ptext);
		return -ENOLCK;
	}
	cJSON_ArrayForEach(hit, es_hits(root))
	{
		const char *id = es_jstr(hit, "_id");
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(hit, "_source");
		const char *key = es_jstr(src, "path"), *type = es_jstr(src, "lock_type");
		const cJSON *e;
		struct tl_lock_info *li;
		struct buf hb = BUF_INIT;
		unsigned int holders = 0;

		if (!id || !es_docs_is_lock_id(id))
			continue;
		if (!key)
			key = id;
		if (ptext && strcmp(ptext, "/") != 0 && strcmp(key, ptext) != 0 &&
		    !path_is_ancestor(text_path(ptext), text_path(key)))
			continue;
		if (cnt == cap) {
			struct tl_lock_info *nl;

			cap = cap ? 2 * cap : 16;
			nl = realloc(list, cap * sizeof(*list));
			if (!nl)
				break;
			list = nl;
		}
		li = &list[cnt];
		memset(li, 0, sizeof(*li));
		li->key = strdup(key);
		li->mode = type && strcmp(type, "exclusive") == 0 ? TL_EXCLUSIVE : TL_SHARED;
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(src, "holders"))
		{
			if (holders++)
				buf_adds(&hb, ", ");
			buf_adds(&hb, e->string);
		}
		if (!holders && li->mode == TL_EXCLUSIVE)
			buf_adds(&hb, es_jstr(src, "process_id") ? es_jstr(src, "process_id")
								  : "(no owner)");
		li->holders = buf_detach(&hb, NULL);
		li->count = li->mode == TL_EXCLUSIVE
				    ? 1
				    : (unsigned int)es_jint(src, "lock_count", holders);
		li->age_ms = es_jint(src, "since", -1) > 0 ? tl_wall_ms() - es_jint(src, "since", 0)
							   : -1;
		li->waiters = (unsigned int)cJSON_GetArraySize(
			cJSON_GetObjectItemCaseSensitive(src, "waiters"));
		cnt++;
	}
	cJSON_Delete(root);
	free(ptext);
	*out = list;
	*n = cnt;
	return 0;
}
