/* config.h - the configuration (struct tl_config) of the mount and of
 * treelockctl: its options, their defaults, the config file and validation
 *
 * Every option exists as "--name=value" and "-o name=value" (so fstab and
 * mount.fuse3 work), and as "name=value" in a config file given with
 * --config=FILE / -o config=FILE. Later wins: defaults < config file <
 * command line. Booleans come in pairs: "es_insecure" / "no_es_insecure".
 * Each option of ours is one row of config_options (config.c); each lock
 * store's own options are its tl_store_options, parsed alongside. Of
 * the layers above, nothing is included (the FUSE layer, the es store's
 * internals), and of libfuse only fuse_opt.
 *
 * Files in src/config/:
 *
 *   config.[ch]        the options of ours, one row each (config_options),
 *                      and the parsing, defaults, checks, --help and
 *                      cleanup that follow from the rows
 *   config_i.h         what the files of src/config/ share
 *   config_file.c      the files a configuration is read from: the config
 *                      file (config=FILE) and the stores' secret files
 *   config_value.c     one option's value (numbers, words, file names) and
 *                      the problems found in a configuration
 *   config_libfuse.c   libfuse's own options: those a config file may
 *                      carry, the numbers they take, allow_other
 *
 * Depends on: base.
 * Exception: config.c and config.h use lock (what they configure: the names
 *   of the lock strategies, lockplan.h, and the stores with their own
 *   options, lockstore.h).
 */
#ifndef TREELOCKFS_CONFIG_CONFIG_H
#define TREELOCKFS_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lock/lockplan.h"

struct fuse_args;
struct stat;

enum tl_store_kind {
	TL_STORE_MEM = 0,
	TL_STORE_ES,
	TL_STORE_COUNT
};

struct tl_config;
struct fuse_opt;

/* A backend's own options (sshfs cache_parse_options style): its fuse_opt
 * table (offsets into its own struct of SIZE bytes) runs over the same
 * arguments and config file as our options (config_options), before
 * them. The backends and their options are listed once, in
 * lockstore_backends (lockstore.h). */
struct tl_store_options {
	size_t size;                      /* of the backend's option struct */
	const struct fuse_opt *opts;      /* its fuse_opt table */
	const char *help;                 /* its --help lines */
	/* Sets the defaults in O (zeroed). Returns 0 or -ENOMEM. */
	int (*init)(void *o);
	/* Checks and converts O, appending problems with config_error();
	 * SELECTED: this is the store of lock_store=. */
	void (*validate)(void *o, struct tl_config *cfg, bool selected);
	/* Loads the secrets O names (only for the selected store). */
	void (*load_secrets)(void *o, struct tl_config *cfg);
	/* Frees what O owns (not O); wipes secrets. */
	void (*free)(void *o);
};

enum tl_scope {
	TL_SCOPE_RENAME = 0,
	TL_SCOPE_NAMESPACE,
};

/* One "name = value" line of the config file. */
struct tl_config_origin {
	char *name;     /* without a leading "--" */
	char *value;    /* as written, trimmed */
	unsigned line;
};

/* passthrough=: whether open files do their I/O in the kernel (FUSE
 * passthrough). AUTO uses it where the kernel accepts it, file by file;
 * ON refuses to mount where it cannot work; OFF never asks for it. */
enum tl_passthrough {
	TL_PASSTHROUGH_AUTO = 0,
	TL_PASSTHROUGH_ON,
	TL_PASSTHROUGH_OFF,
};

/* inode_prune=: how the daemon keeps its descriptors bounded (fs_inode.c).
 * AUTO asks the kernel to forget inodes by nodeid where it can (FUSE
 * protocol 7.45), else by the names of files; NAMES always by names; OFF
 * never (descriptors then grow with what the kernel remembers). */
enum tl_inode_prune {
	TL_PRUNE_AUTO = 0,
	TL_PRUNE_NAMES,
	TL_PRUNE_OFF,
};

/* Each option's members are named in its row of config_options
 * (config.c): a bool or string is one member; an option converted by
 * config_validate() has NAME_s, as given, and NAME, its value. */
struct tl_config {
	/* as given, or the default (NULL: none); converted by config_validate() */
	char *lock_store_s;
	char *lock_strategy_s;
	char *lock_scope_s;
	char *lock_timeout_s;
	char *rename_delay_ms_s;
	char *hold_log;        /* mount: file of every rename's lock holds, or NULL */
	char *metrics_file;    /* mount: Prometheus textfile (absolute once validated) */
	char *metrics_interval_s;
	char *entry_timeout_s;
	char *attr_timeout_s;
	char *negative_timeout_s;
	char *passthrough_s;
	char *inode_prune_s;
	char *log_level_s;
	char *config_file;
	char *owner;           /* store-generic: this mount as shown to others */
	char *lease_ttl_s;     /* store-generic: lease of a shared store's locks */
	char *delegations_s;
	char *delegation_recall_s;
	char *delegation_idle_s;
	char *export_remember_s;
	int export_support;    /* mount: file handles that outlive the kernel's inodes */
	int noatime;           /* mount: reads leave BACKING's atime alone (O_NOATIME) */
	char *lock_waiters_s;
	char *fs_index;        /* lock_store=es: the fs index's name, or NULL */
	char *fs_index_delay_s;
	char *fs_index_settle_s;
	char *lock_waiters_per_user_s;
	int allow_other;
	int show_help;
	int show_version;
	int foreground;
	int debug;

	/* validated */
	enum tl_store_kind lock_store;
	enum tl_strategy lock_strategy;
	enum tl_scope lock_scope;
	double lock_timeout;     /* seconds */
	unsigned int rename_delay_ms;
	unsigned int metrics_interval; /* seconds */
	double entry_timeout;    /* seconds */
	double attr_timeout;
	double negative_timeout;
	enum tl_passthrough passthrough;
	enum tl_inode_prune inode_prune;
	int log_level;
	double lease_ttl;        /* seconds */
	int delegations;         /* 0 off, 1 on (lockdeleg.h) */
	double delegation_recall; /* seconds: a recall is seen within this */
	double delegation_idle;   /* seconds: a delegation unused this long is given back */
	unsigned int export_remember; /* forgotten inodes kept findable by handle */
	unsigned int lock_waiters;          /* blocked flock/fcntl waits of the mount */
	unsigned int lock_waiters_per_user; /* ... of one uid */
	double fs_index_delay;   /* seconds: how long fs index notes gather */
	double fs_index_settle;  /* seconds: a written entry's second look (0: none) */

	/* each backend's own options, by enum tl_store_kind (NULL: none) */
	void *store_opts[TL_STORE_COUNT];

	/* positional: BACKING (mount) */
	char *backing;
	int nonopt_count;

	/* errors found while parsing, reported all at once */
	char *errors;

	/* the config file's options, by line, for config_value_error() */
	struct tl_config_origin *origins;
	size_t norigins;
	char *origin_file;
};

/* Fills CFG with the defaults. Returns 0, -ENOMEM, or -EINVAL when a
 * default of config_options is out of its own bounds (a bug, which the
 * unit tests meet first). */
int config_init(struct tl_config *cfg);

/* Parses ARGS (argv of treelockfs or treelockctl) into CFG, reading a
 * config file first when one is named. Options that are not ours stay in
 * ARGS (for libfuse). For the mount, the first positional argument is
 * BACKING and is removed from ARGS; the second (MOUNTPOINT) stays. With
 * FOR_CTL, positional arguments stay in ARGS (commands).
 * Problems are collected in cfg->errors; returns 0, or -ENOMEM. */
int config_parse(struct tl_config *cfg, struct fuse_args *args, bool for_ctl);

/* Checks and converts every option, appending every problem to
 * cfg->errors. Returns 0 when there is none, else -EINVAL. */
int config_validate(struct tl_config *cfg);

/* Loads the secrets of the selected store (for es: the password from
 * es_password_file or TREELOCKFS_ES_PASSWORD, the API key). Appends
 * problems to cfg->errors; returns 0 or -EINVAL. */
int config_load_secrets(struct tl_config *cfg);

/* The option struct of backend KIND in CFG, or NULL. */
void *config_store_opts(const struct tl_config *cfg, enum tl_store_kind kind);

/* The one syntax of numbers in options (every option that takes one, the
 * config file's, libfuse's thread counts, and lock_timeout written to
 * .treelockfs/options): seconds are decimal digits with an optional
 * fraction ("30", "0.5"); whole numbers are decimal digits. No sign,
 * blank, exponent, hex, inf or nan. These convert S within MIN..MAX into
 * *OUT, and return 0 or -EINVAL (*OUT unchanged). */
int config_scan_seconds(const char *s, double min, double max, double *out);
int config_scan_uint(const char *s, unsigned long min, unsigned long max, unsigned long *out);

/* For backends' validate hooks: convert S (NULL: keep *OUT) by the
 * functions above, or append an "invalid NAME 'S': ..." problem. Return
 * whether S was valid. */
bool config_parse_seconds(struct tl_config *cfg, const char *name, const char *s, double min,
			  double max, double *out);
bool config_parse_uint(struct tl_config *cfg, const char *name, const char *s, unsigned long min,
		       unsigned long max, unsigned int *out);

/* For backends' validate hooks: makes the file name *PATH of option NAME
 * absolute, relative to the working directory of the caller, as the user
 * meant it: a file the store opens later (libcurl reads es_cacert when it
 * connects, from whichever thread, after the daemon left its working
 * directory) must not depend on where the process then is. Returns
 * whether *PATH is usable (a problem is appended otherwise). */
bool config_path_absolute(struct tl_config *cfg, const char *name, char **path);

/* Whether a file with status ST may steer a process running as EUID: a
 * file it takes options or secrets from (config=, es_password_file,
 * es_api_key_file) or appends to (hold_log). It must be owned by EUID
 * (with ROOT_TOO, or by root: for a root process that is one rule, root)
 * and writable by neither its group nor others: whoever else could
 * write it could turn on allow_other, point the store elsewhere or
 * change the credentials. When not, writes why into WHY (SIZE bytes):
 * "owned by uid N, not root", "owned by uid N, not by uid M or root",
 * "writable by group or others". This function can't fail. */
bool config_file_trusted(const struct stat *st, uid_t euid, bool root_too, char *why,
			 size_t size);

/* Reads the first line of secret file FILE (WHAT names it in problems),
 * refusing a file that group or others may access, or that
 * config_file_trusted() refuses. Returns a new string or NULL (problem
 * appended). */
char *config_read_secret(struct tl_config *cfg, const char *what, const char *file);

/* Appends one formatted problem to cfg->errors, as one line with bytes
 * that could garble a terminal or log escaped (escape.h). */
void config_error(struct tl_config *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* config_error() for a bad VALUE of option NAME: when the config file set
 * NAME to VALUE, the problem is prefixed with its file and line. */
void config_value_error(struct tl_config *cfg, const char *name, const char *value,
			const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Escapes ',' and '\' in S for one element of a -o list. Returns a new
 * string (caller frees) or NULL when out of memory. */
char *config_opt_escape(const char *s);

/* Limits of a config file: its size and the length of one line, in bytes
 * (the man page names them). */
#define TL_CONFIG_MAX_SIZE (256 * 1024)
#define TL_CONFIG_MAX_LINE 4096

/* Whether ARGS, as libfuse will read them, ask for allow_other or
 * allow_root by any route (a -o list, an escaped value is not one). Errs
 * on the side of true when out of memory. ARGS is not changed. */
bool config_args_allow_other(const struct fuse_args *args);

/* Prints the options of ours (for --help), for the mount or for treelockctl. */
void config_print_help(bool for_ctl);

/* Frees what CFG owns (not CFG itself); secrets are wiped first. */
void config_free(struct tl_config *cfg);

/* For a backend's fuse_opt table (tl_store_options): the entries of one
 * option in both spellings, "--name=v" and "name=v" (in -o lists and
 * config files); booleans also as "no_name", as ours are matched. */
#define TL_OPT_STR(name, type, field)                                                              \
	{"--" name "=%s", offsetof(type, field), 0}, {name "=%s", offsetof(type, field), 0}
#define TL_OPT_BOOL(name, type, field)                                                             \
	{"--" name, offsetof(type, field), 1}, {name, offsetof(type, field), 1},                   \
	{"--no_" name, offsetof(type, field), 0}, {"no_" name, offsetof(type, field), 0}

/* Longest owner= name, in bytes: an owner id "NAME:PID:NONCE" of the es
 * store (ES_NAME_MAX) and a holder id "NAME#TICKET" (lockstore.h) fit. */
#define TL_OWNER_MAX 63
/* Largest max_threads= and max_idle_threads= (libfuse's own limit,
 * FUSE_LOOP_MT_MAX_THREADS: it ignores a larger value). */
#define TL_MAX_THREADS 100000

/* Bounds and defaults that others use too; the rest are in the rows of
 * config_options (config.c). */
#define TL_LOCK_TIMEOUT_MIN 0.001 /* seconds, also for .treelockfs/options */
#define TL_LOCK_TIMEOUT_MAX 86400
#define TL_DEFAULT_LEASE_TTL 10.0 /* seconds: lease_ttl= */
/* Blocked flock()/fcntl() waits of a mount and of one uid (lock_waiters=,
 * lock_waiters_per_user=; fs/plockwait.h counts them). */
#define TL_DEFAULT_LOCK_WAITERS 1024
#define TL_DEFAULT_LOCK_WAITERS_PER_USER 256

#endif /* TREELOCKFS_CONFIG_CONFIG_H */
