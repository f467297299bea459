/* options.c - options of treelockfs and treelockctl, see options.h
 *
 * One fuse_opt table serves the command line and the config file: a file's
 * "key = value" lines are turned into "-o key=value" arguments and parsed
 * with the same table, so the two can never disagree about what an option
 * means. Problems are collected in cfg->errors and reported all at once.
 */
#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_opt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/escape.h"
#include "lock/lockstore.h"
#include "base/log.h"
#include "config/config.h"
#include "base/path.h"

enum {
	KEY_HELP,
	KEY_VERSION,
	KEY_FOREGROUND,
	KEY_DEBUG,
	KEY_ALLOW_OTHER,
	KEY_NO_ALLOW_OTHER,
	KEY_CONFIG_FILE_ONLY,
	KEY_NOATIME,
	KEY_ATIME,
	KEY_RELATIME,
	KEY_ATIME_REFUSED,
};

#define OPT_STR(name, field) TL_OPT_STR(name, struct tl_config, field)

/* The options of backend I (lockstore_backends), or NULL: none. */
static const struct tl_store_options *store_options(size_t i)
{
	return lockstore_backends[i].options;
}

/* a holder id "OWNER#TICKET" fits tl_holder's id with any ticket */
_Static_assert(TL_OWNER_MAX + 1 + 20 < sizeof(((struct tl_holder *)0)->id),
	       "owner= names must fit holder ids");

static const struct fuse_opt tl_opts[] = {
	OPT_STR("lock_store", lock_store_s),
	OPT_STR("lock_strategy", lock_strategy_s),
	OPT_STR("lock_scope", lock_scope_s),
	OPT_STR("lock_timeout", lock_timeout_s),
	OPT_STR("rename_delay_ms", rename_delay_ms_s),
	OPT_STR("hold_log", hold_log),
	OPT_STR("metrics_file", metrics_file),
	OPT_STR("metrics_interval", metrics_interval_s),
	OPT_STR("entry_timeout", entry_timeout_s),
	OPT_STR("attr_timeout", attr_timeout_s),
	OPT_STR("negative_timeout", negative_timeout_s),
	OPT_STR("passthrough", passthrough_s),
	OPT_STR("inode_prune", inode_prune_s),
	OPT_STR("log_level", log_level_s),
	OPT_STR("config", config_file),
	/* "--config FILE", two words, as the man page and --help promise */
	{"--config %s", offsetof(struct tl_config, config_file), 0},
	OPT_STR("owner", owner),
	OPT_STR("lease_ttl", lease_ttl_s),
	TL_OPT_BOOL("export_support", struct tl_config, export_support),
	OPT_STR("export_remember", export_remember_s),
	OPT_STR("lock_waiters", lock_waiters_s),
	OPT_STR("lock_waiters_per_user", lock_waiters_per_user_s),
	FUSE_OPT_KEY("--allow_other", KEY_ALLOW_OTHER),
	FUSE_OPT_KEY("allow_other", KEY_ALLOW_OTHER),
	FUSE_OPT_KEY("--no_allow_other", KEY_NO_ALLOW_OTHER),
	FUSE_OPT_KEY("no_allow_other", KEY_NO_ALLOW_OTHER),
	/* atime: reads through the mount are the daemon's reads of BACKING */
	FUSE_OPT_KEY("noatime", KEY_NOATIME),
	FUSE_OPT_KEY("atime", KEY_ATIME),
	FUSE_OPT_KEY("relatime", KEY_RELATIME),
	FUSE_OPT_KEY("diratime", KEY_RELATIME),
	FUSE_OPT_KEY("strictatime", KEY_ATIME_REFUSED),
	FUSE_OPT_KEY("nodiratime", KEY_ATIME_REFUSED),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("-f", KEY_FOREGROUND),
	FUSE_OPT_KEY("-d", KEY_DEBUG),
	FUSE_OPT_KEY("debug", KEY_DEBUG),
	FUSE_OPT_END,
};

/* Parsing context of the callback (fuse_opt passes only cfg). */
struct parse_ctx {
	struct tl_config *cfg;
	bool for_ctl;
	const char *file;   /* non-NULL while parsing a config file */
	struct fuse_args *passthrough; /* file options for libfuse */
};

static __thread struct parse_ctx *cur;

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

/* The words of the options that name one of a few choices, in the order
 * of their enums (options.h). */
static const char *const passthrough_words[] = {"auto", "on", "off"};
static const char *const inode_prune_words[] = {"auto", "names", "off"};
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* VALUE of option NAME as the index of its word among WORDS (N of them),
 * or 0 after an error that names the words. */
static int config_parse_word(struct tl_config *cfg, const char *name, const char *value,
			     const char *const *words, size_t n)
{
	char expected[160] = "";
	size_t i, len;

	for (i = 0; i < n; i++)
		if (strcmp(value, words[i]) == 0)
			return (int)i;
	for (i = 0; i < n; i++) {
		len = strlen(expected);
		snprintf(expected + len, sizeof(expected) - len, "%s%s",
			 i == 0 ? "" : i + 1 == n ? " or " : ", ", words[i]);
	}
	config_value_error(cfg, name, value, "invalid %s '%s': expected %s", name, value,
			   expected);
	return 0;
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs);
static void check_libfuse_number(struct tl_config *cfg, const char *opt);

int config_init(struct tl_config *cfg)
{
	char host[256];
	size_t i;

	memset(cfg, 0, sizeof(*cfg));
	/* strdup the defaults: fuse_opt frees a string option it overwrites */
	cfg->lock_store_s = strdup("mem");
	cfg->lock_strategy_s = strdup("tree");
	cfg->lock_scope_s = strdup("rename");
	cfg->passthrough_s = strdup("auto");
	cfg->inode_prune_s = strdup("auto");
	if (gethostname(host, sizeof(host)) != 0)
		strcpy(host, "localhost");
	host[TL_OWNER_MAX] = '\0'; /* a default always fits (validate_owner()) */
	cfg->owner = strdup(host);
	cfg->log_level = LOG_NOTICE;
	cfg->lock_timeout = TL_DEFAULT_LOCK_TIMEOUT;
	cfg->entry_timeout = TL_DEFAULT_ENTRY_TIMEOUT;
	cfg->attr_timeout = TL_DEFAULT_ATTR_TIMEOUT;
	cfg->negative_timeout = TL_DEFAULT_NEGATIVE_TIMEOUT;
	cfg->lease_ttl = TL_DEFAULT_LEASE_TTL;
	cfg->metrics_interval = TL_DEFAULT_METRICS_INTERVAL;
	cfg->export_remember = TL_DEFAULT_EXPORT_REMEMBER;
	cfg->lock_waiters = TL_DEFAULT_LOCK_WAITERS;
	cfg->lock_waiters_per_user = TL_DEFAULT_LOCK_WAITERS_PER_USER;
	if (!cfg->lock_store_s || !cfg->lock_strategy_s || !cfg->lock_scope_s || !cfg->owner ||
	    !cfg->passthrough_s || !cfg->inode_prune_s)
		return -ENOMEM;
	for (i = 0; i < TL_STORE_COUNT; i++) {
		const struct tl_store_options *so = store_options(i);

		if (!so)
			continue;
		cfg->store_opts[i] = calloc(1, so->size);
		if (!cfg->store_opts[i] || so->init(cfg->store_opts[i]) != 0)
			return -ENOMEM;
	}
	return 0;
}

void *config_store_opts(const struct tl_config *cfg, enum tl_store_kind kind)
{
	return kind < TL_STORE_COUNT ? cfg->store_opts[kind] : NULL;
}

/* Runs every backend's table, then ours, over ARGS. Returns 0 or -1. */
static int parse_all(struct fuse_args *args, struct tl_config *cfg)
{
	size_t i;

	for (i = 0; i < TL_STORE_COUNT; i++)
		if (store_options(i) &&
		    fuse_opt_parse(args, cfg->store_opts[i], store_options(i)->opts, NULL) == -1)
			return -1;
	return fuse_opt_parse(args, cfg, tl_opts, opt_proc);
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct tl_config *cfg = data;
	struct parse_ctx *ctx = cur;

	switch (key) {
	case KEY_HELP:
		cfg->show_help = 1;
		return 0;
	case KEY_VERSION:
		cfg->show_version = 1;
		return 0;
	case KEY_FOREGROUND:
		cfg->foreground = 1;
		return 1; /* libfuse needs it too */
	case KEY_DEBUG:
		cfg->debug = 1;
		cfg->foreground = 1;
		return ctx->for_ctl ? 0 : 1;
	case KEY_ALLOW_OTHER:
		cfg->allow_other = 1;
		return 0; /* main() passes allow_other,default_permissions on */
	case KEY_NO_ALLOW_OTHER:
		cfg->allow_other = 0;
		return 0;
	case KEY_RELATIME:
		/* the kernel's default for a new mount (libfuse 3.14 does not
		 * know the name); atime is then as BACKING's mount keeps it */
		cfg->noatime = 0;
		return 0;
	case KEY_ATIME_REFUSED:
		config_error(cfg, "cannot honour '%s': reads through the mount update atime as "
				  "BACKING's own mount does; noatime here stops them", arg);
		return 0;
	case FUSE_OPT_KEY_NONOPT:
		if (ctx->file) {
			config_error(cfg, "config file '%s': cannot parse '%s'", ctx->file, arg);
			return 0;
		}
		if (ctx->for_ctl)
			return 1;
		cfg->nonopt_count++;
		if (cfg->nonopt_count == 1) {
			free(cfg->backing);
			cfg->backing = strdup(arg);
			return 0;
		}
		if (cfg->nonopt_count == 2)
			return 1; /* MOUNTPOINT, for libfuse */
		config_error(cfg, "unexpected argument '%s'", arg);
		return 0;
	case KEY_NOATIME:
	case KEY_ATIME:
		/* the kernel's flag as well: on to libfuse */
		cfg->noatime = key == KEY_NOATIME;
		/* fall through */
	case FUSE_OPT_KEY_OPT:
		check_libfuse_number(cfg, arg);
		if (ctx->file) {
			/* a libfuse option (allow_root, fsname=...) in the file */
			if (ctx->for_ctl)
				return 0;
			/* fuse_opt hands ARG over unescaped: a value's comma
			 * ("fsname=a,allow_other") must stay part of the value */
			if (ctx->passthrough) {
				char *esc = config_opt_escape(arg);

				if (!esc || fuse_opt_add_arg(ctx->passthrough, "-o") != 0 ||
				    fuse_opt_add_arg(ctx->passthrough, esc) != 0)
					config_error(cfg, "out of memory");
				free(esc);
			}
			return 0;
		}
		if (ctx->for_ctl) {
			if (arg[0] == '-' && arg[1] != '\0') {
				config_error(cfg, "unknown option '%s'", arg);
				return 0;
			}
			return 1;
		}
		return 1; /* libfuse's own option; fuse_new() checks it */
	}
	return 1;
}

/* Finds --config=F, --config F or -o ...config=F... in ARGS without
 * touching them. Returns a new string or NULL. */
static char *find_config_file(const struct fuse_args *args)
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

static int find_allow_other(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	(void)arg;
	(void)outargs;
	if (key == 0)
		*(bool *)data = true;
	return 1;
}

bool config_args_allow_other(const struct fuse_args *args)
{
	static const struct fuse_opt opts[] = {
		FUSE_OPT_KEY("allow_other", 0),
		FUSE_OPT_KEY("allow_root", 0),
		FUSE_OPT_END,
	};
	struct fuse_args copy = FUSE_ARGS_INIT(0, NULL);
	bool found = false;
	int i;

	for (i = 0; i < args->argc; i++)
		if (fuse_opt_add_arg(&copy, args->argv[i]) != 0)
			found = true; /* out of memory: assume the worst */
	if (!found && fuse_opt_parse(&copy, &found, opts, find_allow_other) != 0)
		found = true;
	fuse_opt_free_args(&copy);
	return found;
}

/* libfuse's options that a config file may carry (libfuse 3.14: its
 * mount, session and command line tables), with what each takes: 'f' a
 * flag, 's' a string, 'u' a whole number. A config file line is checked
 * against ours and these before libfuse sees it, so that treelockctl,
 * which never asks libfuse, refuses the same lines as the mount, and a
 * problem names its line instead of libfuse echoing the bytes. */
static const struct {
	const char *name;
	char kind;
} libfuse_file_opts[] = {
	{"allow_root", 'f'},     {"auto_unmount", 'f'}, {"blkdev", 'f'},
	{"default_permissions", 'f'}, {"clone_fd", 'f'}, {"ro", 'f'},
	{"rw", 'f'},             {"suid", 'f'},         {"nosuid", 'f'},
	{"dev", 'f'},            {"nodev", 'f'},        {"exec", 'f'},
	{"noexec", 'f'},         {"async", 'f'},        {"sync", 'f'},
	{"dirsync", 'f'},        {"atime", 'f'},        {"noatime", 'f'},
	{"fsname", 's'},         {"subtype", 's'},      {"blksize", 'u'},
	{"context", 's'},        {"fscontext", 's'},    {"defcontext", 's'},
	{"rootcontext", 's'},    {"user", 's'},         {"max_read", 'u'},
	{"max_threads", 'u'},    {"max_idle_threads", 'u'},
};

/* libfuse's whole numbers, with the values it takes: libfuse reads them
 * with sscanf("%u"), which takes "-1" (wrapped), blanks, a sign and
 * trailing junk, and then ignores a thread count of 0 or above its
 * FUSE_LOOP_MT_MAX_THREADS without failing. Checked here, in the config
 * file and on the command line alike, by config_scan_uint(). */
static const struct {
	const char *name;
	unsigned long min, max;
} libfuse_numbers[] = {
	{"max_threads", 1, TL_MAX_THREADS},
	{"max_idle_threads", 0, TL_MAX_THREADS},
	{"max_read", 0, UINT_MAX},
	{"blksize", 0, UINT_MAX},
};

/* Checks OPT ("name=value") when it is one of libfuse_numbers, appending
 * the problem (config_value_error(): a config file's line is named). */
static void check_libfuse_number(struct tl_config *cfg, const char *opt)
{
	size_t i, n = strcspn(opt, "=");
	unsigned long v;

	if (opt[n] != '=')
		return;
	for (i = 0; i < sizeof(libfuse_numbers) / sizeof(libfuse_numbers[0]); i++) {
		const char *name = libfuse_numbers[i].name;

		if (strlen(name) != n || strncmp(opt, name, n) != 0)
			continue;
		if (config_scan_uint(opt + n + 1, libfuse_numbers[i].min, libfuse_numbers[i].max,
				     &v) != 0)
			config_value_error(cfg, name, opt + n + 1,
					   "invalid %s '%s': expected a whole number from %lu to "
					   "%lu", name, opt + n + 1, libfuse_numbers[i].min,
					   libfuse_numbers[i].max);
		return;
	}
}

/* Whether OPT ("name" or "name=value") is one of ours or a backend's. */
static bool ours_match(const char *opt)
{
	size_t i;

	for (i = 0; i < TL_STORE_COUNT; i++)
		if (store_options(i) && fuse_opt_match(store_options(i)->opts, opt))
			return true;
	return fuse_opt_match(tl_opts, opt);
}

/* Checks config file line LINENO of FILE: NAME with VALUE (NULL: the line
 * had no '='), OPT as it will be parsed. Returns whether it is an option
 * of ours or of libfuse with what it takes; else appends the problem. */
static bool file_line_valid(struct tl_config *cfg, const char *file, unsigned lineno,
			    const char *name, const char *value, const char *opt)
{
	char *probe;
	bool known;
	size_t i;

	if (*name == '\0') {
		config_error(cfg, "config file '%s' line %u: expected name = value", file, lineno);
		return false;
	}
	if (ours_match(opt))
		return true;
	for (i = 0; i < sizeof(libfuse_file_opts) / sizeof(libfuse_file_opts[0]); i++) {
		char kind = libfuse_file_opts[i].kind;

		if (strcmp(name, libfuse_file_opts[i].name) != 0)
			continue;
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
		 * line (check_libfuse_number()) */
		return true;
	}
	/* one of ours, but with or without a value it does not take */
	if (value) {
		known = ours_match(name);
	} else {
		known = false;
		if (asprintf(&probe, "%s=x", name) >= 0) {
			known = ours_match(probe);
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

static int parse_config_file(struct tl_config *cfg, const char *file, struct parse_ctx *ctx)
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
		if (parse_all(&fargs, cfg) == -1)
			config_error(cfg, "config file '%s': cannot parse", file);
		ctx->file = NULL;
	}
	fuse_opt_free_args(&fargs);
	return err;
}

int config_parse(struct tl_config *cfg, struct fuse_args *args, bool for_ctl)
{
	struct fuse_args file_fuse = FUSE_ARGS_INIT(0, NULL);
	struct parse_ctx ctx = {.cfg = cfg, .for_ctl = for_ctl, .passthrough = &file_fuse};
	char *file;
	int err = 0, i;

	cur = &ctx;
	file = find_config_file(args);
	if (file && !*file)
		config_error(cfg, "invalid config '': expected a file name");
	else if (file)
		err = parse_config_file(cfg, file, &ctx);
	free(file);
	if (err)
		goto out;
	if (parse_all(args, cfg) == -1)
		config_error(cfg, "cannot parse the command line");
	/* libfuse options from the config file go before the command line's */
	for (i = 0; i < file_fuse.argc; i++)
		fuse_opt_insert_arg(args, 1 + i, file_fuse.argv[i]);
out:
	fuse_opt_free_args(&file_fuse);
	cur = NULL;
	return err;
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

/* metrics_file=: a file name, made absolute (the daemon leaves its
 * working directory when it goes to the background). Its directory is
 * the daemon's to open and judge (metrics_dir_open()), not treelockctl's,
 * which reads the same config files. */
static void validate_metrics_file(struct tl_config *cfg)
{
	const char *base;

	base = strrchr(cfg->metrics_file, '/');
	base = base ? base + 1 : cfg->metrics_file;
	if (!base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
		config_error(cfg, "invalid metrics_file '%s': expected a file name",
			     cfg->metrics_file);
		return;
	}
	config_path_absolute(cfg, "metrics_file", &cfg->metrics_file);
}

/* lock_store=: one of lockstore_backends' names. */
static void validate_lock_store(struct tl_config *cfg)
{
	char names[128] = "";
	size_t i, o = 0;

	for (i = 0; i < TL_STORE_COUNT; i++) {
		if (strcmp(cfg->lock_store_s, lockstore_backends[i].name) == 0) {
			cfg->lock_store = (enum tl_store_kind)i;
			return;
		}
		o += (size_t)snprintf(names + o, o < sizeof(names) ? sizeof(names) - o : 0, "%s%s",
				      i == 0 ? "" : i + 1 == TL_STORE_COUNT ? " or " : ", ",
				      lockstore_backends[i].name);
	}
	config_value_error(cfg, "lock_store", cfg->lock_store_s,
			   "invalid lock_store '%s': expected %s", cfg->lock_store_s, names);
}

/* owner=: a name in holder ids "OWNER#TICKET" (lockmgr's owner[64],
 * tl_holder's id[96]) and in the es store's owner ids
 * "OWNER:PID:NONCE" and documents: at most TL_OWNER_MAX bytes of UTF-8
 * text without blanks, control characters or '#' (which ends it in a
 * holder id). Checked for every store: the name is in every hold. */
static void validate_owner(struct tl_config *cfg)
{
	const unsigned char *p = (const unsigned char *)cfg->owner;
	size_t len = strlen(cfg->owner), n;

	if (len == 0) {
		config_value_error(cfg, "owner", cfg->owner, "invalid owner '': expected a name");
		return;
	}
	if (len > TL_OWNER_MAX) {
		config_value_error(cfg, "owner", cfg->owner,
				   "invalid owner '%.32s...': longer than %d bytes", cfg->owner,
				   TL_OWNER_MAX);
		return;
	}
	for (; *p; p += n) {
		n = path_utf8_len(p, len - (size_t)(p - (const unsigned char *)cfg->owner));
		/* C0, space, '#', DEL, C1 (U+0080..U+009F: 0xc2 0x80..0x9f) */
		if (n == 0 || *p <= ' ' || *p == '#' || *p == 0x7f ||
		    (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)) {
			config_value_error(cfg, "owner", cfg->owner,
					   "invalid owner '%s': expected a name without blanks, "
					   "control characters or '#'", cfg->owner);
			return;
		}
	}
}

int config_validate(struct tl_config *cfg)
{
	size_t i;
	int lvl;

	validate_lock_store(cfg);
	validate_owner(cfg);
	if (lockplan_strategy_parse(cfg->lock_strategy_s, &cfg->lock_strategy) != 0)
		config_value_error(cfg, "lock_strategy", cfg->lock_strategy_s,
				   "invalid lock_strategy '%s': expected tree, global, document or none",
				   cfg->lock_strategy_s);
	if (strcmp(cfg->lock_scope_s, "rename") == 0)
		cfg->lock_scope = TL_SCOPE_RENAME;
	else if (strcmp(cfg->lock_scope_s, "namespace") == 0)
		cfg->lock_scope = TL_SCOPE_NAMESPACE;
	else
		config_value_error(cfg, "lock_scope", cfg->lock_scope_s,
				   "invalid lock_scope '%s': expected rename or namespace",
				   cfg->lock_scope_s);
	config_parse_seconds(cfg, "lock_timeout", cfg->lock_timeout_s, TL_LOCK_TIMEOUT_MIN,
			     TL_LOCK_TIMEOUT_MAX, &cfg->lock_timeout);
	config_parse_uint(cfg, "rename_delay_ms", cfg->rename_delay_ms_s, 0, 600000,
			  &cfg->rename_delay_ms);
	config_parse_seconds(cfg, "entry_timeout", cfg->entry_timeout_s, 0, 86400,
			     &cfg->entry_timeout);
	config_parse_seconds(cfg, "attr_timeout", cfg->attr_timeout_s, 0, 86400, &cfg->attr_timeout);
	config_parse_seconds(cfg, "negative_timeout", cfg->negative_timeout_s, 0, 86400,
			     &cfg->negative_timeout);
	config_parse_uint(cfg, "metrics_interval", cfg->metrics_interval_s, 1, 86400,
			  &cfg->metrics_interval);
	if (cfg->metrics_file)
		validate_metrics_file(cfg);
	if (cfg->export_remember_s)
		config_parse_uint(cfg, "export_remember", cfg->export_remember_s, 0, 100000000,
				  &cfg->export_remember);
	cfg->passthrough = (enum tl_passthrough)config_parse_word(
		cfg, "passthrough", cfg->passthrough_s, passthrough_words, ARRAY_LEN(passthrough_words));
	cfg->inode_prune = (enum tl_inode_prune)config_parse_word(
		cfg, "inode_prune", cfg->inode_prune_s, inode_prune_words, ARRAY_LEN(inode_prune_words));
	config_parse_uint(cfg, "lock_waiters", cfg->lock_waiters_s, 0, 65536, &cfg->lock_waiters);
	config_parse_uint(cfg, "lock_waiters_per_user", cfg->lock_waiters_per_user_s, 0, 65536,
			  &cfg->lock_waiters_per_user);
	/* every backend checks the syntax of its options, the selected one
	 * also what it needs */
	for (i = 0; i < TL_STORE_COUNT; i++)
		if (store_options(i))
			store_options(i)->validate(cfg->store_opts[i], cfg,
						   cfg->lock_store == (enum tl_store_kind)i);
	config_parse_seconds(cfg, "lease_ttl", cfg->lease_ttl_s, 1, 3600, &cfg->lease_ttl);
	if (cfg->log_level_s) {
		lvl = tl_log_parse_level(cfg->log_level_s);
		if (lvl < 0)
			config_value_error(cfg, "log_level", cfg->log_level_s,
					   "invalid log_level '%s': expected err, warning, notice, "
					   "info or debug", cfg->log_level_s);
		else
			cfg->log_level = lvl;
	} else if (cfg->debug) {
		cfg->log_level = LOG_DEBUG;
	}
	return cfg->errors ? -EINVAL : 0;
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

int config_load_secrets(struct tl_config *cfg)
{
	const struct tl_store_options *so =
		cfg->lock_store < TL_STORE_COUNT ? store_options(cfg->lock_store) : NULL;

	if (so && so->load_secrets)
		so->load_secrets(cfg->store_opts[cfg->lock_store], cfg);
	return cfg->errors ? -EINVAL : 0;
}

static const char help_common[] =
	"Lock store options (each also as -o name=value, and as name=value in a config file):\n"
	"    --config=FILE            read options from FILE (name = value lines; owned by\n"
	"                             root or you, writable by no one else)\n"
	"    --lock_store=mem|es      where locks live (default mem: this mount only)\n"
	"    --lock_strategy=S        tree|global|document|none (default tree)\n"
	"    --lock_timeout=SECONDS   give up a rename with EBUSY after this (default 30)\n";

static const char help_shared_store[] =
	"    --owner=NAME             this host's name as shown to others (default host name);\n"
	"                             at most 63 bytes, no blanks, control characters or '#'\n"
	"    --lease_ttl=SECONDS      lease of this mount's locks (default 10)\n"
	"    --log_level=LEVEL        err|warning|notice|info|debug (default notice)\n"
	"Numbers are plain decimal: SECONDS as 30 or 0.5, N and MS as digits only.\n";

static const char help_mount[] =
	"Mount options:\n"
	"    --lock_scope=SCOPE       rename|namespace (default rename); namespace also locks\n"
	"                             create, mkdir, mknod, symlink, link, unlink, rmdir\n"
	"    --rename_delay_ms=N      testing: hold the locks N ms before renaming (default 0)\n"
	"    --hold_log=FILE          append each rename's lock holds to FILE, on CLOCK_MONOTONIC\n"
	"                             (made 0600; a symlink or a file others may use is refused)\n"
	"    --metrics_file=FILE      write Prometheus metrics to FILE (atomically replaced)\n"
	"    --metrics_interval=SECONDS  how often metrics_file is written (default 15)\n"
	"    --entry_timeout=SECONDS  cache names this long (default 1); with lock_store=mem\n"
	"                             also directory paths for lock keys\n"
	"    --attr_timeout=SECONDS   cache attributes this long (default 1)\n"
	"    --negative_timeout=SECONDS cache missing names this long (default 0)\n"
	"    --export_support         file handles that outlive the kernel's cache\n"
	"                             (open_by_handle_at, NFS re-export with fsid=)\n"
	"    --export_remember=N      with export_support: forgotten files kept findable\n"
	"                             by handle, oldest dropped first (default 1000000)\n"
	"    --passthrough=auto|on|off reads and writes of open files in the kernel, not\n"
	"                             through the daemon (FUSE passthrough; default auto:\n"
	"                             where the kernel accepts it; on: refuse to mount\n"
	"                             without it)\n"
	"    --inode_prune=auto|names|off  past half the open-file limit, ask the kernel\n"
	"                             to forget unused inodes (default auto: by inode\n"
	"                             where the kernel can, else by the names of files)\n"
	"    --lock_waiters=N         blocked flock()/F_SETLKW waits of the mount (default 1024);\n"
	"                             one more fails with ENOLCK\n"
	"    --lock_waiters_per_user=N  ... of one user (default 256)\n"
	"    --allow_other            let other users in; turns on default_permissions,\n"
	"                             each request then acts as its user\n"
	"    -f                       stay in the foreground, log to stderr\n"
	"    -d, -o debug             foreground, libfuse debug output, log_level=debug\n"
	"    -s                       single-threaded\n"
	"    -h, --help               this help\n"
	"    -V, --version            version\n";

void config_print_help(bool for_ctl)
{
	size_t i;

	if (!for_ctl)
		fputs(help_mount, stdout);
	fputs(help_common, stdout);
	for (i = 0; i < TL_STORE_COUNT; i++)
		if (store_options(i))
			fputs(store_options(i)->help, stdout);
	fputs(help_shared_store, stdout);
}

void config_free(struct tl_config *cfg)
{
	char **strs[] = {
		&cfg->lock_store_s,     &cfg->lock_strategy_s,    &cfg->lock_scope_s,
		&cfg->lock_timeout_s,   &cfg->rename_delay_ms_s,  &cfg->entry_timeout_s,
		&cfg->attr_timeout_s,   &cfg->negative_timeout_s, &cfg->log_level_s,
		&cfg->passthrough_s,    &cfg->inode_prune_s,
		&cfg->config_file,      &cfg->owner,              &cfg->lease_ttl_s,
		&cfg->backing,          &cfg->errors,             &cfg->hold_log,
		&cfg->metrics_file,     &cfg->metrics_interval_s,
		&cfg->export_remember_s,
		&cfg->lock_waiters_s,   &cfg->lock_waiters_per_user_s,
	};
	size_t i;

	for (i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
		free(*strs[i]);
		*strs[i] = NULL;
	}
	for (i = 0; i < cfg->norigins; i++) {
		free(cfg->origins[i].name);
		free(cfg->origins[i].value);
	}
	free(cfg->origins);
	cfg->origins = NULL;
	cfg->norigins = 0;
	free(cfg->origin_file);
	cfg->origin_file = NULL;
	for (i = 0; i < TL_STORE_COUNT; i++) {
		if (store_options(i) && cfg->store_opts[i])
			store_options(i)->free(cfg->store_opts[i]);
		free(cfg->store_opts[i]);
		cfg->store_opts[i] = NULL;
	}
}
