/* es_scripts.h - the Painless scripts of the es lock store
 *
 * Fixed sources: every piece of data travels in params, never in the
 * source (no string building, no script injection, and Elasticsearch
 * compiles each script once). Used by es_docs.c, which puts them
 * into bulk items: by id when they are stored in the cluster
 * (PUT _scripts/<id> at mount, es_index.c), inline otherwise. The document
 * shapes they act on are described in es_store.c.
 *
 * Each id carries a version: change a source and bump its version (all
 * ids share ES_SCRIPTS_VERSION, below), so that mounts of the old and
 * the new release keep working side by side on one cluster, each with its
 * own scripts. This header includes nothing: es_docs.c puts the sources
 * into requests, es_index.c names the version in its notes.
 *
 * The acquire and mark scripts run as scripted upserts: on a missing
 * document ctx._source is empty and the script builds the document itself
 * (lock_type null), so the item carries no copy of it. A parameter that is
 * absent has its default (dead: nobody known dead; path: the document id
 * is the key's text, and the document has no "path").
 */
#ifndef TREELOCKFS_ES_ES_SCRIPTS_H
#define TREELOCKFS_ES_ES_SCRIPTS_H

/* The version in the stored scripts' ids ("treelockfs-rel-v1"): bumped
 * whenever a script's source below changes. */
#define ES_SCRIPTS_VERSION "v1"

#define ES_SCRIPT_ID(name) "treelockfs-" name "-" ES_SCRIPTS_VERSION

/* Shared acquire. params: h holder, age, [path], [dead owners]. A shared
 * document made here is "since" the holder's age (its first attempt). */
#define SCRIPT_ACQ_S_ID ES_SCRIPT_ID("acqs")
static const char SCRIPT_ACQ_S[] =
	"def s = ctx._source;"
	" if (s.lock_type == null) { s.lock_type = 'shared'; s.lock_count = 0;"
	" if (params.path != null) { s.path = params.path; }"
	" s.holders = new HashMap(); s.since = params.age; }"
	" if (s.lock_type == 'exclusive') { throw new IllegalStateException('exclusive'); }"
	" if (s.holders == null) { s.holders = new HashMap(); }"
	" if (s.holders.containsKey(params.h)) { ctx.op = 'noop'; } else {"
	" if (s.waiters != null) {"
	" for (def k : s.waiters.keySet()) { def w = s.waiters.get(k);"
	" if (k != params.h && w.mode == 'exclusive'"
	" && (params.dead == null || !params.dead.contains(w.owner))"
	" && params.age <= w.age + w.tmo"
	" && (w.age < params.age || (w.age == params.age && k.compareTo(params.h) < 0))) {"
	" throw new IllegalStateException('waiter'); } }"
	" s.waiters.remove(params.h); }"
	" s.holders.put(params.h, 1);"
	" s.lock_count = (s.lock_count == null ? 0 : s.lock_count) + 1; }";

/* Exclusive acquire after a refusal (the document may hold waiter marks).
 * params: h, o owner, age, [path], pid, since, [dead]. */
#define SCRIPT_ACQ_X_ID ES_SCRIPT_ID("acqx")
static const char SCRIPT_ACQ_X[] =
	"def s = ctx._source;"
	" if (s.lock_type == null) { s.lock_type = 'shared'; }"
	" if (s.lock_type == 'exclusive') {"
	" if (s.holder != params.h) { throw new IllegalStateException('exclusive'); }"
	" ctx.op = 'noop'; } else {"
	" if (s.lock_count != null && s.lock_count > 0) { throw new IllegalStateException('shared'); }"
	" if (s.waiters != null) {"
	" for (def k : s.waiters.keySet()) { def w = s.waiters.get(k);"
	" if (k != params.h && (params.dead == null || !params.dead.contains(w.owner))"
	" && params.age <= w.age + w.tmo"
	" && (w.age < params.age || (w.age == params.age && k.compareTo(params.h) < 0))) {"
	" throw new IllegalStateException('waiter'); } }"
	" s.waiters.remove(params.h); }"
	" s.lock_type = 'exclusive'; s.remove('lock_count');"
	" if (params.path != null) { s.path = params.path; }"
	" s.owner = params.o; s.holder = params.h; s.process_id = params.h;"
	" s.holders = new HashMap(); s.holders.put(params.h, 1);"
	" s.since = params.since; s.pid = params.pid; }";

/* Release. params: h. */
#define SCRIPT_RELEASE_ID ES_SCRIPT_ID("rel")
static const char SCRIPT_RELEASE[] =
	"def s = ctx._source;"
	" if (s.holders == null || !s.holders.containsKey(params.h)) { ctx.op = 'noop'; } else {"
	" s.holders.remove(params.h);"
	" if (s.lock_type == 'exclusive') { s.lock_type = 'shared'; s.lock_count = 0;"
	" s.remove('owner'); s.remove('holder'); s.remove('process_id'); s.remove('since');"
	" s.remove('pid'); } else { s.lock_count = s.lock_count - 1; }"
	" if (s.lock_count <= 0 && (s.waiters == null || s.waiters.isEmpty())) {"
	" ctx.op = 'delete'; } }";

/* Waiter mark. params: h, o, mode, age, tmo, [path]. */
#define SCRIPT_MARK_ID ES_SCRIPT_ID("mark")
static const char SCRIPT_MARK[] =
	"def s = ctx._source;"
	" if (s.lock_type == null) { s.lock_type = 'shared'; s.lock_count = 0;"
	" if (params.path != null) { s.path = params.path; } }"
	" if (s.waiters == null) { s.waiters = new HashMap(); }"
	" if (s.waiters.containsKey(params.h)) { ctx.op = 'noop'; } else {"
	" Map w = new HashMap(); w.put('owner', params.o); w.put('mode', params.mode);"
	" w.put('age', params.age); w.put('tmo', params.tmo);"
	" s.waiters.put(params.h, w); }";

/* Drop a waiter mark (abandon). params: h. */
#define SCRIPT_UNMARK_ID ES_SCRIPT_ID("unmark")
static const char SCRIPT_UNMARK[] =
	"def s = ctx._source;"
	" if (s.waiters == null || !s.waiters.containsKey(params.h)) { ctx.op = 'noop'; } else {"
	" s.waiters.remove(params.h);"
	" if (s.lock_type != 'exclusive' && (s.lock_count == null || s.lock_count <= 0)"
	" && s.waiters.isEmpty()) { ctx.op = 'delete'; } }";

/* Evict a dead owner's shares and marks. params: o owner. */
#define SCRIPT_EVICT_ID ES_SCRIPT_ID("evict")
static const char SCRIPT_EVICT[] =
	"def s = ctx._source; boolean changed = false; String p = params.o + '#';"
	" if (s.holders != null) { List ks = new ArrayList(s.holders.keySet());"
	" for (def k : ks) { if (k.startsWith(p)) { s.holders.remove(k); changed = true;"
	" if (s.lock_type != 'exclusive') { s.lock_count = s.lock_count - 1; } } } }"
	" if (s.lock_type == 'exclusive' && s.owner == params.o) { s.lock_type = 'shared';"
	" s.lock_count = 0; s.remove('owner'); s.remove('holder'); s.remove('process_id');"
	" s.remove('since'); s.remove('pid'); changed = true; }"
	" if (s.waiters != null) { List ws = new ArrayList(s.waiters.keySet());"
	" for (def k : ws) { if (k.startsWith(p)) { s.waiters.remove(k); changed = true; } } }"
	" if (!changed) { ctx.op = 'noop'; } else if (s.lock_type != 'exclusive'"
	" && (s.lock_count == null || s.lock_count <= 0)"
	" && (s.waiters == null || s.waiters.isEmpty())) { ctx.op = 'delete'; }";

#endif /* TREELOCKFS_ES_ES_SCRIPTS_H */
