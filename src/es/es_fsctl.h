/* es_fsctl.h - the fs index as treelockctl reads and writes it
 *
 * A client on the lock store's nodes (its URLs, credentials and timeout:
 * the same es_* options) for the fs index named by fs_index= (es_fsdoc.h
 * holds its documents): creating it, sending bulks of es_fsdoc_put() and
 * es_fsdoc_del() items and counting their outcomes, reading one document,
 * many by id, and every document a query matches, page by page in path
 * order (search_after). Nothing here takes a lease or a lock.
 *
 * Thread rules: es_fsctl_bulk(), es_fsctl_get(), es_fsctl_mget() and
 * es_fsctl_page() may run in many threads at once (httpc's rules);
 * es_fsctl_open() and es_fsctl_close() in one thread while none runs.
 */
#ifndef TREELOCKFS_ES_ES_FSCTL_H
#define TREELOCKFS_ES_ES_FSCTL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "es/es_fsdoc.h"

struct tl_config;
struct es_fsctl;

/* Opens a client for index INDEX on the nodes CFG's es options name.
 * Returns 0, -EINVAL (no es_url, or no usable one: logged), -ENOMEM. */
int es_fsctl_open(const struct tl_config *cfg, const char *index, struct es_fsctl **out);

/* Frees F; accepts NULL. */
void es_fsctl_close(struct es_fsctl *f);

/* The index's name as given. */
const char *es_fsctl_index(const struct es_fsctl *f);

/* Creates the index (es_fsdoc_index_body()) unless it exists; *CREATED
 * (may be NULL) tells which. Returns 0, -EPROTO (an index of that name
 * exists and is not an fs index of ours), -ENOLCK (the store failed or
 * refused; es_fsctl_last_error() says why), -ENOMEM. */
int es_fsctl_ensure(struct es_fsctl *f, int *created);

/* Whether the index exists: 1 yes, 0 no, or -ENOLCK. */
int es_fsctl_exists(struct es_fsctl *f);

/* Makes what was written visible to searches (_refresh). Returns 0 or
 * -ENOLCK. */
int es_fsctl_refresh(struct es_fsctl *f);

/* The outcomes of bulk items. */
struct es_fsctl_counts {
	size_t ok;        /* written, or (a delete) already gone */
	size_t stale;     /* 409: a newer truth was there already */
	size_t failed;    /* anything else; the first reason in es_fsctl_last_error() */
};

/* Sends the ndjson DATA[0..LEN) to _bulk and adds the outcomes of its
 * items to *C (its fields are updated atomically: threads may share one).
 * A request that fails as a whole is sent again up to 3 times. Returns 0
 * (whatever the items' outcomes), -ENOLCK (the request failed), -ENOMEM. */
int es_fsctl_bulk(struct es_fsctl *f, const char *data, size_t len, struct es_fsctl_counts *c);

/* Reads the document of KEY into *OUT (es_fsentry_free() it). Returns 0,
 * -ENOENT (none), -ENOLCK, -ENOMEM. */
int es_fsctl_get(struct es_fsctl *f, const char *key, struct es_fsentry *out);

/* Reads the documents of KEYS[0..N) with one _mget: OUT[i] gets KEYS[i]'s
 * (OUT[i].key NULL when it has none). Returns 0, -ENOLCK, -ENOMEM; on
 * failure OUT holds nothing. */
int es_fsctl_mget(struct es_fsctl *f, char *const *keys, size_t n, struct es_fsentry *out);

/* One page of the documents QUERY matches (NULL: all), in path order,
 * after the path text *AFTER (NULL: from the first), at most SIZE. Fills
 * OUT (SIZE entries; *N of them read, es_fsentry_free() each) and moves
 * *AFTER (a string of ours: free() it at the end) to the last path read.
 * QUERY stays the caller's. Returns 1 (a next page may follow), 0 (the
 * last page), -ENOENT (no such index), -ENOLCK, -ENOMEM. */
int es_fsctl_page(struct es_fsctl *f, const cJSON *query, char **after, size_t size,
		  struct es_fsentry *out, size_t *n);

/* Copies the last recorded failure ("" if none) to BUF. */
void es_fsctl_last_error(struct es_fsctl *f, char *buf, size_t size);

#endif /* TREELOCKFS_ES_ES_FSCTL_H */
