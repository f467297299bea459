/* test_es_docs.c - the es store's documents and bulk items, without a server */
#include <config.h>

#include <check.h>
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "es/es_docs.h"
#include "es/es_scripts.h"
#include "lock/lockplan.h"
#include "unit.h"

/* A plan of two items: shared /a, exclusive /a/b (from /a/b to nothing). */
static struct tl_plan *two_item_plan(void)
{
	struct tl_plan *p = NULL;

	ck_assert_int_eq(lockplan_entry(TL_STRATEGY_TREE, "/a/b", &p), 0);
	ck_assert_uint_eq(p->n, 2);
	return p;
}

static void req_init(struct es_req *r, const struct tl_plan *p, char **ids, char **dead,
		     size_t ndead, bool marked)
{
	memset(r, 0, sizeof(*r));
	r->plan = p;
	r->ids = ids;
	r->holder = "h1:7:ab#3";
	r->owner = "h1:7:ab";
	r->start_ms = 1000;
	r->pid = 42;
	r->now_ms = 2000;
	r->tmo_ms = 40000;
	r->marked = marked;
	r->dead = dead;
	r->ndead = ndead;
}

/* Line N (0-based) of ndjson B, parsed. */
static cJSON *line(const struct buf *b, int n)
{
	const char *s = b->data, *e;

	ck_assert_ptr_nonnull(s);
	while (n-- > 0) {
		s = strchr(s, '\n');
		ck_assert_ptr_nonnull(s);
		s++;
	}
	e = strchr(s, '\n');
	ck_assert_ptr_nonnull(e);
	return cJSON_ParseWithLength(s, (size_t)(e - s));
}

/* Line N of B is an ACTION item for the document ID, retried RETRY times
 * on a version conflict (0: not retried). */
static void assert_item(const struct buf *b, int n, const char *action, const char *id, int retry)
{
	cJSON *j = line(b, n);
	const cJSON *a = cJSON_GetObjectItem(j, action);

	ck_assert_ptr_nonnull(a);
	ck_assert_str_eq(es_jstr(a, "_id"), id);
	ck_assert_int_eq(es_jint(a, "retry_on_conflict", 0), retry);
	cJSON_Delete(j);
}

/* The "script" object of line N of B. */
static cJSON *script_of(const struct buf *b, int n, cJSON **root)
{
	*root = line(b, n);
	ck_assert_ptr_nonnull(*root);
	return cJSON_GetObjectItem(*root, "script");
}

/* A scripted upsert: the script builds the document, the item has none. */
static void assert_scripted_upsert(const cJSON *body)
{
	const cJSON *up = cJSON_GetObjectItem(body, "upsert");

	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(body, "scripted_upsert")));
	ck_assert(cJSON_IsObject(up));
	ck_assert_ptr_null(up->child);
}

START_TEST(test_es_docs__acquire_first_attempt)
{
	struct tl_plan *p = two_item_plan();
	char *ids[] = {"/a", "/a/b"};
	char *dead[] = {"gone:1:ff"};
	struct buf b = BUF_INIT;
	struct es_req r;
	cJSON *j, *s;

	req_init(&r, p, ids, dead, 1, false);
	es_docs_acquire(&b, &r, 0);
	es_docs_acquire(&b, &r, 1);
	ck_assert_int_eq(b.err, 0);
	/* shared: scripted update, scripted upsert; only what the script reads */
	assert_item(&b, 0, "update", "/a", 5);
	s = script_of(&b, 1, &j);
	ck_assert_ptr_nonnull(strstr(es_jstr(s, "source"), "s.holders.put(params.h, 1)"));
	ck_assert_ptr_null(cJSON_GetObjectItem(s, "id"));
	ck_assert_ptr_null(cJSON_GetObjectItem(s, "lang")); /* painless is the default */
	{
		char *t = cJSON_PrintUnformatted(cJSON_GetObjectItem(s, "params"));

		/* no "path": the id is the key */
		ck_assert_str_eq(t, "{\"h\":\"h1:7:ab#3\",\"age\":1000,\"dead\":[\"gone:1:ff\"]}");
		free(t);
	}
	assert_scripted_upsert(j);
	cJSON_Delete(j);
	/* exclusive, first attempt: the guide's create */
	assert_item(&b, 2, "create", "/a/b", 0);
	ck_assert_ptr_nonnull(strstr(b.data, "{\"lock_type\":\"exclusive\","
					     "\"owner\":\"h1:7:ab\",\"holder\":\"h1:7:ab#3\","
					     "\"process_id\":\"h1:7:ab#3\",\"holders\":{\"h1:7:ab#3\":1},"
					     "\"since\":2000,\"pid\":42}\n"));
	buf_free(&b);
	lockplan_free(p);
}
END_TEST

START_TEST(test_es_docs__acquire_by_stored_id)
{
	struct tl_plan *p = two_item_plan();
	char *ids[] = {"/a", "/a/b"};
	struct buf b = BUF_INIT;
	struct es_req r;
	cJSON *j, *s;

	req_init(&r, p, ids, NULL, 0, false);
	r.stored = true;
	es_docs_acquire(&b, &r, 0);
	es_docs_release(&b, "/a", "h1:7:ab#3", true);
	ck_assert_int_eq(b.err, 0);
	/* the whole item, byte for byte: no source, no dead owners */
	ck_assert_str_eq(b.data,
			 "{\"update\":{\"_id\":\"/a\",\"retry_on_conflict\":5}}\n"
			 "{\"script\":{\"id\":\"treelockfs-acqs-" ES_SCRIPTS_VERSION "\","
			 "\"params\":{\"h\":\"h1:7:ab#3\",\"age\":1000}},"
			 "\"scripted_upsert\":true,\"upsert\":{}}\n"
			 "{\"update\":{\"_id\":\"/a\",\"retry_on_conflict\":5}}\n"
			 "{\"script\":{\"id\":\"treelockfs-rel-" ES_SCRIPTS_VERSION "\","
			 "\"params\":{\"h\":\"h1:7:ab#3\"}}}\n");
	s = script_of(&b, 1, &j);
	ck_assert_ptr_null(cJSON_GetObjectItem(s, "source"));
	cJSON_Delete(j);
	buf_free(&b);
	lockplan_free(p);
}
END_TEST

START_TEST(test_es_docs__scripts_table)
{
	size_t i, k, ns;
	const struct es_script *es_scripts = es_docs_scripts(&ns);

	ck_assert_uint_eq(ns, 6);
	for (i = 0; i < ns; i++) {
		cJSON *j = es_docs_stored_script(es_scripts[i].source);
		char *t = cJSON_PrintUnformatted(j);
		size_t n = strlen(es_scripts[i].id), v = strlen(ES_SCRIPTS_VERSION);

		/* versioned ids, unique */
		ck_assert(strncmp(es_scripts[i].id, "treelockfs-", 11) == 0);
		ck_assert(n > v + 1 && strcmp(es_scripts[i].id + n - v, ES_SCRIPTS_VERSION) == 0);
		for (k = 0; k < i; k++)
			ck_assert_str_ne(es_scripts[i].id, es_scripts[k].id);
		ck_assert(strncmp(t, "{\"script\":{\"lang\":\"painless\",\"source\":\"def s = ", 45) ==
			  0);
		free(t);
		cJSON_Delete(j);
	}
}
END_TEST

START_TEST(test_es_docs__missing_script_error)
{
	cJSON *e = cJSON_Parse("{\"type\":\"illegal_argument_exception\",\"reason\":\"failed to "
			       "execute script\",\"caused_by\":{\"type\":\"resource_not_found_exception\","
			       "\"reason\":\"unable to find script [treelockfs-rel-v1] in cluster "
			       "state\"}}");
	cJSON *other = cJSON_Parse("{\"type\":\"resource_not_found_exception\",\"reason\":\"no such "
				   "index [x]\"}");

	ck_assert(es_docs_is_missing_script(e));
	ck_assert(!es_docs_is_missing_script(other));
	ck_assert(!es_docs_is_script_refusal(e));
	ck_assert(!es_docs_is_missing_script(NULL));
	cJSON_Delete(e);
	cJSON_Delete(other);
}
END_TEST

/* A body built by id, rewritten inline: the same bytes as built inline. */
START_TEST(test_es_docs__inline_rewrites_ids)
{
	struct tl_plan *p = two_item_plan();
	char *ids[] = {"/a", "/a/b"};
	struct buf by_id = BUF_INIT, inl = BUF_INIT;
	struct es_req r;
	int pass;

	for (pass = 0; pass < 2; pass++) {
		struct buf *b = pass ? &inl : &by_id;

		req_init(&r, p, ids, NULL, 0, false);
		r.stored = pass == 0;
		es_docs_intent(b, &r, "h1");
		es_docs_acquire(b, &r, 0);
		es_docs_acquire(b, &r, 1);
		es_docs_release(b, "/a", "h1:7:ab#3", r.stored);
		es_docs_evict(b, "/a", "dead:1:00", r.stored);
		es_docs_delete(b, "/x");
	}
	ck_assert_ptr_nonnull(strstr(by_id.data, "\"id\":\"treelockfs-rel-"));
	ck_assert_int_eq(es_docs_inline(&by_id), 0);
	ck_assert_str_eq(by_id.data, inl.data);
	/* nothing by id: unchanged */
	ck_assert_int_eq(es_docs_inline(&inl), 0);
	ck_assert_str_eq(by_id.data, inl.data);
	buf_free(&by_id);
	buf_free(&inl);
	lockplan_free(p);
}
END_TEST

START_TEST(test_es_docs__acquire_after_refusal_is_scripted)
{
	struct tl_plan *p = two_item_plan();
	char *ids[] = {"/a", "/a/b"};
	struct buf b = BUF_INIT;
	struct es_req r;
	cJSON *j, *s;
	char *t;

	req_init(&r, p, ids, NULL, 0, true);
	es_docs_acquire(&b, &r, 1);
	assert_item(&b, 0, "update", "/a/b", 0);
	s = script_of(&b, 1, &j);
	ck_assert_ptr_nonnull(strstr(es_jstr(s, "source"), "throw new IllegalStateException('shared')"));
	/* no dead owners: no "dead" */
	t = cJSON_PrintUnformatted(cJSON_GetObjectItem(s, "params"));
	ck_assert_str_eq(t, "{\"h\":\"h1:7:ab#3\",\"o\":\"h1:7:ab\",\"age\":1000,\"pid\":42,"
			    "\"since\":2000}");
	free(t);
	assert_scripted_upsert(j);
	cJSON_Delete(j);
	buf_free(&b);
	lockplan_free(p);
}
END_TEST

START_TEST(test_es_docs__mark_release_evict)
{
	struct tl_plan *p = two_item_plan();
	char *ids[] = {"/a", "/a/b"};
	struct buf b = BUF_INIT;
	struct es_req r;
	cJSON *j, *s;
	char *t;

	req_init(&r, p, ids, NULL, 0, true);
	es_docs_mark(&b, &r, 1);
	es_docs_release(&b, "/a", "h1:7:ab#3", false);
	es_docs_evict(&b, "/a", "dead:1:00", false);
	es_docs_unmark(&b, "/a/b", "h1:7:ab#3", false);
	s = script_of(&b, 1, &j);
	t = cJSON_PrintUnformatted(cJSON_GetObjectItem(s, "params"));
	ck_assert_str_eq(t, "{\"h\":\"h1:7:ab#3\",\"o\":\"h1:7:ab\",\"mode\":\"exclusive\","
			    "\"age\":1000,\"tmo\":40000}");
	free(t);
	assert_scripted_upsert(j);
	cJSON_Delete(j);
	ck_assert_ptr_nonnull(strstr(b.data, "\"params\":{\"h\":\"h1:7:ab#3\"}"));
	ck_assert_ptr_nonnull(strstr(b.data, "\"params\":{\"o\":\"dead:1:00\"}}}\n"));
	/* four items, two lines each */
	j = line(&b, 7);
	ck_assert_ptr_nonnull(cJSON_GetObjectItem(j, "script"));
	cJSON_Delete(j);
	buf_free(&b);
	lockplan_free(p);
}
END_TEST

START_TEST(test_es_docs__intent_and_delete)
{
	struct tl_plan *p = NULL;
	char *ids[3];
	struct buf b = BUF_INIT;
	struct es_req r;
	cJSON *j;

	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_TREE, "/a/x", "/b/y", 0, NULL, 0, &p), 0);
	req_init(&r, p, ids, NULL, 0, false);
	es_docs_intent(&b, &r, "h1");
	es_docs_intent_delete(&b, "h1:7:ab#3");
	assert_item(&b, 0, "index", "intent:h1:7:ab#3", 0);
	j = line(&b, 1);
	ck_assert_str_eq(es_jstr(j, "from"), "/a/x");
	ck_assert_str_eq(es_jstr(j, "to"), "/b/y");
	ck_assert_str_eq(es_jstr(j, "name"), "h1");
	ck_assert_ptr_null(cJSON_GetObjectItem(j, "holder")); /* the id says it */
	/* a tree plan's keys follow from from and to: not sent, derived */
	ck_assert_ptr_null(cJSON_GetObjectItem(j, "keys"));
	{
		char **keys = NULL;
		size_t nk = 0, i;

		ck_assert_int_eq(es_docs_intent_keys(j, TL_STRATEGY_TREE, &keys, &nk), 0);
		ck_assert_uint_eq(nk, p->n);
		ck_assert_uint_eq(nk, 4);
		for (i = 0; i < nk; i++) {
			ck_assert_str_eq(keys[i], p->items[i].key);
			free(keys[i]);
		}
		free(keys);
	}
	cJSON_Delete(j);
	assert_item(&b, 2, "delete", "intent:h1:7:ab#3", 0);
	buf_free(&b);
	lockplan_free(p);
}
END_TEST

/* Where the id is not the key (hashed), the key travels as "path"; keys
 * of a document-strategy plan (entries below) travel in the intent. */
START_TEST(test_es_docs__path_and_keys_where_not_derivable)
{
	struct tl_plan *p = two_item_plan(), *d = NULL;
	const char *below[] = {"/a/x/1"};
	char *ids[] = {"sha256:00", "sha256:01"};
	struct buf b = BUF_INIT;
	struct es_req r;
	cJSON *j, *s;
	char **keys = NULL;
	size_t nk = 0, i;

	req_init(&r, p, ids, NULL, 0, false);
	r.stored = true;
	es_docs_acquire(&b, &r, 0);
	es_docs_acquire(&b, &r, 1);
	s = script_of(&b, 1, &j);
	ck_assert_str_eq(es_jstr(cJSON_GetObjectItem(s, "params"), "path"), "/a");
	cJSON_Delete(j);
	j = line(&b, 3);
	ck_assert_str_eq(es_jstr(j, "path"), "/a/b");
	cJSON_Delete(j);
	buf_free(&b);

	ck_assert_int_eq(lockplan_rename(TL_STRATEGY_DOCUMENT, "/a/x", "/b", 0, below, 1, &d), 0);
	req_init(&r, d, ids, NULL, 0, false);
	es_docs_intent(&b, &r, "h1");
	j = line(&b, 1);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "keys")), (int)d->n);
	ck_assert_int_eq(es_docs_intent_keys(j, TL_STRATEGY_DOCUMENT, &keys, &nk), 0);
	ck_assert_uint_eq(nk, d->n);
	for (i = 0; i < nk; i++) {
		ck_assert_str_eq(keys[i], d->items[i].key);
		free(keys[i]);
	}
	free(keys);
	cJSON_Delete(j);
	buf_free(&b);
	lockplan_free(d);
	lockplan_free(p);
}
END_TEST

START_TEST(test_es_docs__owner_mapping_ids_search)
{
	char *ids[] = {"o1", "o2"};
	cJSON *j = es_docs_owner("h:1:ab", "h", "host", 1, 5, 10000);
	char *t = cJSON_PrintUnformatted(j);

	ck_assert_str_eq(t, "{\"type\":\"owner\",\"owner\":\"h:1:ab\",\"name\":\"h\",\"host\":\"host\","
			    "\"pid\":1,\"renewed\":5,\"ttl_ms\":10000}");
	free(t);
	cJSON_Delete(j);
	j = es_docs_mapping(TL_STRATEGY_GLOBAL);
	ck_assert_str_eq(es_jstr(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(
							     j, "mappings"), "_meta"), "treelockfs"),
				 "strategy"),
			 "global");
	ck_assert_str_eq(es_jstr(cJSON_GetObjectItem(j, "settings"), "auto_expand_replicas"),
			 "0-1");
	cJSON_Delete(j);
	j = es_docs_ids(ES_OWNER_PREFIX, ids, 2);
	t = cJSON_PrintUnformatted(j);
	ck_assert_str_eq(t, "{\"ids\":[\"owner:o1\",\"owner:o2\"]}");
	free(t);
	cJSON_Delete(j);
	j = es_docs_search(NULL);
	t = cJSON_PrintUnformatted(j);
	ck_assert_str_eq(t, "{\"size\":10000,\"seq_no_primary_term\":true,\"query\":{\"match_all\":{}}}");
	free(t);
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_es_docs__ids_and_holders)
{
	char *s;

	ck_assert(es_docs_is_lock_id("/a"));
	ck_assert(es_docs_is_lock_id("global"));
	ck_assert(!es_docs_is_lock_id("owner:x"));
	ck_assert(!es_docs_is_lock_id("intent:x#1"));
	s = es_docs_owner_of_holder("h:1:ab#12");
	ck_assert_str_eq(s, "h:1:ab");
	free(s);
	s = es_docs_owner_display("h:1:ab");
	ck_assert_str_eq(s, "h:1");
	free(s);
}
END_TEST

START_TEST(test_es_docs__script_refusal)
{
	cJSON *e = cJSON_Parse("{\"type\":\"illegal_argument_exception\",\"caused_by\":"
			       "{\"type\":\"script_exception\"}}");
	char type[32];

	ck_assert(es_docs_is_script_refusal(e));
	cJSON_Delete(e);
	e = cJSON_Parse("{\"error\":{\"type\":\"version_conflict_engine_exception\"}}");
	ck_assert(!es_docs_is_script_refusal(cJSON_GetObjectItem(e, "error")));
	es_docs_error_type(e, type, sizeof(type));
	ck_assert_str_eq(type, "version_conflict_engine_excepti"); /* truncated to the buffer */
	cJSON_Delete(e);
}
END_TEST

START_TEST(test_es_docs__null_line_fails_buffer)
{
	struct buf b = BUF_INIT;

	es_docs_line(&b, NULL);
	ck_assert_int_ne(b.err, 0);
	buf_free(&b);
}
END_TEST


/* The findings of SETTINGS (JSON text of the "index" object) on NODES. */
static int findings(const char *settings, long nodes, char *buf, size_t size)
{
	cJSON *o = cJSON_Parse(settings);
	int n;

	ck_assert_ptr_nonnull(o);
	n = es_docs_settings_findings(o, nodes, buf, size);
	cJSON_Delete(o);
	return n;
}

START_TEST(test_es_docs__settings_findings)
{
	char buf[1024];

	/* as the store creates it: fine on one node and on three */
	ck_assert_int_eq(findings("{\"number_of_replicas\":\"0\",\"auto_expand_replicas\":\"0-1\"}",
				  1, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "");
	ck_assert_int_eq(findings("{\"number_of_replicas\":\"0\",\"auto_expand_replicas\":\"0-1\"}",
				  3, buf, sizeof(buf)), 0);
	ck_assert_int_eq(findings("{\"number_of_replicas\":\"0\",\"auto_expand_replicas\":\"0-all\"}",
				  3, buf, sizeof(buf)), 0);
	/* no replica and none to come: fine on one node, not on two */
	ck_assert_int_eq(findings("{\"number_of_replicas\":\"0\"}", 1, buf, sizeof(buf)), 0);
	ck_assert_int_eq(findings("{\"number_of_replicas\":\"0\"}", 0, buf, sizeof(buf)), 0);
	ck_assert_int_eq(findings("{\"number_of_replicas\":\"0\",\"auto_expand_replicas\":\"false\"}",
				  2, buf, sizeof(buf)), 1);
	ck_assert_ptr_nonnull(strstr(buf, "no replica on a cluster of 2 data nodes"));
	ck_assert_int_eq(findings("{\"number_of_replicas\":\"0\",\"auto_expand_replicas\":\"0-0\"}",
				  3, buf, sizeof(buf)), 1);
	ck_assert_int_eq(findings("{\"number_of_replicas\":\"1\"}", 3, buf, sizeof(buf)), 0);
	/* durability and write waits, nested as the engines answer, or flat */
	ck_assert_int_eq(findings("{\"number_of_replicas\":\"1\",\"translog\":{\"durability\":\"async\"},"
				  "\"write\":{\"wait_for_active_shards\":\"all\"}}",
				  3, buf, sizeof(buf)), 2);
	ck_assert_ptr_nonnull(strstr(buf, "translog.durability is async"));
	ck_assert_ptr_nonnull(strstr(buf, "wait_for_active_shards is all"));
	ck_assert_ptr_nonnull(strchr(buf, '\n'));
	ck_assert_int_eq(findings("{\"translog.durability\":\"request\","
				  "\"write.wait_for_active_shards\":\"1\"}", 3, buf, sizeof(buf)), 0);
	/* three findings in a small buffer: counted, cut, terminated */
	ck_assert_int_eq(findings("{\"number_of_replicas\":\"0\",\"translog\":{\"durability\":\"async\"},"
				  "\"write\":{\"wait_for_active_shards\":\"2\"}}",
				  5, buf, 40), 3);
	ck_assert_uint_eq(strlen(buf), 39);
	/* nothing known */
	ck_assert_int_eq(es_docs_settings_findings(NULL, 3, buf, sizeof(buf)), 0);
}
END_TEST

Suite *make_suite_es_docs(void)
{
	Suite *s = suite_create("es_docs");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_es_docs__acquire_first_attempt);
	tcase_add_test(tc, test_es_docs__acquire_by_stored_id);
	tcase_add_test(tc, test_es_docs__scripts_table);
	tcase_add_test(tc, test_es_docs__missing_script_error);
	tcase_add_test(tc, test_es_docs__inline_rewrites_ids);
	tcase_add_test(tc, test_es_docs__acquire_after_refusal_is_scripted);
	tcase_add_test(tc, test_es_docs__mark_release_evict);
	tcase_add_test(tc, test_es_docs__intent_and_delete);
	tcase_add_test(tc, test_es_docs__path_and_keys_where_not_derivable);
	tcase_add_test(tc, test_es_docs__owner_mapping_ids_search);
	tcase_add_test(tc, test_es_docs__ids_and_holders);
	tcase_add_test(tc, test_es_docs__script_refusal);
	tcase_add_test(tc, test_es_docs__null_line_fails_buffer);
	tcase_add_test(tc, test_es_docs__settings_findings);
	suite_add_tcase(s, tc);
	return s;
}
