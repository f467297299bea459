/* test_escape.c - the one escaper of user text (escape.h) */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/escape.h"
#include "unit.h"

static const char *esc(const char *in, size_t size)
{
	static char out[1024];

	escape_text(out, size, in);
	return out;
}

/* IN escaped by escape_fputs() into a new string (caller frees). */
static char *esc_file(const char *in)
{
	char *data = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&data, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(escape_fputs(in, f), 0);
	fclose(f);
	return data;
}

/* IN escaped by escape_buf() into a new string (caller frees). */
static char *esc_buf(const char *in)
{
	struct buf b = BUF_INIT;

	ck_assert_int_eq(escape_buf(&b, in), 0);
	return buf_detach(&b, NULL);
}

/* Decodes escaped TEXT into OUT (as large as TEXT), as a reader of our
 * lines would; returns -1 on an escape escape.h never writes. */
static int unescape(const char *text, char *out)
{
	while (*text) {
		unsigned int v;

		if (*text != '\\') {
			*out++ = *text++;
			continue;
		}
		if (text[1] == '\\') {
			*out++ = '\\';
			text += 2;
		} else if (text[1] == 'x' && sscanf(text + 2, "%2x", &v) == 1 && v != 0) {
			*out++ = (char)v;
			text += 4;
		} else {
			return -1;
		}
	}
	*out = '\0';
	return 0;
}

START_TEST(test_escape__controls_backslash_and_bad_utf8)
{
	ck_assert_str_eq(esc("plain /a/b c", 256), "plain /a/b c");
	ck_assert_str_eq(esc("a\nfake: line", 256), "a\\x0afake: line");
	ck_assert_str_eq(esc("\r\t\x1b[2J\x7f", 256), "\\x0d\\x09\\x1b[2J\\x7f");
	/* the literal text "\x0a" differs from an escaped newline */
	ck_assert_str_eq(esc("c\\x0a", 256), "c\\\\x0a");
	ck_assert_str_eq(esc("\xff\xc3", 256), "\\xff\\xc3");
	/* an overlong form, a surrogate, past U+10FFFF, a lone continuation */
	ck_assert_str_eq(esc("\xc0\xaf", 256), "\\xc0\\xaf");
	ck_assert_str_eq(esc("\xed\xa0\x80", 256), "\\xed\\xa0\\x80");
	ck_assert_str_eq(esc("\xf4\x90\x80\x80", 256), "\\xf4\\x90\\x80\\x80");
	ck_assert_str_eq(esc("a\x80z", 256), "a\\x80z");
}
END_TEST

START_TEST(test_escape__valid_utf8_and_space_stay)
{
	ck_assert_str_eq(esc("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 256),
			 "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
	/* U+00A0, the first character after the C1 controls */
	ck_assert_str_eq(esc("\xc2\xa0", 256), "\xc2\xa0");
	ck_assert_str_eq(esc("", 256), "");
}
END_TEST

START_TEST(test_escape__c1_controls)
{
	/* CSI (U+009B) and NEL (U+0085) are terminal controls in UTF-8 too */
	ck_assert_str_eq(esc("\xc2\x9b", 256), "\\xc2\\x9b");
	ck_assert_str_eq(esc("a\xc2\x85z", 256), "a\\xc2\\x85z");
	ck_assert_str_eq(esc("\xc2\x80", 256), "\\xc2\\x80");
	ck_assert_str_eq(esc("\xc2\x9f", 256), "\\xc2\\x9f");
}
END_TEST

/* Bidirectional controls reorder what is shown ("evil\u202etxt.exe"
 * reads "evilexe.txt"): written byte by byte as \xHH; their neighbours,
 * and other invisible characters that reorder nothing, stay. */
START_TEST(test_escape__bidi_controls)
{
	static const char *const bidi[][2] = {
		{"\xd8\x9c", "\\xd8\\x9c"},         /* U+061C ARABIC LETTER MARK */
		{"\xe2\x80\x8e", "\\xe2\\x80\\x8e"}, /* U+200E LRM */
		{"\xe2\x80\x8f", "\\xe2\\x80\\x8f"}, /* U+200F RLM */
		{"\xe2\x80\xaa", "\\xe2\\x80\\xaa"}, /* U+202A LRE */
		{"\xe2\x80\xab", "\\xe2\\x80\\xab"}, /* U+202B RLE */
		{"\xe2\x80\xac", "\\xe2\\x80\\xac"}, /* U+202C PDF */
		{"\xe2\x80\xad", "\\xe2\\x80\\xad"}, /* U+202D LRO */
		{"\xe2\x80\xae", "\\xe2\\x80\\xae"}, /* U+202E RLO */
		{"\xe2\x81\xa6", "\\xe2\\x81\\xa6"}, /* U+2066 LRI */
		{"\xe2\x81\xa7", "\\xe2\\x81\\xa7"}, /* U+2067 RLI */
		{"\xe2\x81\xa8", "\\xe2\\x81\\xa8"}, /* U+2068 FSI */
		{"\xe2\x81\xa9", "\\xe2\\x81\\xa9"}, /* U+2069 PDI */
	};
	static const char *const kept[] = {
		"\xd8\x9b",     /* U+061B, U+061D: Arabic punctuation */
		"\xd8\x9d",
		"\xe2\x80\x8d", /* U+200D ZERO WIDTH JOINER (emoji sequences) */
		"\xe2\x80\x90", /* U+2010 HYPHEN */
		"\xe2\x80\xa9", /* U+2029, U+202F */
		"\xe2\x80\xaf",
		"\xe2\x81\xa5", /* U+2065, U+206A */
		"\xe2\x81\xaa",
	};
	char in[32], back[64];
	size_t i;

	for (i = 0; i < sizeof(bidi) / sizeof(bidi[0]); i++) {
		ck_assert_str_eq(esc(bidi[i][0], 256), bidi[i][1]);
		ck_assert_uint_eq(escape_kept_len(bidi[i][0]), 0);
		snprintf(in, sizeof(in), "a%sb", bidi[i][0]);
		ck_assert_int_eq(unescape(esc(in, 256), back), 0);
		ck_assert_str_eq(back, in);
	}
	for (i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
		ck_assert_str_eq(esc(kept[i], 256), kept[i]);
		ck_assert_uint_eq(escape_kept_len(kept[i]), strlen(kept[i]));
	}
	ck_assert_str_eq(esc("evil\xe2\x80\xaetxt.exe", 256), "evil\\xe2\\x80\\xaetxt.exe");
	/* every output alike, and a truncation keeps escapes whole */
	ck_assert_str_eq(esc("\x1b\xe2\x80\xae", 256), "\\x1b\\xe2\\x80\\xae");
	ck_assert_str_eq(esc("ab\xe2\x80\xae", 11), "ab\\xe2\\x80");
}
END_TEST

START_TEST(test_escape__kept_len)
{
	ck_assert_uint_eq(escape_kept_len("a"), 1);
	ck_assert_uint_eq(escape_kept_len("\xc3\xa9"), 2);
	ck_assert_uint_eq(escape_kept_len("\xf0\x9f\x98\x80!"), 4);
	ck_assert_uint_eq(escape_kept_len("\\"), 0);
	ck_assert_uint_eq(escape_kept_len("\x1b"), 0);
	ck_assert_uint_eq(escape_kept_len("\xc2\x9b"), 0);
	ck_assert_uint_eq(escape_kept_len("\xff"), 0);
}
END_TEST

START_TEST(test_escape__truncates_on_whole_escapes)
{
	char out[6];

	ck_assert_uint_eq(escape_text(out, sizeof(out), "ab\ncd"), 2);
	ck_assert_str_eq(out, "ab");
	ck_assert_uint_eq(escape_text(out, sizeof(out), "abcdefgh"), 5);
	ck_assert_str_eq(out, "abcde");
	/* a UTF-8 character is not split either */
	ck_assert_uint_eq(escape_text(out, sizeof(out), "abc\xe2\x82\xac"), 3);
	ck_assert_str_eq(out, "abc");
	ck_assert_uint_eq(escape_text(out, sizeof(out), "abc\\"), 5);
	ck_assert_str_eq(out, "abc\\\\");
	ck_assert_uint_eq(escape_text(out, 1, "abc"), 0);
	ck_assert_str_eq(out, "");
	out[0] = 'x';
	ck_assert_uint_eq(escape_text(out, 0, "abc"), 0);
	ck_assert_int_eq(out[0], 'x');
}
END_TEST

START_TEST(test_escape__every_output_writes_the_same)
{
	static const char *const inputs[] = {
		"plain", "tab\there", "back\\slash", "\xc2\x9b\xff\xc3\xa9", "/a b/\x1b[2J",
		"\xf0\x9f\x98\x80\xf0\x9f\x98", "a\xe2\x80\xae" "b\xe2\x81\xa6",
	};
	size_t i;

	for (i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
		char *f = esc_file(inputs[i]), *b = esc_buf(inputs[i]);

		ck_assert_str_eq(f, esc(inputs[i], 1024));
		ck_assert_str_eq(b, esc(inputs[i], 1024));
		free(f);
		free(b);
	}
}
END_TEST

START_TEST(test_escape__decodes_back_to_every_byte)
{
	char in[3], out[16], back[16];
	int c, d;

	/* every byte alone and in every pair: one line, no tab, and the
	 * original again */
	for (c = 1; c < 256; c++) {
		for (d = 0; d < 256; d++) {
			in[0] = (char)c;
			in[1] = (char)d;
			in[2] = '\0';
			escape_text(out, sizeof(out), in);
			ck_assert_ptr_null(strchr(out, '\n'));
			ck_assert_ptr_null(strchr(out, '\t'));
			ck_assert_int_eq(unescape(out, back), 0);
			ck_assert_str_eq(back, in);
		}
	}
}
END_TEST

START_TEST(test_escape__buf_reports_its_cap)
{
	struct buf b;

	buf_init(&b, 6);
	ck_assert_int_eq(escape_buf(&b, "ab"), 0);
	ck_assert_int_eq(escape_buf(&b, "\n\n"), -EMSGSIZE);
	ck_assert_int_eq(b.err, -EMSGSIZE);
	buf_free(&b);
}
END_TEST

START_TEST(test_escape__has_control)
{
	/* what escape_text() writes as \xHH because it is a control */
	ck_assert(escape_has_control("a\nb", 3));
	ck_assert(escape_has_control("\t", 1));
	ck_assert(escape_has_control("a\x7f", 2));
	ck_assert(escape_has_control("a\xc2\x85", 3)); /* NEL */
	ck_assert(escape_has_control("a\0b", 3));      /* a NUL within LEN */
	ck_assert(!escape_has_control("lock_timeout=5 x", 16));
	ck_assert(!escape_has_control("b\xc3\xbchne\xc2\xa0", 8));
	ck_assert(!escape_has_control("\xff\xfe", 2)); /* not UTF-8: no control */
	ck_assert(!escape_has_control("\xc2", 1));     /* cut before its second byte */
	ck_assert(!escape_has_control("a\nb", 1));     /* only LEN bytes */
}
END_TEST

Suite *make_suite_escape(void)
{
	Suite *s = suite_create("escape");
	TCase *tc = tcase_create("escape");

	tcase_add_test(tc, test_escape__controls_backslash_and_bad_utf8);
	tcase_add_test(tc, test_escape__valid_utf8_and_space_stay);
	tcase_add_test(tc, test_escape__c1_controls);
	tcase_add_test(tc, test_escape__bidi_controls);
	tcase_add_test(tc, test_escape__kept_len);
	tcase_add_test(tc, test_escape__truncates_on_whole_escapes);
	tcase_add_test(tc, test_escape__every_output_writes_the_same);
	tcase_add_test(tc, test_escape__decodes_back_to_every_byte);
	tcase_add_test(tc, test_escape__buf_reports_its_cap);
	tcase_add_test(tc, test_escape__has_control);
	suite_add_tcase(s, tc);
	return s;
}
