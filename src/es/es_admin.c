/* es_admin.c - what treelockctl asks of the es store, see es_store.h
 *
 * An observer, never an owner: nothing here starts a lease. Owners are
 * told alive or dead the way a mount tells them (es_owners.c): by watching
 * their lease documents on our own monotonic clock.
 */
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
#include "es/es_internal.h"
#include "es/es_index.h"
#include "es/es_owners.h"
#include "es/es_retry.h"
#include "es/httpc.h"
#include "es/es_store.h"
#include "base/log.h"
#include "base/path.h"
#include "base/tlclock.h"
#include "lock/lockstore.h"

bool es_store_configured(const struct tl_config *cfg)
{
	const struct es_options *eo = es_options_of(cfg);

	return eo && eo->url;
}

int es_store_open_ctl(const struct tl_config *cfg, struct lockstore **out)
{
	return es_open(cfg, out, true);
}

/* The check as one JSON document; see es_store_check(). */
static void check_json(FILE *out, struct es_store *es, const char *status, const bool *kw,
		       const char *strategy, char *findings)
{
	cJSON *o = cJSON_CreateObject(), *w;
	char *text, *line, *save = NULL;

	if (!o)
		return;
	cJSON_AddStringToObject(o, "store", es->version);
	cJSON_AddStringToObject(o, "node", httpc_node_name(es->cl.http, 0));
	cJSON_AddStringToObject(o, "index", es->cl.index);
	cJSON_AddStringToObject(o, "status", status);
	if (kw)
		cJSON_AddBoolToObject(o, "mapping_ours", *kw);
	else
		cJSON_AddNullToObject(o, "mapping_ours");
	if (strategy)
		cJSON_AddStringToObject(o, "strategy", strategy);
	else
		cJSON_AddNullToObject(o, "strategy");
	cJSON_AddStringToObject(o, "scripts", es_index_scripts_note(&es->cl));
	cJSON_AddBoolToObject(o, "cleartext_credentials", es->cleartext_creds);
	w = cJSON_AddArrayToObject(o, "warnings");
	for (line = strtok_r(findings, "\n", &save); w && line; line = strtok_r(NULL, "\n", &save))
		cJSON_AddItemToArray(w, cJSON_CreateString(line));
	text = cJSON_Print(o);
	if (text)
		fprintf(out, "%s\n", text);
	free(text);
	cJSON_Delete(o);
}

int es_store_check(struct lockstore *st, FILE *out, bool json)
{
	struct es_store *es = es_store_of(st);
	char *have = NULL, findings[1024] = "", *line, *save = NULL;
	bool kw = false;
	int err;

	if (!es)
		return -EINVAL;
	if (!json) {
		fprintf(out, "store:    %s at %s\n", es->version, httpc_node_name(es->cl.http, 0));
		fprintf(out, "index:    %s\n", es->cl.index);
		if (es->cleartext_creds)
			fprintf(out, "warning:  credentials travel unencrypted (http://, "
				     "es_allow_insecure)\n");
	}
	err = es_index_read_mapping(&es->cl, &have, &kw, 0);
	if (err && err != -ENOENT)
		return -ENOLCK;
	/* what the store relies on from the index's settings: warnings only */
	if (!err && es_index_settings_findings(&es->cl, findings, sizeof(findings)) < 0)
		findings[0] = '\0';
	if (json) {
		check_json(out, es, err == -ENOENT ? "index_missing" : kw && have ? "ok" : "not_ours",
			   err == -ENOENT ? NULL : &kw, have, findings);
	} else {
		if (err == -ENOENT) {
			fprintf(out, "status:   index missing (a mount creates it)\n");
		} else {
			fprintf(out, "mapping:  %s\n",
				kw ? "ok (path is a keyword)" : "NOT OURS (path is not a keyword)");
			fprintf(out, "strategy: %s\n", have ? have : "(none recorded)");
			fprintf(out, "scripts:  %s\n", es_index_scripts_note(&es->cl));
			for (line = strtok_r(findings, "\n", &save); line;
			     line = strtok_r(NULL, "\n", &save))
				fprintf(out, "warning:  %s\n", line);
		}
	}
	if (!err)
		err = kw && have ? 0 : -EPROTO;
	free(have);
	return err;
}

static void owner_info_fill(struct es_owner_info *o, const cJSON *hit)
{
	const cJSON *src = cJSON_GetObjectItemCaseSensitive(hit, "_source");

	o->id = strdup(es_jstr(src, "owner") ? es_jstr(src, "owner") : "?");
	o->name = strdup(es_jstr(src, "name") ? es_jstr(src, "name") : "?");
	o->seq_no = es_jint(hit, "_seq_no", -1);
	o->renewed_ms = es_jint(src, "renewed", -1);
	o->ttl_ms = es_jint(src, "ttl_ms", 0);
	o->state = ES_OWNER_UNKNOWN;
}

/* Counts in LIST (N owners) the directories delegated to each: the lock
 * documents of ROOT (a search of the whole index) held exclusive by a
 * delegation's holder id. */
static void count_delegations(const cJSON *root, struct es_owner_info *list, size_t n)
{
	const cJSON *hit;
	size_t i;

	cJSON_ArrayForEach(hit, es_hits(root))
	{
		const char *id = es_jstr(hit, "_id");
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(hit, "_source");
		const char *type = es_jstr(src, "lock_type"), *holder = es_jstr(src, "process_id");
		char *owner;

		if (!id || !es_docs_is_lock_id(id) || !type || strcmp(type, "exclusive") != 0 ||
		    !lockstore_holder_is_delegation(holder))
			continue;
		owner = es_docs_owner_of_holder(holder);
		for (i = 0; owner && i < n; i++)
			if (list[i].id && strcmp(list[i].id, owner) == 0)
				list[i].delegations++;
		free(owner);
	}
}

int es_store_owners(struct lockstore *st, unsigned int observe_ms, struct es_owner_info **out,
			size_t *n)
{
	struct es_store *es = es_store_of(st);
	struct es_owner_info *list = NULL;
	int64_t until;
	cJSON *root;
	const cJSON *hit;
	size_t cnt = 0, i, unknown;

	*out = NULL;
	*n = 0;
	if (!es)
		return -EINVAL;
	root = es_search_all(&es->cl, NULL, 0);
	if (!root)
		return -ENOLCK;
	list = calloc((size_t)cJSON_GetArraySize(es_hits(root)) + 1, sizeof(*list));
	if (!list) {
		cJSON_Delete(root);
		return -ENOMEM;
	}
	cJSON_ArrayForEach(hit, es_hits(root))
	{
		const char *id = es_jstr(hit, "_id");

		if (!id || strncmp(id, ES_OWNER_PREFIX, strlen(ES_OWNER_PREFIX)) != 0)
			continue;
		owner_info_fill(&list[cnt], hit);
		/* alive once its seq_no moves while we watch, dead after
		 * 2 x its lease_ttl unmoved: no clock of its is trusted */
		es_obs_record(es, list[cnt].id, list[cnt].seq_no, list[cnt].ttl_ms);
		cnt++;
	}
	count_delegations(root, list, cnt);
	cJSON_Delete(root);
	/* watch the others with our monotonic clock until told apart */
	until = tl_mono_ms() + observe_ms;
	for (;;) {
		char **ids = calloc(cnt + 1, sizeof(*ids));
		bool *dead = calloc(cnt + 1, sizeof(*dead));
		size_t *map = calloc(cnt + 1, sizeof(*map));

		unknown = 0;
		for (i = 0; ids && dead && map && i < cnt; i++)
			if (list[i].state == ES_OWNER_UNKNOWN) {
				map[unknown] = i;
				ids[unknown++] = list[i].id;
			}
		if (unknown && es_judge_owners(es, ids, unknown, dead, 0) == 0) {
			for (i = 0; i < unknown; i++) {
				bool moved = es_obs_seq(es, ids[i]) != list[map[i]].seq_no;

				if (dead[i])
					list[map[i]].state = ES_OWNER_DEAD;
				else if (moved)
					list[map[i]].state = ES_OWNER_ALIVE;
			}
		}
		free(ids);
		free(dead);
		free(map);
		unknown = 0;
		for (i = 0; i < cnt; i++)
			if (list[i].state == ES_OWNER_UNKNOWN)
				unknown++;
		if (!unknown || tl_mono_ms() >= until)
			break;
		es_sleep_ms(200);
	}
	*out = list;
	*n = cnt;
	return 0;
}

void es_store_free_owners(struct es_owner_info *o, size_t n)
{
	size_t i;

	if (!o)
		return;
	for (i = 0; i < n; i++) {
		free(o[i].id);
		free(o[i].name);
	}
	free(o);
}

int es_store_intents(struct lockstore *st, unsigned int observe_ms,
			 struct es_intent_info **out, size_t *n)
{
	struct es_store *es = es_store_of(st);
	struct es_owner_info *owners = NULL;
	struct es_intent_info *list = NULL;
	size_t nown = 0, cnt = 0, i;
	cJSON *root;
	const cJSON *hit;
	int err;

	*out = NULL;
	*n = 0;
	if (!es)
		return -EINVAL;
	err = es_store_owners(st, observe_ms, &owners, &nown);
	if (err)
		return err;
	root = es_search_all(&es->cl, NULL, 0);
	if (!root) {
		es_store_free_owners(owners, nown);
		return -ENOLCK;
	}
	list = calloc((size_t)cJSON_GetArraySize(es_hits(root)) + 1, sizeof(*list));
	cJSON_ArrayForEach(hit, es_hits(root))
	{
		const char *id = es_jstr(hit, "_id");
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(hit, "_source");
		struct es_intent_info *it;

		if (!list || !id || strncmp(id, ES_INTENT_PREFIX, strlen(ES_INTENT_PREFIX)) != 0)
			continue;
		it = &list[cnt++];
		it->holder = strdup(es_jstr(src, "holder") ? es_jstr(src, "holder")
							   : id + strlen(ES_INTENT_PREFIX));
		it->owner = strdup(es_jstr(src, "owner") ? es_jstr(src, "owner") : "?");
		it->from = strdup(es_jstr(src, "from") ? es_jstr(src, "from") : "?");
		it->to = es_jstr(src, "to") ? strdup(es_jstr(src, "to")) : NULL;
		it->start_ms = es_jint(src, "start", -1);
		{
			char **keys = NULL;
			size_t nk = 0, k;

			if (es_docs_intent_keys(src, es->strategy, &keys, &nk) == 0) {
				for (k = 0; k < nk; k++)
					free(keys[k]);
				free(keys);
			}
			it->nkeys = nk;
		}
		it->owner_state = ES_OWNER_DEAD; /* no lease document at all */
		for (i = 0; i < nown; i++)
			if (strcmp(owners[i].id, it->owner) == 0)
				it->owner_state = owners[i].state;
	}
	cJSON_Delete(root);
	es_store_free_owners(owners, nown);
	if (!list)
		return -ENOMEM;
	*out = list;
	*n = cnt;
	return 0;
}

void es_store_free_intents(struct es_intent_info *it, size_t n)
{
	size_t i;

	if (!it)
		return;
	for (i = 0; i < n; i++) {
		free(it[i].holder);
		free(it[i].owner);
		free(it[i].from);
		free(it[i].to);
	}
	free(it);
}

int es_store_break(struct lockstore *st, const char *key)
{
	struct es_store *es = es_store_of(st);
	char *id = NULL;
	int err;

	if (!es)
		return -EINVAL;
	/* the raw name, or its text as listings print it */
	if (strncmp(key, PATH_BYTES_PREFIX, strlen(PATH_BYTES_PREFIX)) == 0)
		err = path_text_lock_id(key, &id);
	else
		err = path_lock_id(key, &id);
	if (err)
		return err;
	err = es_delete(&es->cl, id, "refresh=true", false, 0);
	if (err == 0)
		tl_log(LOG_NOTICE, "lock '%s' broken", id);
	free(id);
	return err == -ENOMEM ? -ENOLCK : err;
}

int es_store_reap(struct lockstore *st, const char *owner, size_t *nlocks)
{
	struct es_store *es = es_store_of(st);

	*nlocks = 0;
	if (!es)
		return -EINVAL;
	return es_reap_owner(es, owner, ES_REAP_DROP_INTENTS | ES_REAP_EVERY_DOC, nlocks, 0);
}

/* Adds owner id O to V (*N entries) unless present. Returns 0 or -ENOMEM. */
static int strv_add_unique(char ***v, size_t *n, const char *o)
{
	char **nv, *d;
	size_t i;

	for (i = 0; i < *n; i++)
		if (strcmp((*v)[i], o) == 0)
			return 0;
	d = strdup(o);
	nv = d ? realloc(*v, (*n + 1) * sizeof(**v)) : NULL;
	if (!nv) {
		free(d);
		return -ENOMEM;
	}
	nv[(*n)++] = d;
	*v = nv;
	return 0;
}

/* Adds the owners of the holder ids that are the keys of member NAME. */
static int add_holder_owners(const cJSON *src, const char *name, char ***v, size_t *n)
{
	const cJSON *e;
	int err = 0;

	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(src, name))
	{
		char *o = e->string ? es_docs_owner_of_holder(e->string) : NULL;

		if (o && !err)
			err = strv_add_unique(v, n, o);
		free(o);
	}
	return err;
}

int es_store_orphans(struct lockstore *st, char ***out, size_t *n)
{
	struct es_store *es = es_store_of(st);
	char **named = NULL, **live = NULL, **res = NULL;
	size_t nnamed = 0, nlive = 0, nres = 0, i, j;
	const cJSON *hit;
	cJSON *root;
	int err = 0;

	*out = NULL;
	*n = 0;
	if (!es)
		return -EINVAL;
	root = es_search_all(&es->cl, NULL, 0);
	if (!root)
		return -ENOLCK;
	cJSON_ArrayForEach(hit, es_hits(root))
	{
		const char *id = es_jstr(hit, "_id");
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(hit, "_source");
		const char *o = es_jstr(src, "owner");

		if (!id)
			continue;
		if (strncmp(id, ES_OWNER_PREFIX, strlen(ES_OWNER_PREFIX)) == 0) {
			if (o)
				err = err ? err : strv_add_unique(&live, &nlive, o);
			continue;
		}
		if (o)
			err = err ? err : strv_add_unique(&named, &nnamed, o);
		if (es_docs_is_lock_id(id)) {
			err = err ? err : add_holder_owners(src, "holders", &named, &nnamed);
			err = err ? err : add_holder_owners(src, "waiters", &named, &nnamed);
		}
	}
	cJSON_Delete(root);
	for (i = 0; i < nnamed && !err; i++) {
		for (j = 0; j < nlive && strcmp(named[i], live[j]) != 0; j++)
			;
		if (j == nlive)
			err = strv_add_unique(&res, &nres, named[i]);
	}
	es_strv_free(named, nnamed);
	es_strv_free(live, nlive);
	if (err) {
		es_strv_free(res, nres);
		return err;
	}
	*out = res;
	*n = nres;
	return 0;
}
