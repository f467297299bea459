/* buf.h - a growable byte buffer with an optional cap
 *
 * One buffer for what we build (ndjson bulk bodies) and what we receive
 * (HTTP response bodies). The contents are always NUL-terminated so they
 * can be handed to string functions. An append that would pass the cap, or
 * that finds no memory, fails and leaves the buffer *failed*: every later
 * append is ignored, so a builder may append many items and check once at
 * the end (like curl's dynbuf and git's strbuf).
 *
 * Thread rules: none; a buffer belongs to one thread at a time.
 */
#ifndef TREELOCKFS_BASE_BUF_H
#define TREELOCKFS_BASE_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct buf {
	char *data;      /* NUL-terminated once anything was added, else NULL */
	size_t len;      /* bytes held, without the NUL */
	size_t cap;      /* bytes allocated */
	size_t max;      /* cap on len; 0: no cap */
	int err;         /* 0, or the first failure: -ENOMEM or -EMSGSIZE (cap) */
};

#define BUF_INIT {NULL, 0, 0, 0, 0}

/* Empties B and sets its cap (0: none). B must not hold memory. This
 * function can't fail. */
void buf_init(struct buf *b, size_t max);

/* Appends N bytes at P. Returns 0, -EMSGSIZE when len would pass the cap,
 * -ENOMEM; on failure B keeps what it held and stays failed (b->err). */
int buf_add(struct buf *b, const void *p, size_t n);

/* Appends the string S (without its NUL). As buf_add(). */
int buf_adds(struct buf *b, const char *s);

/* Hands the contents to the caller (free()): "" when empty, NULL when out
 * of memory. *LEN (may be NULL) receives the length. B is emptied. */
char *buf_detach(struct buf *b, size_t *len);

/* Frees what B holds and empties it (the cap stays); accepts NULL. */
void buf_free(struct buf *b);

#endif /* TREELOCKFS_BASE_BUF_H */
