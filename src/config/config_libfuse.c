/* config_libfuse.c - what the configuration knows of libfuse's own options:
 * those a config file may carry, the numbers it takes, allow_other */
#include <config.h>

#include <fuse_opt.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "config/config.h"
#include "config/config_i.h"

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

char config_libfuse_kind(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(libfuse_file_opts) / sizeof(libfuse_file_opts[0]); i++)
		if (strcmp(name, libfuse_file_opts[i].name) == 0)
			return libfuse_file_opts[i].kind;
	return 0;
}

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

void config_libfuse_number(struct tl_config *cfg, const char *opt)
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
