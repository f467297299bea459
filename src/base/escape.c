/* escape.c - the one escaper for text from users, see escape.h */
#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/escape.h"
#include "base/path.h"

/* Longest piece one input character becomes: "\xHH" or 4 UTF-8 bytes. */
#define PIECE_MAX 4

/* True when the valid UTF-8 sequence of N bytes at S is a bidirectional
 * control: U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069. */
static bool bidi_control(const unsigned char *s, size_t n)
{
	if (n == 2)
		return s[0] == 0xd8 && s[1] == 0x9c;
	if (n != 3 || s[0] != 0xe2)
		return false;
	if (s[1] == 0x80)
		return s[2] == 0x8e || s[2] == 0x8f || (s[2] >= 0xaa && s[2] <= 0xae);
	return s[1] == 0x81 && s[2] >= 0xa6 && s[2] <= 0xa9;
}

size_t escape_kept_len(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n;

	/* C0, DEL and C1 (U+0080..U+009F: 0xc2 0x80..0x9f) are controls */
	if (u[0] < 0x20 || u[0] == 0x7f || u[0] == '\\' || (u[0] == 0xc2 && u[1] < 0xa0))
		return 0;
	n = path_utf8_len(u, strnlen(s, PIECE_MAX));
	return n && !bidi_control(u, n) ? n : 0;
}

/* The piece the character at S (not NUL) is written as: points *OUT at
 * it (inside S or PIECE) and returns its length; *USED receives the input
 * bytes it stands for. An escaped character is escaped byte by byte: the
 * bytes after the first of a bidirectional control are no valid UTF-8 on
 * their own. */
static size_t escape_piece(const unsigned char *s, char piece[PIECE_MAX], const char **out,
			   size_t *used)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = escape_kept_len((const char *)s);

	if (n) {
		*out = (const char *)s;
		*used = n;
		return n;
	}
	*used = 1;
	*out = piece;
	piece[0] = '\\';
	if (s[0] == '\\') {
		piece[1] = '\\';
		return 2;
	}
	piece[1] = 'x';
	piece[2] = hex[s[0] >> 4];
	piece[3] = hex[s[0] & 15];
	return 4;
}

/* Hands IN, escaped, piece by piece to PUT (with ARG) until PUT returns
 * non-zero. Returns what PUT returned last (0 when all of IN went). */
static int escape_each(const char *in, int (*put)(void *arg, const char *p, size_t n), void *arg)
{
	const unsigned char *s = (const unsigned char *)in;
	char piece[PIECE_MAX];
	const char *p;
	size_t n, used;
	int res;

	while (*s) {
		n = escape_piece(s, piece, &p, &used);
		res = put(arg, p, n);
		if (res)
			return res;
		s += used;
	}
	return 0;
}

/* escape_text()'s output: SIZE bytes at OUT, LEN of them written. */
struct text_out {
	char *out;
	size_t size, len;
};

/* Appends a piece while it fits whole with the NUL; else returns 1. */
static int put_text(void *arg, const char *p, size_t n)
{
	struct text_out *t = arg;

	if (t->len + n >= t->size)
		return 1;
	memcpy(t->out + t->len, p, n);
	t->len += n;
	return 0;
}

size_t escape_text(char *out, size_t size, const char *in)
{
	struct text_out t = {out, size, 0};

	if (size == 0)
		return 0;
	escape_each(in, put_text, &t);
	out[t.len] = '\0';
	return t.len;
}

bool escape_has_control(const char *in, size_t len)
{
	const unsigned char *s = (const unsigned char *)in;
	size_t i;

	for (i = 0; i < len; i++)
		if (s[i] < 0x20 || s[i] == 0x7f ||
		    (s[i] == 0xc2 && i + 1 < len && s[i + 1] >= 0x80 && s[i + 1] < 0xa0))
			return true;
	return false;
}

static int put_file(void *arg, const char *p, size_t n)
{
	return fwrite(p, 1, n, arg) != n ? -EIO : 0;
}

int escape_fputs(const char *in, FILE *f)
{
	return escape_each(in, put_file, f);
}

static int put_buf(void *arg, const char *p, size_t n)
{
	struct buf *b = arg;

	return buf_add(b, p, n) != 0 ? b->err : 0;
}

int escape_buf(struct buf *b, const char *in)
{
	return escape_each(in, put_buf, b);
}
