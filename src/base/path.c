/* path.c - lock keys, see path.h */
#include <config.h>

#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "base/escape.h"
#include "base/path.h"

int path_normalise(const char *in, char **out)
{
	size_t len, i, o;
	char *p;

	*out = NULL;
	if (!in || in[0] != '/')
		return -EINVAL;
	len = strlen(in); /* of any length: a key is as deep as its entry, not a syscall's path */
	p = malloc(len + 1);
	if (!p)
		return -ENOMEM;
	o = 0;
	for (i = 0; i < len;) {
		size_t start, clen;

		while (i < len && in[i] == '/')
			i++;
		if (i == len)
			break;
		start = i;
		while (i < len && in[i] != '/')
			i++;
		clen = i - start;
		if ((clen == 1 && in[start] == '.') ||
		    (clen == 2 && in[start] == '.' && in[start + 1] == '.')) {
			free(p);
			return -EINVAL;
		}
		p[o++] = '/';
		memcpy(p + o, in + start, clen);
		o += clen;
	}
	if (o == 0)
		p[o++] = '/';
	p[o] = '\0';
	*out = p;
	return 0;
}

bool path_is_normal(const char *p)
{
	/* what path_normalise() leaves as it is, without allocating: "/", or
	 * "/c1/c2..." with no empty, "." or ".." component */
	const char *c;

	if (!p || p[0] != '/')
		return false;
	if (p[1] == '\0')
		return true;
	for (c = p + 1;; c++) {
		const char *e = c;

		while (*e && *e != '/')
			e++;
		if (e == c || (e - c == 1 && c[0] == '.') ||
		    (e - c == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		if (!*e)
			return true;
		c = e;
	}
}

size_t path_depth(const char *p)
{
	size_t d = 0;

	if (p[0] != '/' || p[1] == '\0')
		return 0;
	for (; *p; p++)
		if (*p == '/')
			d++;
	return d;
}

size_t path_parent_len(const char *p, size_t len)
{
	if (len <= 1)
		return 0;
	while (len > 0 && p[len - 1] != '/')
		len--;
	/* len now counts up to and including the last '/' */
	return len <= 1 ? 1 : len - 1;
}

bool path_is_ancestor(const char *anc, const char *p)
{
	size_t n = strlen(anc);

	if (anc[0] != '/' || p[0] != '/')
		return false;
	if (n == 1)
		return p[1] != '\0';
	return strncmp(anc, p, n) == 0 && p[n] == '/';
}

int path_cmp(const char *a, const char *b)
{
	bool pa = a[0] == '/', pb = b[0] == '/';
	size_t da, db;
	int c;

	if (pa != pb)
		return pa ? 1 : -1;
	da = path_depth(a);
	db = path_depth(b);
	if (da != db)
		return da < db ? -1 : 1;
	c = strcmp(a, b); /* strcmp compares as unsigned char */
	return c < 0 ? -1 : c > 0;
}

const char *path_rel(const char *p)
{
	return p[1] == '\0' ? "." : p + 1;
}

int path_digest_hex(const void *data, size_t len, char hex[PATH_DIGEST_HEX_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0, i;

	if (!EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) || mdlen * 2 != PATH_DIGEST_HEX_LEN)
		return -ENOMEM; /* libcrypto fails only when it cannot allocate */
	for (i = 0; i < mdlen; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 0xf];
	}
	hex[2 * mdlen] = '\0';
	return 0;
}

size_t path_utf8_len(const unsigned char *s, size_t n)
{
	size_t len, i;
	unsigned char lo = 0x80, hi = 0xbf;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

int path_key_text(const char *key, char **out)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *k = (const unsigned char *)key;
	size_t n = strlen(key), i, l, o;
	bool valid = true;
	char *t;

	for (i = 0; i < n; i += l) {
		l = path_utf8_len(k + i, n - i);
		if (l == 0) {
			valid = false;
			break;
		}
	}
	if (valid) {
		*out = strdup(key);
		return *out ? 0 : -ENOMEM;
	}
	*out = NULL;
	t = malloc(sizeof(PATH_BYTES_PREFIX) - 1 + 4 * n + 1);
	if (!t)
		return -ENOMEM;
	o = sizeof(PATH_BYTES_PREFIX) - 1;
	memcpy(t, PATH_BYTES_PREFIX, o);
	for (i = 0; i < n; i += l) {
		l = path_utf8_len(k + i, n - i);
		if (l == 0) {
			t[o++] = '\\';
			t[o++] = 'x';
			t[o++] = digits[k[i] >> 4];
			t[o++] = digits[k[i] & 0xf];
			l = 1;
		} else if (k[i] == '\\') {
			t[o++] = '\\';
			t[o++] = '\\';
		} else {
			memcpy(t + o, k + i, l);
			o += l;
		}
	}
	t[o] = '\0';
	*out = t;
	return 0;
}

int path_text_lock_id(const char *text, char **out)
{
	static const char prefix[] = "sha256:";
	size_t len = strlen(text);
	char *id;

	if (len > 0 && len <= PATH_ID_MAX) {
		*out = strdup(text);
		return *out ? 0 : -ENOMEM;
	}
	*out = NULL;
	id = malloc(sizeof(prefix) - 1 + PATH_DIGEST_HEX_LEN + 1);
	if (!id)
		return -ENOMEM;
	memcpy(id, prefix, sizeof(prefix) - 1);
	if (path_digest_hex(text, len, id + sizeof(prefix) - 1) != 0) {
		free(id);
		return -ENOMEM;
	}
	*out = id;
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Decodes the escapes "\\" and "\xHH" (lowercase, not NUL) of S into a
 * new string in *OUT (caller frees). Returns 0, -EINVAL (a bad escape)
 * or -ENOMEM. */
static int unescape_bytes(const char *s, char **out)
{
	size_t o = 0;
	char *k;

	*out = NULL;
	k = malloc(strlen(s) + 1);
	if (!k)
		return -ENOMEM;
	for (; *s; s++) {
		int hi, lo;

		if (*s != '\\') {
			k[o++] = *s;
			continue;
		}
		if (s[1] == '\\') {
			k[o++] = '\\';
			s++;
			continue;
		}
		hi = s[1] == 'x' ? hexval(s[2]) : -1;
		lo = hi >= 0 ? hexval(s[3]) : -1;
		if (lo < 0 || (hi == 0 && lo == 0)) {
			free(k);
			return -EINVAL;
		}
		k[o++] = (char)(hi << 4 | lo);
		s += 3;
	}
	k[o] = '\0';
	*out = k;
	return 0;
}

/* The key that ENCODE writes as TEXT, as a new string in *OUT: TEXT itself
 * without PATH_BYTES_PREFIX, else its escapes decoded, when ENCODE writes
 * that key as TEXT again (one text per key). Returns 0, -EINVAL or
 * -ENOMEM. */
static int key_from(const char *text, int (*encode)(const char *key, char **out), char **out)
{
	size_t pl = sizeof(PATH_BYTES_PREFIX) - 1;
	char *k, *back = NULL;
	int err;

	*out = NULL;
	if (strncmp(text, PATH_BYTES_PREFIX, pl) != 0) {
		*out = strdup(text);
		return *out ? 0 : -ENOMEM;
	}
	err = unescape_bytes(text + pl, &k);
	if (err)
		return err;
	err = encode(k, &back);
	if (!err && strcmp(back, text) != 0)
		err = -EINVAL;
	free(back);
	if (err) {
		free(k);
		return err;
	}
	*out = k;
	return 0;
}

int path_key_from_text(const char *text, char **out)
{
	return key_from(text, path_key_text, out);
}

int path_key_shown(const char *key, char **out)
{
	size_t pl = sizeof(PATH_BYTES_PREFIX) - 1, n = strlen(key), i, l;
	char *t;

	*out = NULL;
	for (i = 0; i < n; i += l) {
		l = key[i] == '\\' ? 1 : escape_kept_len(key + i);
		if (l == 0)
			break;
	}
	if (i == n) {
		*out = strdup(key);
		return *out ? 0 : -ENOMEM;
	}
	/* at most 4 bytes ("\xHH") per byte of KEY */
	t = malloc(pl + 4 * n + 1);
	if (!t)
		return -ENOMEM;
	memcpy(t, PATH_BYTES_PREFIX, pl);
	escape_text(t + pl, 4 * n + 1, key);
	*out = t;
	return 0;
}

int path_key_from_shown(const char *text, char **out)
{
	return key_from(text, path_key_shown, out);
}

int path_lock_id(const char *key, char **out)
{
	char *text;
	int err;

	*out = NULL;
	err = path_key_text(key, &text);
	if (err)
		return err;
	err = path_text_lock_id(text, out);
	free(text);
	return err;
}
