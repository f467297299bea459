/* es_index.h - the lock index of the es store: cluster check, mapping,
 * bootstrap
 *
 * The index is created by the first mount with a keyword mapping (lock
 * ids and owners are matched exactly) and the lock strategy recorded in
 * the mapping's _meta; a mount asking for another strategy is refused, so
 * two strategies never share one index. treelockctl only reads.
 *
 * Thread rules: called while opening the store, from one thread.
 */
#ifndef TREELOCKFS_ES_INDEX_H
#define TREELOCKFS_ES_INDEX_H

#include <stdbool.h>
#include <stddef.h>

#include "es_client.h"
#include "lockplan.h"

/* GET /: reachable, credentials accepted, which product. Writes
 * "Elasticsearch 8.x" or "OpenSearch 2.x" to VERSION and sets *OPENSEARCH.
 * Returns 0, -EAGAIN (unreachable, 429, 5xx: worth retrying; the reason is
 * recorded in C, es_client_last_error()), -ENOLCK (refused, logged),
 * -ENOMEM. */
int es_index_check_cluster(struct es_client *c, char *version, size_t size, bool *opensearch);

/* Reads the index mapping. Returns 0 with *STRATEGY (NULL when the index
 * has no _meta of ours; caller frees) and, when KEYWORD_PATH is not NULL,
 * whether "path" is a keyword; -ENOENT (no index), -EAGAIN (worth
 * retrying), -EACCES (refused, logged). */
int es_index_read_mapping(struct es_client *c, char **strategy, bool *keyword_path);

/* Creates the index if missing (unless FOR_CTL; two mounts may race:
 * "already exists" is fine) and checks that it records strategy S.
 * A mount refuses an index that records no strategy or lacks the keyword
 * mapping (auto-created by a write after the store lost it).
 * Then es_index_scripts().
 * Returns 0, -EINVAL (another strategy or not ours, logged), -EAGAIN (worth
 * retrying), -ENOLCK, -ENOMEM. */
int es_index_bootstrap(struct es_client *c, enum tl_strategy s, bool for_ctl);

/* Makes the lock scripts (es_docs.h) usable by id: a mount reads the one
 * stored last (GET _scripts/<id>), one request when the scripts are there;
 * where it is missing, each is read and the missing ones stored (PUT), in
 * order. FOR_CTL reads each and stores nothing. Where storing is refused
 * (no privilege, stored scripts disabled) or a stored script is not ours,
 * they travel inline. A store that fails now (429, 5xx, no answer) does
 * not fail the start: the scripts travel inline and es_index_verify()
 * tries again. Sets es_client_scripts_stored() and, unless FOR_CTL, logs
 * which (once, not at every failed try). Returns 0 or -ENOMEM. Called by
 * es_index_bootstrap() once the index is ours. */
int es_index_scripts(struct es_client *c, bool for_ctl);

/* How the scripts of C travel, as es_index_scripts() found ("stored in the
 * cluster (...)" or "inline (why)"), for treelockctl check. */
const char *es_index_scripts_note(const struct es_client *c);

/* Checks, while mounted, that the index still carries our mapping and
 * strategy S, and re-creates it when it is gone (the store lost it).
 * *HAVE gets the strategy it records (or NULL; caller frees). Returns 0,
 * -EPROTO (not our mapping: auto-created or foreign), -EINVAL (another
 * strategy), -EAGAIN (cannot tell now), -ENOLCK, -ENOMEM. Logs only the
 * re-creation. Then, when a failure of the store left the scripts inline,
 * tries es_index_scripts() again. */
int es_index_verify(struct es_client *c, enum tl_strategy s, char **have);

#endif /* TREELOCKFS_ES_INDEX_H */
