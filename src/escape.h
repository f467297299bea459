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
 *     tab, DEL U+007F, C1 U+0080..U+009F) and every byte that is not part
 *     of valid UTF-8 (path_utf8_len(): no overlong forms, surrogates or
 *     code points above U+10FFFF) are written as "\xHH", lowercase hex,
 *     one escape per byte;
 *   - everything else (printable ASCII, space included, and valid UTF-8
 *     that is no control) is written as it is.
 *
 * Tab and newline are thus free as separators of fields and lines.
 *
 * Thread rules: none; every function may run in any thread.
 */
#ifndef TREELOCKFS_ESCAPE_H
#define TREELOCKFS_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct buf;

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

#endif /* TREELOCKFS_ESCAPE_H */
