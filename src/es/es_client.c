/* es_client.c - the Elasticsearch request layer, see es_client.h */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/httpc.h"
#include "base/log.h"
#include "base/tlclock.h"

unsigned int es_request_timeout(const struct es_client *c, int64_t deadline)
{
	int64_t left;

	if (!deadline)
		return 0;
	left = deadline - tl_mono_ms();
	if (left >= (int64_t)c->timeout_ms)
		return 0;
	return left < ES_GRACE_MS ? ES_GRACE_MS : (unsigned int)left;
}

int es_client_open(struct es_client *c, const struct httpc_config *hc, const char *index)
{
	int err = -ENOMEM;

	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->err_mutex, NULL);
	c->index = strdup(index);
	if (!c->index)
		goto out_close;
	c->index_esc = httpc_escape(index);
	if (!c->index_esc)
		goto out_close;
	c->timeout_ms = hc->timeout_ms ? hc->timeout_ms : 5000;
	atomic_init(&c->scripts_stored, false);
	snprintf(c->scripts_note, sizeof(c->scripts_note), "inline (not checked)");
	err = httpc_open(hc, &c->http);
	if (err) {
		err = err == -ENOMEM ? err : -EINVAL;
		goto out_close;
	}
	return 0;

out_close:
	es_client_close(c);
	return err;
}

void es_client_close(struct es_client *c)
{
	httpc_close(c->http);
	free(c->index);
	free(c->index_esc);
	pthread_mutex_destroy(&c->err_mutex);
	memset(c, 0, sizeof(*c));
}

void es_client_set_error(struct es_client *c, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&c->err_mutex);
	va_start(ap, fmt);
	vsnprintf(c->last_err, sizeof(c->last_err), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&c->err_mutex);
}

void es_client_last_error(struct es_client *c, char *buf, size_t size)
{
	pthread_mutex_lock(&c->err_mutex);
	snprintf(buf, size, "%s", c->last_err);
	pthread_mutex_unlock(&c->err_mutex);
}

char *es_path(const struct es_client *c, const char *api, const char *id, const char *query)
{
	struct buf b = BUF_INIT;
	char *e = NULL;

	buf_add(&b, "/", 1);
	buf_adds(&b, c->index_esc);
	buf_add(&b, "/", 1);
	buf_adds(&b, api);
	if (id) {
		e = httpc_escape(id);
		if (!e)
			b.err = -ENOMEM;
		buf_add(&b, "/", 1);
		if (e)
			buf_adds(&b, e);
		free(e);
	}
	if (query) {
		buf_add(&b, "?", 1);
		buf_adds(&b, query);
	}
	if (b.err) {
		buf_free(&b);
		return NULL;
	}
	return buf_detach(&b, NULL);
}

cJSON *es_parse(const struct httpc_response *r)
{
	return r->body ? cJSON_ParseWithLengthOpts(r->body, r->len, NULL, false) : NULL;
}

void es_log_refusal(struct es_client *c, const char *method, const char *path,
		    const struct httpc_response *r)
{
	char type[96] = "";
	cJSON *root = es_parse(r);

	es_docs_error_type(root, type, sizeof(type));
	cJSON_Delete(root);
	if (r->status == 401 || r->status == 403)
		tl_log(LOG_ERR,
		       "lock store at '%s' refuses our credentials (HTTP %ld%s%s): check es_user, "
		       "the password or es_api_key_file",
		       httpc_node_name(c->http, r->node), r->status, *type ? " " : "", type);
	else
		tl_log(LOG_ERR, "lock store rejected our request '%s %s' (HTTP %ld): %.1000s", method,
		       path, r->status, r->body ? r->body : "");
}

enum es_call_class es_call(struct es_client *c, const char *method, const char *path,
			   const char *ctype, const char *body, size_t len, int64_t deadline,
			   struct httpc_response *r, bool quiet)
{
	char errbuf[256];
	int err;

	err = httpc_request(c->http, method, path, ctype, body, len, es_request_timeout(c, deadline),
			    r, errbuf, sizeof(errbuf));
	if (err) {
		es_client_set_error(c, "request '%s %s' failed: %s", method, path,
				    *errbuf ? errbuf : strerror(-err));
		if (!quiet)
			tl_log(LOG_WARNING, "lock store request '%s %s' failed: %s", method, path,
			       *errbuf ? errbuf : strerror(-err));
		return err == -ENOMEM ? ES_CALL_FATAL : ES_CALL_RETRY;
	}
	if (r->status >= 200 && r->status < 300)
		return ES_CALL_OK;
	{
		char type[96] = "";
		cJSON *root = es_parse(r);

		es_docs_error_type(root, type, sizeof(type));
		cJSON_Delete(root);
		es_client_set_error(c, "request '%s %s' answered HTTP %ld%s%s from '%s'", method,
				    path, r->status, *type ? " " : "", type,
				    httpc_node_name(c->http, r->node));
		if (r->status != 429 && r->status < 500)
			return ES_CALL_FATAL;
		/* the type tells an overloaded node (429 es_rejected_execution_
		 * exception, circuit_breaking_exception) from a failing one */
		if (!quiet)
			tl_log(LOG_WARNING, "lock store request '%s %s' failed: HTTP %ld%s%s from '%s'",
			       method, path, r->status, *type ? " " : "", type,
			       httpc_node_name(c->http, r->node));
		return ES_CALL_RETRY;
	}
}

int es_bulk_post(struct es_client *c, const char *data, size_t len, int64_t deadline,
		 cJSON **root)
{
	struct httpc_response r;
	enum es_call_class cc;
	char *path;

	*root = NULL;
	path = es_path(c, "_bulk", NULL, NULL);
	if (!path)
		return -ENOMEM;
	cc = es_call(c, "POST", path, HTTPC_NDJSON, data, len, deadline, &r, false);
	if (cc == ES_CALL_RETRY) {
		httpc_response_free(&r);
		free(path);
		return -EAGAIN;
	}
	if (cc == ES_CALL_FATAL) {
		if (r.body)
			es_log_refusal(c, "POST", path, &r);
		httpc_response_free(&r);
		free(path);
		return -EACCES;
	}
	free(path);
	*root = es_parse(&r);
	if (!*root || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(*root, "items"))) {
		tl_log(LOG_ERR, "lock store sent a malformed bulk response: %.300s", r.body);
		cJSON_Delete(*root);
		*root = NULL;
		httpc_response_free(&r);
		return -EAGAIN;
	}
	httpc_response_free(&r);
	return 0;
}

long es_bulk_count(const char *data, size_t len)
{
	static const char *const ops[] = {"{\"delete\"", "{\"index\"", "{\"create\"",
					  "{\"update\""};
	const char *p = data, *end = data + len;
	long n = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t k, l = nl ? (size_t)(nl - p) : (size_t)(end - p);

		for (k = 0; k < 4; k++)
			if (l >= strlen(ops[k]) && memcmp(p, ops[k], strlen(ops[k])) == 0)
				break;
		if (k == 4)
			return -1;
		n++;
		p = nl ? nl + 1 : end;
		if (k > 0) { /* index, create and update carry a source line */
			if (p >= end)
				return -1;
			nl = memchr(p, '\n', (size_t)(end - p));
			p = nl ? nl + 1 : end;
		}
	}
	return n;
}

bool es_client_scripts_stored(struct es_client *c)
{
	return atomic_load(&c->scripts_stored);
}

void es_client_set_scripts_stored(struct es_client *c, bool stored)
{
	atomic_store(&c->scripts_stored, stored);
}

enum es_item_state es_item_state(struct es_client *c, const cJSON *it, long *status_out)
{
	const cJSON *body = it ? it->child : NULL; /* {"create": {...}} */
	const char *op = body && body->string ? body->string : "";
	long status = (long)es_jint(body, "status", 0);
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(body, "error");

	if (status_out)
		*status_out = status;
	if (status >= 200 && status < 300)
		return ES_ITEM_OK;
	if (status == 404 && (strcmp(op, "delete") == 0 || strcmp(op, "update") == 0))
		return ES_ITEM_OK; /* already gone: release, unmark and evict are done */
	if (status == 409)
		return strcmp(op, "create") == 0 ? ES_ITEM_REFUSED : ES_ITEM_RETRY;
	if (status == 400 && es_docs_is_script_refusal(err))
		return ES_ITEM_REFUSED;
	if (status == 400 && es_docs_is_missing_script(err)) {
		/* our stored scripts were deleted: inline from now on */
		if (atomic_exchange(&c->scripts_stored, false)) {
			tl_log(LOG_WARNING, "the lock scripts stored in the cluster are gone: "
			       "sending them inline from now on");
		}
		return ES_ITEM_RETRY;
	}
	if (status == 429 || status >= 500 || status == 0)
		return ES_ITEM_RETRY;
	return ES_ITEM_FATAL;
}

/* POSTs the JSON REQ (freed) to API; the parsed answer on 2xx, else NULL.
 * With LOG, a refusal is logged. */
static cJSON *post_json(struct es_client *c, const char *api, cJSON *req, int64_t deadline,
			bool log)
{
	struct httpc_response r;
	cJSON *root = NULL;
	char *body = req ? cJSON_PrintUnformatted(req) : NULL;
	char *path = es_path(c, api, NULL, NULL);

	cJSON_Delete(req);
	if (!body || !path)
		goto out;
	if (es_call(c, "POST", path, HTTPC_JSON, body, strlen(body), deadline, &r, false) ==
	    ES_CALL_OK)
		root = es_parse(&r);
	else if (log && r.body)
		es_log_refusal(c, "POST", path, &r);
	httpc_response_free(&r);
out:
	free(path);
	free(body);
	return root;
}

cJSON *es_mget(struct es_client *c, const char *prefix, char *const *ids, size_t n,
	       int64_t deadline)
{
	return post_json(c, "_mget", es_docs_ids(prefix, ids, n), deadline, false);
}

cJSON *es_search_all(struct es_client *c, cJSON *query, int64_t deadline)
{
	struct httpc_response r;
	char *path = es_path(c, "_refresh", NULL, NULL);

	if (path) {
		es_call(c, "POST", path, HTTPC_JSON, NULL, 0, deadline, &r, false);
		httpc_response_free(&r);
		free(path);
	}
	return post_json(c, "_search", es_docs_search(query), deadline, true);
}

const cJSON *es_hits(const cJSON *root)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "hits"),
						"hits");
}

int es_delete(struct es_client *c, const char *id, const char *query, bool quiet,
	      int64_t deadline)
{
	struct httpc_response r;
	enum es_call_class cc;
	char *path = es_path(c, "_doc", id, query);
	int err;

	if (!path)
		return -ENOMEM;
	cc = es_call(c, "DELETE", path, NULL, NULL, 0, deadline, &r, quiet);
	if (cc == ES_CALL_OK)
		err = 0;
	else if (r.status == 404)
		err = -ENOENT;
	else
		err = -ENOLCK;
	httpc_response_free(&r);
	free(path);
	return err;
}
