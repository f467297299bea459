/* test_options.c - the configuration (config_*): options in both
 * spellings, the config file, errors reported all at once, secrets
 * refused when others can read them, --help */
#include <config.h>

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_opt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "es/es_internal.h"
#include "unit.h"

static struct es_options *es_opts(struct tl_config *cfg)
{
	return config_store_opts(cfg, TL_STORE_ES);
}

static struct tl_config cfg;
static struct fuse_args args;
static char tmpdir[64];

static void setup(void)
{
	strcpy(tmpdir, "/tmp/tlcfgXXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	ck_assert_int_eq(config_init(&cfg), 0);
}

static void teardown(void)
{
	char cmd[128];

	config_free(&cfg);
	fuse_opt_free_args(&args);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

static void parse(bool ctl, const char *const *argv)
{
	int argc = 0;

	memset(&args, 0, sizeof(args));
	fuse_opt_add_arg(&args, "prog");
	for (; argv[argc]; argc++)
		fuse_opt_add_arg(&args, argv[argc]);
	ck_assert_int_eq(config_parse(&cfg, &args, ctl), 0);
}

static char *write_file(const char *name, const char *text, mode_t mode)
{
	char *path;
	FILE *f;

	ck_assert_int_ge(asprintf(&path, "%s/%s", tmpdir, name), 0);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	chmod(path, mode);
	return path;
}

START_TEST(test_options__defaults)
{
	const char *argv[] = {"/b", "/m", NULL};

	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(cfg.lock_store, TL_STORE_MEM);
	ck_assert_int_eq(cfg.lock_strategy, TL_STRATEGY_TREE);
	ck_assert_int_eq(cfg.lock_scope, TL_SCOPE_RENAME);
	ck_assert_double_eq(cfg.lock_timeout, 30.0);
	ck_assert_double_eq(cfg.entry_timeout, 1.0);
	ck_assert_double_eq(cfg.attr_timeout, 1.0);
	ck_assert_double_eq(cfg.negative_timeout, 0.0);
	ck_assert_str_eq(cfg.backing, "/b");
	/* MOUNTPOINT stays for libfuse */
	ck_assert_int_eq(args.argc, 2);
	ck_assert_str_eq(args.argv[1], "/m");
}
END_TEST

START_TEST(test_options__both_spellings)
{
	const char *argv[] = {"--lock_strategy=global", "-o", "lock_timeout=2.5,rename_delay_ms=7",
			      "--lock_scope=namespace", "-oallow_other", "/b", "/m", "-f", NULL};

	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(cfg.lock_strategy, TL_STRATEGY_GLOBAL);
	ck_assert_double_eq(cfg.lock_timeout, 2.5);
	ck_assert_uint_eq(cfg.rename_delay_ms, 7);
	ck_assert_int_eq(cfg.lock_scope, TL_SCOPE_NAMESPACE);
	ck_assert_int_eq(cfg.allow_other, 1);
	ck_assert_int_eq(cfg.foreground, 1);
}
END_TEST

/* A fresh CFG and ARGS, for a second parse in one test. */
static void reset(void)
{
	config_free(&cfg);
	fuse_opt_free_args(&args);
	ck_assert_int_eq(config_init(&cfg), 0);
}

START_TEST(test_options__passthrough)
{
	const char *def[] = {"/b", "/m", NULL};
	const char *on[] = {"-o", "passthrough=on", "/b", "/m", NULL};
	const char *off[] = {"--passthrough=off", "/b", "/m", NULL};
	const char *bad[] = {"-o", "passthrough=yes", "/b", "/m", NULL};

	parse(false, def);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(cfg.passthrough, TL_PASSTHROUGH_AUTO);
	reset();
	parse(false, on);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(cfg.passthrough, TL_PASSTHROUGH_ON);
	reset();
	parse(false, off);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(cfg.passthrough, TL_PASSTHROUGH_OFF);
	reset();
	parse(false, bad);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(
		strstr(cfg.errors, "invalid passthrough 'yes': expected auto, on or off"));
}
END_TEST

START_TEST(test_options__lock_waiters)
{
	const char *argv[] = {"-o", "lock_waiters=5", "--lock_waiters_per_user=0", "/b", "/m",
			      NULL};
	const char *bad[] = {"-o", "lock_waiters=-1,lock_waiters_per_user=65537", "/b", "/m",
			     NULL};

	parse(false, argv + 4);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_uint_eq(cfg.lock_waiters, 1024);
	ck_assert_uint_eq(cfg.lock_waiters_per_user, 256);
	teardown();
	setup();
	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_uint_eq(cfg.lock_waiters, 5);
	ck_assert_uint_eq(cfg.lock_waiters_per_user, 0);
	teardown();
	setup();
	parse(false, bad);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid lock_waiters '-1'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid lock_waiters_per_user '65537'"));
}
END_TEST

START_TEST(test_options__fs_index)
{
	const char *argv[] = {"-o", "lock_store=es,es_url=http://h:9200,fs_index=tree-docs",
			      "--fs_index_delay=1.5", "--fs_index_settle=0", "/b", "/m", NULL};
	const char *mem[] = {"-o", "fs_index=tree-docs", "/b", "/m", NULL};
	const char *bad[] = {"-o", "lock_store=es,es_url=http://h:9200,fs_index=Tree",
			     "--fs_index_delay=0", "/b", "/m", NULL};
	const char *bad2[] = {"-o", "lock_store=es,es_url=http://h:9200,fs_index=_x", "/b", "/m",
			      NULL};

	parse(false, argv + 5);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_ptr_null(cfg.fs_index);
	ck_assert(cfg.fs_index_delay == 0.2);
	ck_assert(cfg.fs_index_settle == 2);
	teardown();
	setup();
	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_str_eq(cfg.fs_index, "tree-docs");
	ck_assert(cfg.fs_index_delay == 1.5);
	ck_assert(cfg.fs_index_settle == 0);
	teardown();
	setup();
	parse(false, mem);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "fs_index=tree-docs needs lock_store=es"));
	teardown();
	setup();
	parse(false, bad);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid fs_index 'Tree'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid fs_index_delay '0'"));
	teardown();
	setup();
	parse(true, bad2);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid fs_index '_x'"));
}
END_TEST

START_TEST(test_options__all_errors_at_once)
{
	const char *argv[] = {"-o", "lock_store=nope,lock_timeout=-1,lock_strategy=x",
			      "--rename_delay_ms=abc", "--log_level=loud", "/b", "/m", "/extra",
			      NULL};

	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid lock_store 'nope'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid lock_timeout '-1'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid lock_strategy 'x'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid rename_delay_ms 'abc'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid log_level 'loud'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "unexpected argument '/extra'"));
}
END_TEST

START_TEST(test_options__file_then_command_line)
{
	char *file = write_file("t.conf",
				"# comment\n"
				"lock_strategy = document\n"
				"lock_timeout=3\n"
				"\n"
				"es_url = http://a:9200,http://b:9200\n"
				"allow_other\n",
				0644);
	char *opt;
	const char *argv[] = {NULL, "--lock_timeout=4", "/b", "/m", NULL};

	ck_assert_int_ge(asprintf(&opt, "--config=%s", file), 0);
	argv[0] = opt;
	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(cfg.lock_strategy, TL_STRATEGY_DOCUMENT);
	ck_assert_double_eq(cfg.lock_timeout, 4.0); /* the command line wins */
	ck_assert_str_eq(es_opts(&cfg)->url, "http://a:9200,http://b:9200");
	ck_assert_int_eq(cfg.allow_other, 1);
	free(opt);
	free(file);
}
END_TEST

START_TEST(test_options__file_via_o_and_unknown_key)
{
	char *file = write_file("u.conf",
				"lock_store = mem\n"
				"es_idnex = other-index\n"
				"fsname = shared\n"
				"max_threads = 4\n"
				"default_permissions\n",
				0644);
	char *opt;
	const char *argv[] = {"-o", NULL, "x", NULL};

	ck_assert_int_ge(asprintf(&opt, "config=%s", file), 0);
	argv[1] = opt;
	parse(true, argv);
	/* treelockctl accepts libfuse's options of a shared file, and refuses
	 * a key that is no one's, naming its line */
	ck_assert_ptr_nonnull(cfg.errors);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "line 2: unknown option 'es_idnex'"));
	ck_assert_ptr_null(strstr(cfg.errors, "line 3"));
	ck_assert_ptr_null(strstr(cfg.errors, "line 4"));
	ck_assert_ptr_null(strstr(cfg.errors, "line 5"));
	ck_assert_str_eq(es_opts(&cfg)->index, ES_DEFAULT_INDEX);
	free(opt);
	free(file);
}
END_TEST

/* Every line that is not an option with what it takes is a problem naming
 * its line, for the mount and for treelockctl alike; bad values of ours
 * name the line they came from unless the command line replaced them. */
static void check_bad_lines(bool ctl)
{
	char *file = write_file("bad.conf",
				"lock_timeout = never\n"
				"this is not an option\n"
				"\x1b[2J\xff\xfe=\x07\n"
				"lock_scope\n"
				"allow_other = yes\n"
				"max_read = lots\n"
				"es_timeout_ms = 0\n"
				"= value\n"
				"es_index = Bad\n"
				"lock_strategy = sideways\n",
				0644);
	char *opt;
	const char *argv[] = {NULL, "--lock_strategy=upwards", "/b", "/m", NULL};

	ck_assert_int_ge(asprintf(&opt, "--config=%s", file), 0);
	argv[0] = opt;
	parse(ctl, argv);
	config_validate(&cfg);
	ck_assert_ptr_nonnull(cfg.errors);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "line 1: invalid lock_timeout 'never'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "line 2: unknown option 'this is not an option'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "line 3: unknown option '\\x1b[2J\\xff\\xfe'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "line 4: 'lock_scope' needs a value"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "line 5: 'allow_other' takes no value"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "line 6: invalid max_read 'lots'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "line 7: invalid es_timeout_ms '0'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "line 8: expected name = value"));
	/* the command line's value is not the file's */
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid lock_strategy 'upwards'"));
	ck_assert_ptr_null(strstr(cfg.errors, "line 10"));
	/* no raw control byte or invalid UTF-8 in the problems */
	ck_assert_ptr_null(strchr(cfg.errors, '\x1b'));
	ck_assert_ptr_null(strchr(cfg.errors, '\xff'));
	ck_assert_ptr_null(strchr(cfg.errors, '\x07'));
	free(opt);
	free(file);
}

START_TEST(test_options__bad_file_lines_named_for_the_mount)
{
	check_bad_lines(false);
}
END_TEST

START_TEST(test_options__bad_file_lines_named_for_treelockctl)
{
	check_bad_lines(true);
}
END_TEST

START_TEST(test_options__missing_file)
{
	const char *argv[] = {"--config=/nonexistent/treelockfs.conf", "/b", "/m", NULL};

	parse(false, argv);
	ck_assert_ptr_nonnull(cfg.errors);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "cannot read config file"));
}
END_TEST

START_TEST(test_options__es_validation)
{
	const char *argv[] = {"-o", "lock_store=es,es_index=Bad,es_timeout_ms=0,lease_ttl=0.1",
			      "--es_url=ftp://x", "/b", "/m", NULL};

	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid es_url 'ftp://x'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid es_index 'Bad'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid es_timeout_ms '0'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid lease_ttl '0.1'"));
}
END_TEST

/* A fresh configuration parsed from ARGV. */
static void reparse(const char *const *argv)
{
	config_free(&cfg);
	fuse_opt_free_args(&args);
	ck_assert_int_eq(config_init(&cfg), 0);
	parse(false, argv);
}

START_TEST(test_options__es_group_commit)
{
	const char *dflt[] = {"-o", "lock_store=es,es_url=http://x:9200", "/b", "/m", NULL};
	const char *off[] = {"-o", "lock_store=es,es_url=http://x:9200,no_es_group_commit", "/b",
			     "/m", NULL};
	const char *on[] = {"--es_group_commit", "-o", "lock_store=es,es_url=http://x:9200",
			    "/b", "/m", NULL};

	parse(false, dflt);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(es_opts(&cfg)->group_commit, 1);
	reparse(off);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(es_opts(&cfg)->group_commit, 0);
	reparse(on);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(es_opts(&cfg)->group_commit, 1);
}
END_TEST

START_TEST(test_options__es_inflight)
{
	const char *dflt[] = {"-o", "lock_store=es,es_url=http://x:9200", "/b", "/m", NULL};
	const char *one[] = {"-o", "lock_store=es,es_url=http://x:9200,es_inflight=1", "/b", "/m",
			     NULL};
	const char *bad[] = {"-o", "lock_store=es,es_url=http://x:9200,es_inflight=0",
			     "--es_inflight=17", "/b", "/m", NULL};

	parse(false, dflt);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_uint_eq(es_opts(&cfg)->inflight, 2);
	reparse(one);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_uint_eq(es_opts(&cfg)->inflight, 1);
	reparse(bad);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid es_inflight '17'"));
	/* treelockctl's options get the default too (the store hands
	 * es_inflight to its client as it is) */
	{
		const char *ctl[] = {"--es_url=http://x:9200", "--lock_store=es", "check", NULL};

		config_free(&cfg);
		fuse_opt_free_args(&args);
		ck_assert_int_eq(config_init(&cfg), 0);
		parse(true, ctl);
		ck_assert_int_eq(config_validate(&cfg), 0);
		ck_assert_uint_eq(es_opts(&cfg)->inflight, ES_BATCH_INFLIGHT);
	}
}
END_TEST

START_TEST(test_options__es_cacert_made_absolute)
{
	const char *rel[] = {"-o", "lock_store=es,es_url=https://x:9200,es_cacert=ca/root.pem",
			     "/b", "/m", NULL};
	const char *abs[] = {"-o", "lock_store=es,es_url=https://x:9200,es_cacert=/etc/ca.pem",
			     "/b", "/m", NULL};
	char *cwd = getcwd(NULL, 0), *want;

	/* the store's TLS client reads the file when it connects, long after
	 * the daemon left the working directory it was named from */
	ck_assert_ptr_nonnull(cwd);
	ck_assert_int_ge(asprintf(&want, "%s/ca/root.pem", strcmp(cwd, "/") ? cwd : ""), 0);
	parse(false, rel);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_str_eq(es_opts(&cfg)->cacert, want);
	reparse(abs);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_str_eq(es_opts(&cfg)->cacert, "/etc/ca.pem");
	free(want);
	free(cwd);
}
END_TEST

START_TEST(test_options__lock_store_names_the_backends)
{
	const char *bad[] = {"-o", "lock_store=etcd", "/b", "/m", NULL};
	const char *es[] = {"-o", "lock_store=es,es_url=http://x:9200", "/b", "/m", NULL};

	parse(false, bad);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid lock_store 'etcd': expected mem or es\n"));
	reparse(es);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(cfg.lock_store, TL_STORE_ES);
}
END_TEST

START_TEST(test_options__secret_file_permissions)
{
	char *loose = write_file("pw1", "sekrit\n", 0644);
	char *tight = write_file("pw2", "sekrit\n", 0600);

	cfg.lock_store = TL_STORE_ES; /* secrets are the selected store's */
	es_opts(&cfg)->user = strdup("u");
	es_opts(&cfg)->password_file = strdup(loose);
	ck_assert_int_eq(config_load_secrets(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "accessible by group or others"));
	ck_assert_ptr_null(strstr(cfg.errors, "sekrit"));
	ck_assert_ptr_null(es_opts(&cfg)->password);
	free(cfg.errors);
	cfg.errors = NULL;
	free(es_opts(&cfg)->password_file);
	es_opts(&cfg)->password_file = strdup(tight);
	ck_assert_int_eq(config_load_secrets(&cfg), 0);
	ck_assert_str_eq(es_opts(&cfg)->password, "sekrit");
	free(loose);
	free(tight);
}
END_TEST

START_TEST(test_options__password_from_environment)
{
	cfg.lock_store = TL_STORE_ES; /* secrets are the selected store's */
	es_opts(&cfg)->user = strdup("u");
	setenv(ES_PASSWORD_ENV, "envpw", 1);
	ck_assert_int_eq(config_load_secrets(&cfg), 0);
	ck_assert_str_eq(es_opts(&cfg)->password, "envpw");
	unsetenv(ES_PASSWORD_ENV);
}
END_TEST

static bool args_have(const char *opt)
{
	for (int i = 0; i < args.argc; i++)
		if (strstr(args.argv[i], opt))
			return true;
	return false;
}

START_TEST(test_options__atime_and_export_support)
{
	const char *argv[] = {"/b", "/m", "-o", "relatime,noatime,export_support,export_remember=7",
			      NULL};

	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(cfg.noatime, 1);
	ck_assert(args_have("noatime"));   /* the kernel's flag: on to libfuse */
	ck_assert(!args_have("relatime")); /* the default, unknown to libfuse 3.14 */
	ck_assert_int_eq(cfg.export_support, 1);
	ck_assert_uint_eq(cfg.export_remember, 7);
}
END_TEST

START_TEST(test_options__atime_that_cannot_be_honoured)
{
	const char *argv[] = {"/b", "/m", "-o", "strictatime,nodiratime,export_remember=-1", NULL};

	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "cannot honour 'strictatime'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "cannot honour 'nodiratime'"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid export_remember '-1'"));
	ck_assert_int_eq(cfg.noatime, 0);
	ck_assert_int_eq(cfg.export_support, 0);
}
END_TEST

START_TEST(test_options__noatime_from_a_config_file)
{
	char *file = write_file("c.conf", "noatime\n", 0644);
	const char *argv[] = {"/b", "/m", "--config", file, NULL};

	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(cfg.noatime, 1);
	ck_assert(args_have("noatime"));
	free(file);
}
END_TEST

START_TEST(test_options__bools_in_pairs)
{
	const char *argv[] = {"--allow_other", "-o", "export_support,no_allow_other", "/b", "/m",
			      "--no_export_support", "-o", "--allow_other", NULL};
	const char *with_value[] = {"-o", "export_support=1", "/b", "/m", NULL};
	const char *ctl_with_value[] = {"--allow_other=1", "check", NULL};

	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(cfg.allow_other, 1);
	ck_assert_int_eq(cfg.export_support, 0);
	ck_assert(!args_have("allow_other"));
	ck_assert(!args_have("export_support"));
	/* a bool takes no value: "name=1" is not ours, but libfuse's to refuse */
	reset();
	parse(false, with_value);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert_int_eq(cfg.export_support, 0);
	ck_assert(args_have("export_support=1"));
	reset();
	parse(true, ctl_with_value);
	ck_assert_ptr_nonnull(cfg.errors);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "unknown option '--allow_other=1'"));
}
END_TEST

START_TEST(test_options__value_options_need_their_value)
{
	const char *argv[] = {"/b", "/m", "-o", "lock_timeout", "--lock_scope", NULL};
	const char *ctl_argv[] = {"--lock_timeout", "check", NULL};

	/* "name" without "=": not ours, libfuse's to refuse */
	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), 0);
	ck_assert(args_have("lock_timeout"));
	ck_assert(args_have("--lock_scope"));
	ck_assert_double_eq(cfg.lock_timeout, 30.0);
	reset();
	parse(true, ctl_argv);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "unknown option '--lock_timeout'"));
}
END_TEST

/* The --help of config_print_help(FOR_CTL), as printed to stdout. */
static char *help_of(bool for_ctl)
{
	char *path, *text = NULL;
	size_t size = 0;
	int fd, saved;
	FILE *f;

	ck_assert_int_ge(asprintf(&path, "%s/help", tmpdir), 0);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	fflush(stdout);
	saved = dup(1);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(dup2(fd, 1), 0);
	config_print_help(for_ctl);
	fflush(stdout);
	ck_assert_int_ge(dup2(saved, 1), 0);
	close(saved);
	close(fd);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_ge(getdelim(&text, &size, '\0', f), 0);
	fclose(f);
	free(path);
	return text;
}

START_TEST(test_options__help_in_columns)
{
	char *help = help_of(false), *ctl_help = help_of(true), *line, *save = NULL;
	size_t name, text;

	ck_assert_ptr_nonnull(strstr(help, "Mount options:\n    --lock_scope=SCOPE       rename|"));
	ck_assert_ptr_nonnull(strstr(help, "\n    --passthrough=auto|on|off  reads and"));
	ck_assert_ptr_nonnull(strstr(help, "\n    --export_support         file handles"));
	ck_assert_ptr_nonnull(strstr(help, "\n    -V, --version            version\n"
					   "Lock store options"));
	ck_assert_ptr_nonnull(strstr(help, "\n    --no_es_group_commit     each rename"));
	ck_assert_ptr_nonnull(strstr(help, "\n    --log_level=LEVEL        err|warning|"));
	ck_assert_ptr_null(strstr(ctl_help, "Mount options"));
	ck_assert_ptr_null(strstr(ctl_help, "--lock_scope"));
	ck_assert_ptr_nonnull(strstr(ctl_help, "\n    --lock_timeout=SECONDS   give up"));
	/* every option's text at column 29, or two spaces after a longer
	 * name; its further lines at column 29 */
	for (line = strtok_r(help, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] != ' ')
			continue;
		name = strspn(line, " ");
		if (strncmp(line + name, "--", 2) == 0) {
			name += strcspn(line + name, " ");
			text = name + strspn(line + name, " ");
			ck_assert_msg(text == 29 || (name > 27 && text == name + 2), "%s", line);
		} else if (line[name] != '-') {
			ck_assert_msg(name == 29, "%s", line);
		}
	}
	free(help);
	free(ctl_help);
}
END_TEST

/* Parses "-o OPT" (or, with CTL, as treelockctl) afresh and validates;
 * returns whether OPT passed. */
static bool opt_passes(bool ctl, const char *opt)
{
	const char *argv[] = {"-o", opt, "/b", "/m", NULL};
	const char *ctl_argv[] = {"-o", opt, "check", NULL};

	reset();
	parse(ctl, ctl ? ctl_argv : argv);
	return config_validate(&cfg) == 0;
}

/* "-o OPT" is refused with a problem that contains WANT. */
static void opt_refused(bool ctl, const char *opt, const char *want)
{
	ck_assert_msg(!opt_passes(ctl, opt), "'%.80s' was accepted", opt);
	ck_assert_msg(strstr(cfg.errors, want), "'%.80s': no '%s' in: %.300s", opt, want,
		      cfg.errors);
}

START_TEST(test_options__numbers_are_plain_decimal)
{
	/* every option that takes a number, one parser: seconds, then
	 * whole numbers */
	static const char *const seconds[] = {"lock_timeout", "entry_timeout", "attr_timeout",
					      "negative_timeout", "lease_ttl"};
	static const char *const wholes[] = {"rename_delay_ms", "metrics_interval",
					     "export_remember", "lock_waiters",
					     "lock_waiters_per_user", "es_timeout_ms",
					     "es_start_timeout", "es_inflight", "max_threads",
					     "max_idle_threads", "max_read", "blksize"};
	static const char *const bad_seconds[] = {"0x10", "0X1p4", "1e3", "2E0", "inf", "nan",
						  "infinity", " 5", "5 ", "+5", "-0", ".5", "5.",
						  "5..0", "5:5", "", "5s", "1\n"};
	static const char *const bad_wholes[] = {"0x10", "1e3", " 5", "5 ", "+5", "-1", "-0",
						 "2.0", "", "5x", "18446744073709551617"};
	char opt[128], want[128];
	size_t i, j;

	for (i = 0; i < sizeof(seconds) / sizeof(seconds[0]); i++) {
		for (j = 0; j < sizeof(bad_seconds) / sizeof(bad_seconds[0]); j++) {
			snprintf(opt, sizeof(opt), "%s=%s", seconds[i], bad_seconds[j]);
			snprintf(want, sizeof(want), "invalid %s '", seconds[i]);
			opt_refused(false, opt, want);
		}
		snprintf(opt, sizeof(opt), "%s=2.50", seconds[i]);
		ck_assert_msg(opt_passes(false, opt), "%s: %s", opt, cfg.errors);
		snprintf(opt, sizeof(opt), "%s=0010", seconds[i]);
		ck_assert_msg(opt_passes(false, opt), "%s: %s", opt, cfg.errors);
	}
	ck_assert(opt_passes(false, "lock_timeout=0.25"));
	ck_assert_double_eq(cfg.lock_timeout, 0.25);
	for (i = 0; i < sizeof(wholes) / sizeof(wholes[0]); i++) {
		for (j = 0; j < sizeof(bad_wholes) / sizeof(bad_wholes[0]); j++) {
			snprintf(opt, sizeof(opt), "%s=%s", wholes[i], bad_wholes[j]);
			snprintf(want, sizeof(want), "invalid %s '", wholes[i]);
			opt_refused(false, opt, want);
		}
		snprintf(opt, sizeof(opt), "%s=2", wholes[i]);
		ck_assert_msg(opt_passes(false, opt), "%s: %s", opt, cfg.errors);
	}
	/* log_level's numbers too */
	opt_refused(false, "log_level=+5", "invalid log_level '+5'");
	opt_refused(false, "log_level= 5", "invalid log_level ' 5'");
	opt_refused(false, "log_level=05", "invalid log_level '05'");
	ck_assert(opt_passes(false, "log_level=5"));
	ck_assert_int_eq(cfg.log_level, 5);
	/* treelockctl reads the same options */
	opt_refused(true, "lock_timeout=0x10", "invalid lock_timeout '0x10'");
}
END_TEST

START_TEST(test_options__max_threads_within_what_libfuse_takes)
{
	char *file = write_file("t.conf", "max_threads = 0\nmax_idle_threads = 7\n", 0644);
	char *opt;
	const char *argv[] = {NULL, "/b", "/m", NULL};

	opt_refused(false, "max_threads=0", "invalid max_threads '0': expected a whole number "
					    "from 1 to 100000");
	opt_refused(false, "max_threads=-1", "invalid max_threads '-1'");
	opt_refused(false, "max_threads=100000000", "invalid max_threads '100000000'");
	opt_refused(false, "max_threads=100001", "invalid max_threads '100001'");
	opt_refused(false, "max_idle_threads=100001", "invalid max_idle_threads '100001'");
	ck_assert(opt_passes(false, "max_threads=100000"));
	ck_assert(opt_passes(false, "max_threads=1,max_idle_threads=0"));
	/* left for libfuse, which applies it */
	ck_assert(args_have("max_threads=1"));
	/* in a config file, naming its line */
	ck_assert_int_ge(asprintf(&opt, "--config=%s", file), 0);
	argv[0] = opt;
	reset();
	parse(false, argv);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "line 1: invalid max_threads '0'"));
	ck_assert_ptr_null(strstr(cfg.errors, "line 2"));
	/* reported once */
	ck_assert_ptr_null(strstr(strstr(cfg.errors, "max_threads '0'") + 1, "max_threads '0'"));
	free(opt);
	free(file);
}
END_TEST

START_TEST(test_options__config_needs_a_file)
{
	const char *dashes[] = {"--config=", "/b", "/m", NULL};
	const char *two[] = {"--config", "", "/b", "/m", NULL};

	opt_refused(false, "config=", "invalid config '': expected a file name");
	opt_refused(true, "config=", "invalid config '': expected a file name");
	reset();
	parse(false, dashes);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid config '': expected a file name"));
	reset();
	parse(false, two);
	ck_assert_int_eq(config_validate(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "invalid config '': expected a file name"));
}
END_TEST

START_TEST(test_options__owner_is_a_short_name)
{
	char *huge = malloc(70000 + 7), opt[128];

	ck_assert_ptr_nonnull(huge);
	strcpy(huge, "owner=");
	memset(huge + 6, 'a', 70000);
	huge[70006] = '\0';
	/* for every store: the name is in every holder id */
	opt_refused(false, huge, "invalid owner 'aaaa");
	ck_assert_ptr_nonnull(strstr(cfg.errors, "longer than 63 bytes"));
	ck_assert_uint_lt(strlen(cfg.errors), 200); /* not echoed whole */
	huge[6 + 64] = '\0';
	opt_refused(false, huge, "longer than 63 bytes");
	huge[6 + 63] = '\0';
	ck_assert_msg(opt_passes(false, huge), "%s", cfg.errors);
	ck_assert_uint_eq(strlen(cfg.owner), 63);
	opt_refused(false, "owner=", "invalid owner '': expected a name");
	opt_refused(false, "owner=a#b", "invalid owner 'a#b': expected a name without blanks, "
					"control characters or '#'");
	opt_refused(false, "owner=a b", "invalid owner 'a b'");
	opt_refused(false, "owner=a\tb", "invalid owner 'a\\x09b'");
	opt_refused(false, "owner=a\x7f", "invalid owner 'a\\x7f'");
	opt_refused(false, "owner=a\xc2\x85", "invalid owner 'a\\xc2\\x85'"); /* C1 NEL */
	opt_refused(false, "owner=a\xff", "invalid owner 'a\\xff'");
	opt_refused(true, "owner=a#b", "invalid owner 'a#b'");
	snprintf(opt, sizeof(opt), "lock_store=es,es_url=http://x:9200,%s", "owner=a b");
	opt_refused(false, opt, "invalid owner 'a b'");
	ck_assert(opt_passes(false, "owner=build-7.example.org"));
	ck_assert(opt_passes(false, "owner=b\xc3\xbchne")); /* UTF-8 text */
	free(huge);
}
END_TEST

START_TEST(test_options__file_trust_rule)
{
	struct stat st = {.st_mode = S_IFREG | 0644, .st_uid = 0};
	char why[96];

	/* a root process: root's files only */
	ck_assert(config_file_trusted(&st, 0, true, why, sizeof(why)));
	st.st_uid = 1000;
	ck_assert(!config_file_trusted(&st, 0, true, why, sizeof(why)));
	ck_assert_str_eq(why, "owned by uid 1000, not root");
	/* another user's process: its own or root's */
	ck_assert(config_file_trusted(&st, 1000, true, why, sizeof(why)));
	st.st_uid = 0;
	ck_assert(config_file_trusted(&st, 1000, true, why, sizeof(why)));
	ck_assert(!config_file_trusted(&st, 1000, false, why, sizeof(why)));
	ck_assert_str_eq(why, "owned by uid 0, not by uid 1000");
	st.st_uid = 1001;
	ck_assert(!config_file_trusted(&st, 1000, true, why, sizeof(why)));
	ck_assert_str_eq(why, "owned by uid 1001, not by uid 1000 or root");
	/* writable by others than the owner: never */
	st.st_uid = 0;
	st.st_mode = S_IFREG | 0664;
	ck_assert(!config_file_trusted(&st, 0, true, why, sizeof(why)));
	ck_assert_str_eq(why, "writable by group or others");
	st.st_mode = S_IFREG | 0602;
	ck_assert(!config_file_trusted(&st, 0, true, why, sizeof(why)));
	ck_assert_str_eq(why, "writable by group or others");
	st.st_mode = S_IFREG | 0444;
	ck_assert(config_file_trusted(&st, 0, true, why, sizeof(why)));
}
END_TEST

/* Config file NAME with MODE, given to UID (when root), parsed for the
 * mount or CTL: returns the problems (or NULL). */
static const char *parse_config_as(bool ctl, const char *name, mode_t mode, uid_t uid)
{
	char *file = write_file(name, "lock_timeout = 7\nallow_other\n", mode);
	char *opt;
	const char *argv[] = {NULL, "/b", "/m", NULL};

	ck_assert_int_eq(chown(file, uid, uid), 0);
	ck_assert_int_ge(asprintf(&opt, "--config=%s", file), 0);
	argv[0] = opt;
	reset();
	parse(ctl, argv);
	config_validate(&cfg);
	free(opt);
	free(file);
	return cfg.errors;
}

START_TEST(test_options__config_file_others_could_write_is_refused)
{
	const char *err;
	char want[256];
	int ctl;

	if (geteuid() != 0)
		return; /* files of another owner need root */
	for (ctl = 0; ctl < 2; ctl++) {
		err = parse_config_as(ctl, "nobody.conf", 0644, 65534);
		ck_assert_ptr_nonnull(err);
		snprintf(want, sizeof(want),
			 "cannot use config file '%s/nobody.conf': owned by uid 65534, not root",
			 tmpdir);
		ck_assert_msg(strstr(err, want), "%s", err);
		ck_assert_int_eq(cfg.allow_other, 0); /* nothing of it was used */
		ck_assert_double_eq(cfg.lock_timeout, 30.0);
		err = parse_config_as(ctl, "group.conf", 0664, 0);
		ck_assert_ptr_nonnull(err);
		ck_assert_ptr_nonnull(strstr(err, "group.conf': writable by group or others"));
		err = parse_config_as(ctl, "others.conf", 0646, 0);
		ck_assert_ptr_nonnull(err);
		ck_assert_ptr_nonnull(strstr(err, "others.conf': writable by group or others"));
		/* root's, readable by all: fine */
		ck_assert_ptr_null(parse_config_as(ctl, "good.conf", 0644, 0));
		ck_assert_double_eq(cfg.lock_timeout, 7.0);
	}
}
END_TEST

START_TEST(test_options__secret_file_of_another_owner_is_refused)
{
	char *theirs = write_file("pw-nobody", "sekrit\n", 0600);
	char *key = write_file("key-nobody", "id:sekrit\n", 0600);

	if (geteuid() != 0)
		goto out; /* files of another owner need root */
	ck_assert_int_eq(chown(theirs, 65534, 65534), 0);
	ck_assert_int_eq(chown(key, 65534, 65534), 0);
	cfg.lock_store = TL_STORE_ES; /* secrets are the selected store's */
	es_opts(&cfg)->user = strdup("u");
	es_opts(&cfg)->password_file = strdup(theirs);
	ck_assert_int_eq(config_load_secrets(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "cannot use es_password_file '"));
	ck_assert_ptr_nonnull(strstr(cfg.errors, "pw-nobody': owned by uid 65534, not root"));
	ck_assert_ptr_null(strstr(cfg.errors, "sekrit"));
	ck_assert_ptr_null(es_opts(&cfg)->password);
	free(cfg.errors);
	cfg.errors = NULL;
	free(es_opts(&cfg)->user);
	es_opts(&cfg)->user = NULL;
	free(es_opts(&cfg)->password_file);
	es_opts(&cfg)->password_file = NULL;
	es_opts(&cfg)->api_key_file = strdup(key);
	ck_assert_int_eq(config_load_secrets(&cfg), -EINVAL);
	ck_assert_ptr_nonnull(strstr(cfg.errors, "key-nobody': owned by uid 65534, not root"));
	ck_assert_ptr_null(es_opts(&cfg)->api_key);
out:
	free(theirs);
	free(key);
}
END_TEST

Suite *make_suite_options(void)
{
	Suite *s = suite_create("options");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_options__defaults);
	tcase_add_test(tc, test_options__both_spellings);
	tcase_add_test(tc, test_options__passthrough);
	tcase_add_test(tc, test_options__all_errors_at_once);
	tcase_add_test(tc, test_options__lock_waiters);
	tcase_add_test(tc, test_options__fs_index);
	tcase_add_test(tc, test_options__file_then_command_line);
	tcase_add_test(tc, test_options__file_via_o_and_unknown_key);
	tcase_add_test(tc, test_options__bad_file_lines_named_for_the_mount);
	tcase_add_test(tc, test_options__bad_file_lines_named_for_treelockctl);
	tcase_add_test(tc, test_options__missing_file);
	tcase_add_test(tc, test_options__es_validation);
	tcase_add_test(tc, test_options__es_inflight);
	tcase_add_test(tc, test_options__es_group_commit);
	tcase_add_test(tc, test_options__secret_file_permissions);
	tcase_add_test(tc, test_options__password_from_environment);
	tcase_add_test(tc, test_options__atime_and_export_support);
	tcase_add_test(tc, test_options__atime_that_cannot_be_honoured);
	tcase_add_test(tc, test_options__noatime_from_a_config_file);
	tcase_add_test(tc, test_options__bools_in_pairs);
	tcase_add_test(tc, test_options__value_options_need_their_value);
	tcase_add_test(tc, test_options__help_in_columns);
	tcase_add_test(tc, test_options__es_cacert_made_absolute);
	tcase_add_test(tc, test_options__lock_store_names_the_backends);
	tcase_add_test(tc, test_options__numbers_are_plain_decimal);
	tcase_add_test(tc, test_options__max_threads_within_what_libfuse_takes);
	tcase_add_test(tc, test_options__config_needs_a_file);
	tcase_add_test(tc, test_options__owner_is_a_short_name);
	tcase_add_test(tc, test_options__file_trust_rule);
	tcase_add_test(tc, test_options__config_file_others_could_write_is_refused);
	tcase_add_test(tc, test_options__secret_file_of_another_owner_is_refused);
	suite_add_tcase(s, tc);
	return s;
}
