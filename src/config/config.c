/* config.c - the options of treelockfs and treelockctl, one row each, and
 * the configuration built from them, see config.h
 *
 * config_options has one row per option: its name, its fields in
 * tl_config, its kind, default, bounds and --help text. The parser,
 * config_init(), config_validate(), config_print_help() and config_free()
 * all walk it; what no kind says (the lock store's name, the strategy,
 * owner=, log_level=, the flags that are keys of the fuse_opt callback,
 * the backends' own options) is explicit code beside it. Problems are
 * collected in cfg->errors and reported all at once.
 */
#include <config.h>

#include <errno.h>
#include <fuse_opt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/path.h"
#include "config/config.h"
#include "config/config_i.h"
#include "lock/lockplan.h"
#include "lock/lockstore.h"

/* What an option's value is, and how config_validate() checks it. */
enum config_kind {
	CONFIG_BOOL,    /* int: "name" sets 1, "no_name" 0 */
	CONFIG_STRING,  /* char *, kept as given */
	CONFIG_PATH,    /* char *: a file name, made absolute */
	CONFIG_UINT,    /* char * as given, into an unsigned int from MIN to MAX */
	CONFIG_SECONDS, /* char * as given, into a double from MIN to MAX */
	CONFIG_WORDS,   /* char * as given, into the index of its word (an enum) */
};

/* Where an option's line is in --help (config_print_help()). */
enum config_section {
	CONFIG_MOUNT,  /* "Mount options": treelockfs only */
	CONFIG_STORE,  /* "Lock store options", before the backends' own */
	CONFIG_SHARED, /* after the backends' own: of any store */
};

/* One option. */
struct config_option {
	const char *name;
	enum config_kind kind;
	size_t given;         /* offsetof the value as given (int for a bool) */
	size_t value;         /* offsetof the converted value (UINT, SECONDS, WORDS) */
	const char *dflt;     /* as it would be written; NULL: none (or explicit code) */
	double min, max;      /* UINT, SECONDS */
	const char *const *words; /* WORDS: in the order of the enum, NULL-terminated */
	/* Explicit code run after the kind's checks: converts what the kind
	 * does not, appending problems. */
	void (*check)(struct tl_config *cfg);
	enum config_section section;
	const char *arg;      /* --help "--name=ARG"; NULL: a bool, or WORDS as "a|b" */
	const char *help;     /* --help, '\n' between its lines */
};

/* A row's name and kind: FIELD names the option and its member of
 * tl_config, FIELD##_s the value as given when it is converted. */
#define OPT_BOOL(field)                                                                            \
	.name = #field, .kind = CONFIG_BOOL, .given = offsetof(struct tl_config, field)
#define OPT_STRING(field)                                                                          \
	.name = #field, .kind = CONFIG_STRING, .given = offsetof(struct tl_config, field)
#define OPT_PATH(field)                                                                            \
	.name = #field, .kind = CONFIG_PATH, .given = offsetof(struct tl_config, field)
#define OPT_CONVERTED(field, kind_)                                                                \
	.name = #field, .kind = kind_, .given = offsetof(struct tl_config, field##_s),             \
	.value = offsetof(struct tl_config, field)
#define OPT_UINT(field, dflt_, min_, max_)                                                         \
	OPT_CONVERTED(field, CONFIG_UINT), .dflt = dflt_, .min = min_, .max = max_
#define OPT_SECONDS(field, dflt_, min_, max_)                                                      \
	OPT_CONVERTED(field, CONFIG_SECONDS), .dflt = dflt_, .min = min_, .max = max_
#define OPT_WORDS(field, dflt_, words_)                                                            \
	OPT_CONVERTED(field, CONFIG_WORDS), .dflt = dflt_, .words = words_
/* a string converted by CHECK alone */
#define OPT_CHECKED(field, dflt_, check_)                                                          \
	.name = #field, .kind = CONFIG_STRING, .given = offsetof(struct tl_config, field##_s),     \
	.dflt = dflt_, .check = check_

#define CONFIG_STR_(x) #x
#define CONFIG_STR(x) CONFIG_STR_(x)

/* the words of the options that name one of a few choices, in the order
 * of their enums (config.h) */
static const char *const lock_scope_words[] = {"rename", "namespace", NULL};
static const char *const passthrough_words[] = {"auto", "on", "off", NULL};
static const char *const inode_prune_words[] = {"auto", "names", "off", NULL};
static const char *const off_on_words[] = {"off", "on", NULL};
_Static_assert(sizeof(enum tl_scope) == sizeof(int) && sizeof(enum tl_passthrough) == sizeof(int) &&
		       sizeof(enum tl_inode_prune) == sizeof(int) &&
		       sizeof(((struct tl_config *)0)->delegations) == sizeof(int),
	       "a WORDS option's value is written as an int");

static void validate_lock_store(struct tl_config *cfg);
static void validate_lock_strategy(struct tl_config *cfg);
static void validate_owner(struct tl_config *cfg);
static void validate_log_level(struct tl_config *cfg);
static void validate_fs_index(struct tl_config *cfg);

/* Every option of ours, in the order of --help and of the checks. */
static const struct config_option config_options[] = {
	{OPT_WORDS(lock_scope, "rename", lock_scope_words), .section = CONFIG_MOUNT, .arg = "SCOPE",
	 .help = "rename|namespace (default rename); namespace also locks\n"
		 "create, mkdir, mknod, symlink, link, unlink, rmdir"},
	{OPT_UINT(rename_delay_ms, "0", 0, 600000), .section = CONFIG_MOUNT, .arg = "N",
	 .help = "testing: hold the locks N ms before renaming (default 0)"},
	{OPT_STRING(hold_log), .section = CONFIG_MOUNT, .arg = "FILE",
	 .help = "append each rename's lock holds to FILE, on CLOCK_MONOTONIC\n"
		 "(made 0600; a symlink or a file others may use is refused)"},
	/* made absolute: the daemon leaves its working directory when it
	 * goes to the background. Its directory is the daemon's to open and
	 * judge (metrics_dir_open()), not treelockctl's, which reads the
	 * same config files. */
	{OPT_PATH(metrics_file), .section = CONFIG_MOUNT, .arg = "FILE",
	 .help = "write Prometheus metrics to FILE (atomically replaced)"},
	{OPT_UINT(metrics_interval, "15", 1, 86400), .section = CONFIG_MOUNT, .arg = "SECONDS",
	 .help = "how often metrics_file is written (default 15)"},
	{OPT_SECONDS(entry_timeout, "1", 0, 86400), .section = CONFIG_MOUNT, .arg = "SECONDS",
	 .help = "cache names this long (default 1); with lock_store=mem\n"
		 "also directory paths for lock keys"},
	{OPT_SECONDS(attr_timeout, "1", 0, 86400), .section = CONFIG_MOUNT, .arg = "SECONDS",
	 .help = "cache attributes this long (default 1)"},
	{OPT_SECONDS(negative_timeout, "0", 0, 86400), .section = CONFIG_MOUNT, .arg = "SECONDS",
	 .help = "cache missing names this long (default 0)"},
	{OPT_BOOL(export_support), .section = CONFIG_MOUNT,
	 .help = "file handles that outlive the kernel's cache\n"
		 "(open_by_handle_at, NFS re-export with fsid=)"},
	{OPT_UINT(export_remember, "1000000", 0, 100000000), .section = CONFIG_MOUNT, .arg = "N",
	 .help = "with export_support: forgotten files kept findable\n"
		 "by handle, oldest dropped first (default 1000000)"},
	{OPT_WORDS(passthrough, "auto", passthrough_words), .section = CONFIG_MOUNT,
	 .help = "reads and writes of open files in the kernel, not\n"
		 "through the daemon (FUSE passthrough; default auto:\n"
		 "where the kernel accepts it; on: refuse to mount\n"
		 "without it)"},
	{OPT_WORDS(inode_prune, "auto", inode_prune_words), .section = CONFIG_MOUNT,
	 .help = "past half the open-file limit, ask the kernel\n"
		 "to forget unused inodes (default auto: by inode\n"
		 "where the kernel can, else by the names of files)"},
	{OPT_UINT(lock_waiters, CONFIG_STR(TL_DEFAULT_LOCK_WAITERS), 0, 65536),
	 .section = CONFIG_MOUNT, .arg = "N",
	 .help = "blocked flock()/F_SETLKW waits of the mount (default 1024);\n"
		 "one more fails with ENOLCK"},
	{OPT_UINT(lock_waiters_per_user, CONFIG_STR(TL_DEFAULT_LOCK_WAITERS_PER_USER), 0, 65536),
	 .section = CONFIG_MOUNT, .arg = "N", .help = "... of one user (default 256)"},
	{OPT_WORDS(delegations, "off", off_on_words), .section = CONFIG_MOUNT, .arg = "off|on",
	 .help = "lock_store=es: a directory this mount renames in\n"
		 "repeatedly is delegated to it: renames below it lock\n"
		 "in memory until another host asks (default off)"},
	{OPT_SECONDS(delegation_recall, "1", 0.1, 60), .section = CONFIG_MOUNT, .arg = "SECONDS",
	 .help = "another host's asking for a delegation is seen\n"
		 "within this (default 1)"},
	/* 2 s: twice the grant's window (two renames within 1 s), so what
	 * earned a delegation keeps it while it renames at least every 2 s
	 * (rsync and mv rename every few ms), and another host's first
	 * rename there waits for a recall only that long after the last */
	{OPT_SECONDS(delegation_idle, "2", 0.1, 3600), .section = CONFIG_MOUNT, .arg = "SECONDS",
	 .help = "a delegation no rename used for this long is given\n"
		 "back (default 2)"},
	{OPT_SECONDS(fs_index_delay, "0.2", 0.01, 60), .section = CONFIG_MOUNT, .arg = "SECONDS",
	 .help = "with fs_index: changes are gathered this long and\n"
		 "sent in one request (default 0.2)"},
	/* 2 s: longer than the attribute and entry caches of NFS clients
	 * and of FUSE mounts (1 s by default), so the second look sees
	 * past a cache the first one looked through */
	{OPT_SECONDS(fs_index_settle, "2", 0, 60), .section = CONFIG_MOUNT, .arg = "SECONDS",
	 .help = "with fs_index: every entry written is looked up\n"
		 "once more this much later (default 2; 0 off)"},
	/* main() passes allow_other,default_permissions on to libfuse */
	{OPT_BOOL(allow_other), .section = CONFIG_MOUNT,
	 .help = "let other users in; turns on default_permissions,\n"
		 "each request then acts as its user"},

	/* read before the others (config_file_find()); kept for "-o config=" */
	{.name = "config", .kind = CONFIG_STRING, .given = offsetof(struct tl_config, config_file),
	 .section = CONFIG_STORE, .arg = "FILE",
	 .help = "read options from FILE (name = value lines; owned by\n"
		 "root or you, writable by no one else)"},
	{OPT_CHECKED(lock_store, "mem", validate_lock_store), .section = CONFIG_STORE,
	 .arg = "mem|es", .help = "where locks live (default mem: this mount only)"},
	{OPT_CHECKED(lock_strategy, "tree", validate_lock_strategy), .section = CONFIG_STORE,
	 .arg = "S", .help = "tree|global|document|none (default tree)"},
	{OPT_SECONDS(lock_timeout, "30", TL_LOCK_TIMEOUT_MIN, TL_LOCK_TIMEOUT_MAX),
	 .section = CONFIG_STORE, .arg = "SECONDS",
	 .help = "give up a rename with EBUSY after this (default 30)"},
	{OPT_STRING(fs_index), .check = validate_fs_index, .section = CONFIG_STORE, .arg = "NAME",
	 .help = "lock_store=es: keep a document per file of the tree\n"
		 "in index NAME of the same engine (made when missing)"},

	/* default: the host name (config_init()) */
	{OPT_STRING(owner), .check = validate_owner, .section = CONFIG_SHARED, .arg = "NAME",
	 .help = "this host's name as shown to others (default host name);\n"
		 "at most 63 bytes, no blanks, control characters or '#'"},
	{OPT_SECONDS(lease_ttl, CONFIG_STR(TL_DEFAULT_LEASE_TTL), 1, 3600),
	 .section = CONFIG_SHARED, .arg = "SECONDS",
	 .help = "lease of this mount's locks (default 10)"},
	/* default: notice, or debug with -d (validate_log_level()) */
	{OPT_CHECKED(log_level, NULL, validate_log_level), .section = CONFIG_SHARED,
	 .arg = "LEVEL", .help = "err|warning|notice|info|debug (default notice)"},
};

#define NOPTIONS (sizeof(config_options) / sizeof(config_options[0]))

/* The member at OFFSET of CFG. */
static void *field(struct tl_config *cfg, size_t offset)
{
	return (char *)cfg + offset;
}

/* The flags and the options that are not one value, handled by
 * config_option_proc() (keys) or by fuse_opt itself. */
enum {
	KEY_HELP,
	KEY_VERSION,
	KEY_FOREGROUND,
	KEY_DEBUG,
	KEY_NOATIME,
	KEY_ATIME,
	KEY_RELATIME,
	KEY_ATIME_REFUSED,
};

static const struct fuse_opt config_keys[] = {
	/* "--config FILE", two words, as the man page and --help promise */
	{"--config %s", offsetof(struct tl_config, config_file), 0},
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

/* The options of backend I (lockstore_backends), or NULL: none. */
static const struct tl_store_options *store_options(size_t i)
{
	return lockstore_backends[i].options;
}

/* a holder id "OWNER#TICKET" fits tl_holder's id with any ticket */
_Static_assert(TL_OWNER_MAX + 1 + 20 < sizeof(((struct tl_holder *)0)->id),
	       "owner= names must fit holder ids");

static __thread struct config_parse_ctx *cur;

/* The row OPT ("name", "no_name" or "name=value", each also with "--")
 * sets, as fuse_opt would match "--name=%s" and "name=%s", or "--name",
 * "name", "--no_name" and "no_name" for a bool; NULL: none. *VALUE
 * receives what follows '=' (NULL for a bool), *ON a bool's value. */
static const struct config_option *option_find(const char *opt, const char **value, int *on)
{
	size_t i, len;

	if (strncmp(opt, "--", 2) == 0)
		opt += 2;
	for (i = 0; i < NOPTIONS; i++) {
		const struct config_option *o = &config_options[i];
		const char *name = opt;

		len = strlen(o->name);
		if (o->kind == CONFIG_BOOL) {
			*on = strncmp(name, "no_", 3) != 0;
			if (!*on)
				name += 3;
			if (strcmp(name, o->name) != 0)
				continue;
			*value = NULL;
			return o;
		}
		if (strncmp(name, o->name, len) == 0 && name[len] == '=') {
			*value = name + len + 1;
			return o;
		}
	}
	return NULL;
}

/* Sets the option OPT names when it is one of ours. Returns 0 when it
 * was, 1 when it is not ours, -1 when out of memory (as fuse_opt). */
static int option_set(struct tl_config *cfg, const char *opt)
{
	const char *value;
	char *copy, **given;
	int on;
	const struct config_option *o = option_find(opt, &value, &on);

	if (!o)
		return 1;
	if (o->kind == CONFIG_BOOL) {
		*(int *)field(cfg, o->given) = on;
		return 0;
	}
	copy = strdup(value);
	if (!copy)
		return -1;
	given = field(cfg, o->given);
	free(*given);
	*given = copy;
	return 0;
}

bool config_option_known(const char *opt)
{
	const char *value;
	size_t i;
	int on;

	for (i = 0; i < TL_STORE_COUNT; i++)
		if (store_options(i) && fuse_opt_match(store_options(i)->opts, opt))
			return true;
	return option_find(opt, &value, &on) || fuse_opt_match(config_keys, opt);
}

static int config_option_proc(void *data, const char *arg, int key, struct fuse_args *outargs);

int config_init(struct tl_config *cfg)
{
	char host[256];
	unsigned long u;
	size_t i;

	memset(cfg, 0, sizeof(*cfg));
	for (i = 0; i < NOPTIONS; i++) {
		const struct config_option *o = &config_options[i];
		char **given = field(cfg, o->given);

		if (!o->dflt)
			continue;
		switch (o->kind) {
		case CONFIG_BOOL:
			*(int *)field(cfg, o->given) = strcmp(o->dflt, "1") == 0;
			break;
		case CONFIG_UINT:
			/* a default out of its bounds is a bug of the table */
			if (config_scan_uint(o->dflt, (unsigned long)o->min, (unsigned long)o->max,
					     &u) != 0)
				return -EINVAL;
			*(unsigned int *)field(cfg, o->value) = (unsigned int)u;
			break;
		case CONFIG_SECONDS:
			if (config_scan_seconds(o->dflt, o->min, o->max, field(cfg, o->value)) != 0)
				return -EINVAL;
			break;
		case CONFIG_WORDS:
			/* and kept as given, as the user's would be */
			*(int *)field(cfg, o->value) =
				config_parse_word(cfg, o->name, o->dflt, o->words);
			/* fall through */
		case CONFIG_STRING:
		case CONFIG_PATH:
			/* strdup the defaults: the parser frees a string it overwrites */
			*given = strdup(o->dflt);
			if (!*given)
				return -ENOMEM;
			break;
		}
	}
	if (gethostname(host, sizeof(host)) != 0)
		strcpy(host, "localhost");
	host[TL_OWNER_MAX] = '\0'; /* a default always fits (validate_owner()) */
	cfg->owner = strdup(host);
	cfg->log_level = LOG_NOTICE;
	if (!cfg->owner)
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

int config_parse_args(struct fuse_args *args, struct tl_config *cfg)
{
	size_t i;

	for (i = 0; i < TL_STORE_COUNT; i++)
		if (store_options(i) &&
		    fuse_opt_parse(args, cfg->store_opts[i], store_options(i)->opts, NULL) == -1)
			return -1;
	return fuse_opt_parse(args, cfg, config_keys, config_option_proc);
}

/* The fuse_opt callback: our options (config_options), the keys of
 * config_keys, and what is libfuse's or positional. */
static int config_option_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct tl_config *cfg = data;
	struct config_parse_ctx *ctx = cur;
	int res;

	(void)outargs;
	if (key == FUSE_OPT_KEY_OPT) {
		res = option_set(cfg, arg);
		if (res != 1)
			return res;
	}
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
		config_libfuse_number(cfg, arg);
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

int config_parse(struct tl_config *cfg, struct fuse_args *args, bool for_ctl)
{
	struct fuse_args file_fuse = FUSE_ARGS_INIT(0, NULL);
	struct config_parse_ctx ctx = {.cfg = cfg, .for_ctl = for_ctl, .passthrough = &file_fuse};
	char *file;
	int err = 0, i;

	cur = &ctx;
	file = config_file_find(args);
	if (file && !*file)
		config_error(cfg, "invalid config '': expected a file name");
	else if (file)
		err = config_file_parse(cfg, file, &ctx);
	free(file);
	if (err)
		goto out;
	if (config_parse_args(args, cfg) == -1)
		config_error(cfg, "cannot parse the command line");
	/* libfuse options from the config file go before the command line's */
	for (i = 0; i < file_fuse.argc; i++)
		fuse_opt_insert_arg(args, 1 + i, file_fuse.argv[i]);
out:
	fuse_opt_free_args(&file_fuse);
	cur = NULL;
	return err;
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

/* lock_strategy=: one of lockplan's strategies. */
static void validate_lock_strategy(struct tl_config *cfg)
{
	if (lockplan_strategy_parse(cfg->lock_strategy_s, &cfg->lock_strategy) != 0)
		config_value_error(cfg, "lock_strategy", cfg->lock_strategy_s,
				   "invalid lock_strategy '%s': expected tree, global, document or none",
				   cfg->lock_strategy_s);
}

/* owner=: a name in holder ids "OWNER#TICKET" (lockmgr's owner[64],
 * tl_holder's id[96]) and in the es store's owner ids
 * "OWNER:PID:NONCE" and documents: at most TL_OWNER_MAX bytes of UTF-8
 * text without blanks, control characters or '#' (which ends it in a
 * holder id). Checked for every store: the name is in every hold. */
/* fs_index=NAME: an index name the engine takes (lowercase, none of the
 * characters backslash, slash, star, ?"<>|,#: or blanks, not "." or "..",
 * not starting with -, _ or +, at most 255 bytes), with lock_store=es only. */
static void validate_fs_index(struct tl_config *cfg)
{
	const char *n = cfg->fs_index, *p;

	if (!n)
		return;
	if (!*n || strlen(n) > 255 || strcmp(n, ".") == 0 || strcmp(n, "..") == 0 ||
	    strchr("-_+", n[0])) {
		config_value_error(cfg, "fs_index", n,
				   "invalid fs_index '%.64s': expected an index name", n);
		return;
	}
	for (p = n; *p; p++) {
		if ((unsigned char)*p <= ' ' || strchr("\\/*?\"<>|,#:", *p) ||
		    (*p >= 'A' && *p <= 'Z')) {
			config_value_error(cfg, "fs_index", n,
					   "invalid fs_index '%.64s': expected an index name in "
					   "lowercase, without blanks or any of \\/*?\"<>|,#:",
					   n);
			return;
		}
	}
	if (cfg->lock_store != TL_STORE_ES)
		config_value_error(cfg, "fs_index", n,
				   "fs_index=%s needs lock_store=es: the index lives in the "
				   "lock store's engine",
				   n);
}

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

/* log_level=: a syslog level by name (tl_log_parse_level()); without
 * one, -d means debug. */
static void validate_log_level(struct tl_config *cfg)
{
	int lvl;

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
}

/* Checks and converts the options of SECTION by their kinds, then by
 * their own checks. */
static void validate_section(struct tl_config *cfg, enum config_section section)
{
	size_t i;

	for (i = 0; i < NOPTIONS; i++) {
		const struct config_option *o = &config_options[i];
		char **given = field(cfg, o->given);

		if (o->section != section)
			continue;
		switch (o->kind) {
		case CONFIG_BOOL:
		case CONFIG_STRING:
			break;
		case CONFIG_PATH:
			if (*given)
				config_parse_file_name(cfg, o->name, given);
			break;
		case CONFIG_UINT:
			config_parse_uint(cfg, o->name, *given, (unsigned long)o->min,
					  (unsigned long)o->max, field(cfg, o->value));
			break;
		case CONFIG_SECONDS:
			config_parse_seconds(cfg, o->name, *given, o->min, o->max,
					     field(cfg, o->value));
			break;
		case CONFIG_WORDS:
			*(int *)field(cfg, o->value) =
				config_parse_word(cfg, o->name, *given, o->words);
			break;
		}
		if (o->check)
			o->check(cfg);
	}
}

int config_validate(struct tl_config *cfg)
{
	size_t i;

	validate_section(cfg, CONFIG_MOUNT);
	validate_section(cfg, CONFIG_STORE);
	/* every backend checks the syntax of its options, the selected one
	 * also what it needs */
	for (i = 0; i < TL_STORE_COUNT; i++)
		if (store_options(i))
			store_options(i)->validate(cfg->store_opts[i], cfg,
						   cfg->lock_store == (enum tl_store_kind)i);
	validate_section(cfg, CONFIG_SHARED);
	return cfg->errors ? -EINVAL : 0;
}

int config_load_secrets(struct tl_config *cfg)
{
	const struct tl_store_options *so =
		cfg->lock_store < TL_STORE_COUNT ? store_options(cfg->lock_store) : NULL;

	if (so && so->load_secrets)
		so->load_secrets(cfg->store_opts[cfg->lock_store], cfg);
	return cfg->errors ? -EINVAL : 0;
}

/* Column of the text of an option's --help lines. */
#define HELP_COLUMN 29

/* Prints the --help lines of the options of SECTION: "    --name=ARG",
 * then the text from HELP_COLUMN on (two spaces further when the name is
 * longer), each further line of it indented to HELP_COLUMN. */
static void print_section_help(enum config_section section)
{
	size_t i, w;
	const char *arg, *line, *end;
	char words[64];

	for (i = 0; i < NOPTIONS; i++) {
		const struct config_option *o = &config_options[i];

		if (o->section != section)
			continue;
		arg = o->arg;
		if (!arg && o->kind == CONFIG_WORDS) {
			size_t j, n = 0;

			for (j = 0; o->words[j] && n < sizeof(words); j++)
				n += (size_t)snprintf(words + n, sizeof(words) - n, "%s%s",
						      j ? "|" : "", o->words[j]);
			arg = words;
		}
		w = (size_t)printf("    --%s%s%s", o->name, arg ? "=" : "", arg ? arg : "");
		printf("%*s", w + 2 > HELP_COLUMN ? 2 : (int)(HELP_COLUMN - w), "");
		for (line = o->help;; line = end + 1) {
			end = strchrnul(line, '\n');
			printf("%s%.*s\n", line == o->help ? "" : "                             ",
			       (int)(end - line), line);
			if (!*end)
				break;
		}
	}
}

static const char help_mount_flags[] =
	"    -f                       stay in the foreground, log to stderr\n"
	"    -d, -o debug             foreground, libfuse debug output, log_level=debug\n"
	"    -s                       single-threaded\n"
	"    -h, --help               this help\n"
	"    -V, --version            version\n";

void config_print_help(bool for_ctl)
{
	size_t i;

	if (!for_ctl) {
		fputs("Mount options:\n", stdout);
		print_section_help(CONFIG_MOUNT);
		fputs(help_mount_flags, stdout);
	}
	fputs("Lock store options (each also as -o name=value, and as name=value in a config "
	      "file):\n", stdout);
	print_section_help(CONFIG_STORE);
	for (i = 0; i < TL_STORE_COUNT; i++)
		if (store_options(i))
			fputs(store_options(i)->help, stdout);
	print_section_help(CONFIG_SHARED);
	fputs("Numbers are plain decimal: SECONDS as 30 or 0.5, N and MS as digits only.\n",
	      stdout);
}

void config_free(struct tl_config *cfg)
{
	char **strs[] = {&cfg->backing, &cfg->errors, &cfg->origin_file};
	size_t i;

	for (i = 0; i < NOPTIONS; i++) {
		char **given = field(cfg, config_options[i].given);

		if (config_options[i].kind == CONFIG_BOOL)
			continue;
		free(*given);
		*given = NULL;
	}
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
	for (i = 0; i < TL_STORE_COUNT; i++) {
		if (store_options(i) && cfg->store_opts[i])
			store_options(i)->free(cfg->store_opts[i]);
		free(cfg->store_opts[i]);
		cfg->store_opts[i] = NULL;
	}
}
