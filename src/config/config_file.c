/* config_file.c - the files a configuration is read from: the config file
 * (config=FILE) and the stores' secret files, see config.h
 *
 * A config file's "name = value" lines are turned into "-o name=value"
 * arguments and parsed with the command line's options, so the two can
 * never disagree about what an option means. Each line is checked first
 * (an option of ours, or one of libfuse that a file may carry, with or
 * without the value it takes), so that a problem names its line.
 */
#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_opt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "config/config_i.h"

char *config_file_find(const struct fuse_args *args)
{
	char *found = NULL;
	int i;

	for (i = 1; i < args->argc; i++) {
		const char *a = args->argv[i];
		const char *o = NULL;

		if (strncmp(a, "--config=", 9) == 0) {
			o = a + 9;
		} else if (strcmp(a, "--config") == 0 && i + 1 < args->argc) {
			o = args->argv[i + 1];
		} else if (strncmp(a, "-o", 2) == 0) {
			const char *list = a[2] ? a + 2 : (i + 1 < args->argc ? args->argv[i + 1] : "");
			const char *p = list;

			while (p && *p) {
				const char *end = strchr(p, ',');
				size_t len = end ? (size_t)(end - p) : strlen(p);

				if (len >= 7 && strncmp(p, "config=", 7) == 0) {
					free(found);
					found = strndup(p + 7, len - 7);
				}
				p = end ? end + 1 : NULL;
			}
			continue;
		}
		if (o) {
			free(found);
			found = strdup(o);
		}
	}
	return found;
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

char *config_opt_escape(const char *s)
{
	char *out = malloc(strlen(s) * 2 + 1), *o = out;

	if (!out)
		return NULL;
	for (; *s; s++) {
		if (*s == ',' || *s == '\\')
			*o++ = '\\';
		*o++ = *s;
	}
	*o = '\0';
	return out;
}

/* Checks config file line LINENO of FILE: NAME with VALUE (NULL: the line
 * had no '='), OPT as it will be parsed. Returns whether it is an option
 * of ours or of libfuse with what it takes; else appends the problem. */
static bool file_line_valid(struct tl_config *cfg, const char *file, unsigned lineno,
			    const char *name, const char *value, const char *opt)
{
	char *probe, kind;
	bool known;

	if (*name == '\0') {
		config_error(cfg, "config file '%s' line %u: expected name = value", file, lineno);
		return false;
	}
	if (config_option_known(opt))
		return true;
	kind = config_libfuse_kind(name);
	if (kind) {
		if (kind == 'f' && value) {
			config_error(cfg, "config file '%s' line %u: '%s' takes no value", file,
				     lineno, name);
			return false;
		}
		if (kind != 'f' && !value) {
			config_error(cfg, "config file '%s' line %u: '%s' needs a value", file,
				     lineno, name);
			return false;
		}
		/* a 'u' value is checked with the command line's, naming this
		 * line (config_libfuse_number()) */
		return true;
	}
	/* one of ours, but with or without a value it does not take */
	if (value) {
		known = config_option_known(name);
	} else {
		known = false;
		if (asprintf(&probe, "%s=x", name) >= 0) {
			known = config_option_known(probe);
			free(probe);
		}
	}
	if (known)
		config_error(cfg, "config file '%s' line %u: '%s' %s", file, lineno, name,
			     value ? "takes no value" : "needs a value");
	else
		config_error(cfg, "config file '%s' line %u: unknown option '%s'", file, lineno,
			     name);
	return false;
}

/* Remembers that line LINENO set NAME to VALUE, for config_value_error(). */
static int add_origin(struct tl_config *cfg, const char *name, const char *value,
		      unsigned lineno)
{
	struct tl_config_origin *o;

	if (strncmp(name, "--", 2) == 0)
		name += 2;
	o = realloc(cfg->origins, (cfg->norigins + 1) * sizeof(*o));
	if (!o)
		return -ENOMEM;
	cfg->origins = o;
	o += cfg->norigins;
	o->name = strdup(name);
	o->value = strdup(value);
	o->line = lineno;
	if (!o->name || !o->value) {
		free(o->name);
		free(o->value);
		return -ENOMEM;
	}
	cfg->norigins++;
	return 0;
}

bool config_file_trusted(const struct stat *st, uid_t euid, bool root_too, char *why,
			 size_t size)
{
	if (st->st_uid != euid && !(root_too && st->st_uid == 0)) {
		if (euid == 0)
			snprintf(why, size, "owned by uid %u, not root", (unsigned)st->st_uid);
		else
			snprintf(why, size, "owned by uid %u, not by uid %u%s",
				 (unsigned)st->st_uid, (unsigned)euid, root_too ? " or root" : "");
		return false;
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, size, "writable by group or others");
		return false;
	}
	return true;
}

/* Opens config file FILE for reading, refusing what is not a regular file
 * (a directory, /dev/zero, a FIFO that would block), is larger than
 * TL_CONFIG_MAX_SIZE, or config_file_trusted() refuses. Returns the
 * stream or NULL (problem appended). */
static FILE *config_file_open(struct tl_config *cfg, const char *file)
{
	char why[96];
	struct stat st;
	FILE *f;
	int fd;

	/* O_NONBLOCK: opening a FIFO must not wait for a writer */
	fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd == -1) {
		config_error(cfg, "cannot read config file '%s': %s", file, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) != 0) {
		config_error(cfg, "cannot read config file '%s': %s", file, strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		config_error(cfg, "cannot read config file '%s': not a regular file", file);
		goto out_close;
	}
	if (!config_file_trusted(&st, geteuid(), true, why, sizeof(why))) {
		config_error(cfg, "cannot use config file '%s': %s", file, why);
		goto out_close;
	}
	if (st.st_size > TL_CONFIG_MAX_SIZE) {
		config_error(cfg, "config file '%s' is larger than %d bytes", file,
			     TL_CONFIG_MAX_SIZE);
		goto out_close;
	}
	f = NULL;
	if (fcntl(fd, F_SETFL, 0) != -1)
		f = fdopen(fd, "r");
	if (!f) {
		config_error(cfg, "cannot read config file '%s': %s", file, strerror(errno));
		goto out_close;
	}
	return f;

out_close:
	close(fd);
	return NULL;
}

int config_file_parse(struct tl_config *cfg, const char *file, struct config_parse_ctx *ctx)
{
	struct fuse_args fargs = FUSE_ARGS_INIT(0, NULL);
	char *line = NULL;
	size_t cap = 0, total = 0;
	unsigned lineno = 0;
	ssize_t n;
	FILE *f;
	int err = 0;

	f = config_file_open(cfg, file);
	if (!f)
		return 0;
	fuse_opt_add_arg(&fargs, "config");
	free(cfg->origin_file);
	cfg->origin_file = strdup(file);
	if (!cfg->origin_file) {
		fclose(f);
		return -ENOMEM;
	}
	for (;;) {
		char *s, *eq, *opt, *val, *raw;

		errno = 0;
		n = getline(&line, &cap, f);
		if (n < 0) {
			if (ferror(f))
				config_error(cfg, "cannot read config file '%s': %s", file,
					     strerror(errno ? errno : EIO));
			break;
		}
		lineno++;
		total += (size_t)n;
		if (total > TL_CONFIG_MAX_SIZE) {
			config_error(cfg, "config file '%s' is larger than %d bytes", file,
				     TL_CONFIG_MAX_SIZE);
			break;
		}
		if ((size_t)n > TL_CONFIG_MAX_LINE) {
			config_error(cfg, "config file '%s' line %u: longer than %d bytes", file,
				     lineno, TL_CONFIG_MAX_LINE);
			continue;
		}
		s = trim(line);
		if (*s == '\0' || *s == '#' || *s == ';')
			continue;
		eq = strchr(s, '=');
		raw = NULL;
		if (eq) {
			*eq = '\0';
			raw = trim(eq + 1);
			s = trim(s);
			val = config_opt_escape(raw);
			if (!val) {
				err = -ENOMEM;
				break;
			}
			if (asprintf(&opt, "%s=%s", s, val) < 0)
				opt = NULL;
			free(val);
		} else {
			opt = strdup(s);
		}
		if (!opt) {
			err = -ENOMEM;
			break;
		}
		if (strncmp(opt, "config=", 7) == 0) {
			config_error(cfg, "config file '%s' line %u: a config file cannot name another",
				     file, lineno);
			free(opt);
			continue;
		}
		if (!file_line_valid(cfg, file, lineno, s, raw, opt)) {
			free(opt);
			continue;
		}
		if (raw && add_origin(cfg, s, raw, lineno) != 0) {
			free(opt);
			err = -ENOMEM;
			break;
		}
		fuse_opt_add_arg(&fargs, "-o");
		fuse_opt_add_arg(&fargs, opt);
		free(opt);
	}
	free(line);
	fclose(f);
	if (!err) {
		ctx->file = file;
		if (config_parse_args(&fargs, cfg) == -1)
			config_error(cfg, "config file '%s': cannot parse", file);
		ctx->file = NULL;
	}
	fuse_opt_free_args(&fargs);
	return err;
}

char *config_read_secret(struct tl_config *cfg, const char *what, const char *file)
{
	char why[96];
	struct stat st;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	FILE *f;

	f = fopen(file, "re");
	if (!f) {
		config_error(cfg, "cannot read %s '%s': %s", what, file, strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) != 0 || (st.st_mode & 077)) {
		config_error(cfg, "%s '%s' is accessible by group or others: chmod 600 it", what,
			     file);
		fclose(f);
		return NULL;
	}
	if (!config_file_trusted(&st, geteuid(), true, why, sizeof(why))) {
		config_error(cfg, "cannot use %s '%s': %s", what, file, why);
		fclose(f);
		return NULL;
	}
	n = getline(&line, &cap, f);
	fclose(f);
	if (n <= 0) {
		free(line);
		config_error(cfg, "%s '%s' is empty", what, file);
		return NULL;
	}
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	return line;
}
