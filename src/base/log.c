/* log.c - stderr or syslog sink, see log.h */
#include <config.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "base/escape.h"
#include "base/log.h"

int tl_log_level = LOG_NOTICE;
static const char *log_progname = "treelockfs";
static bool log_syslog;

static const char *const level_names[] = {
	[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert",   [LOG_CRIT] = "crit",
	[LOG_ERR] = "err",     [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
	[LOG_INFO] = "info",   [LOG_DEBUG] = "debug",
};

void tl_log_init(const char *progname, int level)
{
	if (progname)
		log_progname = progname;
	tl_log_level = level;
}

void tl_log_use_syslog(void)
{
	openlog(log_progname, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	log_syslog = true;
}

int tl_log_parse_level(const char *name)
{
	int i;

	if (!name || !*name)
		return -1;
	for (i = LOG_ERR; i <= LOG_DEBUG; i++)
		if (strcmp(name, level_names[i]) == 0)
			return i;
	if (strcmp(name, "error") == 0)
		return LOG_ERR;
	if (strcmp(name, "warn") == 0)
		return LOG_WARNING;
	/* one digit, as options take numbers (config.h): no blank or sign */
	if (name[0] >= '0' + LOG_ERR && name[0] <= '0' + LOG_DEBUG && name[1] == '\0')
		return name[0] - '0';
	return -1;
}

void tl_log_set_level(int level)
{
	__atomic_store_n(&tl_log_level, level, __ATOMIC_RELAXED);
}

const char *tl_log_level_name(int level)
{
	if (level < 0 || level > LOG_DEBUG)
		return "?";
	return level_names[level];
}

void tl_log_write(int level, const char *fmt, ...)
{
	char buf[2048], esc[4 * sizeof(buf)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* names and keys come from users: one message stays one line of text
	 * (escape.h) */
	escape_text(esc, sizeof(esc), buf);
	if (log_syslog) {
		syslog(level, "%s", esc);
		return;
	}
	/* One fprintf per line keeps lines whole across threads. */
	fprintf(stderr, "%s: %s: %s\n", log_progname, tl_log_level_name(level), esc);
}
