/* es_fsctl.c - the fs index as treelockctl reads and writes it, see
 * es_fsctl.h
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/path.h"
#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/es_fsctl.h"
#include "es/es_fsdoc.h"
#include "es/es_internal.h"
#include "es/es_retry.h"
#include "es/httpc.h"

/* How often a bulk that failed as a whole is sent (the items carry their
 * versions: sending one again changes nothing that was applied). */
#define FSCTL_BULK_TRIES 4

struct es_fsctl {
	struct es_client cl;
};

int es_fsctl_open(const struct tl_config *cfg, const char *index, struct es_fsctl **out)
{
	const struct es_options *eo = es_options_of(cfg);
	struct httpc_config hc = {0};
	struct es_fsctl *f;
	int err;

	*out = NULL;
	if (!eo || !eo->url)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	es_options_httpc(eo, &hc);
	/* a bulk of thousands of documents takes longer than a lock */
	hc.timeout_ms = eo->timeout_ms > 60000 ? eo->timeout_ms : 60000;
	hc.max_body = 256u << 20;
	hc.opaque_id = "treelockctl";
	err = es_client_open(&f->cl, &hc, index);
	if (err) {
		free(f);
		return err;
	}
	*out = f;
	return 0;
}

void es_fsctl_close(struct es_fsctl *f)
{
	if (!f)
		return;
	es_client_close(&f->cl);
	free(f);
}

const char *es_fsctl_index(const struct es_fsctl *f)
{
	return f->cl.index;
}

void es_fsctl_last_error(struct es_fsctl *f, char *buf, size_t size)
{
	es_client_last_error(&f->cl, buf, size);
}

/* "/<index>" as a new string, or NULL. */
static char *index_path(struct es_fsctl *f)
{
	char *p = NULL;

	return asprintf(&p, "/%s", f->cl.index_esc) < 0 ? NULL : p;
}

int es_fsctl_exists(struct es_fsctl *f)
{
	struct httpc_response r;
	enum es_call_class cc;
	char *path = es_path(&f->cl, "_mapping", NULL, NULL);
	int res;

	if (!path)
		return -ENOMEM;
	cc = es_call(&f->cl, "GET", path, NULL, NULL, 0, 0, &r, true);
	res = cc == ES_CALL_OK ? 1 : r.status == 404 ? 0 : -ENOLCK;
	if (res < 0 && r.status)
		es_client_set_error(&f->cl, "GET %s: status %ld", path, r.status);
	httpc_response_free(&r);
	free(path);
	return res;
}

/* Whether the existing index's mapping is an fs index of ours: 1, 0, or
 * -ENOLCK. */
static int mapping_ours(struct es_fsctl *f)
{
	struct httpc_response r;
	char *path = es_path(&f->cl, "_mapping", NULL, NULL);
	const cJSON *first;
	cJSON *root;
	int res = -ENOLCK;

	if (!path)
		return -ENOMEM;
	if (es_call(&f->cl, "GET", path, NULL, NULL, 0, 0, &r, false) == ES_CALL_OK) {
		root = es_parse(&r);
		first = root && root->child ? root->child : NULL;
		if (first)
			res = es_fsdoc_is_ours(cJSON_GetObjectItemCaseSensitive(first, "mappings"));
		cJSON_Delete(root);
	}
	httpc_response_free(&r);
	free(path);
	return res;
}

int es_fsctl_ensure(struct es_fsctl *f, int *created)
{
	struct httpc_response r;
	enum es_call_class cc;
	char type[96] = "", *body = NULL, *path = NULL;
	cJSON *b, *root;
	int err;

	if (created)
		*created = 0;
	err = es_fsctl_exists(f);
	if (err < 0)
		return err;
	if (err == 0) {
		b = es_fsdoc_index_body();
		body = b ? cJSON_PrintUnformatted(b) : NULL;
		cJSON_Delete(b);
		path = index_path(f);
		if (!body || !path) {
			free(body);
			free(path);
			return -ENOMEM;
		}
		cc = es_call(&f->cl, "PUT", path, HTTPC_JSON, body, strlen(body), 0, &r, false);
		root = es_parse(&r);
		es_docs_error_type(root, type, sizeof(type));
		cJSON_Delete(root);
		err = 0;
		if (cc == ES_CALL_OK) {
			if (created)
				*created = 1;
		} else if (!(r.status == 400 &&
			     strcmp(type, "resource_already_exists_exception") == 0)) {
			if (r.status)
				es_log_refusal(&f->cl, "PUT", path, &r);
			err = -ENOLCK;
		}
		httpc_response_free(&r);
		free(body);
		free(path);
		if (err || (created && *created))
			return err;
	}
	err = mapping_ours(f);
	if (err < 0)
		return err;
	if (!err) {
		es_client_set_error(&f->cl, "index '%s' is not an fs index of treelockfs",
				    f->cl.index);
		return -EPROTO;
	}
	return 0;
}

int es_fsctl_refresh(struct es_fsctl *f)
{
	struct httpc_response r;
	char *path = es_path(&f->cl, "_refresh", NULL, NULL);
	enum es_call_class cc;

	if (!path)
		return -ENOMEM;
	cc = es_call(&f->cl, "POST", path, HTTPC_JSON, NULL, 0, 0, &r, false);
	httpc_response_free(&r);
	free(path);
	return cc == ES_CALL_OK ? 0 : -ENOLCK;
}

int es_fsctl_bulk(struct es_fsctl *f, const char *data, size_t len, struct es_fsctl_counts *c)
{
	size_t ok = 0, stale = 0, failed = 0;
	const cJSON *it;
	cJSON *root = NULL;
	int err = -EAGAIN, tries;

	for (tries = 0; tries < FSCTL_BULK_TRIES && err == -EAGAIN; tries++) {
		if (tries)
			es_sleep_ms(200u << tries);
		err = es_bulk_post(&f->cl, data, len, 0, &root);
	}
	if (err)
		return err == -ENOMEM ? err : -ENOLCK;
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "items"))
	{
		const cJSON *op = it->child;
		long st = (long)es_jint(op, "status", 0);
		const char *res = es_jstr(op, "result");

		if ((st >= 200 && st < 300) || (st == 404 && res && strcmp(res, "not_found") == 0))
			ok++;
		else if (st == 409)
			stale++;
		else {
			const cJSON *e = cJSON_GetObjectItemCaseSensitive(op, "error");

			if (!failed)
				es_client_set_error(&f->cl, "bulk item refused: status %ld %s", st,
						    es_jstr(e, "reason") ? es_jstr(e, "reason") : "");
			failed++;
		}
	}
	cJSON_Delete(root);
	__atomic_add_fetch(&c->ok, ok, __ATOMIC_RELAXED);
	__atomic_add_fetch(&c->stale, stale, __ATOMIC_RELAXED);
	__atomic_add_fetch(&c->failed, failed, __ATOMIC_RELAXED);
	return 0;
}

/* Reads hit or doc H (with _source) into OUT. */
static int entry_of(const cJSON *h, struct es_fsentry *out)
{
	const cJSON *src = cJSON_GetObjectItemCaseSensitive(h, "_source");

	return es_fsdoc_read(src, es_jint(h, "_version", -1), out);
}

int es_fsctl_get(struct es_fsctl *f, const char *key, struct es_fsentry *out)
{
	struct httpc_response r;
	char *id = NULL, *path;
	cJSON *root;
	int err;

	memset(out, 0, sizeof(*out));
	if (path_lock_id(key, &id) != 0)
		return -ENOMEM;
	path = es_path(&f->cl, "_doc", id, NULL);
	free(id);
	if (!path)
		return -ENOMEM;
	es_call(&f->cl, "GET", path, NULL, NULL, 0, 0, &r, true);
	free(path);
	if (r.status == 404) {
		httpc_response_free(&r);
		return -ENOENT;
	}
	if (r.status != 200) {
		httpc_response_free(&r);
		return -ENOLCK;
	}
	root = es_parse(&r);
	httpc_response_free(&r);
	err = root ? entry_of(root, out) : -ENOLCK;
	cJSON_Delete(root);
	return err == -EINVAL ? -ENOENT : err;
}

int es_fsctl_mget(struct es_fsctl *f, char *const *keys, size_t n, struct es_fsentry *out)
{
	char **ids = calloc(n + 1, sizeof(*ids));
	const cJSON *d;
	cJSON *root = NULL;
	size_t i;
	int err = -ENOMEM;

	memset(out, 0, n * sizeof(*out));
	if (!ids)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		if (path_lock_id(keys[i], &ids[i]) != 0)
			goto out;
	root = es_mget(&f->cl, NULL, ids, n, 0);
	err = -ENOLCK;
	if (!root)
		goto out;
	i = 0;
	cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(root, "docs"))
	{
		if (i >= n)
			break;
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "found")))
			entry_of(d, &out[i]);
		i++;
	}
	err = 0;
out:
	for (i = 0; i < n; i++)
		free(ids[i]);
	free(ids);
	cJSON_Delete(root);
	return err;
}

int es_fsctl_page(struct es_fsctl *f, const cJSON *query, char **after, size_t size,
		  struct es_fsentry *out, size_t *n)
{
	struct httpc_response r;
	cJSON *req = cJSON_CreateObject(), *root = NULL, *sort, *q;
	const cJSON *h, *last = NULL;
	char *body = NULL, *path = es_path(&f->cl, "_search", NULL, NULL);
	int err = -ENOMEM;

	*n = 0;
	if (!req || !path)
		goto out;
	cJSON_AddNumberToObject(req, "size", (double)size);
	cJSON_AddFalseToObject(req, "track_total_hits");
	q = query ? cJSON_Duplicate(query, true) : NULL;
	if (q)
		cJSON_AddItemToObject(req, "query", q);
	sort = cJSON_AddArrayToObject(req, "sort");
	cJSON_AddItemToArray(sort, cJSON_CreateString("path"));
	if (*after)
		cJSON_AddItemToObject(req, "search_after", cJSON_CreateStringArray(
								   (const char *const *)after, 1));
	body = cJSON_PrintUnformatted(req);
	if (!body)
		goto out;
	es_call(&f->cl, "POST", path, HTTPC_JSON, body, strlen(body), 0, &r, false);
	if (r.status == 404) {
		err = -ENOENT;
		httpc_response_free(&r);
		goto out;
	}
	if (r.status != 200) {
		if (r.status)
			es_log_refusal(&f->cl, "POST", path, &r);
		httpc_response_free(&r);
		err = -ENOLCK;
		goto out;
	}
	root = es_parse(&r);
	httpc_response_free(&r);
	err = -ENOLCK;
	if (!root)
		goto out;
	cJSON_ArrayForEach(h, es_hits(root))
	{
		if (*n >= size)
			break;
		last = h;
		if (entry_of(h, &out[*n]) == 0)
			(*n)++;
	}
	err = 0;
	if (last) {
		const char *p = es_jstr(cJSON_GetObjectItemCaseSensitive(last, "_source"), "path");
		char *np = p ? strdup(p) : NULL;

		if (!np) {
			err = -ENOMEM;
		} else {
			free(*after);
			*after = np;
		}
		/* a full page (documents not ours skipped) may have a next */
		if (!err && cJSON_GetArraySize(es_hits(root)) >= (int)size)
			err = 1;
	}
out:
	cJSON_Delete(req);
	cJSON_Delete(root);
	free(body);
	free(path);
	return err;
}
