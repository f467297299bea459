/* log.h - the one log sink of treelockfs and treelockctl
 *
 * Messages go to stderr until tl_log_use_syslog() is called (daemon mode),
 * then to syslog with the program name. Levels are syslog's (LOG_ERR ..
 * LOG_DEBUG). tl_log() checks the level before its arguments are formatted,
 * so debug lines cost one comparison when debug is off.
 *
 * Style: lowercase, no final period, what failed first, subject quoted:
 *   tl_log(LOG_ERR, "cannot acquire lock on '%s': %s", path, strerror(-err));
 *
 * Thread rules: all functions may be called from any thread after
 * tl_log_init(); tl_log_init() and tl_log_use_syslog() are called once from
 * main() before threads start.
 */
#ifndef TREELOCKFS_BASE_LOG_H
#define TREELOCKFS_BASE_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <syslog.h>

/* The current threshold; messages above it are dropped. Read without a
 * lock; changed at run time only with tl_log_set_level(). */
extern int tl_log_level;

/* Changes the threshold, from any thread. This function can't fail. */
void tl_log_set_level(int level);

/* Sets the program name (for syslog and stderr prefixes) and threshold. */
void tl_log_init(const char *progname, int level);

/* Sends further messages to syslog (LOG_DAEMON) instead of stderr. */
void tl_log_use_syslog(void);

/* Parses "err", "warning", "notice", "info", "debug" ("error", "warn", or
 * one digit 3..7: no blank or sign, as options take numbers).
 * Returns the level, or -1 for anything else. This function can't fail
 * otherwise. */
int tl_log_parse_level(const char *name);

/* Name of a level for messages ("debug" for LOG_DEBUG). */
const char *tl_log_level_name(int level);

/* Formats and writes one message; user text in it is escaped (escape.h):
 * pass names raw, never pre-escaped. Call it through tl_log(). */
void tl_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define tl_log(level, ...)                                                                         \
	do {                                                                                       \
		if ((level) <= tl_log_level)                                                       \
			tl_log_write((level), __VA_ARGS__);                                        \
	} while (0)

#endif /* TREELOCKFS_BASE_LOG_H */
