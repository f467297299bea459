/* path.h - lock keys: normalisation, ancestors, order, lock ids
 *
 * A lock key is a path relative to the mount root, starting with '/', with
 * no empty, "." or ".." component and no trailing '/'; the root is "/".
 * Any byte but NUL may appear in a component (spaces, newlines, '%', UTF-8
 * or not): keys are byte strings, never interpreted as text.
 *
 * Nothing here does I/O or takes locks; every function is thread-safe.
 */
#ifndef TREELOCKFS_BASE_PATH_H
#define TREELOCKFS_BASE_PATH_H

#include <stdbool.h>
#include <stddef.h>

/* The longest id Elasticsearch accepts, in bytes. */
#define PATH_ID_MAX 512

/* Normalises IN into a new string in *OUT (caller frees): collapses
 * repeated slashes and drops a trailing one. IN may be of any length:
 * PATH_MAX bounds one syscall's path, not how deep an entry sits. Returns
 * 0, -EINVAL when IN is not absolute or has a "." or ".." component,
 * -ENOMEM. */
int path_normalise(const char *in, char **out);

/* True when P is a normalised key (see above). */
bool path_is_normal(const char *p);

/* Number of components: 0 for "/", 2 for "/a/b". */
size_t path_depth(const char *p);

/* Length of the parent of the first LEN bytes of P: "/a/b" -> 2 ("/a"),
 * "/a" -> 1 ("/"), "/" -> 0 (no parent). */
size_t path_parent_len(const char *p, size_t len);

/* True when ANC is a proper ancestor of P ("/" is one of every other key). */
bool path_is_ancestor(const char *anc, const char *p);

/* The total order of lock acquisition: fewer components first, then
 * bytewise (unsigned). Ancestors therefore come before descendants, and
 * reversing the order releases the longest paths first. Keys that are not
 * paths (such as "global") sort before every path. */
int path_cmp(const char *a, const char *b);

/* The path relative to the backing directory: "." for "/", else P + 1. */
const char *path_rel(const char *p);

#define PATH_DIGEST_HEX_LEN 64

/* Writes the lowercase hex SHA-256 digest of LEN bytes at DATA and a NUL
 * to HEX (libcrypto computes it, so a lock id does not depend on which TLS
 * library libcurl was built with). Returns 0, or -ENOMEM when libcrypto
 * cannot allocate. Thread-safe. */
int path_digest_hex(const void *data, size_t len, char hex[PATH_DIGEST_HEX_LEN + 1]);

/* Length of the valid UTF-8 sequence at S (N bytes left, N >= 1), 0 when
 * invalid: no overlong forms, surrogates or code points above U+10FFFF.
 * This function can't fail. */
size_t path_utf8_len(const unsigned char *s, size_t n);

/* Marks a key text that escapes bytes (see path_key_text()). */
#define PATH_BYTES_PREFIX "bytes:"

/* The text of KEY for a store that holds UTF-8 only (JSON): KEY itself when
 * it is valid UTF-8, else PATH_BYTES_PREFIX and KEY with every byte that
 * is not part of a valid UTF-8 sequence written "\xHH" (two lowercase hex
 * digits) and every backslash written "\\". The mapping is injective
 * (a key starts with '/' or is "global", never with the prefix) and the
 * result is valid UTF-8. Writes a new string to *OUT (caller frees).
 * Returns 0 or -ENOMEM. */
int path_key_text(const char *key, char **out);

/* The inverse of path_key_text(): the key whose text is TEXT, as a new
 * string in *OUT (caller frees). TEXT without PATH_BYTES_PREFIX is the key
 * itself. Returns 0, -EINVAL (TEXT is no key's text: a bad escape, an
 * escaped NUL, or a byte left unescaped that path_key_text() escapes) or
 * -ENOMEM. */
int path_key_from_text(const char *text, char **out);

/* KEY as listings for people show it (treelockctl's tables and --json):
 * KEY itself when it is valid UTF-8 and holds no character that escape.h
 * escapes but the backslash (no control, no bidirectional control), else
 * PATH_BYTES_PREFIX and KEY escaped by escape.h's rules (every such byte
 * "\xHH", every backslash "\\"). For a key that is not UTF-8 and holds
 * no control this is path_key_text(KEY); unlike that text, it holds no
 * byte that could steer a terminal or reorder a line. The mapping is
 * injective as path_key_text()'s is. Writes a new string to *OUT (caller
 * frees). Returns 0 or -ENOMEM. */
int path_key_shown(const char *key, char **out);

/* The inverse of path_key_shown(), as path_key_from_text() is of
 * path_key_text(): 0, -EINVAL (TEXT is no key as shown) or -ENOMEM. */
int path_key_from_shown(const char *text, char **out);

/* The document id for KEY in a lock store limited to PATH_ID_MAX bytes:
 * path_key_text(KEY) when it fits, else "sha256:" and the hex digest of
 * that text (the same as of KEY when KEY is valid UTF-8). Writes a new
 * string to *OUT (caller frees). Returns 0 or -ENOMEM. */
int path_lock_id(const char *key, char **out);

/* The same for a key already written as its text (path_key_text()). */
int path_text_lock_id(const char *text, char **out);

#endif /* TREELOCKFS_BASE_PATH_H */
