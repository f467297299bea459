/* test_path.c - normalisation, ancestors, order, hostile bytes, long keys */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/path.h"
#include "unit.h"

static const struct {
	const char *in;
	const char *out; /* NULL: error */
	int err;
} norm_cases[] = {
	{"/", "/", 0},
	{"//", "/", 0},
	{"/a", "/a", 0},
	{"/a/", "/a", 0},
	{"//a//b///", "/a/b", 0},
	{"/a b/c\nd", "/a b/c\nd", 0},
	{"/%2F/%", "/%2F/%", 0},
	{"/caf\xc3\xa9/\xff\xfe", "/caf\xc3\xa9/\xff\xfe", 0},
	{"/...", "/...", 0},
	{"/.a/..b", "/.a/..b", 0},
	{"a", NULL, -EINVAL},
	{"", NULL, -EINVAL},
	{"/a/./b", NULL, -EINVAL},
	{"/a/../b", NULL, -EINVAL},
	{"/..", NULL, -EINVAL},
};

START_TEST(test_path__normalise)
{
	char *out = NULL;
	int err = path_normalise(norm_cases[_i].in, &out);

	ck_assert_int_eq(err, norm_cases[_i].err);
	if (norm_cases[_i].out) {
		ck_assert_str_eq(out, norm_cases[_i].out);
		ck_assert(path_is_normal(out));
	} else {
		ck_assert_ptr_null(out);
	}
	free(out);
}
END_TEST

/* path_is_normal() scans without allocating: it must say exactly what
 * "path_normalise() leaves it as it is" says, on every spelling. */
START_TEST(test_path__is_normal_agrees)
{
	static const char *const extra[] = {
		"/a//b", "/a/b/", "/./a", "/a/.", "/a/..", "/..a", "/a..", "/.../b", "//",
		"/a/./", "/x/y/z", "/ /", "/ ", ".", "./a", "a/b", "/\xff/.", NULL,
	};
	size_t i, n = sizeof(norm_cases) / sizeof(norm_cases[0]);

	for (i = 0; i < n + sizeof(extra) / sizeof(extra[0]); i++) {
		const char *p = i < n ? norm_cases[i].in : extra[i - n];
		char *out = NULL;
		bool want;

		if (!p) {
			ck_assert(!path_is_normal(NULL));
			continue;
		}
		want = path_normalise(p, &out) == 0 && strcmp(out, p) == 0;
		ck_assert_msg(path_is_normal(p) == want, "'%s': %d", p, (int)want);
		free(out);
	}
}
END_TEST

/* Keys have no length limit: PATH_MAX bounds one syscall's path, not how
 * deep an entry sits (rm -rf and find reach deeper through directory fds). */
START_TEST(test_path__long_paths)
{
	const size_t lens[] = {PATH_MAX - 1, PATH_MAX, PATH_MAX + 1, 65536};
	size_t i, k;

	for (k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		char *p = malloc(lens[k] + 2), *out = NULL;

		for (i = 0; i < lens[k]; i++)
			p[i] = (i % 200 == 0) ? '/' : 'x';
		p[lens[k]] = '\0';
		ck_assert_int_eq(path_normalise(p, &out), 0);
		ck_assert_uint_eq(strlen(out), lens[k]);
		ck_assert_uint_eq(path_depth(out), (lens[k] + 199) / 200);
		ck_assert(path_is_normal(out));
		free(out);
		/* a trailing slash still goes */
		p[lens[k]] = '/';
		p[lens[k] + 1] = '\0';
		ck_assert_int_eq(path_normalise(p, &out), 0);
		ck_assert_uint_eq(strlen(out), lens[k]);
		free(out);
		free(p);
	}
}
END_TEST

START_TEST(test_path__depth_and_parent)
{
	ck_assert_uint_eq(path_depth("/"), 0);
	ck_assert_uint_eq(path_depth("/a"), 1);
	ck_assert_uint_eq(path_depth("/a/b c/d"), 3);
	ck_assert_uint_eq(path_parent_len("/a/b", 4), 2);
	ck_assert_uint_eq(path_parent_len("/a", 2), 1);
	ck_assert_uint_eq(path_parent_len("/", 1), 0);
	ck_assert_uint_eq(path_parent_len("/ab/cd/ef", 9), 6);
}
END_TEST

START_TEST(test_path__ancestors)
{
	ck_assert(path_is_ancestor("/", "/a"));
	ck_assert(path_is_ancestor("/a", "/a/b"));
	ck_assert(path_is_ancestor("/a", "/a/b/c"));
	ck_assert(!path_is_ancestor("/a", "/a"));
	ck_assert(!path_is_ancestor("/a", "/ab"));
	ck_assert(!path_is_ancestor("/a/b", "/a"));
	ck_assert(!path_is_ancestor("/", "/"));
	ck_assert(!path_is_ancestor("global", "/a"));
}
END_TEST

START_TEST(test_path__order)
{
	/* fewer components first, then bytewise as unsigned bytes */
	ck_assert_int_lt(path_cmp("/z", "/a/b"), 0);
	ck_assert_int_lt(path_cmp("/a", "/b"), 0);
	ck_assert_int_lt(path_cmp("/a-c", "/a/b"), 0);
	ck_assert_int_lt(path_cmp("/a", "/\xff"), 0);
	ck_assert_int_eq(path_cmp("/a/b", "/a/b"), 0);
	ck_assert_int_lt(path_cmp("global", "/"), 0);
	ck_assert_int_gt(path_cmp("/a/b", "/a"), 0);
	ck_assert_str_eq(path_rel("/"), ".");
	ck_assert_str_eq(path_rel("/a/b"), "a/b");
}
END_TEST

START_TEST(test_path__lock_id)
{
	char *id = NULL, *key = malloc(PATH_ID_MAX + 2);

	ck_assert_int_eq(path_lock_id("/a b/%2F", &id), 0);
	ck_assert_str_eq(id, "/a b/%2F");
	free(id);
	memset(key, 'k', PATH_ID_MAX);
	key[0] = '/';
	key[PATH_ID_MAX] = '\0';
	ck_assert_int_eq(path_lock_id(key, &id), 0);
	ck_assert_str_eq(id, key); /* exactly 512 bytes still fits */
	free(id);
	key[PATH_ID_MAX] = 'k';
	key[PATH_ID_MAX + 1] = '\0';
	ck_assert_int_eq(path_lock_id(key, &id), 0);
	ck_assert_uint_eq(strlen(id), 7 + 64);
	ck_assert(strncmp(id, "sha256:", 7) == 0);
	free(id);
	free(key);
}
END_TEST

/* Keys that are not UTF-8: texts are valid UTF-8, distinct keys stay
 * distinct, valid UTF-8 keys (backslash included) are unchanged, and the
 * id limit counts the escaped bytes. */
START_TEST(test_path__key_text_not_utf8)
{
	/* raw keys and their texts */
	static const char *const keys[][2] = {
		{"/d/\xff", "bytes:/d/\\xff"},
		{"/d/\xfe", "bytes:/d/\\xfe"},
		{"/d/\\xff", "/d/\\xff"}, /* valid UTF-8: the plain path */
		{"/d/\\", "/d/\\"},
		{"/d/\xc3", "bytes:/d/\\xc3"},
		{"/d/\xc3\xa9x", "/d/\xc3\xa9x"},
		{"/d/\xed\xa0\x80", "bytes:/d/\\xed\\xa0\\x80"},         /* a surrogate */
		{"/d/\xc0\xaf", "bytes:/d/\\xc0\\xaf"},                   /* overlong */
		{"/d/\xf4\x90\x80\x80", "bytes:/d/\\xf4\\x90\\x80\\x80"}, /* > U+10FFFF */
		{"/d/\xe2\x82", "bytes:/d/\\xe2\\x82"},                   /* truncated */
		{"/d/\\\xff", "bytes:/d/\\\\\\xff"}, /* the escape character, escaped */
		{"/d/\xf0\x9f\x98\x80", "/d/\xf0\x9f\x98\x80"},
	};
	size_t n = sizeof(keys) / sizeof(keys[0]), i, j;
	char *t[sizeof(keys) / sizeof(keys[0])], *id = NULL, *key;

	for (i = 0; i < n; i++) {
		ck_assert_int_eq(path_key_text(keys[i][0], &t[i]), 0);
		ck_assert_str_eq(t[i], keys[i][1]);
	}
	for (i = 0; i < n; i++)
		for (j = i + 1; j < n; j++)
			ck_assert_str_ne(t[i], t[j]);
	/* and back: every text gives its key */
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(path_key_from_text(t[i], &key), 0);
		ck_assert_str_eq(key, keys[i][0]);
		free(key);
	}
	for (i = 0; i < n; i++)
		free(t[i]);

	/* 255 bytes of 0xff: 1020 escaped bytes, hashed; 100 fit (406 bytes) */
	key = malloc(300);
	key[0] = '/';
	memset(key + 1, 0xff, 255);
	key[256] = '\0';
	ck_assert_int_eq(path_lock_id(key, &id), 0);
	ck_assert(strncmp(id, "sha256:", 7) == 0);
	free(id);
	key[101] = '\0';
	ck_assert_int_eq(path_lock_id(key, &id), 0);
	ck_assert_uint_eq(strlen(id), 6 + 1 + 400);
	free(id);
	/* the id of a key's text is the id of the key */
	ck_assert_int_eq(path_text_lock_id("bytes:/\\xff", &id), 0);
	ck_assert_str_eq(id, "bytes:/\\xff");
	free(id);
	free(key);
}
END_TEST

/* Texts that no key has are refused, not guessed at: the lock listing
 * decides on what the decoded key names. */
START_TEST(test_path__key_from_text_refuses_forgeries)
{
	static const char *const bad[] = {
		"bytes:/d/\\\\x0",  /* an escaped escape, then plain text: needs no prefix */
		"bytes:/d/\\x00",   /* NUL */
		"bytes:/d/\\xzz",   /* not hex */
		"bytes:/d/\\xFF",   /* uppercase: path_key_text() writes lowercase */
		"bytes:/d/\\x41",   /* an escaped byte that is valid UTF-8 */
		"bytes:/d/\\",      /* dangling */
		"bytes:/d/e",       /* valid UTF-8 needs no prefix */
	};
	size_t i;
	char *k = NULL;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(path_key_from_text(bad[i], &k) == -EINVAL, "%s", bad[i]);
		ck_assert_ptr_null(k);
	}
	ck_assert_int_eq(path_key_from_text("global", &k), 0);
	ck_assert_str_eq(k, "global");
	free(k);
}
END_TEST

/* Keys as listings show them: controls and bidirectional controls
 * escaped like names that are not UTF-8, so that no shown key steers a
 * terminal or reads as another; keys without them are shown as their
 * text; every shown form decodes back to its key, and to no other. */
START_TEST(test_path__key_shown)
{
	static const char *const keys[][2] = {
		{"/d/plain", "/d/plain"},
		{"global", "global"},
		{"/d/a\\b", "/d/a\\b"}, /* valid UTF-8: the plain path, backslash too */
		{"/d/\xc3\xa9t\xc3\xa9", "/d/\xc3\xa9t\xc3\xa9"},
		{"/d/\x1b[2J", "bytes:/d/\\x1b[2J"},
		{"/d/a\tb\nc", "bytes:/d/a\\x09b\\x0ac"},
		{"/d/a\\\x1b", "bytes:/d/a\\\\\\x1b"},
		{"/d/\xc2\x9b", "bytes:/d/\\xc2\\x9b"},
		{"/d/evil\xe2\x80\xaetxt.exe", "bytes:/d/evil\\xe2\\x80\\xaetxt.exe"},
		{"/d/\xe2\x81\xa6x\xe2\x81\xa9", "bytes:/d/\\xe2\\x81\\xa6x\\xe2\\x81\\xa9"},
		{"/d/\xd8\x9c", "bytes:/d/\\xd8\\x9c"},
		{"/d/\xff", "bytes:/d/\\xff"},
		{"/d/\xff\x1b", "bytes:/d/\\xff\\x1b"},
	};
	size_t n = sizeof(keys) / sizeof(keys[0]), i, j;
	char *t[sizeof(keys) / sizeof(keys[0])], *key, *text;
	const unsigned char *c;

	for (i = 0; i < n; i++) {
		ck_assert_int_eq(path_key_shown(keys[i][0], &t[i]), 0);
		ck_assert_str_eq(t[i], keys[i][1]);
		for (c = (const unsigned char *)t[i]; *c; c++)
			ck_assert_msg(*c >= 0x20 && *c != 0x7f, "%s", t[i]);
		ck_assert_ptr_null(strstr(t[i], "\xe2\x80\xae"));
		ck_assert_int_eq(path_key_from_shown(t[i], &key), 0);
		ck_assert_str_eq(key, keys[i][0]);
		free(key);
	}
	for (i = 0; i < n; i++)
		for (j = i + 1; j < n; j++)
			ck_assert_str_ne(t[i], t[j]);
	for (i = 0; i < n; i++)
		free(t[i]);
	/* without a control, the shown form is the store's text */
	for (i = 0; i < 4; i++) {
		static const char *const plain[] = {"/d/\xff", "/d/\\\xff", "/d/\xc3", "/d/x\\"};

		ck_assert_int_eq(path_key_shown(plain[i], &key), 0);
		ck_assert_int_eq(path_key_text(plain[i], &text), 0);
		ck_assert_str_eq(key, text);
		free(key);
		free(text);
	}
}
END_TEST

START_TEST(test_path__key_from_shown_refuses_forgeries)
{
	static const char *const bad[] = {
		"bytes:/d/\\x41",     /* an escaped byte that is shown as it is */
		"bytes:/d/e",         /* nothing to escape: needs no prefix */
		"bytes:/d/\\x00",     /* NUL */
		"bytes:/d/\\x1B",     /* uppercase */
		"bytes:/d/\\xff\x1b", /* the store's text: a raw control is not shown */
		"bytes:/d/\xe2\x80\xae\\x1b",
		"bytes:/d/\\",
	};
	size_t i;
	char *k = NULL;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(path_key_from_shown(bad[i], &k) == -EINVAL, "%s", bad[i]);
		ck_assert_ptr_null(k);
	}
}
END_TEST

/* SHA-256 of lock ids: FIPS 180-4 vectors and the lengths around the
 * padding boundary, so that ids stay byte-identical whatever computes them. */
START_TEST(test_path__digest_vectors)
{
	static const char two_blocks[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	char hex[PATH_DIGEST_HEX_LEN + 1];

	ck_assert_int_eq(path_digest_hex("", 0, hex), 0);
	ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	ck_assert_int_eq(path_digest_hex("abc", 3, hex), 0);
	ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	/* 56 bytes: the length no longer fits, padding spills into a second block */
	ck_assert_int_eq(path_digest_hex(two_blocks, strlen(two_blocks), hex), 0);
	ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
END_TEST

START_TEST(test_path__digest_lengths_55_to_64)
{
	/* Digests of 'a' * n for the lengths around the padding boundary. */
	static const char *const want[] = {
		[55] = "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318",
		[56] = "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a",
		[63] = "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34",
		[64] = "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb",
	};
	char buf[64], hex[PATH_DIGEST_HEX_LEN + 1];
	size_t n;

	memset(buf, 'a', sizeof(buf));
	for (n = 55; n <= 64; n++) {
		if (!want[n])
			continue;
		ck_assert_int_eq(path_digest_hex(buf, n, hex), 0);
		ck_assert_msg(strcmp(hex, want[n]) == 0, "length %zu: %s", n, hex);
	}
}
END_TEST

START_TEST(test_path__lock_id_million_a)
{
	char *m = malloc(1000001), *id = NULL;

	ck_assert_ptr_nonnull(m);
	memset(m, 'a', 1000000);
	m[1000000] = '\0';
	ck_assert_int_eq(path_lock_id(m, &id), 0);
	free(m);
	ck_assert_str_eq(id, "sha256:cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(id);
}
END_TEST

Suite *make_suite_path(void)
{
	Suite *s = suite_create("path");
	TCase *tc = tcase_create("core");

	tcase_add_loop_test(tc, test_path__normalise, 0, sizeof(norm_cases) / sizeof(norm_cases[0]));
	tcase_add_test(tc, test_path__is_normal_agrees);
	tcase_add_test(tc, test_path__long_paths);
	tcase_add_test(tc, test_path__depth_and_parent);
	tcase_add_test(tc, test_path__ancestors);
	tcase_add_test(tc, test_path__order);
	tcase_add_test(tc, test_path__lock_id);
	tcase_add_test(tc, test_path__key_text_not_utf8);
	tcase_add_test(tc, test_path__key_from_text_refuses_forgeries);
	tcase_add_test(tc, test_path__key_shown);
	tcase_add_test(tc, test_path__key_from_shown_refuses_forgeries);
	tcase_add_test(tc, test_path__digest_vectors);
	tcase_add_test(tc, test_path__digest_lengths_55_to_64);
	tcase_add_test(tc, test_path__lock_id_million_a);
	suite_add_tcase(s, tc);
	return s;
}
