/* config_i.h - what the files of src/config share: the parsing context,
 * the option lookup, the config file reader, value conversions and
 * libfuse's options */
#ifndef TREELOCKFS_CONFIG_CONFIG_I_H
#define TREELOCKFS_CONFIG_CONFIG_I_H

#include <stdbool.h>

#include "config/config.h"

struct fuse_args;

/* Parsing context of the fuse_opt callback (fuse_opt passes only cfg). */
struct config_parse_ctx {
	struct tl_config *cfg;
	bool for_ctl;
	const char *file;              /* non-NULL while parsing a config file */
	struct fuse_args *passthrough; /* the config file's options for libfuse */
};

/* Runs every backend's option table, then ours, over ARGS into CFG, in
 * the context config_parse() set. Returns 0 or -1 (fuse_opt_parse()). */
int config_parse_args(struct fuse_args *args, struct tl_config *cfg);

/* Whether OPT ("name" or "name=value", either also with "--") is an
 * option of ours or of a backend, as the parser will take it. */
bool config_option_known(const char *opt);

/* Finds --config=F, --config F or -o ...config=F... in ARGS without
 * touching them. Returns a new string or NULL. */
char *config_file_find(const struct fuse_args *args);

/* Reads config file FILE into CFG: checks each line, remembers where
 * each value came from (cfg->origins), and parses the lines as options
 * with CTX's file set. Problems are appended; returns 0, or -ENOMEM. */
int config_file_parse(struct tl_config *cfg, const char *file, struct config_parse_ctx *ctx);

/* VALUE of option NAME as the index of its word among WORDS (NULL
 * terminated), or 0 after an "invalid NAME 'VALUE': expected a, b or c"
 * problem. */
int config_parse_word(struct tl_config *cfg, const char *name, const char *value,
		      const char *const *words);

/* *PATH of option NAME as the name of a file (its last component neither
 * empty, "." nor ".."), made absolute by config_path_absolute(). Returns
 * whether it is usable (a problem is appended otherwise). */
bool config_parse_file_name(struct tl_config *cfg, const char *name, char **path);

/* config_libfuse.c: libfuse's own options */

/* What libfuse's option NAME takes when a config file may carry it: 'f'
 * nothing (a flag), 's' a string, 'u' a whole number; 0: it may not. */
char config_libfuse_kind(const char *name);

/* Checks OPT ("name=value") when it is one of libfuse's whole numbers
 * (max_threads=, max_idle_threads=, max_read=, blksize=) by the syntax and
 * within the values libfuse takes, appending the problem
 * (config_value_error(): a config file's line is named). */
void config_libfuse_number(struct tl_config *cfg, const char *opt);

#endif /* TREELOCKFS_CONFIG_CONFIG_I_H */
