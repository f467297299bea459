/* test_es_fsdoc.c - the fs index's documents, mapping and queries, without a server */
#include <config.h>

#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/path.h"
#include "es/es_fsdoc.h"
#include "unit.h"

/* Line N (0-based) of ndjson B, parsed; the text of the line in *RAW. */
static cJSON *line(const struct buf *b, int n, char **raw)
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
	if (raw)
		*raw = strndup(s, (size_t)(e - s));
	return cJSON_ParseWithLength(s, (size_t)(e - s));
}

static size_t lines(const struct buf *b)
{
	size_t n = 0;
	const char *s;

	for (s = b->data; s && *s; s++)
		n += *s == '\n';
	return n;
}

static void st_file(struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_mode = S_IFREG | 04755;
	st->st_size = 123456789012LL;
	st->st_mtim.tv_sec = 1700000000;
	st->st_mtim.tv_nsec = 123456789;
	st->st_ctim.tv_sec = 1700000001;
	st->st_uid = 1000;
	st->st_gid = 100;
	st->st_nlink = 2;
	st->st_ino = (ino_t)9007199254740993ULL; /* 2^53 + 1 */
}

START_TEST(test_es_fsdoc__type_letters)
{
	ck_assert_int_eq(es_fsdoc_type(S_IFREG | 0644), 'f');
	ck_assert_int_eq(es_fsdoc_type(S_IFDIR), 'd');
	ck_assert_int_eq(es_fsdoc_type(S_IFLNK), 'l');
	ck_assert_int_eq(es_fsdoc_type(S_IFIFO), 'p');
	ck_assert_int_eq(es_fsdoc_type(S_IFSOCK), 's');
	ck_assert_int_eq(es_fsdoc_type(S_IFCHR), 'c');
	ck_assert_int_eq(es_fsdoc_type(S_IFBLK), 'b');
	ck_assert_int_eq(es_fsdoc_type(0), '?');
}
END_TEST

START_TEST(test_es_fsdoc__index_body)
{
	cJSON *b = es_fsdoc_index_body(), *m, *props;
	const char *kw[] = {"path", "name", "parent", "type", "by"};
	const char *lg[] = {"size", "mtime", "mtime_ns", "ctime", "mode",
			    "uid",  "gid",   "nlink",    "ino",   "at"};
	size_t i;

	ck_assert_ptr_nonnull(b);
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "settings"), "gc_deletes")
				 ->valuestring,
			 "10m");
	m = cJSON_GetObjectItem(b, "mappings");
	ck_assert_str_eq(cJSON_GetObjectItem(m, "dynamic")->valuestring, "strict");
	ck_assert(es_fsdoc_is_ours(m));
	props = cJSON_GetObjectItem(m, "properties");
	for (i = 0; i < sizeof(kw) / sizeof(kw[0]); i++)
		ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(props, kw[i]), "type")
					 ->valuestring,
				 "keyword");
	for (i = 0; i < sizeof(lg) / sizeof(lg[0]); i++)
		ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(props, lg[i]), "type")
					 ->valuestring,
				 "long");
	ck_assert_str_eq(
		cJSON_GetObjectItem(cJSON_GetObjectItem(props, "depth"), "type")->valuestring,
		"integer");
	cJSON_Delete(b);
}
END_TEST

START_TEST(test_es_fsdoc__is_ours)
{
	cJSON *m = cJSON_Parse("{\"_meta\":{\"treelockfs\":{\"kind\":\"fs\",\"format\":1}}}");
	cJSON *lock = cJSON_Parse("{\"_meta\":{\"treelockfs\":{\"strategy\":\"tree\","
				  "\"format\":1}}}");
	cJSON *later = cJSON_Parse("{\"_meta\":{\"treelockfs\":{\"kind\":\"fs\",\"format\":2}}}");
	cJSON *none = cJSON_Parse("{\"properties\":{}}");

	ck_assert(es_fsdoc_is_ours(m));
	ck_assert(!es_fsdoc_is_ours(lock));
	ck_assert(!es_fsdoc_is_ours(later));
	ck_assert(!es_fsdoc_is_ours(none));
	ck_assert(!es_fsdoc_is_ours(NULL));
	cJSON_Delete(m);
	cJSON_Delete(lock);
	cJSON_Delete(later);
	cJSON_Delete(none);
}
END_TEST

START_TEST(test_es_fsdoc__put_exact_longs)
{
	struct buf b = BUF_INIT;
	struct stat st;
	cJSON *a, *s;
	char *raw = NULL;
	int64_t v = 1764400000123456789LL;

	st_file(&st);
	es_fsdoc_put(&b, "fsi", "/a/b c", &st, v, "h1:7:ab");
	ck_assert_int_eq(b.err, 0);
	ck_assert_uint_eq(lines(&b), 2);
	a = line(&b, 0, &raw);
	/* the version goes out as the integer it is, not a rounded double */
	ck_assert_ptr_nonnull(strstr(raw, "\"version\":1764400000123456789"));
	free(raw);
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "index"), "_index")->valuestring,
			 "fsi");
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "index"), "_id")->valuestring,
			 "/a/b c");
	ck_assert_str_eq(
		cJSON_GetObjectItem(cJSON_GetObjectItem(a, "index"), "version_type")->valuestring,
		"external");
	cJSON_Delete(a);
	s = line(&b, 1, &raw);
	ck_assert_ptr_nonnull(strstr(raw, "\"ino\":9007199254740993"));
	ck_assert_ptr_nonnull(strstr(raw, "\"size\":123456789012"));
	free(raw);
	ck_assert_str_eq(cJSON_GetObjectItem(s, "path")->valuestring, "/a/b c");
	ck_assert_str_eq(cJSON_GetObjectItem(s, "name")->valuestring, "b c");
	ck_assert_str_eq(cJSON_GetObjectItem(s, "parent")->valuestring, "/a");
	ck_assert_int_eq(cJSON_GetObjectItem(s, "depth")->valueint, 2);
	ck_assert_str_eq(cJSON_GetObjectItem(s, "type")->valuestring, "f");
	ck_assert_int_eq(cJSON_GetObjectItem(s, "mode")->valueint, 04755);
	ck_assert_int_eq(cJSON_GetObjectItem(s, "mtime_ns")->valueint, 123456789);
	ck_assert_int_eq(cJSON_GetObjectItem(s, "uid")->valueint, 1000);
	ck_assert_int_eq(cJSON_GetObjectItem(s, "nlink")->valueint, 2);
	ck_assert_str_eq(cJSON_GetObjectItem(s, "by")->valuestring, "h1:7:ab");
	ck_assert(cJSON_GetObjectItem(s, "at")->valuedouble == 1764400000123.0);
	cJSON_Delete(s);
	buf_free(&b);
}
END_TEST

START_TEST(test_es_fsdoc__root_and_top)
{
	struct buf b = BUF_INIT;
	struct stat st;
	cJSON *s;

	memset(&st, 0, sizeof(st));
	st.st_mode = S_IFDIR | 0755;
	es_fsdoc_put(&b, "fsi", "/", &st, 5, "treelockctl");
	es_fsdoc_put(&b, "fsi", "/top", &st, 6, "treelockctl");
	ck_assert_int_eq(b.err, 0);
	s = line(&b, 1, NULL);
	ck_assert_str_eq(cJSON_GetObjectItem(s, "path")->valuestring, "/");
	ck_assert_str_eq(cJSON_GetObjectItem(s, "name")->valuestring, "/");
	ck_assert_ptr_null(cJSON_GetObjectItem(s, "parent"));
	ck_assert_int_eq(cJSON_GetObjectItem(s, "depth")->valueint, 0);
	ck_assert_str_eq(cJSON_GetObjectItem(s, "type")->valuestring, "d");
	cJSON_Delete(s);
	s = line(&b, 3, NULL);
	ck_assert_str_eq(cJSON_GetObjectItem(s, "parent")->valuestring, "/");
	ck_assert_str_eq(cJSON_GetObjectItem(s, "name")->valuestring, "top");
	ck_assert_int_eq(cJSON_GetObjectItem(s, "depth")->valueint, 1);
	cJSON_Delete(s);
	buf_free(&b);
}
END_TEST

START_TEST(test_es_fsdoc__bytes_paths_and_long_ids)
{
	struct buf b = BUF_INIT;
	struct stat st;
	cJSON *a, *s;
	char longkey[PATH_ID_MAX + 2];

	st_file(&st);
	es_fsdoc_put(&b, "fsi", "/d\\x/n\xff", &st, 7, "o");
	s = line(&b, 1, NULL);
	ck_assert_str_eq(cJSON_GetObjectItem(s, "path")->valuestring, "bytes:/d\\\\x/n\\xff");
	ck_assert_str_eq(cJSON_GetObjectItem(s, "name")->valuestring, "bytes:n\\xff");
	ck_assert_str_eq(cJSON_GetObjectItem(s, "parent")->valuestring, "/d\\x");
	cJSON_Delete(s);
	buf_free(&b);
	/* a key whose text passes the id limit: its hash */
	longkey[0] = '/';
	memset(longkey + 1, 'x', sizeof(longkey) - 2);
	longkey[sizeof(longkey) - 1] = '\0';
	es_fsdoc_put(&b, "fsi", longkey, &st, 7, "o");
	a = line(&b, 0, NULL);
	ck_assert(strncmp(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "index"), "_id")->valuestring,
			  "sha256:", 7) == 0);
	cJSON_Delete(a);
	buf_free(&b);
}
END_TEST

START_TEST(test_es_fsdoc__json_escapes)
{
	struct buf b = BUF_INIT;
	struct stat st;
	cJSON *a, *s;

	st_file(&st);
	es_fsdoc_put(&b, "f\"i", "/q\"\\/n\n\x01", &st, 9, "o\"");
	ck_assert_int_eq(b.err, 0);
	a = line(&b, 0, NULL);
	ck_assert_ptr_nonnull(a);
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "index"), "_index")->valuestring,
			 "f\"i");
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "index"), "_id")->valuestring,
			 "/q\"\\/n\n\x01");
	s = line(&b, 1, NULL);
	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(cJSON_GetObjectItem(s, "path")->valuestring, "/q\"\\/n\n\x01");
	ck_assert_str_eq(cJSON_GetObjectItem(s, "name")->valuestring, "n\n\x01");
	ck_assert_str_eq(cJSON_GetObjectItem(s, "parent")->valuestring, "/q\"\\");
	ck_assert_str_eq(cJSON_GetObjectItem(s, "by")->valuestring, "o\"");
	cJSON_Delete(a);
	cJSON_Delete(s);
	buf_free(&b);
}
END_TEST

START_TEST(test_es_fsdoc__delete)
{
	struct buf b = BUF_INIT;
	cJSON *a;
	char *raw = NULL;

	es_fsdoc_del(&b, "fsi", "/a/b", 1764400000000000001LL);
	ck_assert_int_eq(b.err, 0);
	ck_assert_uint_eq(lines(&b), 1);
	a = line(&b, 0, &raw);
	ck_assert_ptr_nonnull(strstr(raw, "\"version\":1764400000000000001"));
	free(raw);
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "delete"), "_id")->valuestring,
			 "/a/b");
	ck_assert_str_eq(
		cJSON_GetObjectItem(cJSON_GetObjectItem(a, "delete"), "version_type")->valuestring,
		"external");
	cJSON_Delete(a);
	buf_free(&b);
}
END_TEST

START_TEST(test_es_fsdoc__read_round_trip)
{
	struct buf b = BUF_INIT;
	struct stat st;
	struct es_fsentry e;
	cJSON *s;

	st_file(&st);
	es_fsdoc_put(&b, "fsi", "/q/\xfe", &st, 1764400000123456789LL, "o");
	s = line(&b, 1, NULL);
	ck_assert_int_eq(es_fsdoc_read(s, 42, &e), 0);
	ck_assert_str_eq(e.key, "/q/\xfe");
	ck_assert_int_eq(e.type, 'f');
	ck_assert_int_eq(e.size, 123456789012LL);
	ck_assert_int_eq(e.mtime, 1700000000);
	ck_assert_int_eq(e.mtime_ns, 123456789);
	ck_assert_int_eq(e.ctime, 1700000001);
	ck_assert_uint_eq(e.mode, 04755);
	ck_assert_uint_eq(e.uid, 1000);
	ck_assert_uint_eq(e.gid, 100);
	ck_assert_uint_eq(e.nlink, 2);
	ck_assert_int_eq(e.at, 1764400000123LL);
	ck_assert_int_eq(e.version, 42);
	es_fsentry_free(&e);
	ck_assert_ptr_null(e.key);
	es_fsentry_free(NULL);
	cJSON_Delete(s);
	buf_free(&b);
	/* not ours */
	s = cJSON_Parse("{\"path\":\"/a\"}");
	ck_assert_int_eq(es_fsdoc_read(s, -1, &e), -EINVAL);
	es_fsentry_free(&e);
	cJSON_Delete(s);
	s = cJSON_Parse("{\"path\":\"bytes:/a\\\\q\",\"type\":\"f\"}");
	ck_assert_int_eq(es_fsdoc_read(s, -1, &e), -EINVAL);
	es_fsentry_free(&e);
	cJSON_Delete(s);
}
END_TEST

/* The prefixes (in order) of the should clauses of Q, joined by '|'. */
static void prefixes(const cJSON *q, char *out, size_t size)
{
	const cJSON *sh = cJSON_GetObjectItem(cJSON_GetObjectItem(q, "bool"), "should"), *c;

	out[0] = '\0';
	cJSON_ArrayForEach(c, sh)
	{
		if (out[0])
			strncat(out, "|", size - strlen(out) - 1);
		strncat(out,
			cJSON_GetObjectItem(cJSON_GetObjectItem(c, "prefix"), "path")->valuestring,
			size - strlen(out) - 1);
	}
}

START_TEST(test_es_fsdoc__under_query)
{
	char p[256];
	cJSON *q;

	q = es_fsdoc_under_query("/a\\b");
	prefixes(q, p, sizeof(p));
	ck_assert_str_eq(p, "/a\\b/|bytes:/a\\\\b/");
	ck_assert_ptr_null(cJSON_GetObjectItem(cJSON_GetObjectItem(q, "bool"), "must_not"));
	cJSON_Delete(q);
	/* a key that is not UTF-8: every descendant is bytes: too */
	q = es_fsdoc_under_query("/x\xff");
	prefixes(q, p, sizeof(p));
	ck_assert_str_eq(p, "bytes:/x\\xff/");
	cJSON_Delete(q);
	/* the root: everything but the root */
	q = es_fsdoc_under_query("/");
	prefixes(q, p, sizeof(p));
	ck_assert_str_eq(p, "/|bytes:/");
	ck_assert_str_eq(
		cJSON_GetObjectItem(
			cJSON_GetObjectItem(
				cJSON_GetArrayItem(
					cJSON_GetObjectItem(cJSON_GetObjectItem(q, "bool"), "must_not"),
					0),
				"term"),
			"path")
			->valuestring,
		"/");
	cJSON_Delete(q);
}
END_TEST

Suite *make_suite_es_fsdoc(void)
{
	Suite *s = suite_create("es_fsdoc");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_es_fsdoc__type_letters);
	tcase_add_test(tc, test_es_fsdoc__index_body);
	tcase_add_test(tc, test_es_fsdoc__is_ours);
	tcase_add_test(tc, test_es_fsdoc__put_exact_longs);
	tcase_add_test(tc, test_es_fsdoc__root_and_top);
	tcase_add_test(tc, test_es_fsdoc__bytes_paths_and_long_ids);
	tcase_add_test(tc, test_es_fsdoc__json_escapes);
	tcase_add_test(tc, test_es_fsdoc__delete);
	tcase_add_test(tc, test_es_fsdoc__read_round_trip);
	tcase_add_test(tc, test_es_fsdoc__under_query);
	suite_add_tcase(s, tc);
	return s;
}
