/* es_docs.c - documents and bulk items of the es lock store, see es_docs.h
 *
 * The member order of every object is part of what the tests compare:
 * keep it when adding members (append at the end).
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "es/es_docs.h"
#include "es/es_scripts.h"
#include "lock/lockplan.h"
#include "base/path.h"

void es_docs_line(struct buf *b, cJSON *j)
{
	char *t;

	if (!j) {
		if (!b->err)
			b->err = -ENOMEM;
		return;
	}
	t = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (!t) {
		if (!b->err)
			b->err = -ENOMEM;
		return;
	}
	buf_adds(b, t);
	buf_add(b, "\n", 1);
	free(t);
}

/* {"<op>": {"_id": ID}}, or NULL. */
static cJSON *action(const char *op, const char *id)
{
	cJSON *a = cJSON_CreateObject(), *m = cJSON_AddObjectToObject(a, op);

	if (!m || !cJSON_AddStringToObject(m, "_id", id)) {
		cJSON_Delete(a);
		return NULL;
	}
	return a;
}

/* An update action with retry_on_conflict. */
static cJSON *update_action(const char *id)
{
	cJSON *act = action("update", id);

	cJSON_AddNumberToObject(cJSON_GetObjectItem(act, "update"), "retry_on_conflict",
				ES_RETRY_ON_CONFLICT);
	return act;
}

/* Stored in this order (es_index.c); a new script goes at the end, or
 * ES_SCRIPTS_VERSION changes. */
static const struct es_script scripts[] = {
	{SCRIPT_ACQ_S_ID, SCRIPT_ACQ_S},   {SCRIPT_ACQ_X_ID, SCRIPT_ACQ_X},
	{SCRIPT_RELEASE_ID, SCRIPT_RELEASE}, {SCRIPT_MARK_ID, SCRIPT_MARK},
	{SCRIPT_UNMARK_ID, SCRIPT_UNMARK}, {SCRIPT_EVICT_ID, SCRIPT_EVICT},
};
const struct es_script *es_docs_scripts(size_t *n)
{
	*n = sizeof(scripts) / sizeof(scripts[0]);
	return scripts;
}

cJSON *es_docs_stored_script(const char *source)
{
	cJSON *b = cJSON_CreateObject(), *s = cJSON_AddObjectToObject(b, "script");

	cJSON_AddStringToObject(s, "lang", ES_SCRIPT_LANG);
	cJSON_AddStringToObject(s, "source", source);
	return b;
}

/* {"script": {"id": ID (STORED) | "source": SOURCE, "params": PARAMS}} with, for
 * the acquire and mark scripts (UPSERT), an empty scripted upsert: the
 * script builds a missing document itself. */
static cJSON *script_body(bool stored, const char *id, const char *source, cJSON *params,
			  bool upsert)
{
	cJSON *b = cJSON_CreateObject(), *s = cJSON_AddObjectToObject(b, "script");

	if (stored)
		cJSON_AddStringToObject(s, "id", id);
	else
		cJSON_AddStringToObject(s, "source", source);
	if (params)
		cJSON_AddItemToObject(s, "params", params);
	if (upsert) {
		cJSON_AddTrueToObject(b, "scripted_upsert");
		cJSON_AddObjectToObject(b, "upsert");
	}
	return b;
}

static char *concat(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = malloc(la + lb + 1);

	if (!s)
		return NULL;
	memcpy(s, a, la);
	memcpy(s + la, b, lb + 1);
	return s;
}

/* KEY as a JSON string of its text (path_key_text(): keys that are not
 * UTF-8 are escaped, never sent as raw bytes), or NULL when out of memory. */
static cJSON *key_string(const char *key)
{
	char *t = NULL;
	cJSON *j;

	if (path_key_text(key, &t) != 0)
		return NULL;
	j = cJSON_CreateString(t);
	free(t);
	return j;
}

/* Adds member NAME with the text of KEY to O. */
static void add_key(cJSON *o, const char *name, const char *key)
{
	cJSON *j = key_string(key);

	if (!cJSON_AddItemToObject(o, name, j))
		cJSON_Delete(j);
}

/* Adds "path": the text of plan key I of R, unless the document id says
 * it already (the id is the key's text but for hashed ids, path.h). */
static void add_path(cJSON *o, const struct es_req *r, size_t i)
{
	cJSON *j = key_string(r->plan->items[i].key);

	if (j && strcmp(j->valuestring, r->ids[i]) == 0) {
		cJSON_Delete(j);
		return;
	}
	if (!cJSON_AddItemToObject(o, "path", j))
		cJSON_Delete(j);
}

static cJSON *exclusive_source(const struct es_req *r, size_t i)
{
	cJSON *s = cJSON_CreateObject(), *hs;

	cJSON_AddStringToObject(s, "lock_type", "exclusive");
	add_path(s, r, i);
	cJSON_AddStringToObject(s, "owner", r->owner);
	cJSON_AddStringToObject(s, "holder", r->holder);
	cJSON_AddStringToObject(s, "process_id", r->holder);
	hs = cJSON_AddObjectToObject(s, "holders");
	cJSON_AddNumberToObject(hs, r->holder, 1);
	cJSON_AddNumberToObject(s, "since", (double)r->now_ms);
	cJSON_AddNumberToObject(s, "pid", r->pid);
	return s;
}

/* Adds the owners known dead as "dead", when there are any. */
static void add_dead(cJSON *p, const struct es_req *r)
{
	cJSON *a;
	size_t i;

	if (!r->ndead)
		return;
	a = cJSON_AddArrayToObject(p, "dead");
	for (i = 0; a && i < r->ndead; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(r->dead[i]));
}

static cJSON *acquire_params(const struct es_req *r, size_t i)
{
	cJSON *p = cJSON_CreateObject();
	bool x = r->plan->items[i].mode == TL_EXCLUSIVE;

	cJSON_AddStringToObject(p, "h", r->holder);
	if (x)
		cJSON_AddStringToObject(p, "o", r->owner);
	cJSON_AddNumberToObject(p, "age", (double)r->start_ms);
	add_path(p, r, i);
	if (x) {
		cJSON_AddNumberToObject(p, "pid", r->pid);
		cJSON_AddNumberToObject(p, "since", (double)r->now_ms);
	}
	add_dead(p, r);
	return p;
}

void es_docs_acquire(struct buf *b, const struct es_req *r, size_t i)
{
	if (r->plan->items[i].mode == TL_EXCLUSIVE) {
		if (!r->marked) {
			es_docs_line(b, action("create", r->ids[i]));
			es_docs_line(b, exclusive_source(r, i));
			return;
		}
		es_docs_line(b, action("update", r->ids[i]));
		es_docs_line(b, script_body(r->stored, SCRIPT_ACQ_X_ID, SCRIPT_ACQ_X,
					    acquire_params(r, i), true));
		return;
	}
	es_docs_line(b, update_action(r->ids[i]));
	es_docs_line(b, script_body(r->stored, SCRIPT_ACQ_S_ID, SCRIPT_ACQ_S, acquire_params(r, i),
				    true));
}

void es_docs_mark(struct buf *b, const struct es_req *r, size_t i)
{
	cJSON *p = cJSON_CreateObject();
	const char *mode = r->plan->items[i].mode == TL_EXCLUSIVE ? "exclusive" : "shared";

	cJSON_AddStringToObject(p, "h", r->holder);
	cJSON_AddStringToObject(p, "o", r->owner);
	cJSON_AddStringToObject(p, "mode", mode);
	cJSON_AddNumberToObject(p, "age", (double)r->start_ms);
	cJSON_AddNumberToObject(p, "tmo", (double)r->tmo_ms);
	add_path(p, r, i);
	es_docs_line(b, update_action(r->ids[i]));
	es_docs_line(b, script_body(r->stored, SCRIPT_MARK_ID, SCRIPT_MARK, p, true));
}

/* A scripted update of ID with PARAMS {"h": HOLDER}. */
static void holder_script(struct buf *b, const char *id, const char *sid, const char *source,
			  const char *holder, bool stored)
{
	cJSON *p = cJSON_CreateObject();

	cJSON_AddStringToObject(p, "h", holder);
	es_docs_line(b, update_action(id));
	es_docs_line(b, script_body(stored, sid, source, p, false));
}

void es_docs_release(struct buf *b, const char *id, const char *holder, bool stored)
{
	holder_script(b, id, SCRIPT_RELEASE_ID, SCRIPT_RELEASE, holder, stored);
}

int es_docs_item_kind(const char *line, size_t n)
{
	/* by the script's id (stored) or by a statement only that script has
	 * (inline: its source as written, nothing in it JSON escapes) */
	static const char share_id[] = "\"" SCRIPT_ACQ_S_ID "\"",
			  share_src[] = "s.lock_count = (s.lock_count == null ? 0 : s.lock_count) + 1",
			  rel_id[] = "\"" SCRIPT_RELEASE_ID "\"",
			  rel_src[] = "s.lock_count = s.lock_count - 1";

	if (memmem(line, n, share_id, sizeof(share_id) - 1) ||
	    memmem(line, n, share_src, sizeof(share_src) - 1))
		return ES_ITEM_SHARE;
	if (memmem(line, n, rel_id, sizeof(rel_id) - 1) ||
	    memmem(line, n, rel_src, sizeof(rel_src) - 1))
		return ES_ITEM_RELEASE;
	return ES_ITEM_OTHER;
}

void es_docs_unmark(struct buf *b, const char *id, const char *holder, bool stored)
{
	holder_script(b, id, SCRIPT_UNMARK_ID, SCRIPT_UNMARK, holder, stored);
}

void es_docs_evict(struct buf *b, const char *id, const char *owner, bool stored)
{
	cJSON *p = cJSON_CreateObject();

	cJSON_AddStringToObject(p, "o", owner);
	es_docs_line(b, update_action(id));
	es_docs_line(b, script_body(stored, SCRIPT_EVICT_ID, SCRIPT_EVICT, p, false));
}

/* True when the keys of plan P follow from its strategy, from and to
 * (es_docs_intent_keys() derives them): tree and global plans whose from
 * and to are their own text. */
static bool keys_derivable(const struct tl_plan *p)
{
	char *t = NULL;
	bool plain;

	if (p->strategy != TL_STRATEGY_TREE && p->strategy != TL_STRATEGY_GLOBAL)
		return false;
	if (!p->from || path_key_text(p->from, &t) != 0)
		return false;
	plain = strcmp(t, p->from) == 0;
	free(t);
	if (plain && p->to) {
		if (path_key_text(p->to, &t) != 0)
			return false;
		plain = strcmp(t, p->to) == 0;
		free(t);
	}
	return plain;
}

void es_docs_intent(struct buf *b, const struct es_req *r, const char *name)
{
	char *id = es_docs_intent_id(r->holder);
	cJSON *s = cJSON_CreateObject(), *keys;
	size_t i;

	cJSON_AddStringToObject(s, "type", "intent");
	cJSON_AddStringToObject(s, "owner", r->owner);
	cJSON_AddStringToObject(s, "name", name);
	/* no "holder": the id says it ("intent:<holder>") */
	add_key(s, "from", r->plan->from ? r->plan->from : "");
	if (r->plan->to)
		add_key(s, "to", r->plan->to);
	cJSON_AddNumberToObject(s, "start", (double)r->start_ms);
	cJSON_AddNumberToObject(s, "pid", r->pid);
	if (!keys_derivable(r->plan)) {
		keys = cJSON_AddArrayToObject(s, "keys");
		for (i = 0; i < r->plan->n; i++)
			cJSON_AddItemToArray(keys, key_string(r->plan->items[i].key));
	}
	es_docs_line(b, id ? action("index", id) : NULL);
	es_docs_line(b, s);
	free(id);
}

int es_docs_intent_keys(const cJSON *src, enum tl_strategy s, char ***out, size_t *n)
{
	const cJSON *keys = cJSON_GetObjectItemCaseSensitive(src, "keys"), *k;
	const char *from = es_jstr(src, "from"), *to = es_jstr(src, "to");
	struct tl_plan *p = NULL;
	char **v;
	size_t i = 0, cnt;
	int err;

	*out = NULL;
	*n = 0;
	if (!keys) {
		if (!from || !*from)
			return 0;
		err = to ? lockplan_rename(s, from, to, 0, NULL, 0, &p) : lockplan_entry(s, from, &p);
		if (err)
			return err == -ENOMEM ? err : 0; /* not a key of ours: nothing */
		cnt = p->n;
	} else {
		cnt = (size_t)cJSON_GetArraySize(keys);
	}
	v = calloc(cnt ? cnt : 1, sizeof(*v));
	if (!v) {
		lockplan_free(p);
		return -ENOMEM;
	}
	if (p) {
		for (i = 0; i < cnt; i++) {
			v[i] = strdup(p->items[i].key);
			if (!v[i])
				break;
		}
	} else {
		cJSON_ArrayForEach(k, keys)
		{
			if (!cJSON_IsString(k))
				continue;
			v[i] = strdup(k->valuestring);
			if (!v[i])
				break;
			i++;
		}
		if (!k)
			cnt = i;
	}
	lockplan_free(p);
	if (i < cnt) {
		while (i > 0)
			free(v[--i]);
		free(v);
		return -ENOMEM;
	}
	*out = v;
	*n = cnt;
	return 0;
}

void es_docs_intent_delete(struct buf *b, const char *holder)
{
	char *id = es_docs_intent_id(holder);

	es_docs_line(b, id ? action("delete", id) : NULL);
	free(id);
}

void es_docs_delete(struct buf *b, const char *id)
{
	es_docs_line(b, action("delete", id));
}

cJSON *es_docs_owner(const char *owner, const char *name, const char *host, int pid,
		     int64_t now_ms, int64_t ttl_ms)
{
	cJSON *s = cJSON_CreateObject();

	cJSON_AddStringToObject(s, "type", "owner");
	cJSON_AddStringToObject(s, "owner", owner);
	cJSON_AddStringToObject(s, "name", name);
	cJSON_AddStringToObject(s, "host", host);
	cJSON_AddNumberToObject(s, "pid", pid);
	cJSON_AddNumberToObject(s, "renewed", (double)now_ms);
	cJSON_AddNumberToObject(s, "ttl_ms", (double)ttl_ms);
	return s;
}

cJSON *es_docs_mapping(enum tl_strategy s)
{
	static const char *const keywords[] = {"path",   "lock_type", "owner", "holder",
					       "process_id", "type", "name",  "from", "to"};
	cJSON *b = cJSON_CreateObject(), *set, *m, *props, *meta, *tl;
	size_t i;

	set = cJSON_AddObjectToObject(b, "settings");
	cJSON_AddItemToObject(set, "number_of_shards", cJSON_CreateNumber(1));
	/* one replica where a second node can hold it (a cluster survives
	 * the loss of the primary's node: the replica is promoted and no
	 * acknowledged lock is lost), none on a single node (green, not
	 * yellow for ever); writes wait for the primary only (the default
	 * wait_for_active_shards=1), so a lost replica never blocks renames */
	cJSON_AddStringToObject(set, "auto_expand_replicas", "0-1");
	m = cJSON_AddObjectToObject(b, "mappings");
	cJSON_AddFalseToObject(m, "dynamic");
	meta = cJSON_AddObjectToObject(m, "_meta");
	tl = cJSON_AddObjectToObject(meta, ES_META_NAME);
	cJSON_AddStringToObject(tl, "strategy", lockplan_strategy_name(s));
	cJSON_AddNumberToObject(tl, "format", ES_FORMAT_VERSION);
	props = cJSON_AddObjectToObject(m, "properties");
	for (i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
		cJSON_AddStringToObject(cJSON_AddObjectToObject(props, keywords[i]), "type",
					"keyword");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "lock_count"), "type", "integer");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "since"), "type", "long");
	/* per-holder maps have one key per holder: never mapped */
	cJSON_AddFalseToObject(cJSON_AddObjectToObject(props, "holders"), "enabled");
	cJSON_AddFalseToObject(cJSON_AddObjectToObject(props, "waiters"), "enabled");
	return b;
}

cJSON *es_docs_ids(const char *prefix, char *const *ids, size_t n)
{
	cJSON *req = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(req, "ids");
	size_t i;

	if (!arr) {
		cJSON_Delete(req);
		return NULL;
	}
	for (i = 0; i < n; i++) {
		char *id = concat(prefix ? prefix : "", ids[i]);

		if (!id || !cJSON_AddItemToArray(arr, cJSON_CreateString(id))) {
			free(id);
			cJSON_Delete(req);
			return NULL;
		}
		free(id);
	}
	return req;
}

cJSON *es_docs_search(cJSON *query)
{
	cJSON *req = cJSON_CreateObject();

	cJSON_AddNumberToObject(req, "size", 10000);
	cJSON_AddBoolToObject(req, "seq_no_primary_term", true);
	if (!query) {
		query = cJSON_CreateObject();
		cJSON_AddObjectToObject(query, "match_all");
	}
	cJSON_AddItemToObject(req, "query", query);
	return req;
}

char *es_docs_owner_id(const char *owner)
{
	return concat(ES_OWNER_PREFIX, owner);
}

char *es_docs_intent_id(const char *holder)
{
	return concat(ES_INTENT_PREFIX, holder);
}

bool es_docs_is_lock_id(const char *id)
{
	return strncmp(id, ES_OWNER_PREFIX, strlen(ES_OWNER_PREFIX)) != 0 &&
	       strncmp(id, ES_INTENT_PREFIX, strlen(ES_INTENT_PREFIX)) != 0;
}

char *es_docs_owner_of_holder(const char *h)
{
	const char *hash = strrchr(h, '#');

	return strndup(h, hash ? (size_t)(hash - h) : strlen(h));
}

char *es_docs_owner_display(const char *o)
{
	const char *colon = strrchr(o, ':');

	return strndup(o, colon ? (size_t)(colon - o) : strlen(o));
}

const char *es_jstr(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The string at dotted PATH below O ("translog.durability" also as one
 * flat key), or NULL. */
static const char *setting(const cJSON *o, const char *path)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, path);
	char part[64];
	const char *dot;

	while (!v && o && (dot = strchr(path, '.')) && (size_t)(dot - path) < sizeof(part)) {
		memcpy(part, path, (size_t)(dot - path));
		part[dot - path] = '\0';
		o = cJSON_GetObjectItemCaseSensitive(o, part);
		path = dot + 1;
		v = cJSON_GetObjectItemCaseSensitive(o, path);
	}
	if (cJSON_IsString(v))
		return v->valuestring;
	return NULL;
}

int es_docs_settings_findings(const cJSON *settings, long data_nodes, char *buf, size_t size)
{
	const char *rep = setting(settings, "number_of_replicas");
	const char *aer = setting(settings, "auto_expand_replicas");
	const char *dur = setting(settings, "translog.durability");
	const char *wfa = setting(settings, "write.wait_for_active_shards");
	const char *max = aer ? strchr(aer, '-') : NULL;
	bool grows = max && (strcmp(max + 1, "all") == 0 || atol(max + 1) > 0);
	size_t len = 0;
	int n = 0;

#define FINDING(...)                                                                         \
	do {                                                                                 \
		if (len < size) {                                                            \
			int w = snprintf(buf + len, size - len, __VA_ARGS__);                \
			len += w > 0 ? (size_t)w : 0;                                        \
		}                                                                            \
		n++;                                                                         \
	} while (0)
	if (size)
		buf[0] = '\0';
	if (data_nodes >= 2 && rep && atol(rep) == 0 && !grows)
		FINDING("no replica on a cluster of %ld data nodes: losing the primary's node loses "
			"the locks it acknowledged (set index.auto_expand_replicas to 0-1, or "
			"index.number_of_replicas to 1)\n",
			data_nodes);
	if (dur && strcmp(dur, "async") == 0)
		FINDING("index.translog.durability is async: a node that crashes loses the locks "
			"it acknowledged since its last sync (set it to request)\n");
	if (wfa && strcmp(wfa, "1") != 0)
		FINDING("index.write.wait_for_active_shards is %s: renames fail while a copy of "
			"the index is missing (set it to 1)\n",
			wfa);
#undef FINDING
	return n;
}

int64_t es_jint(const cJSON *o, const char *name, int64_t dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

bool es_docs_is_script_refusal(const cJSON *err)
{
	int depth;

	for (depth = 0; err && depth < 8; depth++) {
		const char *type = es_jstr(err, "type");

		if (type && strcmp(type, "script_exception") == 0)
			return true;
		err = cJSON_GetObjectItemCaseSensitive(err, "caused_by");
	}
	return false;
}

/* Line L (without its newline) with a stored script's id replaced by its
 * source, appended to OUT; other lines as they are. */
/* How an item names a stored script. */
#define BY_ID "\"script\":{\"id\":"

static void inline_line(struct buf *out, const char *l, size_t len)
{
	cJSON *j = NULL, *sc, *id, *v;
	size_t i;
	char *k;

	if (memmem(l, len, BY_ID, strlen(BY_ID)))
		j = cJSON_ParseWithLength(l, len);
	sc = cJSON_GetObjectItemCaseSensitive(j, "script");
	id = cJSON_GetObjectItemCaseSensitive(sc, "id");
	for (i = 0; cJSON_IsString(id) && i < sizeof(scripts) / sizeof(scripts[0]); i++) {
		if (strcmp(id->valuestring, scripts[i].id) != 0)
			continue;
		/* "source" in the place of "id", before the params */
		v = cJSON_CreateString(scripts[i].source);
		k = strdup("source");
		if (!v || !k || !cJSON_ReplaceItemInObjectCaseSensitive(sc, "id", v)) {
			cJSON_Delete(v);
			free(k);
			cJSON_Delete(j);
			es_docs_line(out, NULL);
			return;
		}
		free(v->string);
		v->string = k;
		es_docs_line(out, j);
		return;
	}
	cJSON_Delete(j);
	buf_add(out, l, len);
	buf_add(out, "\n", 1);
}

int es_docs_inline(struct buf *b)
{
	struct buf out = BUF_INIT;
	const char *l = b->data, *end = b->data + b->len, *nl;

	if (b->err)
		return b->err;
	if (!b->len || !memmem(b->data, b->len, BY_ID, strlen(BY_ID)))
		return 0;
	while (l < end) {
		nl = memchr(l, '\n', (size_t)(end - l));
		if (!nl)
			nl = end;
		inline_line(&out, l, (size_t)(nl - l));
		l = nl + 1;
	}
	if (out.err) {
		buf_free(&out);
		return -ENOMEM;
	}
	buf_free(b);
	*b = out;
	return 0;
}

bool es_docs_is_missing_script(const cJSON *err)
{
	int depth;

	for (depth = 0; err && depth < 8; depth++) {
		const char *type = es_jstr(err, "type"), *reason = es_jstr(err, "reason");

		if (type && strcmp(type, "resource_not_found_exception") == 0 && reason &&
		    strncmp(reason, "unable to find script [", 23) == 0)
			return true;
		err = cJSON_GetObjectItemCaseSensitive(err, "caused_by");
	}
	return false;
}

void es_docs_error_type(const cJSON *root, char *buf, size_t size)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
	const char *t = cJSON_IsString(e) ? e->valuestring : es_jstr(e, "type");

	snprintf(buf, size, "%s", t ? t : "");
}
