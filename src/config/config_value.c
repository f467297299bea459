/* config_value.c - one option's value (the syntax of numbers, words and
 * file names) and the problems found in a configuration, see config.h */
#include <config.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/escape.h"
#include "config/config.h"
#include "config/config_i.h"

/* Appends LINE, escaped (escape.h: values from a config file or
 * the command line may hold any byte), as one line of cfg->errors. */
static void config_error_add(struct tl_config *cfg, const char *line)
{
	char esc[4 * 1024 + 1];
	size_t old = cfg->errors ? strlen(cfg->errors) : 0, add;
	char *e;

	add = escape_text(esc, sizeof(esc), line);
	e = realloc(cfg->errors, old + add + 2);
	if (!e)
		return;
	memcpy(e + old, esc, add);
	e[old + add] = '\n';
	e[old + add + 1] = '\0';
	cfg->errors = e;
}

void config_error(struct tl_config *cfg, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	config_error_add(cfg, line);
}

/* The config file line that set option NAME to VALUE, or NULL when
 * VALUE did not come from the file (the command line set another). */
static const struct tl_config_origin *config_origin(const struct tl_config *cfg,
						    const char *name, const char *value)
{
	size_t i;

	if (!value)
		return NULL;
	for (i = cfg->norigins; i-- > 0;)
		if (strcmp(cfg->origins[i].name, name) == 0)
			return strcmp(cfg->origins[i].value, value) == 0 ? &cfg->origins[i] : NULL;
	return NULL;
}

void config_value_error(struct tl_config *cfg, const char *name, const char *value,
			const char *fmt, ...)
{
	const struct tl_config_origin *o = config_origin(cfg, name, value);
	char line[1024], where[512] = "";
	va_list ap;

	if (o)
		snprintf(where, sizeof(where), "config file '%s' line %u: ", cfg->origin_file,
			 o->line);
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	config_error(cfg, "%s%s", where, line);
}

int config_parse_word(struct tl_config *cfg, const char *name, const char *value,
		      const char *const *words)
{
	char expected[160] = "";
	size_t i, n, len;

	for (n = 0; words[n]; n++)
		if (strcmp(value, words[n]) == 0)
			return (int)n;
	for (i = 0; i < n; i++) {
		len = strlen(expected);
		snprintf(expected + len, sizeof(expected) - len, "%s%s",
			 i == 0 ? "" : i + 1 == n ? " or " : ", ", words[i]);
	}
	config_value_error(cfg, name, value, "invalid %s '%s': expected %s", name, value,
			   expected);
	return 0;
}

int config_scan_seconds(const char *s, double min, double max, double *out)
{
	size_t whole = strspn(s, "0123456789"), frac = 0;
	double v;

	/* "12" or "12.5": no sign, blank, exponent, hex, inf or nan that
	 * strtod() would take */
	if (whole == 0)
		return -EINVAL;
	if (s[whole] == '.') {
		frac = strspn(s + whole + 1, "0123456789");
		if (frac == 0)
			return -EINVAL;
		frac++;
	}
	if (s[whole + frac] != '\0')
		return -EINVAL;
	/* the digits are plain: strtod() only rounds them (no locale
	 * is set, the point is '.'); too many digits make inf, refused */
	v = strtod(s, NULL);
	if (!isfinite(v) || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int config_scan_uint(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
	size_t n = strspn(s, "0123456789");
	unsigned long v;

	/* digits only: strtoul() would take blanks, a sign and wrap "-1" */
	if (n == 0 || s[n] != '\0')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, NULL, 10);
	if (errno || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

bool config_parse_seconds(struct tl_config *cfg, const char *name, const char *s, double min,
			  double max, double *out)
{
	if (!s)
		return true;
	if (config_scan_seconds(s, min, max, out) != 0) {
		config_value_error(cfg, name, s, "invalid %s '%s': expected decimal seconds from "
				   "%g to %g", name, s, min, max);
		return false;
	}
	return true;
}

bool config_parse_uint(struct tl_config *cfg, const char *name, const char *s, unsigned long min,
		       unsigned long max, unsigned int *out)
{
	unsigned long v;

	if (!s)
		return true;
	if (max > UINT_MAX)
		max = UINT_MAX;
	if (config_scan_uint(s, min, max, &v) != 0) {
		config_value_error(cfg, name, s,
				   "invalid %s '%s': expected a whole number from %lu to %lu", name,
				   s, min, max);
		return false;
	}
	*out = (unsigned int)v;
	return true;
}

bool config_path_absolute(struct tl_config *cfg, const char *name, char **path)
{
	char *cwd, *abs = NULL;

	if ((*path)[0] == '/')
		return true;
	cwd = getcwd(NULL, 0);
	if (!cwd) {
		config_error(cfg, "cannot use %s '%s': the working directory: %s", name, *path,
			     strerror(errno));
		return false;
	}
	if (asprintf(&abs, "%s/%s", cwd, *path) < 0)
		abs = NULL;
	free(cwd);
	if (!abs) {
		config_error(cfg, "cannot use %s '%s': out of memory", name, *path);
		return false;
	}
	free(*path);
	*path = abs;
	return true;
}

bool config_parse_file_name(struct tl_config *cfg, const char *name, char **path)
{
	const char *base;

	base = strrchr(*path, '/');
	base = base ? base + 1 : *path;
	if (!base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
		config_error(cfg, "invalid %s '%s': expected a file name", name, *path);
		return false;
	}
	return config_path_absolute(cfg, name, path);
}
