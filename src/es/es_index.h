/* es_index.h - the lock index of the es store: cluster check, mapping,
 * bootstrap
 *
 * The index is created by the first mount with a keyword mapping (lock
 * ids and owners are matched exactly) and the lock strategy recorded in
 * the mapping's _meta; a mount asking for another strategy is refused, so
 * two strategies never share one index. treelockctl only reads.
 *
 * Thread rules: called while opening the store, from one thread, and
 * by the heartbeat thread (es_index_verify()). Every function that sends
 * takes DEADLINE (monotonic ms, 0: none; es_client.h).
 */
#ifndef TREELOCKFS_ES_ES_INDEX_H
#define TREELOCKFS_ES_ES_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "es/es_client.h"
#include "lock/lockplan.h"

/* GET /: reachable, credentials accepted, which product. Writes
 * "Elasticsearch 8.x" or "OpenSearch 2.x" to VERSION and sets *OPENSEARCH.
 * Returns 0, -EAGAIN (unreachable, 429, 5xx: worth retrying; the reason is
 * recorded in C, es_client_last_error()), -ENOLCK (refused, logged),
 * -ENOMEM. */
int es_index_check_cluster(struct es_client *c, char *version, size_t size, bool *opensearch,
			   int64_t deadline);

/* Reads the index mapping. Returns 0 with *STRATEGY (NULL when the index
 * has no _meta of ours; caller frees) and, when KEYWORD_PATH is not NULL,
 * whether "path" is a keyword; -ENOENT (no index), -EAGAIN (worth
 * retrying), -EACCES (refused, logged). */
int es_index_read_mapping(struct es_client *c, char **strategy, bool *keyword_path,
			  int64_t deadline);

/* Creates the index if missing (unless FOR_CTL; two mounts may race:
 * "already exists" is fine) and checks that it records strategy S.
 * A mount refuses an index that records no strategy or lacks the keyword
 * mapping (auto-created by a write after the store lost it).
 * Then es_index_scripts().
 * Returns 0, -EINVAL (another strategy or not ours, logged), -EAGAIN (worth
 * retrying), -ENOLCK, -ENOMEM. */
int es_index_bootstrap(struct es_client *c, enum tl_strategy s, bool for_ctl, int64_t deadline);

/* Makes the lock scripts (es_docs.h) usable by id: reads every one (GET
 * _scripts/<id>) and compares its source and language with ours; a mount
 * then stores the missing ones (PUT), in order. FOR_CTL stores nothing.
 * Where storing is refused (no privilege, stored scripts disabled) or any
 * stored script is not ours, every script travels inline (a script that
 * is not ours is logged as a warning). A store that fails now (429, 5xx,
 * no answer) does not fail the start: the scripts travel inline, and a
 * later check (es_index_verify()) that cannot tell leaves them as they
 * are. Sets es_client_scripts_stored() and, unless FOR_CTL, logs which
 * when it changes. Returns 0 or -ENOMEM. Called by es_index_bootstrap()
 * once the index is ours, and by es_index_verify(). */
int es_index_scripts(struct es_client *c, bool for_ctl, int64_t deadline);

/* How the scripts of C travel, as es_index_scripts() found ("stored in the
 * cluster (...)" or "inline (why)"), for treelockctl check. */
const char *es_index_scripts_note(const struct es_client *c);

/* Checks, while mounted, that the index still carries our mapping and
 * strategy S, and re-creates it when it is gone (the store lost it).
 * *HAVE gets the strategy it records (or NULL; caller frees). Returns 0,
 * -EPROTO (not our mapping: auto-created or foreign), -EINVAL (another
 * strategy), -EAGAIN (cannot tell now), -ENOLCK, -ENOMEM. Logs only the
 * re-creation. Then checks the scripts again (es_index_scripts()): a
 * stored one replaced meanwhile sends them inline, one stored again (or
 * a store that recovered) by id. */
int es_index_verify(struct es_client *c, enum tl_strategy s, char **have, int64_t deadline);

/* Reads the lock index's settings (GET <index>/_settings) and the
 * cluster's number of data nodes (GET _cluster/health) and judges them
 * with es_docs_settings_findings(): BUF gets one finding per line ("" when
 * none). Returns the number of findings, -ENOENT (no index), -EAGAIN (the
 * store did not answer), -EACCES (refused: the user may lack the monitor
 * privilege; *BUF says why), -ENOMEM. Logs nothing. */
int es_index_settings_findings(struct es_client *c, char *buf, size_t size);

#endif /* TREELOCKFS_ES_ES_INDEX_H */
