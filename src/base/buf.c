/* buf.c - growable byte buffer with an optional cap, see buf.h */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

#define BUF_FIRST_CAP 1024

void buf_init(struct buf *b, size_t max)
{
	memset(b, 0, sizeof(*b));
	b->max = max;
}

int buf_add(struct buf *b, const void *p, size_t n)
{
	size_t cap;
	char *d;

	if (b->err)
		return b->err;
	if ((b->max && n > b->max - b->len) || n >= (size_t)-1 - b->len) {
		b->err = -EMSGSIZE;
		return b->err;
	}
	if (b->len + n + 1 > b->cap) {
		cap = b->cap ? b->cap : BUF_FIRST_CAP;
		while (cap < b->len + n + 1)
			cap = cap > (size_t)-1 / 2 ? b->len + n + 1 : cap * 2;
		d = realloc(b->data, cap);
		if (!d) {
			b->err = -ENOMEM;
			return b->err;
		}
		b->data = d;
		b->cap = cap;
	}
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int buf_adds(struct buf *b, const char *s)
{
	return buf_add(b, s, strlen(s));
}

char *buf_detach(struct buf *b, size_t *len)
{
	char *s = b->data ? b->data : strdup("");
	size_t max = b->max;

	if (len)
		*len = b->data ? b->len : 0;
	buf_init(b, max);
	return s;
}

void buf_free(struct buf *b)
{
	if (!b)
		return;
	free(b->data);
	buf_init(b, b->max);
}
