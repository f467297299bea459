/* es_fsdoc.c - the documents of the fs index, see es_fsdoc.h
 *
 * Bulk lines are written as text here, not through cJSON: the index
 * thread writes one per entry of a moved subtree, and versions and the
 * longs of a stat go out as the integers they are (cJSON holds numbers as
 * doubles: nanoseconds since the epoch need 61 bits, a double keeps 53).
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/path.h"
#include "es/es_docs.h"
#include "es/es_fsdoc.h"

/* How long a delete's tombstone keeps an older write out (index.gc_deletes). */
#define FSDOC_GC_DELETES "10m"

cJSON *es_fsdoc_index_body(void)
{
	static const char *const keywords[] = {"path", "name", "parent", "type", "by"};
	static const char *const longs[] = {"size", "mtime", "mtime_ns", "ctime", "mode", "uid",
					    "gid",  "nlink", "ino",      "at"};
	cJSON *b = cJSON_CreateObject(), *set, *m, *props, *meta, *tl;
	size_t i;

	set = cJSON_AddObjectToObject(b, "settings");
	cJSON_AddItemToObject(set, "number_of_shards", cJSON_CreateNumber(1));
	cJSON_AddStringToObject(set, "auto_expand_replicas", "0-1");
	/* a delete's tombstone outlives any write in flight (es_fsdoc.h) */
	cJSON_AddStringToObject(set, "gc_deletes", FSDOC_GC_DELETES);
	m = cJSON_AddObjectToObject(b, "mappings");
	cJSON_AddStringToObject(m, "dynamic", "strict");
	meta = cJSON_AddObjectToObject(m, "_meta");
	tl = cJSON_AddObjectToObject(meta, ES_META_NAME);
	cJSON_AddStringToObject(tl, "kind", ES_FSDOC_KIND);
	cJSON_AddNumberToObject(tl, "format", ES_FSDOC_FORMAT);
	props = cJSON_AddObjectToObject(m, "properties");
	for (i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
		cJSON_AddStringToObject(cJSON_AddObjectToObject(props, keywords[i]), "type",
					"keyword");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "depth"), "type", "integer");
	for (i = 0; i < sizeof(longs) / sizeof(longs[0]); i++)
		cJSON_AddStringToObject(cJSON_AddObjectToObject(props, longs[i]), "type", "long");
	if (!props) {
		cJSON_Delete(b);
		return NULL;
	}
	return b;
}

bool es_fsdoc_is_ours(const cJSON *mappings)
{
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(mappings, "_meta");
	const cJSON *tl = cJSON_GetObjectItemCaseSensitive(meta, ES_META_NAME);
	const char *kind = es_jstr(tl, "kind");

	return kind && strcmp(kind, ES_FSDOC_KIND) == 0 &&
	       es_jint(tl, "format", -1) == ES_FSDOC_FORMAT;
}

char es_fsdoc_type(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return 'f';
	case S_IFDIR:
		return 'd';
	case S_IFLNK:
		return 'l';
	case S_IFIFO:
		return 'p';
	case S_IFSOCK:
		return 's';
	case S_IFCHR:
		return 'c';
	case S_IFBLK:
		return 'b';
	}
	return '?';
}

/* Appends S as a JSON string (quoted; quotes, backslashes and control
 * characters escaped: S is UTF-8, path_key_text()). */
static void add_json_string(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const char *run = s;
	char esc[7];

	buf_add(b, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		buf_add(b, run, (size_t)(s - run));
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			buf_add(b, esc, 2);
		} else {
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 0xf];
			buf_add(b, esc, 6);
		}
		run = s + 1;
	}
	buf_add(b, run, (size_t)(s - run));
	buf_add(b, "\"", 1);
}

/* Appends ,"NAME":V (or without the comma, FIRST). */
static void add_long(struct buf *b, const char *name, int64_t v)
{
	char t[64];
	int n = snprintf(t, sizeof(t), ",\"%s\":%" PRId64, name, v);

	buf_add(b, t, (size_t)n);
}

/* Appends ,"NAME": and the text of KEY (path_key_text()) as a string;
 * false when out of memory (B failed). */
static bool add_text(struct buf *b, const char *name, const char *key)
{
	char *t = NULL;

	if (path_key_text(key, &t) != 0) {
		if (!b->err)
			b->err = -ENOMEM;
		return false;
	}
	buf_add(b, ",\"", 2);
	buf_adds(b, name);
	buf_add(b, "\":", 2);
	add_json_string(b, t);
	free(t);
	return true;
}

/* The depth of KEY: "/" 0, "/a" 1, "/a/b" 2. */
static int depth_of(const char *key)
{
	int d = 0;

	for (; *key; key++)
		if (*key == '/' && key[1])
			d++;
	return d;
}

/* Appends the action line {"OP":{"_index":INDEX,"_id":<KEY's lock id>,
 * "version":VERSION,"version_type":"external"}}; false when it failed. */
static bool action_line(struct buf *b, const char *op, const char *index, const char *key,
			int64_t version)
{
	char *id = NULL;
	char t[64];
	int n;

	if (path_lock_id(key, &id) != 0) {
		if (!b->err)
			b->err = -ENOMEM;
		return false;
	}
	buf_add(b, "{\"", 2);
	buf_adds(b, op);
	buf_add(b, "\":{\"_index\":", 12);
	add_json_string(b, index);
	buf_add(b, ",\"_id\":", 7);
	add_json_string(b, id);
	n = snprintf(t, sizeof(t), ",\"version\":%" PRId64 ",\"version_type\":\"external\"}}\n",
		     version);
	buf_add(b, t, (size_t)n);
	free(id);
	return b->err == 0;
}

/* Appends the document of KEY with the attributes ST as one line. */
static void source_line(struct buf *b, const char *key, const struct stat *st, int64_t version,
			const char *by)
{
	const char *slash = strrchr(key, '/');
	char *parent = NULL;
	char t[32];
	int n;

	buf_add(b, "{\"path\":", 8);
	{
		char *text = NULL;

		if (path_key_text(key, &text) != 0) {
			if (!b->err)
				b->err = -ENOMEM;
			return;
		}
		add_json_string(b, text);
		free(text);
	}
	if (strcmp(key, "/") == 0 || !slash) {
		buf_adds(b, ",\"name\":\"/\"");
	} else {
		if (!add_text(b, "name", slash + 1))
			return;
		parent = slash == key ? strdup("/") : strndup(key, (size_t)(slash - key));
		if (!parent || !add_text(b, "parent", parent)) {
			free(parent);
			if (!b->err)
				b->err = -ENOMEM;
			return;
		}
		free(parent);
	}
	n = snprintf(t, sizeof(t), ",\"depth\":%d,\"type\":\"%c\"", depth_of(key),
		     es_fsdoc_type(st->st_mode));
	buf_add(b, t, (size_t)n);
	add_long(b, "size", (int64_t)st->st_size);
	add_long(b, "mtime", (int64_t)st->st_mtim.tv_sec);
	add_long(b, "mtime_ns", (int64_t)st->st_mtim.tv_nsec);
	add_long(b, "ctime", (int64_t)st->st_ctim.tv_sec);
	add_long(b, "mode", (int64_t)(st->st_mode & 07777));
	add_long(b, "uid", (int64_t)st->st_uid);
	add_long(b, "gid", (int64_t)st->st_gid);
	add_long(b, "nlink", (int64_t)st->st_nlink);
	add_long(b, "ino", (int64_t)st->st_ino);
	add_long(b, "at", version / 1000000);
	buf_adds(b, ",\"by\":");
	add_json_string(b, by ? by : "");
	buf_add(b, "}\n", 2);
}

void es_fsdoc_put(struct buf *b, const char *index, const char *key, const struct stat *st,
		  int64_t version, const char *by)
{
	if (!action_line(b, "index", index, key, version))
		return;
	source_line(b, key, st, version, by);
}

void es_fsdoc_del(struct buf *b, const char *index, const char *key, int64_t version)
{
	action_line(b, "delete", index, key, version);
}

/* {"prefix": {"path": P}}, or NULL. */
static cJSON *prefix(const char *p)
{
	cJSON *q = cJSON_CreateObject(), *pre = cJSON_AddObjectToObject(q, "prefix");

	if (!cJSON_AddStringToObject(pre, "path", p)) {
		cJSON_Delete(q);
		return NULL;
	}
	return q;
}

/* A new string: A then B, or NULL. */
static char *join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = malloc(la + lb + 1);

	if (s) {
		memcpy(s, a, la);
		memcpy(s + la, b, lb + 1);
	}
	return s;
}

/* KEY (valid UTF-8) as a descendant's bytes: text starts: the prefix, then
 * KEY with every backslash doubled. A new string, or NULL. */
static char *bytes_form(const char *key)
{
	size_t n = strlen(key), i, o = strlen(PATH_BYTES_PREFIX);
	char *t = malloc(o + 2 * n + 1);

	if (!t)
		return NULL;
	memcpy(t, PATH_BYTES_PREFIX, o);
	for (i = 0; i < n; i++) {
		if (key[i] == '\\')
			t[o++] = '\\';
		t[o++] = key[i];
	}
	t[o] = '\0';
	return t;
}

cJSON *es_fsdoc_under_query(const char *key)
{
	cJSON *q = cJSON_CreateObject(), *bq, *should;
	char *text = NULL, *bytes = NULL, *p1 = NULL, *p2 = NULL;
	bool root = strcmp(key, "/") == 0, ok = false;

	bq = cJSON_AddObjectToObject(q, "bool");
	should = cJSON_AddArrayToObject(bq, "should");
	if (!should || path_key_text(key, &text) != 0)
		goto out;
	/* "/a" -> "/a/"; the root "/" -> "/" (and the root itself excluded) */
	p1 = root ? strdup(text) : join(text, "/");
	if (!p1 || !cJSON_AddItemToArray(should, prefix(p1)))
		goto out;
	if (strncmp(text, PATH_BYTES_PREFIX, strlen(PATH_BYTES_PREFIX)) != 0) {
		/* a descendant whose own name is not UTF-8 is written bytes: */
		bytes = bytes_form(key);
		p2 = bytes ? (root ? strdup(bytes) : join(bytes, "/")) : NULL;
		if (!p2 || !cJSON_AddItemToArray(should, prefix(p2)))
			goto out;
	}
	cJSON_AddNumberToObject(bq, "minimum_should_match", 1);
	if (root) {
		cJSON *not = cJSON_AddArrayToObject(bq, "must_not");
		cJSON *t = cJSON_CreateObject();

		cJSON_AddStringToObject(cJSON_AddObjectToObject(t, "term"), "path", "/");
		if (!cJSON_AddItemToArray(not, t)) {
			cJSON_Delete(t);
			goto out;
		}
	}
	ok = true;
out:
	free(text);
	free(bytes);
	free(p1);
	free(p2);
	if (!ok) {
		cJSON_Delete(q);
		return NULL;
	}
	return q;
}

int es_fsdoc_read(const cJSON *src, int64_t v, struct es_fsentry *out)
{
	const char *path = es_jstr(src, "path"), *type = es_jstr(src, "type");
	int err;

	memset(out, 0, sizeof(*out));
	out->version = v;
	if (!path || !type || strlen(type) != 1)
		return -EINVAL;
	err = path_key_from_text(path, &out->key);
	if (err)
		return err;
	out->type = type[0];
	out->size = es_jint(src, "size", 0);
	out->mtime = es_jint(src, "mtime", 0);
	out->mtime_ns = es_jint(src, "mtime_ns", 0);
	out->ctime = es_jint(src, "ctime", 0);
	out->ino = es_jint(src, "ino", 0);
	out->at = es_jint(src, "at", 0);
	out->mode = (uint32_t)es_jint(src, "mode", 0);
	out->uid = (uint32_t)es_jint(src, "uid", 0);
	out->gid = (uint32_t)es_jint(src, "gid", 0);
	out->nlink = (uint32_t)es_jint(src, "nlink", 0);
	return 0;
}

void es_fsentry_free(struct es_fsentry *e)
{
	if (!e)
		return;
	free(e->key);
	e->key = NULL;
}
