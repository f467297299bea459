/* es_store.c - the es store's face: the lockstore vtable over an
 * Elasticsearch / OpenSearch index, its open and close
 *
 * The vtable's work is done by the files around it, one meaning each
 * (es_internal.h draws who calls whom): es_acquire.c (taking and releasing
 * a plan's locks: the protocol, its requests and charts), es_refusal.c (a
 * refused attempt: who blocks, take-over, waiter marks), es_listing.c
 * (listing the locks), es_lease.c (this mount's lease), es_owners.c
 * (other owners: take-over, reap), es_kept.c (release-like bulks that must
 * arrive, kept ones), es_retry.h (who retries what: the one chart),
 * es_batch.c (group commit), es_client.c (one request), es_index.c
 * (cluster check, bootstrap), es_docs.c (documents and bulk items, pure),
 * es_scripts.h (Painless), es_options.c (the backend's options),
 * es_admin.c (treelockctl's asks).
 *
 * One index (es_index, default treelockfs-locks) holds three kinds of
 * documents. Ids never collide: lock keys start with '/', or are "global",
 * "bytes:/..." (keys that are not UTF-8, escaped: path_key_text()) or
 * "sha256:<hex>" (path_lock_id(), for ids over 512 bytes); the others
 * start with "owner:" or "intent:". Every key in a document (path, from,
 * to, keys) is its text: JSON carries UTF-8 only.
 *
 *   lock  /a/b   {"lock_type":"exclusive", ["path":"/a/b",] "owner":O,
 *                 "holder":H, "process_id":H, "holders":{H:1}, "since":ms,
 *                 "pid":n, ["waiters":{...}]}
 *                {"lock_type":"shared", "lock_count":N, ["path":"/a",]
 *                 "holders":{H1:1, H2:1}, "since":ms, ["waiters":{...}]}
 *                waiters: {H: {"owner":O, "mode":"exclusive"|"shared",
 *                              "age":start_ms, "tmo":ms}}
 *                "path" only where the id is not the key's text (hashed
 *                ids); older releases wrote it always. A shared document
 *                is "since" the start_ms of the holder that made it
 *   owner        {"type":"owner", "owner":O, "name":"host", "pid":n,
 *                 "started":ms, "renewed":ms, "ttl_ms":n}
 *   intent       {"type":"intent", "owner":O, "name":.., "from":..,
 *   intent:H      "to":.., "start":ms, "pid":n, ["keys":[...]]}
 *                "keys" only where the plan of from and to does not give
 *                them (es_docs_intent_keys()); older releases wrote them
 *                and "holder":H always
 *
 * O, the owner id, is "<owner name>:<pid>:<nonce>", one per mount (per
 * lease). H, a holder, is "<O>#<ticket>", one per rename. "holders" counts
 * shares per holder, so a dead owner's shares are removed without touching
 * the others' and a retried request is never counted twice (the scripts
 * are idempotent: a holder already present is a noop). lock_count is the
 * guide's field: the number of shares, including those of guide-style
 * clients that do not name themselves.
 *
 * Guide interoperability. A lock taken with the guide's requests (create
 * {"lock_type":"exclusive"}, or update + upsert {"lock_type":"shared",
 * "lock_count":1} + "if exclusive throw; lock_count++") is a document of the
 * same shape without holders; our scripts refuse on it like on ours, and
 * the guide's requests are refused by our documents: create finds the id
 * taken, its script sees lock_type exclusive. Its release script
 * ("--lock_count == 0 -> delete") works on our shared documents. A
 * document with only waiter marks is {"lock_type":"shared","lock_count":0}.
 *
 * Lock order: store->mutex is a leaf; it is never held across a request.
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/log.h"
#include "base/path.h"
#include "base/tlclock.h"
#include "config/config.h"
#include "es/es_batch.h"
#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/es_fsindex.h"
#include "es/es_index.h"
#include "es/es_internal.h"
#include "es/es_lease.h"
#include "es/es_owners.h"
#include "es/es_retry.h"
#include "es/httpc.h"
#include "lock/lockstore.h"
#include "lock/lockstore_impl.h"

static const struct lockstore_ops es_ops;

struct es_store *es_store_of(struct lockstore *st)
{
	return st && st->ops == &es_ops ? es_of(st) : NULL;
}

static bool es_lease_fresh(struct lockstore *st)
{
	struct es_store *es = es_of(st);
	bool fresh;

	pthread_mutex_lock(&es->mutex);
	fresh = es_lease_fresh_locked(es, tl_mono_ms()) && es->held_old == 0;
	pthread_mutex_unlock(&es->mutex);
	return fresh;
}

static void es_shutdown(struct lockstore *st, int64_t end_ms)
{
	httpc_set_end(es_of(st)->cl.http, end_ms);
}

/* How long (ms) this mount has seen waiter mark HOLDER of document ID, on
 * its monotonic clock: 0 the first time. The oldest entry makes room. */
static int64_t mark_seen_for(struct es_store *es, const char *id, const char *holder,
			     int64_t now)
{
	size_t il = strlen(id), hl = strlen(holder), i, old = 0;
	char *k;

	pthread_mutex_lock(&es->mutex);
	for (i = 0; i < ES_MAX_MARKS_SEEN; i++) {
		k = es->marks_seen[i];
		if (k && strncmp(k, id, il) == 0 && k[il] == '\t' &&
		    strcmp(k + il + 1, holder) == 0) {
			int64_t age = now - es->marks_first[i];

			pthread_mutex_unlock(&es->mutex);
			return age;
		}
		if (!k || (es->marks_seen[old] && es->marks_first[i] < es->marks_first[old]))
			old = i;
	}
	k = malloc(il + hl + 2);
	if (k) {
		memcpy(k, id, il);
		k[il] = '\t';
		memcpy(k + il + 1, holder, hl + 1);
		free(es->marks_seen[old]);
		es->marks_seen[old] = k;
		es->marks_first[old] = now;
	}
	pthread_mutex_unlock(&es->mutex);
	return 0;
}

/* The vtable's wanted (lockstore.h): one _mget of the documents of KEYS;
 * a waiter mark conflicts with MODES[i] unless both are shared. Marks of
 * another owner id count, and those of our own renames (not
 * delegations): one that asked in the store just before a delegation
 * of ours was granted would otherwise wait for it until lock_timeout. A
 * document that is gone is not wanted. A mark is stale once this mount
 * has seen it for longer than its timeout, on its own monotonic clock:
 * judged on the wall clock, a delegate whose clock runs ahead by more
 * than a mark's timeout would take every mark for stale and never give
 * its delegation back, each waiter failing at lock_timeout. */
static int es_wanted(struct lockstore *st, const char *const *keys, const enum tl_lock_mode *modes,
		     size_t n, bool *wanted)
{
	struct es_store *es = es_of(st);
	char **ids = calloc(n ? n : 1, sizeof(*ids));
	char owner[ES_ID_MAX];
	const cJSON *d, *w, *docs;
	cJSON *root = NULL;
	size_t i, j = 0;
	int err = 0;

	if (!ids)
		return -ENOMEM;
	for (i = 0; i < n && !err; i++)
		err = path_lock_id(keys[i], &ids[i]);
	pthread_mutex_lock(&es->mutex);
	snprintf(owner, sizeof(owner), "%s", es->owner);
	pthread_mutex_unlock(&es->mutex);
	if (!err) {
		root = es_mget(&es->cl, NULL, ids, n, tl_mono_ms() + es->timeout_ms);
		if (!root)
			err = -ENOLCK;
	}
	docs = root ? cJSON_GetObjectItemCaseSensitive(root, "docs") : NULL;
	cJSON_ArrayForEach(d, docs)
	{
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(d, "_source");

		if (j >= n)
			break;
		wanted[j] = false;
		cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(src, "waiters"))
		{
			const char *wo = es_jstr(w, "owner"), *mode = es_jstr(w, "mode");
			bool shared = mode && strcmp(mode, "shared") == 0;

			const char *hash = w->string ? strrchr(w->string, '#') : NULL;
			bool own_rename = wo && strcmp(wo, owner) == 0 && hash && hash[1] != 'd';

			/* another owner, or a rename of ours that asked before
			 * the delegation was granted; a stale mark is ignored */
			if (wo && (strcmp(wo, owner) != 0 || own_rename) &&
			    !(shared && modes[j] == TL_SHARED) &&
			    (!w->string ||
			     mark_seen_for(es, ids[j], w->string, tl_mono_ms()) <=
				     es_jint(w, "tmo", 0)))
				wanted[j] = true;
		}
		j++;
	}
	cJSON_Delete(root);
	for (i = 0; i < n; i++)
		free(ids[i]);
	free(ids);
	return err;
}

static uint64_t es_requests(struct lockstore *st)
{
	return httpc_requests(es_of(st)->cl.http);
}

/* Counters of the HTTP client; the lease and what was seen of other owners
 * under the mutex, never across a request. */
static void es_metrics(struct lockstore *st, struct tl_store_metrics *m)
{
	struct es_store *es = es_of(st);
	struct httpc_counters hc;
	int64_t now = tl_mono_ms();
	size_t i;

	httpc_counters(es->cl.http, &hc);
	m->requests = hc.requests;
	m->failures = hc.failures;
	m->bytes_sent = hc.bytes_sent;
	m->bytes_received = hc.bytes_received;
	m->request_seconds = hc.seconds;
	m->served_us = hc.served_us;
	pthread_mutex_lock(&es->mutex);
	if (es->started) {
		m->lease_age_ms = es->renewed_ms > 0 ? now - es->renewed_ms : -1;
		m->lease_fresh = es_lease_fresh_locked(es, now) && es->held_old == 0;
	}
	m->owners_alive = m->owners_dead = 0;
	for (i = 0; i < es->nobs; i++) {
		if (es->obs[i].dead)
			m->owners_dead++;
		else if (es->obs[i].seq_no >= 0)
			m->owners_alive++;
	}
	pthread_mutex_unlock(&es->mutex);
}

static int es_start(struct lockstore *st)
{
	int err = es_lease_start(es_of(st));

	/* after the lease: releases handed off before it would have no
	 * store to go to */
	if (!err)
		err = es_batch_start_sender(&es_of(st)->batch);
	if (!err && es_of(st)->fsi)
		err = es_fsindex_start(es_of(st)->fsi);
	return err;
}

/* The vtable's note (lockstore.h): to the fs index, when there is one. */
static uint64_t es_note(struct lockstore *st, const char *key, const char *to, unsigned int what,
		       uint64_t ino)
{
	struct es_fsindex *fsi = es_of(st)->fsi;

	if (!fsi)
		return 0;
	if (what == TL_NOTE_TREE)
		return es_fsindex_tree(fsi, key, to);
	es_fsindex_note_ino(fsi, key, ino);
	return 0;
}

static size_t es_format_stats(struct lockstore *st, char *buf, size_t size, size_t len)
{
	struct es_fsindex *fsi = es_of(st)->fsi;

	return fsi ? es_fsindex_format(fsi, buf, size, len) : len;
}

/* ---- open, close ---------------------------------------------------------------- */

/* Cluster check and index bootstrap: one start attempt. */
static int open_step(struct es_store *es, bool for_ctl, int64_t deadline)
{
	int err;

	err = es_index_check_cluster(&es->cl, es->version, sizeof(es->version), &es->opensearch,
				     deadline);
	if (err)
		return err;
	err = es_index_bootstrap(&es->cl, es->strategy, for_ctl, deadline);
	if (!err && !for_ctl && es->base.cfg->fs_index)
		err = es_fsindex_ensure(&es->cl, es->base.cfg->fs_index, deadline);
	return err;
}

/* Warns, once at start, where the lock index or the cluster lacks what the
 * store relies on (es_docs_settings_findings()). A warning, not a refusal:
 * these are the operator's settings, changed at any time while mounts run
 * (a check at start cannot hold them), and what they risk (locks lost
 * with a node or its disk) is the cluster's state, fixed on the cluster
 * with no remount. */
static void warn_settings(struct es_store *es)
{
	char buf[1024], *line, *save = NULL;
	int n = es_index_settings_findings(&es->cl, buf, sizeof(buf));

	if (n == -EACCES)
		tl_log(LOG_NOTICE, "cannot check the settings of lock index '%s' (%s); "
		       "treelockctl check reports them", es->cl.index, buf);
	if (n <= 0)
		return;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		tl_log(LOG_WARNING, "lock index '%s': %s", es->cl.index, line);
}

static void es_close(struct lockstore *st)
{
	struct es_store *es = es_of(st);

	if (!es)
		return;
	/* the fs index first: its last writes, then the releases parked
	 * for them (handed to the sender) */
	es_fsindex_stop(es->fsi);
	/* releases handed off go first: what fails there is kept, and the
	 * lease's stop resends what is kept */
	es_batch_stop_sender(&es->batch);
	es_lease_stop(es);
	es_batch_close(&es->batch);
	es_client_close(&es->cl);
	es_owners_free(es);
	es_fsindex_close(es->fsi);
	for (size_t i = 0; i < ES_MAX_MARKS_SEEN; i++)
		free(es->marks_seen[i]);
	lockstore_base_free(&es->base, &es->mutex, &es->cond);
}

int es_open(const struct tl_config *cfg, struct lockstore **out, bool for_ctl)
{
	const struct es_options *eo = es_options_of(cfg);
	struct httpc_config hc = {0};
	struct es_store *es;
	int err = -ENOMEM;

	*out = NULL;
	if (!eo)
		return -EINVAL;
	if (cfg->owner && strlen(cfg->owner) > ES_NAME_MAX) {
		tl_log(LOG_ERR, "invalid owner '%s': longer than %d bytes", cfg->owner, ES_NAME_MAX);
		return -EINVAL;
	}
	es = calloc(1, sizeof(*es));
	if (!es)
		return -ENOMEM;
	lockstore_base_init(&es->base, &es_ops, cfg, &es->mutex, &es->cond);
	es->strategy = cfg->lock_strategy;
	es->ttl_ms = (int64_t)((cfg->lease_ttl > 0 ? cfg->lease_ttl : TL_DEFAULT_LEASE_TTL) * 1000);
	es->tmo_ms = (int64_t)(cfg->lock_timeout * 1000) + es->ttl_ms;
	es->timeout_ms = eo->timeout_ms ? eo->timeout_ms : ES_DEFAULT_TIMEOUT_MS;
	/* treelockctl reports at once unless asked to wait */
	es->start_timeout = for_ctl && !eo->start_timeout_s ? 0 : eo->start_timeout;
	if (cfg->owner && *cfg->owner) {
		snprintf(es->name, sizeof(es->name), "%s", cfg->owner);
	} else {
		gethostname(es->name, sizeof(es->name) - 1);
		if (!es->name[0])
			snprintf(es->name, sizeof(es->name), "localhost");
	}
	es_lease_new_owner_id_locked(es); /* no thread runs yet */

	es_options_httpc(eo, &hc);
	hc.timeout_ms = es->timeout_ms;
	hc.opaque_id = es->owner;
	/* eo->inflight: es_inflight=, or its default (es_options.c) */
	err = es_client_open(&es->cl, &hc, eo->index && *eo->index ? eo->index : ES_DEFAULT_INDEX);
	if (err)
		goto out_close;
	es->cl.scripts_inline_only = eo->scripts_inline;
	/* 0: no group commit (no_es_group_commit) */
	es_batch_open(&es->batch, &es->cl, eo->group_commit ? eo->inflight : 0);
	if (eo->insecure)
		tl_log(LOG_WARNING, "es_insecure: TLS certificates of the lock store are not verified");
	es->cleartext_creds = (eo->user || eo->api_key) && es_opts_cleartext(eo);
	if (es->cleartext_creds && !for_ctl)
		tl_log(LOG_WARNING, "es_allow_insecure: the password or API key of the lock store "
		       "travels unencrypted (http://): anyone on the path can read and reuse it");
	err = es_start_retry(es, "open the lock store", open_step, for_ctl);
	if (err)
		goto out_close;
	if (!for_ctl)
		warn_settings(es);
	if (!for_ctl && cfg->fs_index) {
		err = es_fsindex_open(es, cfg->fs_index, cfg->backing, cfg->fs_index_delay,
				      cfg->fs_index_settle, &es->fsi);
		if (err)
			goto out_close;
	}
	*out = &es->base;
	return 0;

out_close:
	es_close(&es->base);
	return err;
}

int es_store_open(const struct tl_config *cfg, struct lockstore **out)
{
	return es_open(cfg, out, false);
}

static const struct lockstore_ops es_ops = {
	.name = "es",
	.caps = TL_CAP_OTHER_WRITERS,
	.start = es_start,
	.try_acquire = es_try_acquire,
	.wait = NULL,
	.abandon = es_abandon,
	.release = es_release,
	.lease_fresh = es_lease_fresh,
	.list = es_list,
	.shutdown = es_shutdown,
	.wanted = es_wanted,
	.requests = es_requests,
	.metrics = es_metrics,
	.note = es_note,
	.format_stats = es_format_stats,
	.close = es_close,
};
