/* es_index.c - cluster check, mapping and bootstrap, see es_index.h */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/es_index.h"
#include "es/es_scripts.h" /* ES_SCRIPTS_VERSION */
#include "es/httpc.h"
#include "lock/lockplan.h"
#include "base/log.h"

int es_index_read_mapping(struct es_client *c, char **strategy, bool *keyword_path,
			  int64_t deadline)
{
	struct httpc_response r;
	enum es_call_class cc;
	cJSON *root, *idx, *m, *tl;
	const char *s;
	char *path;

	*strategy = NULL;
	if (keyword_path)
		*keyword_path = false;
	path = es_path(c, "_mapping", NULL, NULL);
	if (!path)
		return -ENOMEM;
	cc = es_call(c, "GET", path, NULL, NULL, 0, deadline, &r, true);
	if (cc != ES_CALL_OK) {
		int err = r.status == 404 ? -ENOENT : cc == ES_CALL_RETRY ? -EAGAIN : -EACCES;

		if (err == -EACCES)
			es_log_refusal(c, "GET", path, &r);
		httpc_response_free(&r);
		free(path);
		return err;
	}
	free(path);
	root = es_parse(&r);
	httpc_response_free(&r);
	idx = root ? root->child : NULL; /* {"<index>": {"mappings": ...}} */
	m = cJSON_GetObjectItemCaseSensitive(idx, "mappings");
	tl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "_meta"),
					      ES_META_NAME);
	s = es_jstr(tl, "strategy");
	if (s)
		*strategy = strdup(s);
	if (keyword_path) {
		const cJSON *p = cJSON_GetObjectItemCaseSensitive(
			cJSON_GetObjectItemCaseSensitive(m, "properties"), "path");

		*keyword_path = es_jstr(p, "type") && strcmp(es_jstr(p, "type"), "keyword") == 0;
	}
	cJSON_Delete(root);
	return 0;
}

/* PUT /<index> with our mapping. Returns 0 (created), 1 (it exists:
 * created by another client meanwhile, or never gone: a read that did
 * not find it came before the cluster had recovered its state), -EAGAIN
 * (try again), -ENOLCK (refused, logged), -ENOMEM. */
static int create_index(struct es_client *c, enum tl_strategy s, int64_t deadline)
{
	struct httpc_response r;
	char type[96] = "", *body, *path = NULL;
	enum es_call_class cc;
	cJSON *mapping = es_docs_mapping(s), *root;
	int err = -ENOMEM;

	body = mapping ? cJSON_PrintUnformatted(mapping) : NULL;
	cJSON_Delete(mapping);
	if (!body || asprintf(&path, "/%s", c->index_esc) < 0) {
		free(body);
		return -ENOMEM;
	}
	cc = es_call(c, "PUT", path, HTTPC_JSON, body, strlen(body), deadline, &r, false);
	root = es_parse(&r);
	es_docs_error_type(root, type, sizeof(type));
	cJSON_Delete(root);
	if (cc == ES_CALL_OK) {
		tl_log(LOG_NOTICE, "created lock index '%s' for strategy '%s'", c->index,
		       lockplan_strategy_name(s));
		err = 0;
	} else if (r.status == 400 && strcmp(type, "resource_already_exists_exception") == 0) {
		err = 1;
	} else if (cc == ES_CALL_RETRY) {
		err = -EAGAIN;
	} else {
		if (r.status)
			es_log_refusal(c, "PUT", path, &r);
		err = -ENOLCK;
	}
	httpc_response_free(&r);
	free(path);
	free(body);
	return err;
}

int es_index_verify(struct es_client *c, enum tl_strategy s, char **have, int64_t deadline)
{
	const char *want = lockplan_strategy_name(s);
	bool kw = false;
	int err;

	*have = NULL;
	err = es_index_read_mapping(c, have, &kw, deadline);
	if (err == -ENOENT) {
		err = create_index(c, s, deadline);
		if (err < 0)
			return err;
		if (err == 0)
			tl_log(LOG_WARNING, "lock index '%s' was missing (lost by the store?): "
			       "re-created it for lock_strategy=%s", c->index, want);
		else
			tl_log(LOG_NOTICE, "lock index '%s' was not found, then found existing "
			       "(the cluster recovering its state?): nothing re-created", c->index);
		err = es_index_read_mapping(c, have, &kw, deadline);
	}
	if (err)
		return err == -EACCES ? -ENOLCK : err;
	if (!*have || !kw)
		return -EPROTO;
	if (strcmp(*have, want) != 0)
		return -EINVAL;
	/* every check: a stored script may have been replaced meanwhile */
	es_index_scripts(c, false, deadline);
	return 0;
}

const char *es_index_scripts_note(const struct es_client *c)
{
	return c->scripts_note;
}

/* R's status and error type as " (HTTP 403 security_exception)". */
static void status_note(const struct httpc_response *r, char *buf, size_t size)
{
	char type[96] = "";
	cJSON *root = es_parse(r);

	es_docs_error_type(root, type, sizeof(type));
	cJSON_Delete(root);
	snprintf(buf, size, "HTTP %ld%s%s", r->status, *type ? " " : "", type);
}

/* Why a request R that is worth retrying failed, into WHY. */
static void retry_note(const struct httpc_response *r, char *why, size_t size)
{
	char st[100];

	if (r->status) {
		status_note(r, st, sizeof(st));
		snprintf(why, size, "the store failed: %s; storing them again later", st);
	} else {
		snprintf(why, size, "the store did not answer; storing them again later");
	}
}

/* Reads one script: 1 stored with our source, 0 not usable by id (*WHY
 * says why), -ENOENT (not stored: *WHY says so for treelockctl), -EAGAIN
 * (*WHY), -ENOMEM. */
static int script_read(struct es_client *c, const struct es_script *sc, char *why, size_t size,
		       int64_t deadline)
{
	struct httpc_response r;
	enum es_call_class cc;
	char *path = NULL, st[128];
	cJSON *root, *script;
	const char *have, *lang;
	int ret;

	if (asprintf(&path, "/_scripts/%s", sc->id) < 0)
		return -ENOMEM;
	cc = es_call(c, "GET", path, NULL, NULL, 0, deadline, &r, true);
	if (cc == ES_CALL_OK) {
		root = es_parse(&r);
		script = cJSON_GetObjectItemCaseSensitive(root, "script");
		have = es_jstr(script, "source");
		lang = es_jstr(script, "lang");
		ret = have && strcmp(have, sc->source) == 0 && lang && strcmp(lang, ES_SCRIPT_LANG) == 0;
		if (!ret)
			snprintf(why, size,
				 "stored script %s is not ours: its %s differs from this release's",
				 sc->id, have && strcmp(have, sc->source) == 0 ? "language" : "source");
		cJSON_Delete(root);
	} else if (cc == ES_CALL_RETRY) {
		retry_note(&r, why, size);
		ret = -EAGAIN;
	} else if (r.status == 404) {
		snprintf(why, size, "not stored in the cluster yet; a mount stores them");
		ret = -ENOENT;
	} else {
		status_note(&r, st, sizeof(st));
		snprintf(why, size, "cannot read stored scripts: %s", st);
		ret = 0;
	}
	httpc_response_free(&r);
	free(path);
	return ret;
}

/* Stores one script: 1 stored, 0 refused (*WHY says why), -EAGAIN (*WHY),
 * -ENOMEM. */
static int script_put(struct es_client *c, const struct es_script *sc, char *why, size_t size,
		      int64_t deadline)
{
	struct httpc_response r;
	enum es_call_class cc;
	char *path = NULL, *body, st[128];
	cJSON *req;
	int ret;

	req = es_docs_stored_script(sc->source);
	body = req ? cJSON_PrintUnformatted(req) : NULL;
	cJSON_Delete(req);
	if (!body || asprintf(&path, "/_scripts/%s", sc->id) < 0) {
		free(body);
		return -ENOMEM;
	}
	cc = es_call(c, "PUT", path, HTTPC_JSON, body, strlen(body), deadline, &r, true);
	free(body);
	if (cc == ES_CALL_OK) {
		ret = 1;
	} else if (cc == ES_CALL_RETRY) {
		retry_note(&r, why, size);
		ret = -EAGAIN;
	} else {
		status_note(&r, st, sizeof(st));
		snprintf(why, size, "cannot store scripts: %s", st);
		ret = 0;
	}
	httpc_response_free(&r);
	free(path);
	return ret;
}

/* Which way the N scripts SC can travel (1 by id, 0 inline: *WHY says why,
 * -EAGAIN, -ENOMEM), storing the missing ones unless FOR_CTL.
 *
 * Every script is read and compared, source and language, each time: one
 * stored script that is not ours (replaced by hand or by another program
 * under our id) would otherwise be run by every request that names it,
 * and a replaced acquire script breaks mutual exclusion. Then a mount
 * stores the missing ones in table order; treelockctl only reports. */
static int scripts_usable(struct es_client *c, const struct es_script *sc, size_t n,
			  bool for_ctl, char *why, size_t size, int64_t deadline)
{
	size_t i, nmissing = 0, first_missing = n;
	uint64_t missing = 0; /* bit I: sc[I] is not stored */
	int ret;

	for (i = 0; i < n && i < 64; i++) {
		ret = script_read(c, &sc[i], why, size, deadline);
		if (ret == -ENOENT) {
			if (!nmissing++)
				first_missing = i;
			missing |= UINT64_C(1) << i;
			continue;
		}
		if (ret != 1)
			return ret; /* not ours or not readable (0), -EAGAIN, -ENOMEM */
	}
	if (!nmissing)
		return 1;
	if (for_ctl) {
		if (nmissing < n)
			snprintf(why, size,
				 "stored script %s is missing: the next mount stores it again",
				 sc[first_missing].id);
		return 0; /* all missing: script_read() said "not stored yet" */
	}
	for (i = first_missing; i < n && i < 64; i++) {
		if (!(missing & UINT64_C(1) << i))
			continue;
		ret = script_put(c, &sc[i], why, size, deadline);
		if (ret != 1)
			return ret;
	}
	return 1;
}

int es_index_scripts(struct es_client *c, bool for_ctl, int64_t deadline)
{
	char why[200] = "", note[sizeof(c->scripts_note)];
	size_t n;
	const struct es_script *sc = es_docs_scripts(&n);
	bool was_stored = es_client_scripts_stored(c), foreign;
	int ret;

	if (c->scripts_inline_only) {
		/* the cluster's script administrators are not trusted: what
		 * they store under our ids is never read, stored or run */
		es_client_set_scripts_stored(c, false);
		snprintf(c->scripts_note, sizeof(c->scripts_note), "inline (es_scripts=inline)");
		if (!for_ctl && !c->scripts_checked)
			tl_log(LOG_NOTICE, "lock scripts: sent inline (es_scripts=inline): every "
					   "request carries their source, none stored in the cluster "
					   "is used");
		c->scripts_checked = !for_ctl;
		return 0;
	}

	ret = scripts_usable(c, sc, n, for_ctl, why, sizeof(why), deadline);
	if (ret == -ENOMEM)
		return ret;
	if (ret == -EAGAIN && !for_ctl && c->scripts_checked)
		return 0; /* cannot tell now: as they were; the next check tries again */
	if (ret == -EAGAIN && for_ctl)
		snprintf(why, sizeof(why), "the store failed to say; try again");
	/* the store failing at start (429, 5xx, no answer) does not hold it
	 * up: inline until a later check stores them */
	es_client_set_scripts_stored(c, ret == 1);
	if (ret == 1)
		snprintf(note, sizeof(note), "stored in the cluster (treelockfs-*-%s)",
			 ES_SCRIPTS_VERSION);
	else
		snprintf(note, sizeof(note), "inline (%s)", why);
	foreign = ret == 0 && strstr(why, " is not ours") != NULL;
	if (!for_ctl && (!c->scripts_checked || strcmp(note, c->scripts_note) != 0 ||
			 was_stored != (ret == 1))) {
		if (ret == 1)
			tl_log(LOG_NOTICE, "lock scripts: %s", note);
		else if (foreign)
			tl_log(LOG_WARNING, "lock scripts: %s: sending every script inline, by "
			       "source; a mount that runs the stored one would not exclude ours",
			       why);
		else
			tl_log(LOG_NOTICE, "lock scripts: sent %s: every request carries them", note);
	}
	snprintf(c->scripts_note, sizeof(c->scripts_note), "%s", note);
	c->scripts_checked = !for_ctl;
	return 0;
}

int es_index_bootstrap(struct es_client *c, enum tl_strategy s, bool for_ctl, int64_t deadline)
{
	const char *want = lockplan_strategy_name(s);
	char *have = NULL;
	bool kw = false;
	int err;

	err = es_index_read_mapping(c, &have, &kw, deadline);
	if (err == -ENOENT && !for_ctl) {
		err = create_index(c, s, deadline);
		if (err < 0)
			return err;
		if (err > 0)
			tl_log(LOG_INFO, "lock index '%s' was created by another client", c->index);
		err = es_index_read_mapping(c, &have, &kw, deadline);
	}
	if (err == -ENOENT && for_ctl)
		return 0;
	if (err)
		return err == -EACCES ? -ENOLCK : err;
	if (!for_ctl && have && strcmp(have, want) != 0) {
		tl_log(LOG_ERR,
		       "lock index '%s' is used with lock_strategy=%s; this mount asks for %s: "
		       "refusing to mix strategies (use another es_index)",
		       c->index, have, want);
		free(have);
		return -EINVAL;
	}
	if ((!have || !kw) && !for_ctl) {
		/* auto-created by a write after the store lost it, or made by
		 * someone else: lock ids and owners would not match exactly,
		 * and any strategy could join */
		tl_log(LOG_ERR,
		       "lock index '%s' %s: refusing to use it (it was probably created "
		       "by a write after the store lost the index; delete it and a mount "
		       "re-creates it)",
		       c->index, !have ? "records no lock strategy" : "has no keyword mapping");
		free(have);
		return -EINVAL;
	}
	free(have);
	return es_index_scripts(c, for_ctl, deadline);
}

int es_index_check_cluster(struct es_client *c, char *version, size_t size, bool *opensearch,
			   int64_t deadline)
{
	struct httpc_response r;
	char errbuf[256];
	cJSON *root, *ver;
	const char *num, *dist;
	int err;

	err = httpc_request(c->http, "GET", "/", NULL, NULL, 0, es_request_timeout(c, deadline), &r,
			    errbuf, sizeof(errbuf));
	if (err) {
		/* the caller retries, then logs the last error */
		if (*errbuf)
			es_client_set_error(c, "cannot reach the lock store: %s", errbuf);
		else
			es_client_set_error(c, "cannot reach the lock store at '%s': %s",
					    httpc_node_name(c->http, 0), strerror(-err));
		if (err == -EPROTO) {
			/* TLS or URL trouble: waiting does not mend it */
			es_client_last_error(c, errbuf, sizeof(errbuf));
			tl_log(LOG_ERR, "%s", errbuf);
			return -ENOLCK;
		}
		return err == -ENOMEM ? -ENOMEM : -EAGAIN;
	}
	if (r.status != 200) {
		es_client_set_error(c, "lock store at '%s' answers HTTP %ld to GET /",
				    httpc_node_name(c->http, r.node), r.status);
		if (r.status == 429 || r.status >= 500) {
			httpc_response_free(&r);
			return -EAGAIN;
		}
		if (r.status == 401 || r.status == 403)
			es_log_refusal(c, "GET", "/", &r);
		else
			tl_log(LOG_ERR, "lock store at '%s' answers HTTP %ld to GET /",
			       httpc_node_name(c->http, r.node), r.status);
		httpc_response_free(&r);
		return -ENOLCK;
	}
	root = es_parse(&r);
	ver = cJSON_GetObjectItemCaseSensitive(root, "version");
	num = es_jstr(ver, "number");
	dist = es_jstr(ver, "distribution");
	*opensearch = dist && strcmp(dist, "opensearch") == 0;
	snprintf(version, size, "%s %s", *opensearch ? "OpenSearch" : "Elasticsearch",
		 num ? num : "?");
	cJSON_Delete(root);
	httpc_response_free(&r);
	if (!num) {
		tl_log(LOG_ERR, "'%s' does not look like Elasticsearch or OpenSearch (no version)",
		       httpc_node_name(c->http, 0));
		return -ENOLCK;
	}
	tl_log(LOG_INFO, "lock store: %s at '%s'", version, httpc_node_name(c->http, r.node));
	return 0;
}

/* GET PATH (within the client's own timeout) as parsed JSON into *ROOT. Returns 0, -ENOENT (404), -EAGAIN,
 * -EACCES (any other status; BUF says which), -ENOMEM. */
static int get_json(struct es_client *c, const char *path, cJSON **root, char *buf, size_t size)
{
	struct httpc_response r;
	enum es_call_class cc;

	*root = NULL;
	cc = es_call(c, "GET", path, NULL, NULL, 0, 0, &r, true);
	if (cc == ES_CALL_OK) {
		*root = es_parse(&r);
		httpc_response_free(&r);
		return *root ? 0 : -EAGAIN;
	}
	if (r.status == 404) {
		httpc_response_free(&r);
		return -ENOENT;
	}
	if (cc == ES_CALL_RETRY || !r.status) {
		httpc_response_free(&r);
		return -EAGAIN;
	}
	status_note(&r, buf, size);
	httpc_response_free(&r);
	return -EACCES;
}

int es_index_settings_findings(struct es_client *c, char *buf, size_t size)
{
	cJSON *health = NULL, *settings = NULL;
	const cJSON *idx;
	char *path;
	long nodes;
	int err;

	if (size)
		buf[0] = '\0';
	err = get_json(c, "/_cluster/health?filter_path=number_of_data_nodes", &health, buf, size);
	if (err)
		return err;
	nodes = (long)es_jint(health, "number_of_data_nodes", 0);
	cJSON_Delete(health);
	/* the settings judged, nothing an engine adds of its own */
	path = es_path(c, "_settings", NULL,
		       "filter_path=*.settings.index.number_of_replicas,"
		       "*.settings.index.auto_expand_replicas,*.settings.index.translog.durability,"
		       "*.settings.index.write.wait_for_active_shards");
	if (!path)
		return -ENOMEM;
	err = get_json(c, path, &settings, buf, size);
	free(path);
	if (err)
		return err;
	/* {"<index>": {"settings": {"index": {...}}}} */
	idx = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(settings ? settings->child : NULL, "settings"),
		"index");
	err = es_docs_settings_findings(idx, nodes, buf, size);
	cJSON_Delete(settings);
	return err;
}
