/* test_lockstore_es.c - the es store against a canned responder
 *
 * The responder's handler plays a minimal Elasticsearch: GET /, the index
 * mapping, lease documents, _bulk (per-item statuses, refusals on demand),
 * _mget. Each test checks what the store sent: how many requests, which
 * method, path, Content-Type and body.
 */
#include <config.h>

#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "es/es_docs.h"
#include "es/es_internal.h"
#include "es/es_index.h"
#include "es/es_retry.h"
#include "es/es_scripts.h"
#include "config/config.h"
#include "lock/lockplan.h"
#include "lock/lockstore.h"
#include "es/es_store.h"
#include "lock/lockstore_impl.h"
#include "base/log.h"
#include "responder.h"
#include "base/tlclock.h"
#include "unit.h"

struct fake {
	bool index_exists;
	int mapping_404;       /* the next N GET _mapping say 404 even so */
	char strategy[16];
	int root_status;       /* GET / status, 200 by default */
	int bulk_503;          /* answer the next N bulks with 503 */
	char refuse[64];       /* key refused (409 on create, 400 script on update) */
	int hold_bulks;        /* the next N bulks are answered ... */
	int hold_bulk_ms;      /* ... this late (other requests go on) */
	int fail_skip;         /* bulks answered normally before fail_status ... */
	int fail_status;       /* ... answers every further bulk (0: none) */
	int script_put;        /* status of PUT _scripts (0: no such route) */
	int scripts_stored;    /* PUT _scripts answered 200 */
	int script_put_ok;     /* > 0: only this many PUT _scripts get 200, then 503 */
	/* scripts stored by PUT, read back by GET _scripts/<id> */
	char script_id[8][48];
	char *script_src[8];
};

static char *dup_json(cJSON *j)
{
	char *s = cJSON_PrintUnformatted(j);

	cJSON_Delete(j);
	return s;
}

static int fake_bulk(struct fake *f, const struct resp_req *req, char **body)
{
	cJSON *resp = cJSON_CreateObject(), *items = cJSON_AddArrayToObject(resp, "items");
	char *copy = strdup(req->body), *line = copy, *next;

	cJSON_AddFalseToObject(resp, "errors");
	while (line && *line) {
		cJSON *act, *meta, *item, *it;
		const char *op, *id;
		int status;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		act = cJSON_Parse(line);
		meta = act ? act->child : NULL;
		op = meta ? meta->string : "?";
		id = cJSON_GetStringValue(cJSON_GetObjectItem(meta, "_id"));
		if (strcmp(op, "delete") != 0 && next) { /* skip the source line */
			char *src = next;

			next = strchr(src, '\n');
			if (next)
				*next++ = '\0';
		}
		status = strcmp(op, "create") == 0 || strcmp(op, "index") == 0 ? 201 : 200;
		item = cJSON_CreateObject();
		it = cJSON_AddObjectToObject(item, op);
		cJSON_AddStringToObject(it, "_id", id ? id : "");
		if (id && f->refuse[0] && strcmp(id, f->refuse) == 0 && strcmp(op, "create") == 0)
			status = 409;
		if (id && f->refuse[0] && strcmp(id, f->refuse) == 0 && strcmp(op, "update") == 0 &&
		    strstr(line, "\"update\"") && !strstr(req->body, "__never__")) {
			/* a refusal only for acquire scripts: those carry "age" */
			status = 0;
		}
		if (status == 0) {
			cJSON *err = cJSON_AddObjectToObject(it, "error"), *cb;

			status = 200;
			cJSON_AddStringToObject(err, "type", "illegal_argument_exception");
			cJSON_AddStringToObject(err, "reason", "failed to execute script");
			cb = cJSON_AddObjectToObject(err, "caused_by");
			cJSON_AddStringToObject(cb, "type", "script_exception");
			cJSON_AddStringToObject(cb, "reason", "runtime error");
			status = 400;
		} else if (status == 409) {
			cJSON_AddStringToObject(cJSON_AddObjectToObject(it, "error"), "type",
						"version_conflict_engine_exception");
		}
		cJSON_AddNumberToObject(it, "status", status);
		cJSON_AddItemToArray(items, item);
		cJSON_Delete(act);
		line = next;
	}
	free(copy);
	*body = dup_json(resp);
	return 200;
}

static int fake_mget(struct fake *f, const struct resp_req *req, char **body)
{
	cJSON *in = cJSON_Parse(req->body), *id, *resp = cJSON_CreateObject();
	cJSON *docs = cJSON_AddArrayToObject(resp, "docs");

	(void)f;
	cJSON_ArrayForEach(id, cJSON_GetObjectItem(in, "ids"))
	{
		cJSON *d = cJSON_CreateObject(), *src;

		cJSON_AddStringToObject(d, "_id", id->valuestring);
		cJSON_AddTrueToObject(d, "found");
		cJSON_AddNumberToObject(d, "_seq_no", 5);
		src = cJSON_AddObjectToObject(d, "_source");
		if (strncmp(id->valuestring, "owner:", 6) == 0) {
			cJSON_AddNumberToObject(src, "ttl_ms", 10000);
		} else {
			cJSON_AddStringToObject(src, "lock_type", "exclusive");
			cJSON_AddStringToObject(src, "owner", "other:1:aa");
			cJSON_AddNumberToObject(cJSON_AddObjectToObject(src, "holders"), "other:1:aa#7",
						1);
		}
		cJSON_AddItemToArray(docs, d);
	}
	cJSON_Delete(in);
	*body = dup_json(resp);
	return 200;
}

/* The slot of stored script ID in F (a free one for a new id), or -1. */
static int fake_script(struct fake *f, const char *id)
{
	int k, free_k = -1;

	for (k = 0; k < 8; k++) {
		if (strcmp(f->script_id[k], id) == 0)
			return k;
		if (!f->script_id[k][0] && free_k < 0)
			free_k = k;
	}
	if (free_k >= 0 && strlen(id) < sizeof(f->script_id[0]))
		snprintf(f->script_id[free_k], sizeof(f->script_id[0]), "%s", id);
	return free_k;
}

/* GET _scripts/<ID> of a stored script with SRC. */
static char *fake_script_found(const char *id, const char *src)
{
	cJSON *j = cJSON_CreateObject(), *sc;

	cJSON_AddStringToObject(j, "_id", id);
	cJSON_AddTrueToObject(j, "found");
	sc = cJSON_AddObjectToObject(j, "script");
	cJSON_AddStringToObject(sc, "lang", "painless");
	cJSON_AddStringToObject(sc, "source", src);
	return dup_json(j);
}

static int fake_es(struct responder *r, const struct resp_req *req, char **body)
{
	struct fake *f = r->user;
	char buf[512];

	if (strcmp(req->method, "GET") == 0 && strcmp(req->path, "/") == 0) {
		*body = strdup("{\"name\":\"n\",\"version\":{\"number\":\"8.15.0\"},"
			       "\"tagline\":\"You Know, for Search\"}");
		return f->root_status ? f->root_status : 200;
	}
	if (strcmp(req->method, "GET") == 0 && strcmp(req->path, "/locks/_mapping") == 0) {
		if (!f->index_exists || f->mapping_404 > 0) {
			if (f->mapping_404 > 0)
				f->mapping_404--;
			*body = strdup("{\"error\":{\"type\":\"index_not_found_exception\"},\"status\":404}");
			return 404;
		}
		snprintf(buf, sizeof(buf),
			 "{\"locks\":{\"mappings\":{\"_meta\":{\"treelockfs\":{\"strategy\":\"%s\"}},"
			 "\"properties\":{\"path\":{\"type\":\"keyword\"}}}}}",
			 f->strategy);
		*body = strdup(buf);
		return 200;
	}
	if (strcmp(req->method, "PUT") == 0 && strcmp(req->path, "/locks") == 0) {
		if (f->index_exists) {
			*body = strdup("{\"error\":{\"type\":\"resource_already_exists_exception\"},"
				       "\"status\":400}");
			return 400;
		}
		f->index_exists = true;
		snprintf(f->strategy, sizeof(f->strategy), "%s",
			 strstr(req->body, "\"strategy\":\"tree\"") ? "tree" : "other");
		*body = strdup("{\"acknowledged\":true}");
		return 200;
	}
	if (strcmp(req->method, "PUT") == 0 && strncmp(req->path, "/locks/_create/owner", 20) == 0) {
		*body = strdup("{\"_seq_no\":0,\"_primary_term\":1,\"result\":\"created\"}");
		return 201;
	}
	if (strcmp(req->method, "PUT") == 0 && strncmp(req->path, "/locks/_doc/owner", 17) == 0) {
		*body = strdup("{\"_seq_no\":1,\"_primary_term\":1,\"result\":\"updated\"}");
		return 200;
	}
	if (strcmp(req->method, "POST") == 0 && strcmp(req->path, "/locks/_bulk") == 0) {
		if (f->hold_bulks > 0) {
			f->hold_bulks--;
			r->hang_next_ms = f->hold_bulk_ms;
		}
		if (f->fail_status && f->fail_skip-- <= 0) {
			*body = strdup(f->fail_status == 400
					       ? "{\"error\":{\"type\":\"parse_exception\"},\"status\":400}"
					       : "{\"error\":{\"type\":\"unavailable\"},\"status\":503}");
			return f->fail_status;
		}
		if (f->bulk_503 > 0) {
			f->bulk_503--;
			*body = strdup("{\"error\":{\"type\":\"cluster_block_exception\"},\"status\":503}");
			return 503;
		}
		return fake_bulk(f, req, body);
	}
	if (strcmp(req->method, "POST") == 0 && strcmp(req->path, "/locks/_mget") == 0)
		return fake_mget(f, req, body);
	if (f->script_put && strncmp(req->path, "/_scripts/treelockfs-", 21) == 0) {
		int k = fake_script(f, req->path + 10);

		if (strcmp(req->method, "GET") == 0) {
			if (k < 0 || !f->script_src[k]) {
				*body = strdup("{\"found\":false}");
				return 404;
			}
			*body = fake_script_found(req->path + 10, f->script_src[k]);
			return 200;
		}
		if (strcmp(req->method, "PUT") == 0 && strstr(req->body, "\"lang\":\"painless\"")) {
			if (f->script_put == 200 && f->script_put_ok > 0 &&
			    f->scripts_stored >= f->script_put_ok) {
				*body = strdup("{\"error\":{\"type\":\"cluster_block_exception\"},"
					       "\"status\":503}");
				return 503;
			}
			if (f->script_put == 200) {
				cJSON *in = cJSON_Parse(req->body);
				const char *src = cJSON_GetStringValue(
					cJSON_GetObjectItem(cJSON_GetObjectItem(in, "script"), "source"));

				if (k < 0 || !src) {
					cJSON_Delete(in);
					*body = strdup("{\"error\":\"fake: no slot or no source\"}");
					return 500;
				}
				free(f->script_src[k]);
				f->script_src[k] = strdup(src);
				cJSON_Delete(in);
				f->scripts_stored++;
				*body = strdup("{\"acknowledged\":true}");
			} else {
				*body = strdup(f->script_put == 403
						       ? "{\"error\":{\"type\":\"security_exception\"},"
							 "\"status\":403}"
						       : "{\"error\":{\"type\":\"cluster_block_exception\"},"
							 "\"status\":503}");
			}
			return f->script_put;
		}
	}
	if (strcmp(req->method, "DELETE") == 0) {
		*body = strdup("{\"result\":\"deleted\"}");
		return 200;
	}
	*body = strdup("{\"error\":\"no handler\"}");
	return 400;
}

struct fixture {
	struct responder r;
	struct fake f;
	struct tl_config cfg;
	struct lockstore *st;
};

static void fx_init(struct fixture *fx)
{
	memset(fx, 0, sizeof(*fx));
	snprintf(fx->f.strategy, sizeof(fx->f.strategy), "tree");
	fx->r.handler = fake_es;
	fx->r.user = &fx->f;
	/* the store's sender thread (releases) has a connection of its own */
	fx->r.concurrent = true;
	ck_assert_int_eq(responder_start(&fx->r), 0);
	unit_store_config(&fx->cfg, TL_STORE_ES, fx->r.url);
}

static void fx_done(struct fixture *fx)
{
	int k;

	lockstore_close(fx->st);
	responder_stop(&fx->r);
	config_free(&fx->cfg);
	for (k = 0; k < 8; k++)
		free(fx->f.script_src[k]);
}

/* Requests with METHOD and PATH recorded so far. */
static int count(struct fixture *fx, const char *method, const char *path)
{
	int i, n = 0;

	pthread_mutex_lock(&fx->r.mu);
	for (i = 0; i < fx->r.nreqs; i++)
		if (strcmp(fx->r.reqs[i].method, method) == 0 && strcmp(fx->r.reqs[i].path, path) == 0)
			n++;
	pthread_mutex_unlock(&fx->r.mu);
	return n;
}

/* Waits until the releases FX's store handed to its sender thread were
 * answered (a rename returns before its release is). */
static void drained(struct fixture *fx)
{
	es_batch_drain(&es_store_of(fx->st)->batch);
}

static const struct resp_req *last(struct fixture *fx, const char *path)
{
	int i;

	for (i = fx->r.nreqs; i-- > 0;)
		if (strcmp(fx->r.reqs[i].path, path) == 0)
			return &fx->r.reqs[i];
	return NULL;
}

/* True when some bulk request body holds both A and B. */
static bool any_bulk_has(struct fixture *fx, const char *a, const char *b)
{
	int i;

	for (i = 0; i < fx->r.nreqs; i++)
		if (strcmp(fx->r.reqs[i].path, "/locks/_bulk") == 0 && strstr(fx->r.reqs[i].body, a) &&
		    strstr(fx->r.reqs[i].body, b))
			return true;
	return false;
}

static void holder_init(struct tl_holder *h, uint64_t ticket)
{
	memset(h, 0, sizeof(*h));
	h->ticket = ticket;
	h->start_ms = 1000;
	h->pid = 77;
	snprintf(h->id, sizeof(h->id), "hostA#%llu", (unsigned long long)ticket);
}

START_TEST(test_lockstore_es__bootstrap_creates_index)
{
	struct fixture fx;
	const struct resp_req *put;

	fx_init(&fx);
	ck_assert_int_eq(es_store_open(&fx.cfg, &fx.st), 0);
	ck_assert_int_eq(count(&fx, "GET", "/"), 1);
	ck_assert_int_eq(count(&fx, "PUT", "/locks"), 1);
	put = last(&fx, "/locks");
	ck_assert_str_eq(put->ctype, "application/json");
	ck_assert_ptr_nonnull(strstr(put->body, "\"path\":{\"type\":\"keyword\"}"));
	ck_assert_ptr_nonnull(strstr(put->body, "\"_meta\":{\"treelockfs\":{\"strategy\":\"tree\""));
	ck_assert_ptr_nonnull(strstr(put->body, "\"holders\":{\"enabled\":false}"));
	fx_done(&fx);
}
END_TEST

START_TEST(test_lockstore_es__refuses_other_strategy)
{
	struct fixture fx;

	fx_init(&fx);
	fx.f.index_exists = true;
	snprintf(fx.f.strategy, sizeof(fx.f.strategy), "global");
	ck_assert_int_eq(es_store_open(&fx.cfg, &fx.st), -EINVAL);
	ck_assert_ptr_null(fx.st);
	ck_assert_int_eq(count(&fx, "PUT", "/locks"), 0);
	fx_done(&fx);
}
END_TEST

START_TEST(test_lockstore_es__unreachable_and_unauthorised)
{
	struct fixture fx;

	fx_init(&fx);
	/* an unreachable store is retried for es_start_timeout (30 s by
	 * default, as long as this case may run): one second here */
	((struct es_options *)config_store_opts(&fx.cfg, TL_STORE_ES))->start_timeout = 1;
	unit_es_url(&fx.cfg, "http://127.0.0.1:1");
	ck_assert_int_eq(es_store_open(&fx.cfg, &fx.st), -ENOLCK);
	unit_es_url(&fx.cfg, fx.r.url);
	fx.f.root_status = 401;
	ck_assert_int_eq(es_store_open(&fx.cfg, &fx.st), -ENOLCK);
	ck_assert_int_eq(count(&fx, "GET", "/locks/_mapping"), 0);
	fx_done(&fx);
}
END_TEST

START_TEST(test_lockstore_es__one_bulk_per_acquire_and_release)
{
	struct fixture fx;
	struct tl_plan *plan = NULL;
	struct tl_holder h;
	struct tl_conflict why;
	const struct resp_req *b;

	fx_init(&fx);
	ck_assert_int_eq(es_store_open(&fx.cfg, &fx.st), 0);
	ck_assert_int_eq(fx.st->ops->start(fx.st), 0);
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, "/a/b/c", "/a/d e", 0, NULL, 0, &plan), 0);
	holder_init(&h, 1);
	ck_assert_int_eq(fx.st->ops->try_acquire(fx.st, plan, &h, &why), 0);
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk"), 1);
	b = last(&fx, "/locks/_bulk");
	ck_assert_str_eq(b->ctype, "application/x-ndjson");
	ck_assert_int_eq(b->body[b->len - 1], '\n');
	/* the intent first, then shared /a, /a/b, exclusive /a/b/c and "/a/d e" */
	ck_assert_ptr_nonnull(strstr(b->body, "{\"index\":{\"_id\":\"intent:hostA:"));
	ck_assert_ptr_nonnull(strstr(b->body, "{\"update\":{\"_id\":\"/a\""));
	ck_assert_ptr_nonnull(strstr(b->body, "{\"create\":{\"_id\":\"/a/b/c\"}}"));
	ck_assert_ptr_nonnull(strstr(b->body, "{\"create\":{\"_id\":\"/a/d e\"}}"));
	ck_assert_ptr_nonnull(strstr(b->body, "\"lock_type\":\"exclusive\""));
	ck_assert_ptr_nonnull(strstr(b->body, "\"scripted_upsert\":true,\"upsert\":{}"));
	ck_assert(strstr(b->body, "intent:") < strstr(b->body, "\"/a\""));
	ck_assert(fx.st->ops->lease_fresh(fx.st));
	ck_assert_int_eq(fx.st->ops->release(fx.st, plan, &h), 0);
	drained(&fx);
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk"), 2);
	b = last(&fx, "/locks/_bulk");
	/* longest first, then the intent goes */
	ck_assert(strstr(b->body, "\"/a/b/c\"") < strstr(b->body, "\"/a/b\""));
	ck_assert_ptr_nonnull(strstr(b->body, "{\"delete\":{\"_id\":\"intent:hostA:"));
	ck_assert_ptr_null(h.priv);
	lockplan_free(plan);
	fx_done(&fx);
}
END_TEST

/* Scripts stored at mount travel by id; where storing them is refused,
 * or the store fails it (503: the start goes on), inline. */
START_TEST(test_lockstore_es__scripts_stored_or_inline)
{
	static const int puts[] = {200, 403, 503};
	size_t k;

	for (k = 0; k < 3; k++) {
		struct fixture fx;
		struct tl_plan *plan = NULL;
		struct tl_holder h;
		struct tl_conflict why;
		const struct resp_req *b;
		bool stored = puts[k] == 200;

		fx_init(&fx);
		fx.f.script_put = puts[k];
		ck_assert_int_eq(es_store_open(&fx.cfg, &fx.st), 0);
		ck_assert_int_eq(fx.st->ops->start(fx.st), 0);
		/* all six stored; at a refusal the first PUT is the last */
		ck_assert_int_eq(fx.f.scripts_stored, stored ? 6 : 0);
		ck_assert_int_eq(count(&fx, "PUT", "/_scripts/treelockfs-acqs-" ES_SCRIPTS_VERSION), 1);
		ck_assert_int_eq(count(&fx, "PUT", "/_scripts/treelockfs-rel-" ES_SCRIPTS_VERSION),
				 stored ? 1 : 0);
		ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, "/a/b", "/a/c", 0, NULL, 0, &plan),
				 0);
		holder_init(&h, 1);
		ck_assert_int_eq(fx.st->ops->try_acquire(fx.st, plan, &h, &why), 0);
		b = last(&fx, "/locks/_bulk");
		ck_assert_int_eq(strstr(b->body, "\"id\":\"treelockfs-acqs-") != NULL, stored);
		ck_assert_int_eq(strstr(b->body, "\"source\":\"def s = ") == NULL, stored);
		ck_assert_int_eq(fx.st->ops->release(fx.st, plan, &h), 0);
		drained(&fx);
		b = last(&fx, "/locks/_bulk");
		ck_assert_int_eq(strstr(b->body, "\"id\":\"treelockfs-rel-") != NULL, stored);
		lockplan_free(plan);
		fx_done(&fx);
	}
}
END_TEST

/* Requests with METHOD to _scripts recorded so far; the path of the last
 * one to *LAST (may be NULL). */
static int script_reqs(struct fixture *fx, const char *method, const char **last)
{
	int i, n = 0;

	pthread_mutex_lock(&fx->r.mu);
	for (i = 0; i < fx->r.nreqs; i++)
		if (strcmp(fx->r.reqs[i].method, method) == 0 &&
		    strncmp(fx->r.reqs[i].path, "/_scripts/", 10) == 0) {
			n++;
			if (last)
				*last = fx->r.reqs[i].path;
		}
	pthread_mutex_unlock(&fx->r.mu);
	return n;
}

/* Opens (FOR_CTL: as treelockctl does) and closes a store of FX; the
 * _scripts GETs and PUTs it sent, whether its scripts travel by id, and
 * what treelockctl check would say of them. */
static void open_count(struct fixture *fx, bool for_ctl, int *gets, int *puts, bool *stored,
		       char *note, size_t size)
{
	int g0 = script_reqs(fx, "GET", NULL), p0 = script_reqs(fx, "PUT", NULL);
	struct es_store *es;

	ck_assert_int_eq(es_open(&fx->cfg, &fx->st, for_ctl), 0);
	es = es_store_of(fx->st);
	*stored = es_client_scripts_stored(&es->cl);
	snprintf(note, size, "%s", es_index_scripts_note(&es->cl));
	lockstore_close(fx->st);
	fx->st = NULL;
	*gets = script_reqs(fx, "GET", NULL) - g0;
	*puts = script_reqs(fx, "PUT", NULL) - p0;
}

/* Every mount reads every script and compares it with ours; it stores the
 * missing ones, in order. treelockctl reads each and says which is
 * missing. One stored script that is not ours sends them all inline. */
START_TEST(test_lockstore_es__scripts_all_read_and_compared)
{
	struct fixture fx;
	const char *last = NULL;
	char note[256];
	bool stored;
	int gets, puts, k;

	fx_init(&fx);
	fx.f.script_put = 200;
	fx.f.script_put_ok = 3; /* the 4th PUT fails (503): stopped halfway */
	open_count(&fx, false, &gets, &puts, &stored, note, sizeof(note));
	ck_assert_int_eq(gets, 6);
	ck_assert_int_eq(puts, 4); /* acqs, acqx, rel stored, mark failed */
	ck_assert_int_eq(fx.f.scripts_stored, 3);
	ck_assert(!stored);
	ck_assert_ptr_nonnull(strstr(note, "inline (the store failed: HTTP 503"));
	/* treelockctl: the first three are there, the fourth not */
	open_count(&fx, true, &gets, &puts, &stored, note, sizeof(note));
	ck_assert_int_eq(gets, 6);
	ck_assert_int_eq(puts, 0);
	ck_assert(!stored);
	ck_assert_str_eq(note, "inline (stored script treelockfs-mark-" ES_SCRIPTS_VERSION
			       " is missing: the next mount stores it again)");

	/* the next mount stores the missing three, the last one last */
	fx.f.script_put_ok = 0;
	open_count(&fx, false, &gets, &puts, &stored, note, sizeof(note));
	ck_assert_int_eq(gets, 6);
	ck_assert_int_eq(puts, 3);
	script_reqs(&fx, "PUT", &last);
	ck_assert_str_eq(last, "/_scripts/treelockfs-evict-" ES_SCRIPTS_VERSION);
	ck_assert_int_eq(fx.f.scripts_stored, 6);
	ck_assert(stored);
	ck_assert_str_eq(note, "stored in the cluster (treelockfs-*-" ES_SCRIPTS_VERSION ")");

	/* all there: six reads, nothing stored */
	open_count(&fx, false, &gets, &puts, &stored, note, sizeof(note));
	ck_assert_int_eq(gets, 6);
	ck_assert_int_eq(puts, 0);
	ck_assert(stored);
	open_count(&fx, true, &gets, &puts, &stored, note, sizeof(note));
	ck_assert_int_eq(gets, 6);
	ck_assert_int_eq(puts, 0);
	ck_assert(stored);
	ck_assert_str_eq(note, "stored in the cluster (treelockfs-*-" ES_SCRIPTS_VERSION ")");

	/* one deleted by hand: treelockctl says which, a mount stores it */
	k = fake_script(&fx.f, "treelockfs-rel-" ES_SCRIPTS_VERSION);
	free(fx.f.script_src[k]);
	fx.f.script_src[k] = NULL;
	open_count(&fx, true, &gets, &puts, &stored, note, sizeof(note));
	ck_assert_int_eq(gets, 6);
	ck_assert(!stored);
	ck_assert_str_eq(note, "inline (stored script treelockfs-rel-" ES_SCRIPTS_VERSION
			       " is missing: the next mount stores it again)");
	open_count(&fx, false, &gets, &puts, &stored, note, sizeof(note));
	ck_assert_int_eq(gets, 6);
	ck_assert_int_eq(puts, 1);
	ck_assert(stored);

	/* the first one replaced by another source: inline, for a mount and
	 * for treelockctl, and nothing is overwritten */
	k = fake_script(&fx.f, "treelockfs-acqs-" ES_SCRIPTS_VERSION);
	free(fx.f.script_src[k]);
	fx.f.script_src[k] = strdup("ctx._source.lock_count = 1");
	open_count(&fx, false, &gets, &puts, &stored, note, sizeof(note));
	ck_assert_int_eq(puts, 0);
	ck_assert(!stored);
	ck_assert_str_eq(note, "inline (stored script treelockfs-acqs-" ES_SCRIPTS_VERSION
			       " is not ours: its source differs from this release's)");
	ck_assert_str_eq(fx.f.script_src[k], "ctx._source.lock_count = 1");
	open_count(&fx, true, &gets, &puts, &stored, note, sizeof(note));
	ck_assert(!stored);
	ck_assert_ptr_nonnull(strstr(note, "acqs-" ES_SCRIPTS_VERSION " is not ours"));
	fx_done(&fx);
}
END_TEST

/* Takes and releases the locks of PLAN in FX's store; true when both
 * bulks named the scripts by id, false when both carried them inline. */
static bool scripts_by_id(struct fixture *fx, const struct tl_plan *plan, uint64_t ticket)
{
	struct tl_holder h;
	struct tl_conflict why;
	const struct resp_req *b;
	bool acq, rel;

	holder_init(&h, ticket);
	ck_assert_int_eq(fx->st->ops->try_acquire(fx->st, plan, &h, &why), 0);
	b = last(fx, "/locks/_bulk");
	acq = strstr(b->body, "\"id\":\"treelockfs-acqs-") != NULL;
	ck_assert_int_eq(strstr(b->body, "\"source\":\"def s = ") == NULL, acq);
	ck_assert_int_eq(fx->st->ops->release(fx->st, plan, &h), 0);
	drained(fx);
	b = last(fx, "/locks/_bulk");
	rel = strstr(b->body, "\"id\":\"treelockfs-rel-") != NULL;
	ck_assert_int_eq(acq, rel);
	return acq;
}

/* Two es stores in one process keep their own way of sending scripts:
 * opening one where storing them is refused leaves the other by id, and
 * a stored script gone from one cluster switches only that store inline. */
START_TEST(test_lockstore_es__scripts_mode_per_store)
{
	static const int puts[] = {200, 403, 200};
	struct fixture fx[3];
	struct es_store *es;
	struct tl_plan *plan = NULL;
	cJSON *item;
	size_t k;

	for (k = 0; k < 3; k++) {
		fx_init(&fx[k]);
		fx[k].f.script_put = puts[k];
		ck_assert_int_eq(es_store_open(&fx[k].cfg, &fx[k].st), 0);
		ck_assert_int_eq(fx[k].st->ops->start(fx[k].st), 0);
	}
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, "/a/b", "/a/c", 0, NULL, 0, &plan), 0);
	ck_assert(scripts_by_id(&fx[0], plan, 1));
	ck_assert(!scripts_by_id(&fx[1], plan, 2));
	ck_assert(scripts_by_id(&fx[2], plan, 3));
	/* the first store's cluster lost a stored script */
	item = cJSON_Parse("{\"update\":{\"_id\":\"/a\",\"status\":400,\"error\":{"
			   "\"type\":\"illegal_argument_exception\",\"reason\":\"failed to "
			   "execute script\",\"caused_by\":{\"type\":"
			   "\"resource_not_found_exception\",\"reason\":\"unable to find "
			   "script [treelockfs-acqs-" ES_SCRIPTS_VERSION "] in cluster state\"}}}}");
	ck_assert_ptr_nonnull(item);
	es = es_store_of(fx[0].st);
	ck_assert_int_eq(es_item_state(&es->cl, item, NULL), ES_ITEM_RETRY);
	cJSON_Delete(item);
	ck_assert(!scripts_by_id(&fx[0], plan, 4));
	ck_assert(!scripts_by_id(&fx[1], plan, 5));
	ck_assert(scripts_by_id(&fx[2], plan, 6));
	lockplan_free(plan);
	for (k = 0; k < 3; k++)
		fx_done(&fx[k]);
}
END_TEST

START_TEST(test_lockstore_es__long_key_uses_sha256_id)
{
	struct fixture fx;
	struct tl_plan *plan = NULL;
	struct tl_holder h;
	struct tl_conflict why;
	const struct resp_req *b;
	char key[700];

	memset(key, 'k', sizeof(key) - 1);
	key[0] = '/';
	key[sizeof(key) - 1] = '\0';
	fx_init(&fx);
	ck_assert_int_eq(es_store_open(&fx.cfg, &fx.st), 0);
	ck_assert_int_eq(fx.st->ops->start(fx.st), 0);
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, key, "/short", 0, NULL, 0, &plan), 0);
	holder_init(&h, 2);
	ck_assert_int_eq(fx.st->ops->try_acquire(fx.st, plan, &h, &why), 0);
	b = last(&fx, "/locks/_bulk");
	ck_assert_ptr_nonnull(strstr(b->body, "{\"create\":{\"_id\":\"sha256:"));
	ck_assert_ptr_nonnull(strstr(b->body, key)); /* the path stays in "path" */
	fx.st->ops->release(fx.st, plan, &h);
	lockplan_free(plan);
	fx_done(&fx);
}
END_TEST

START_TEST(test_lockstore_es__conflict_rolls_back_and_marks)
{
	struct fixture fx;
	struct tl_plan *plan = NULL;
	struct tl_holder h;
	struct tl_conflict why;
	const struct resp_req *b;

	fx_init(&fx);
	ck_assert_int_eq(es_store_open(&fx.cfg, &fx.st), 0);
	ck_assert_int_eq(fx.st->ops->start(fx.st), 0);
	snprintf(fx.f.refuse, sizeof(fx.f.refuse), "/x/y");
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, "/x/y", "/x/z", 0, NULL, 0, &plan), 0);
	holder_init(&h, 3);
	memset(&why, 0, sizeof(why));
	ck_assert_int_eq(fx.st->ops->try_acquire(fx.st, plan, &h, &why), -EAGAIN);
	ck_assert_str_eq(why.key, "/x/y");
	ck_assert_ptr_nonnull(strstr(why.holder, "other:1"));
	ck_assert_ptr_nonnull(h.priv);
	/* acquire, read the blocker, read its owner, roll back + mark */
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk"), 2);
	ck_assert_int_eq(count(&fx, "POST", "/locks/_mget"), 2);
	b = last(&fx, "/locks/_bulk");
	ck_assert_ptr_nonnull(strstr(b->body, "ctx.op = 'delete'"));     /* release script */
	ck_assert_ptr_nonnull(strstr(b->body, "\"mode\":\"exclusive\""));  /* mark */
	/* the intent stays while we wait (a reap finds our marks by it) */
	ck_assert_ptr_null(strstr(b->body, "{\"delete\":{\"_id\":\"intent:"));
	/* the retry takes the exclusive key with the script, not create */
	ck_assert_int_eq(fx.st->ops->try_acquire(fx.st, plan, &h, &why), -EAGAIN);
	ck_assert(any_bulk_has(&fx, "{\"update\":{\"_id\":\"/x/y\"", "s.holder != params.h"));
	fx.st->ops->abandon(fx.st, plan, &h);
	b = last(&fx, "/locks/_bulk");
	ck_assert_ptr_nonnull(strstr(b->body, "{\"delete\":{\"_id\":\"intent:"));
	ck_assert_ptr_nonnull(strstr(b->body, "s.waiters.remove(params.h)"));
	ck_assert_ptr_null(h.priv);
	lockplan_free(plan);
	fx_done(&fx);
}
END_TEST

START_TEST(test_lockstore_es__retries_503_items)
{
	struct fixture fx;
	struct tl_plan *plan = NULL;
	struct tl_holder h;
	struct tl_conflict why;

	fx_init(&fx);
	ck_assert_int_eq(es_store_open(&fx.cfg, &fx.st), 0);
	ck_assert_int_eq(fx.st->ops->start(fx.st), 0);
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, "/p/q", "/p/r", 0, NULL, 0, &plan), 0);
	holder_init(&h, 4);
	fx.f.bulk_503 = 1;
	ck_assert_int_eq(fx.st->ops->try_acquire(fx.st, plan, &h, &why), 0);
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk"), 2);
	ck_assert_int_eq(fx.st->ops->release(fx.st, plan, &h), 0);
	/* a store that stays down: -ENOLCK, nothing held */
	holder_init(&h, 5);
	fx.f.bulk_503 = 100;
	ck_assert_int_eq(fx.st->ops->try_acquire(fx.st, plan, &h, &why), -ENOLCK);
	fx.st->ops->abandon(fx.st, plan, &h);
	lockplan_free(plan);
	fx.f.bulk_503 = 0;
	fx_done(&fx);
}
END_TEST

START_TEST(test_lockstore_es__break_encodes_id)
{
	struct fixture fx;

	fx_init(&fx);
	ck_assert_int_eq(es_store_open_ctl(&fx.cfg, &fx.st), 0);
	ck_assert_int_eq(es_store_break(fx.st, "/a b+c%d/\xc3\xa9"), 0);
	ck_assert_int_eq(count(&fx, "DELETE", "/locks/_doc/%2Fa%20b%2Bc%25d%2F%C3%A9?refresh=true"),
			 1);
	/* the ctl store never creates the index */
	ck_assert_int_eq(count(&fx, "PUT", "/locks"), 0);
	fx_done(&fx);
}
END_TEST

/* ---- group commit ---------------------------------------------------------------- */

/* One rename of a concurrent test, run in its own thread. */
struct job {
	struct lockstore *st;
	struct tl_plan *plan;
	struct tl_holder h;
	struct tl_conflict why;
	bool release;          /* release instead of acquire */
	int64_t timeout_ms;    /* the holder's deadline from its start, 0: none */
	int err;
	int64_t took_ms;
	pthread_t th;
};

static void *job_main(void *arg)
{
	struct job *j = arg;
	int64_t t0 = tl_mono_ms();

	if (j->release) {
		j->err = j->st->ops->release(j->st, j->plan, &j->h);
	} else {
		memset(&j->why, 0, sizeof(j->why));
		j->h.deadline_us = j->timeout_ms ? tl_mono_us() + j->timeout_ms * 1000 : 0;
		j->err = j->st->ops->try_acquire(j->st, j->plan, &j->h, &j->why);
	}
	j->took_ms = tl_mono_ms() - t0;
	return NULL;
}

static void jobs_init(struct job *jobs, size_t n, struct lockstore *st, const char *top)
{
	char from[64], to[64];
	size_t i;

	memset(jobs, 0, n * sizeof(*jobs));
	for (i = 0; i < n; i++) {
		snprintf(from, sizeof(from), "/%s%zu/x", top, i);
		snprintf(to, sizeof(to), "/%s%zu/y", top, i);
		ck_assert_int_eq(
			lockplan_rename(TL_STRATEGY_TREE, from, to, 0, NULL, 0, &jobs[i].plan), 0);
		holder_init(&jobs[i].h, 100 + i);
		jobs[i].st = st;
	}
}

/* The sending slots of a default store, and the jobs that fill them: the
 * first request carries one job, each further one ES_BATCH_EXTRA_MIN. */
#define SLOTS ES_BATCH_INFLIGHT
#define OPENERS (1 + (SLOTS - 1) * ES_BATCH_EXTRA_MIN)

static unsigned int queued(struct fixture *fx)
{
	struct es_batch *c = &es_store_of(fx->st)->batch;
	unsigned int n;

	pthread_mutex_lock(&c->mutex);
	n = c->queued;
	pthread_mutex_unlock(&c->mutex);
	return n;
}

/* Waits up to 5 s for the fake server to have seen WANT bulks. */
static void await_bulks(struct fixture *fx, int want)
{
	int64_t until = tl_mono_ms() + 5000;

	while (count(fx, "POST", "/locks/_bulk") < want && tl_mono_ms() < until)
		usleep(2000);
	ck_assert_int_eq(count(fx, "POST", "/locks/_bulk"), want);
}

/* Fills every sending slot of the store (es_inflight) with jobs, then runs
 * the rest at once and waits for all. The fake server answers the slots'
 * requests HOLD_MS late. Job 0 goes alone, at once; each further slot opens
 * only once extra_min jobs queue (the last of them sends it), asserted
 * here: one job fewer leaves the request waiting for the first. Returns
 * the jobs that filled the slots. */
static size_t jobs_run(struct fixture *fx, struct job *jobs, size_t n, int hold_ms)
{
	struct es_batch *c = &es_store_of(fx->st)->batch;
	int base = count(fx, "POST", "/locks/_bulk");
	size_t i = 0, k, slot;

	pthread_mutex_lock(&c->mutex);
	c->age_ms = 60000; /* the gate alone opens slots here */
	pthread_mutex_unlock(&c->mutex);
	pthread_mutex_lock(&fx->r.mu);
	fx->f.hold_bulks = (int)c->max_inflight;
	fx->f.hold_bulk_ms = hold_ms;
	pthread_mutex_unlock(&fx->r.mu);
	for (slot = 0; slot < c->max_inflight && i < n; slot++) {
		size_t want = slot == 0 ? 1 : c->extra_min;

		for (k = 0; k < want && i < n; k++, i++) {
			int64_t until = tl_mono_ms() + 5000;

			if (k > 0 && k + 1 == want) { /* one job short of the gate: held */
				usleep(50000);
				ck_assert_int_eq(count(fx, "POST", "/locks/_bulk"), base + (int)slot);
			}
			ck_assert_int_eq(pthread_create(&jobs[i].th, NULL, job_main, &jobs[i]), 0);
			while (k + 1 < want && queued(fx) < k + 1 && tl_mono_ms() < until)
				usleep(2000);
			if (k + 1 < want)
				ck_assert_uint_eq(queued(fx), k + 1);
		}
		await_bulks(fx, base + (int)slot + 1);
		ck_assert_uint_eq(queued(fx), 0);
	}
	for (k = i; k < n; k++)
		ck_assert_int_eq(pthread_create(&jobs[k].th, NULL, job_main, &jobs[k]), 0);
	for (k = 0; k < n; k++)
		pthread_join(jobs[k].th, NULL);
	pthread_mutex_lock(&c->mutex);
	c->age_ms = ES_BATCH_AGE_MS;
	pthread_mutex_unlock(&c->mutex);
	return i;
}

static void jobs_free(struct job *jobs, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (jobs[i].h.priv)
			jobs[i].st->ops->abandon(jobs[i].st, jobs[i].plan, &jobs[i].h);
		lockplan_free(jobs[i].plan);
	}
}

/* Releases, one at a time, every job still holding what it acquired, each
 * release granted; then frees the jobs and closes the fixture. */
static void jobs_done(struct fixture *fx, struct job *jobs, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (jobs[i].err != 0 || !jobs[i].h.priv)
			continue;
		jobs[i].release = true;
		job_main(&jobs[i]);
		ck_assert_int_eq(jobs[i].err, 0);
	}
	jobs_free(jobs, n);
	fx_done(fx);
}

/* A store with SLOTS sending slots (es_inflight=; 0: the default). */
static void fx_open_concurrent_n(struct fixture *fx, size_t slots)
{
	fx_init(fx);
	if (slots)
		((struct es_options *)config_store_opts(&fx->cfg, TL_STORE_ES))->inflight =
			(unsigned int)slots;
	fx->r.concurrent = true;
	ck_assert_int_eq(es_store_open(&fx->cfg, &fx->st), 0);
	ck_assert_int_eq(fx->st->ops->start(fx->st), 0);
	ck_assert_uint_eq(es_store_of(fx->st)->batch.max_inflight, slots ? slots : SLOTS);
}

static void fx_open_concurrent(struct fixture *fx)
{
	fx_open_concurrent_n(fx, 0);
}

/* The bulk requests that hold the item OP of "/<TOP><i>/x" for every
 * job i in [FROM, TO). */
static int bulks_with_all(struct fixture *fx, const char *op, const char *top, size_t from,
			  size_t to)
{
	char needle[96];
	int i, n = 0;
	size_t k;

	pthread_mutex_lock(&fx->r.mu);
	for (i = 0; i < fx->r.nreqs; i++) {
		if (strcmp(fx->r.reqs[i].path, "/locks/_bulk") != 0)
			continue;
		for (k = from; k < to; k++) {
			snprintf(needle, sizeof(needle), "{\"%s\":{\"_id\":\"/%s%zu/x\"", op, top, k);
			if (!strstr(fx->r.reqs[i].body, needle))
				break;
		}
		if (k == to)
			n++;
	}
	pthread_mutex_unlock(&fx->r.mu);
	return n;
}

START_TEST(test_lockstore_es__concurrent_renames_share_bulks)
{
	struct fixture fx;
	struct job jobs[OPENERS + 6];
	size_t n = OPENERS + 6, i;
	int before;

	fx_open_concurrent(&fx);
	jobs_init(jobs, n, fx.st, "g");
	before = count(&fx, "POST", "/locks/_bulk");
	jobs_run(&fx, jobs, n, 1000);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(jobs[i].err, 0);
	/* the slots' requests, then the six that queued meanwhile in one */
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk") - before, SLOTS + 1);
	ck_assert_int_eq(bulks_with_all(&fx, "create", "g", OPENERS, n), 1);
	/* releases share requests the same way, and every one is handed to
	 * the sender thread: the renames go on at once, without waiting for
	 * the held answers, the first one's (sent alone) too */
	before = count(&fx, "POST", "/locks/_bulk");
	for (i = 0; i < n; i++)
		jobs[i].release = true;
	jobs_run(&fx, jobs, n, 1000);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(jobs[i].err, 0);
		ck_assert_ptr_null(jobs[i].h.priv);
		ck_assert_int_lt(jobs[i].took_ms, 500);
	}
	es_batch_drain(&es_store_of(fx.st)->batch);
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk") - before, SLOTS + 1);
	ck_assert_int_eq(bulks_with_all(&fx, "update", "g", OPENERS, n), 1);
	/* alone again: one request each, sent at once */
	jobs[0].release = false;
	before = count(&fx, "POST", "/locks/_bulk");
	job_main(&jobs[0]);
	ck_assert_int_eq(jobs[0].err, 0);
	ck_assert_int_lt(jobs[0].took_ms, 500);
	jobs[0].release = true;
	job_main(&jobs[0]);
	drained(&fx);
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk") - before, 2);
	jobs_done(&fx, jobs, n);
}
END_TEST

/* Makes the fake server answer the next HOLD_BULKS bulks HOLD_MS late,
 * starts J in a thread and waits for its request. Returns the bulks sent
 * before it. */
static int start_held(struct fixture *fx, struct job *j, int hold_bulks, int hold_ms)
{
	int before = count(fx, "POST", "/locks/_bulk");

	pthread_mutex_lock(&fx->r.mu);
	fx->f.hold_bulks = hold_bulks;
	fx->f.hold_bulk_ms = hold_ms;
	pthread_mutex_unlock(&fx->r.mu);
	ck_assert_int_eq(pthread_create(&j->th, NULL, job_main, j), 0);
	await_bulks(fx, before + 1);
	return before;
}

START_TEST(test_lockstore_es__slow_request_holds_up_nobody)
{
	struct fixture fx;
	struct job jobs[2];

	/* the first slot's request is answered 2 s late; a rename queued
	 * alone behind it (short of the gate) opens the second slot once it
	 * has waited ES_BATCH_AGE_MS, not when the slow answer comes */
	fx_open_concurrent(&fx);
	jobs_init(jobs, 2, fx.st, "s");
	start_held(&fx, &jobs[0], 1, 2000);
	job_main(&jobs[1]);
	ck_assert_int_eq(jobs[1].err, 0);
	ck_assert_int_ge(jobs[1].took_ms, ES_BATCH_AGE_MS);
	ck_assert_int_lt(jobs[1].took_ms, 1500);
	pthread_join(jobs[0].th, NULL);
	ck_assert_int_eq(jobs[0].err, 0);
	ck_assert_int_ge(jobs[0].took_ms, 1900);
	jobs_done(&fx, jobs, 2);
}
END_TEST

/* A tool that renames one file after the other in one directory (rsync,
 * mv): the next rename's acquire leaves beside the last rename's release,
 * which is still out, instead of after its answer (the two share only
 * shared documents, /d and /, whose updates commute): one round trip per
 * rename. */
START_TEST(test_lockstore_es__next_rename_leaves_beside_the_last_release)
{
	struct fixture fx;
	struct job jobs[2];
	struct es_batch *c;
	unsigned int live;
	int before;

	fx_open_concurrent(&fx);
	c = &es_store_of(fx.st)->batch;
	pthread_mutex_lock(&c->mutex);
	c->age_ms = 60000; /* no slot opens by age here */
	pthread_mutex_unlock(&c->mutex);
	memset(jobs, 0, sizeof(jobs));
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, "/d/a", "/d/b", 0, NULL, 0,
					 &jobs[0].plan), 0);
	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, "/d/c", "/d/e", 0, NULL, 0,
					 &jobs[1].plan), 0);
	holder_init(&jobs[0].h, 301);
	holder_init(&jobs[1].h, 302);
	jobs[0].st = jobs[1].st = fx.st;
	job_main(&jobs[0]);
	ck_assert_int_eq(jobs[0].err, 0);
	/* the release is answered 5 s late */
	jobs[0].release = true;
	before = count(&fx, "POST", "/locks/_bulk");
	pthread_mutex_lock(&fx.r.mu);
	fx.f.hold_bulks = 1;
	fx.f.hold_bulk_ms = 5000;
	pthread_mutex_unlock(&fx.r.mu);
	job_main(&jobs[0]);
	ck_assert_int_eq(jobs[0].err, 0);
	await_bulks(&fx, before + 1);
	job_main(&jobs[1]);
	ck_assert_int_eq(jobs[1].err, 0);
	pthread_mutex_lock(&c->mutex);
	live = c->detached_live;
	pthread_mutex_unlock(&c->mutex);
	ck_assert_uint_eq(live, 1); /* the release was still out */
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk"), before + 2);
	drained(&fx);
	jobs[0].h.priv = NULL;
	jobs[1].release = true;
	job_main(&jobs[1]);
	ck_assert_int_eq(jobs[1].err, 0);
	drained(&fx);
	jobs_free(jobs, 2);
	fx_done(&fx);
}
END_TEST

START_TEST(test_lockstore_es__one_in_flight)
{
	struct fixture fx;
	struct job jobs[1 + 6];
	size_t n = 1 + 6, i;
	int before;

	/* es_inflight=1: one request at a time; whatever arrives while it
	 * is out goes in the next one */
	fx_open_concurrent_n(&fx, 1);
	jobs_init(jobs, n, fx.st, "o");
	before = count(&fx, "POST", "/locks/_bulk");
	jobs_run(&fx, jobs, n, 1000);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(jobs[i].err, 0);
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk") - before, 2);
	ck_assert_int_eq(bulks_with_all(&fx, "create", "o", 1, n), 1);
	jobs_done(&fx, jobs, n);
}
END_TEST

/* The index of the first (LAST: the last) bulk request whose body holds
 * NEEDLE, or -1; *AT (may be NULL) gets NEEDLE's offset in it. */
static int bulk_index(struct fixture *fx, const char *needle, bool last, long *at)
{
	int i, k = -1;

	pthread_mutex_lock(&fx->r.mu);
	for (i = 0; i < fx->r.nreqs; i++) {
		const char *hit;

		if (strcmp(fx->r.reqs[i].path, "/locks/_bulk") != 0)
			continue;
		hit = strstr(fx->r.reqs[i].body, needle);
		if (hit) {
			k = i;
			if (at)
				*at = hit - fx->r.reqs[i].body;
			if (!last)
				break;
		}
	}
	pthread_mutex_unlock(&fx->r.mu);
	return k;
}

/* A store with SLOTS sending slots where job 0 of JOBS[0..N) (keys under
 * TOP) holds its locks and job 1 has a request out that the fake server
 * answers HOLD_MS late (as the next HOLD_BULKS are). Returns the bulks
 * sent before job 1's. */
static int one_request_out(struct fixture *fx, struct job *jobs, size_t n, const char *top,
			   size_t slots, int hold_bulks, int hold_ms)
{
	fx_open_concurrent_n(fx, slots);
	jobs_init(jobs, n, fx->st, top);
	job_main(&jobs[0]);
	ck_assert_int_eq(jobs[0].err, 0);
	return start_held(fx, &jobs[1], hold_bulks, hold_ms);
}

/* Releases J's locks while a request is out: handed off, it returns at
 * once, in under MAX_MS (less than the request is held); J is set to
 * acquire again. */
static void release_handed_off(struct job *j, int max_ms)
{
	j->release = true;
	job_main(j);
	ck_assert_int_eq(j->err, 0);
	ck_assert_int_lt(j->took_ms, max_ms);
	j->release = false;
}

START_TEST(test_lockstore_es__acquire_waits_for_own_release_in_flight)
{
	struct fixture fx;
	struct job jobs[3]; /* 0 renames twice, 1 holds a slot, 2 is unrelated */
	int before, rel, acq;

	/* three slots: only our own release in flight can hold the second
	 * acquire of the same documents back, not a lack of slots */
	before = one_request_out(&fx, jobs, 3, "w", 3, 2, 700);
	/* a request is out: the release is handed off and returns at once */
	release_handed_off(&jobs[0], 300);
	await_bulks(&fx, before + 2); /* it left after the queue's age */
	/* the same documents again: not sent before the release's answer;
	 * an unrelated rename queued meanwhile is not held back */
	ck_assert_int_eq(pthread_create(&jobs[0].th, NULL, job_main, &jobs[0]), 0);
	usleep(20000);
	job_main(&jobs[2]);
	ck_assert_int_eq(jobs[2].err, 0);
	ck_assert_int_lt(jobs[2].took_ms, 500);
	pthread_join(jobs[0].th, NULL);
	pthread_join(jobs[1].th, NULL);
	ck_assert_int_eq(jobs[0].err, 0);
	ck_assert_int_ge(jobs[0].took_ms, 450);
	/* the release, then the second create in a later request */
	rel = bulk_index(&fx, "{\"update\":{\"_id\":\"/w0/x\"", false, NULL);
	acq = bulk_index(&fx, "{\"create\":{\"_id\":\"/w0/x\"", true, NULL);
	ck_assert_int_ge(rel, 0);
	ck_assert_int_gt(acq, rel);
	/* the unrelated rename left before it */
	ck_assert_int_lt(bulk_index(&fx, "{\"create\":{\"_id\":\"/w2/x\"", false, NULL), acq);
	jobs_done(&fx, jobs, 3);
}
END_TEST

START_TEST(test_lockstore_es__release_and_acquire_queued_travel_in_order)
{
	struct fixture fx;
	struct job jobs[2];
	char rel[48], acq[48];
	long rel_at = -1, acq_at = -1;
	int before, i_rel, i_acq;

	/* one slot, held by job 1: job 0's release and its next acquire of
	 * the same documents both queue and leave in one request, the release
	 * first, so the store applies it before the acquire */
	before = one_request_out(&fx, jobs, 2, "t", 1, 1, 500);
	release_handed_off(&jobs[0], 300);
	job_main(&jobs[0]);
	ck_assert_int_eq(jobs[0].err, 0);
	pthread_join(jobs[1].th, NULL);
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk") - before, 2);
	snprintf(rel, sizeof(rel), "{\"update\":{\"_id\":\"/t0/x\"");
	snprintf(acq, sizeof(acq), "{\"create\":{\"_id\":\"/t0/x\"");
	i_rel = bulk_index(&fx, rel, false, &rel_at);
	i_acq = bulk_index(&fx, acq, true, &acq_at);
	ck_assert_int_eq(i_rel, i_acq);
	ck_assert_int_lt(rel_at, acq_at);
	jobs_done(&fx, jobs, 2);
}
END_TEST

START_TEST(test_lockstore_es__handed_off_release_kept_when_it_fails)
{
	struct fixture fx;
	struct job jobs[2];
	struct es_store *es;
	int64_t until;

	/* a handed-off release whose request fails is kept, like one sent
	 * by its rename, and the heartbeat thread resends it */
	one_request_out(&fx, jobs, 2, "k", 1, 1, 300);
	es = es_store_of(fx.st);
	pthread_mutex_lock(&fx.r.mu);
	fx.f.bulk_503 = 1; /* the next one: the release */
	pthread_mutex_unlock(&fx.r.mu);
	release_handed_off(&jobs[0], 200);
	pthread_join(jobs[1].th, NULL);
	es_batch_drain(&es->batch);
	pthread_mutex_lock(&es->mutex);
	ck_assert_ptr_nonnull(es->pending);
	pthread_mutex_unlock(&es->mutex);
	/* failed once, resent by the heartbeat thread within moments */
	until = tl_mono_ms() + 3000;
	while (bulks_with_all(&fx, "update", "k", 0, 1) < 2 && tl_mono_ms() < until)
		usleep(10000);
	ck_assert_int_ge(bulks_with_all(&fx, "update", "k", 0, 1), 2);
	jobs_done(&fx, jobs, 2);
}
END_TEST

START_TEST(test_lockstore_es__handed_off_releases_open_no_slot)
{
	struct fixture fx;
	struct job jobs[1 + 8];
	struct es_batch *c;
	size_t n = 1 + 8, i;
	int before;

	/* one request out: eight releases handed off hold up no rename, so
	 * they do not open the second slot (acquires that many would); they
	 * leave together once the first request is answered */
	fx_open_concurrent(&fx);
	c = &es_store_of(fx.st)->batch;
	jobs_init(jobs, n, fx.st, "h");
	for (i = 1; i < n; i++) {
		job_main(&jobs[i]);
		ck_assert_int_eq(jobs[i].err, 0);
		jobs[i].release = true;
	}
	pthread_mutex_lock(&c->mutex);
	c->age_ms = 60000; /* only the count could open it */
	pthread_mutex_unlock(&c->mutex);
	before = start_held(&fx, &jobs[0], 1, 600);
	for (i = 1; i < n; i++) {
		job_main(&jobs[i]);
		ck_assert_int_eq(jobs[i].err, 0);
		ck_assert_int_lt(jobs[i].took_ms, 300);
	}
	ck_assert_uint_ge(n - 1, c->extra_min);
	usleep(200000);
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk"), before + 1);
	pthread_join(jobs[0].th, NULL);
	es_batch_drain(c);
	ck_assert_int_eq(count(&fx, "POST", "/locks/_bulk"), before + 2);
	ck_assert_int_eq(bulks_with_all(&fx, "update", "h", 1, n), 1);
	pthread_mutex_lock(&c->mutex);
	c->age_ms = ES_BATCH_AGE_MS;
	pthread_mutex_unlock(&c->mutex);
	jobs_done(&fx, jobs, n);
}
END_TEST

START_TEST(test_lockstore_es__refusal_stays_with_its_rename)
{
	struct fixture fx;
	struct job jobs[OPENERS + 2];
	size_t n = OPENERS + 2, i, a = OPENERS, b = OPENERS + 1;
	char key[32];

	fx_open_concurrent(&fx);
	jobs_init(jobs, n, fx.st, "r");
	snprintf(fx.f.refuse, sizeof(fx.f.refuse), "/r%zu/x", a);
	jobs_run(&fx, jobs, n, 1000);
	/* jobs A and B travelled together; only A met the conflict */
	ck_assert_int_eq(bulks_with_all(&fx, "create", "r", a, n), 1);
	for (i = 0; i < OPENERS; i++)
		ck_assert_int_eq(jobs[i].err, 0);
	ck_assert_int_eq(jobs[a].err, -EAGAIN);
	ck_assert_str_eq(jobs[a].why.key, fx.f.refuse);
	ck_assert_int_eq(jobs[b].err, 0);
	/* A's granted /rA/y was rolled back; B's locks were neither rolled
	 * back nor marked */
	snprintf(key, sizeof(key), "{\"update\":{\"_id\":\"/r%zu/y\"", a);
	ck_assert(any_bulk_has(&fx, key, "ctx.op = 'delete'"));
	snprintf(key, sizeof(key), "/r%zu/", b);
	for (i = 0; i < (size_t)fx.r.nreqs; i++)
		if (strcmp(fx.r.reqs[i].path, "/locks/_bulk") == 0 &&
		    strstr(fx.r.reqs[i].body, "\"waiters\":{"))
			ck_assert_ptr_null(strstr(fx.r.reqs[i].body, key));
	jobs_done(&fx, jobs, n);
}
END_TEST

START_TEST(test_lockstore_es__failed_bulk_fails_every_rename_in_it)
{
	struct fixture fx;
	struct job jobs[OPENERS + 4];
	size_t n = OPENERS + 4, i;

	fx_open_concurrent(&fx);
	/* refused for good (HTTP 400): each rename of the batch gets EACCES */
	jobs_init(jobs, n, fx.st, "f");
	fx.f.fail_skip = SLOTS;
	fx.f.fail_status = 400;
	jobs_run(&fx, jobs, n, 1000);
	for (i = 0; i < OPENERS; i++)
		ck_assert_int_eq(jobs[i].err, 0);
	for (i = OPENERS; i < n; i++) {
		ck_assert_int_eq(jobs[i].err, -EACCES);
		ck_assert_ptr_nonnull(jobs[i].h.priv);
	}
	ck_assert_int_eq(bulks_with_all(&fx, "create", "f", OPENERS, n), 1);
	jobs_free(jobs, n);
	/* unavailable (HTTP 503 on every try): each gets ENOLCK */
	jobs_init(jobs, n, fx.st, "u");
	fx.f.fail_skip = SLOTS;
	fx.f.fail_status = 503;
	jobs_run(&fx, jobs, n, 1000);
	for (i = 0; i < OPENERS; i++)
		ck_assert_int_eq(jobs[i].err, 0);
	for (i = OPENERS; i < n; i++)
		ck_assert_int_eq(jobs[i].err, -ENOLCK);
	ck_assert_int_eq(bulks_with_all(&fx, "create", "u", OPENERS, n), 1);
	fx.f.fail_status = 0;
	jobs_free(jobs, n);
	fx_done(&fx);
}
END_TEST

START_TEST(test_lockstore_es__queued_past_deadline_fails_alone)
{
	struct fixture fx;
	struct job jobs[OPENERS + 1];
	size_t n = OPENERS + 1, i;
	char key[32];
	int k;

	fx_open_concurrent(&fx);
	jobs_init(jobs, n, fx.st, "d");
	jobs[OPENERS].timeout_ms = 200;
	jobs_run(&fx, jobs, n, 1500);
	/* the last job queued behind the slow requests and gave up at its own
	 * deadline (plus the grace), long before their answers came */
	ck_assert_int_eq(jobs[OPENERS].err, -ENOLCK);
	ck_assert_int_lt(jobs[OPENERS].took_ms, 1000);
	for (i = 0; i < OPENERS; i++) {
		ck_assert_int_eq(jobs[i].err, 0);
		ck_assert_int_ge(jobs[i].took_ms, 1400);
	}
	/* it never reached the store */
	snprintf(key, sizeof(key), "/d%zu/x", n - 1);
	pthread_mutex_lock(&fx.r.mu);
	for (k = 0; k < fx.r.nreqs; k++)
		ck_assert_ptr_null(strstr(fx.r.reqs[k].body ? fx.r.reqs[k].body : "", key));
	pthread_mutex_unlock(&fx.r.mu);
	jobs_done(&fx, jobs, n);
}
END_TEST

START_TEST(test_lockstore_es__bulk_count)
{
	const char *b = "{\"index\":{\"_id\":\"i\"}}\n{\"a\":1}\n{\"delete\":{\"_id\":\"x\"}}\n"
			"{\"update\":{\"_id\":\"/a\"}}\n{\"script\":{}}\n"
			"{\"create\":{\"_id\":\"/b\"}}\n{\"delete\":\"not an action\"}\n";

	ck_assert_int_eq(es_bulk_count(b, strlen(b)), 4);
	ck_assert_int_eq(es_bulk_count("", 0), 0);
	ck_assert_int_eq(es_bulk_count("{\"other\":1}\n", 12), -1);
	/* an action that needs a source line without one */
	ck_assert_int_eq(es_bulk_count("{\"create\":{}}\n", 14), -1);
}
END_TEST

/* es_index_verify() on the store of FX, with stderr (the log) captured
 * into LOG (SIZE bytes). Returns its result; *HAVE as it sets it. */
static int verify_logged(struct fixture *fx, char **have, char *log, size_t size)
{
	struct httpc_config hc = {.urls = fx->r.url, .timeout_ms = 5000};
	struct es_client c;
	int saved, level = tl_log_level, err;
	FILE *tmp = tmpfile();
	size_t n;

	ck_assert_ptr_nonnull(tmp);
	ck_assert_int_eq(es_client_open(&c, &hc, "locks"), 0);
	fflush(stderr);
	saved = dup(2);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_eq(dup2(fileno(tmp), 2), 2);
	tl_log_set_level(LOG_INFO);
	err = es_index_verify(&c, TL_STRATEGY_TREE, have, 0);
	tl_log_set_level(level);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	n = fread(log, 1, size - 1, tmp);
	log[n] = '\0';
	fclose(tmp);
	es_client_close(&c);
	return err;
}

START_TEST(test_lockstore_es__index_not_seen_but_there_is_not_called_lost)
{
	struct fixture fx;
	char log[4096], *have = NULL;

	/* the heartbeat's check reads no index (an engine answers so while
	 * it recovers its cluster state after a full restart), tries to
	 * create it and is told it exists: nothing was lost or re-created */
	fx_init(&fx);
	fx.f.index_exists = true;
	fx.f.mapping_404 = 1;
	ck_assert_int_eq(verify_logged(&fx, &have, log, sizeof(log)), 0);
	ck_assert_str_eq(have, "tree");
	ck_assert_int_eq(count(&fx, "PUT", "/locks"), 1);
	ck_assert_msg(!strstr(log, "was missing"), "%s", log);
	ck_assert_msg(strstr(log, "nothing re-created"), "%s", log);
	free(have);
	have = NULL;
	fx_done(&fx);

	/* really gone: re-created, and said so */
	fx_init(&fx);
	ck_assert_int_eq(verify_logged(&fx, &have, log, sizeof(log)), 0);
	ck_assert_str_eq(have, "tree");
	ck_assert_int_eq(count(&fx, "PUT", "/locks"), 1);
	ck_assert_msg(strstr(log, "was missing (lost by the store?): re-created"), "%s", log);
	free(have);
	fx_done(&fx);
}
END_TEST

START_TEST(test_lockstore_es__request_timeout_from_deadline)
{
	struct httpc_config hc = {.urls = "http://127.0.0.1:9", .timeout_ms = 5000};
	struct es_client c;
	unsigned int t;

	ck_assert_int_eq(es_client_open(&c, &hc, "locks"), 0);
	/* no deadline, or one further than the client's timeout: the
	 * client's own */
	ck_assert_uint_eq(es_request_timeout(&c, 0), 0);
	ck_assert_uint_eq(es_request_timeout(&c, tl_mono_ms() + 60000), 0);
	/* what is left of a nearer one */
	t = es_request_timeout(&c, tl_mono_ms() + 2000);
	ck_assert_uint_le(t, 2000);
	ck_assert_uint_ge(t, ES_GRACE_MS);
	/* a deadline that passed still leaves the grace */
	ck_assert_uint_eq(es_request_timeout(&c, tl_mono_ms() - 1000), ES_GRACE_MS);
	es_client_close(&c);
}
END_TEST

START_TEST(test_lockstore_es__retry_pause_within_deadline)
{
	int64_t t0;

	/* a pause that would end past the deadline is not taken */
	ck_assert(!es_retry_pause(tl_mono_ms() + ES_RETRY_BASE_MS, 1));
	ck_assert(!es_retry_pause(tl_mono_ms() - 1, 1));
	/* otherwise the pause of the attempt, doubling */
	t0 = tl_mono_ms();
	ck_assert(es_retry_pause(0, 1));
	ck_assert_int_ge(tl_mono_ms() - t0, 2 * ES_RETRY_BASE_MS);
	t0 = tl_mono_ms();
	ck_assert(es_retry_pause(tl_mono_ms() + 60000, 2));
	ck_assert_int_ge(tl_mono_ms() - t0, 4 * ES_RETRY_BASE_MS);
}
END_TEST

Suite *make_suite_lockstore_es(void)
{
	Suite *s = suite_create("lockstore_es");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_lockstore_es__bootstrap_creates_index);
	tcase_add_test(tc, test_lockstore_es__scripts_stored_or_inline);
	tcase_add_test(tc, test_lockstore_es__scripts_mode_per_store);
	tcase_add_test(tc, test_lockstore_es__scripts_all_read_and_compared);
	tcase_add_test(tc, test_lockstore_es__refuses_other_strategy);
	tcase_add_test(tc, test_lockstore_es__unreachable_and_unauthorised);
	tcase_add_test(tc, test_lockstore_es__one_bulk_per_acquire_and_release);
	tcase_add_test(tc, test_lockstore_es__long_key_uses_sha256_id);
	tcase_add_test(tc, test_lockstore_es__conflict_rolls_back_and_marks);
	tcase_add_test(tc, test_lockstore_es__retries_503_items);
	tcase_add_test(tc, test_lockstore_es__break_encodes_id);
	tcase_add_test(tc, test_lockstore_es__concurrent_renames_share_bulks);
	tcase_add_test(tc, test_lockstore_es__refusal_stays_with_its_rename);
	tcase_add_test(tc, test_lockstore_es__failed_bulk_fails_every_rename_in_it);
	tcase_add_test(tc, test_lockstore_es__queued_past_deadline_fails_alone);
	tcase_add_test(tc, test_lockstore_es__one_in_flight);
	tcase_add_test(tc, test_lockstore_es__acquire_waits_for_own_release_in_flight);
	tcase_add_test(tc, test_lockstore_es__release_and_acquire_queued_travel_in_order);
	tcase_add_test(tc, test_lockstore_es__handed_off_release_kept_when_it_fails);
	tcase_add_test(tc, test_lockstore_es__handed_off_releases_open_no_slot);
	tcase_add_test(tc, test_lockstore_es__slow_request_holds_up_nobody);
	tcase_add_test(tc, test_lockstore_es__next_rename_leaves_beside_the_last_release);
	tcase_add_test(tc, test_lockstore_es__bulk_count);
	tcase_add_test(tc, test_lockstore_es__index_not_seen_but_there_is_not_called_lost);
	tcase_add_test(tc, test_lockstore_es__request_timeout_from_deadline);
	tcase_add_test(tc, test_lockstore_es__retry_pause_within_deadline);
	suite_add_tcase(s, tc);
	return s;
}
