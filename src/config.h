/* config.h is autoconf's; this is tl_config: options of the mount and of
 * treelockctl, their defaults, the config file and validation.
 *
 * Every option exists as "--name=value" and "-o name=value" (so fstab and
 * mount.fuse3 work), and as "name=value" in a config file given with
 * --config=FILE / -o config=FILE. Later wins: defaults < config file <
 * command line. Booleans come in pairs: "es_insecure" / "no_es_insecure".
 */
#ifndef TREELOCKFS_CONFIG_H
#define TREELOCKFS_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "lockplan.h"

struct fuse_args;

enum tl_store_kind {
	TL_STORE_MEM = 0,
	TL_STORE_ES,
};

enum tl_scope {
	TL_SCOPE_RENAME = 0,
	TL_SCOPE_NAMESPACE,
};

struct tl_config {
	/* as given (strings are what fuse_opt fills; validated into enums) */
	char *lock_store_s;
	char *lock_strategy_s;
	char *lock_scope_s;
	char *lock_timeout_s;
	char *rename_delay_ms_s;
	char *entry_timeout_s;
	char *attr_timeout_s;
	char *negative_timeout_s;
	char *log_level_s;
	char *config_file;
	char *es_url;          /* "https://a:9200,https://b:9200" */
	char *es_index;
	char *es_user;
	char *es_password_file;
	char *es_api_key_file;
	char *es_cacert;
	char *es_timeout_ms_s;
	char *owner;
	char *lease_ttl_s;
	int es_insecure;
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
	double entry_timeout;    /* seconds */
	double attr_timeout;
	double negative_timeout;
	int log_level;
	unsigned int es_timeout_ms;
	double lease_ttl;        /* seconds */

	/* secrets, loaded by config_load_secrets(); never logged */
	char *es_password;
	char *es_api_key;

	/* positional: BACKING (mount) */
	char *backing;
	int nonopt_count;

	/* errors found while parsing, reported all at once */
	char *errors;
};

/* Fills CFG with the defaults. Returns 0 or -ENOMEM. */
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

/* Reads the Elasticsearch password (es_password_file, or the environment
 * variable TREELOCKFS_ES_PASSWORD) and API key (es_api_key_file). A secret
 * file readable or writable by group or others is refused. Appends problems
 * to cfg->errors; returns 0 or -EINVAL. */
int config_load_secrets(struct tl_config *cfg);

/* Appends one formatted problem to cfg->errors. */
void config_error(struct tl_config *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Escapes ',' and '\' in S for one element of a -o list. Returns a new
 * string (caller frees) or NULL when out of memory. */
char *config_opt_escape(const char *s);

/* Prints the options of ours (for --help), for the mount or for treelockctl. */
void config_print_help(bool for_ctl);

/* Frees what CFG owns (not CFG itself); secrets are wiped first. */
void config_free(struct tl_config *cfg);

#define TL_DEFAULT_LOCK_TIMEOUT 30.0
#define TL_DEFAULT_ENTRY_TIMEOUT 1.0
#define TL_DEFAULT_ATTR_TIMEOUT 1.0
#define TL_DEFAULT_NEGATIVE_TIMEOUT 0.0
#define TL_DEFAULT_ES_INDEX "treelockfs-locks"
#define TL_DEFAULT_ES_TIMEOUT_MS 5000
#define TL_DEFAULT_LEASE_TTL 10.0
#define TL_PASSWORD_ENV "TREELOCKFS_ES_PASSWORD"

#endif /* TREELOCKFS_CONFIG_H */
