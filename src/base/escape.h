/* escape.h - the one escaper for text from users in lines we write
 *
 * Names, lock keys, URLs and option values come from users and may hold
 * any byte. Wherever such text goes into a line of ours (a log message, a
 * problem reported at start, a row of .treelockfs/locks, the hold log) it
 * is written by these rules, so that one input is one line of valid
 * UTF-8 text, cannot pass for another line or field, and can be decoded
 * again without ambiguity:
 *
 *   - a backslash is written as "\\";
 *   - a control character (C0 U+0000..U+001F, which includes newline and
 *     tab, DEL U+007F, C1 U+0080..U+009F), a Unicode bidirectional
 *     control (U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069:
 *     invisible, they reorder what a terminal or an editor shows, so that
 *     a name could read as another) and every byte that is not part of
 *     valid UTF-8 (path_utf8_len(): no overlong forms, surrogates or code
 *     points above U+10FFFF) are written as "\xHH", lowercase hex, one
 *     escape per byte (U+202E is "\xe2\x80\xae");
 *   - everything else (printable ASCII, space included, and valid UTF-8
 *     that is none of these controls) is written as it is.
 *
 * Tab and newline are thus free as separators of fields and lines.
 *
 * Thread rules: none; every function may run in any thread.
 */
#ifndef TREELOCKFS_BASE_ESCAPE_H
#define TREELOCKFS_BASE_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct buf;

/* The length of the character at S (not NUL) when it is written as it is,
 * 0 when it is escaped (a backslash, a control, a bidirectional control,
 * a byte that is not part of valid UTF-8). This function can't fail. */
size_t escape_kept_len(const char *s);

/* Writes IN escaped to OUT (SIZE bytes, always NUL-terminated when SIZE >
 * 0), stopping before an escape or character that would not fit whole.
 * Returns the length written. This function can't fail. */
size_t escape_text(char *out, size_t size, const char *in);

/* Whether the LEN bytes at IN hold a control character (C0, newline and
 * tab among them, DEL, or C1 as UTF-8), which input that must stay one
 * line or one value may refuse. Bytes that are not valid UTF-8 are no
 * control characters here. This function can't fail. */
bool escape_has_control(const char *in, size_t len);

/* Writes IN escaped to F. Returns 0 or -EIO (F's error). */
int escape_fputs(const char *in, FILE *f);

/* Appends IN escaped to B. Returns 0 or B's error (buf_add(); B stays
 * failed). */
int escape_buf(struct buf *b, const char *in);

#endif /* TREELOCKFS_BASE_ESCAPE_H */
