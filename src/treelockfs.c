/* treelockfs.c - main(): options, validation, store, mount, loop
 *
 *   treelockfs [options] BACKING MOUNTPOINT
 *
 * Everything that can be wrong with the options is reported at once, before
 * anything is mounted (exit 1). The backing directory is opened before the
 * mount, so mounting over BACKING itself works. The lock store is opened
 * (and, for es, checked and bootstrapped) before daemonising; its threads
 * start in the FUSE init callback, after the fork.
 */
#include <config.h>

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "options.h"
#include "fs.h"
#include "lockstore.h"
#include "log.h"

/* configure found FUSE passthrough in the libfuse it links */
#ifdef HAVE_FUSE_PASSTHROUGH
#define TL_HAVE_PASSTHROUGH 1
#else
#define TL_HAVE_PASSTHROUGH 0
#endif

static void usage(const char *prog)
{
	printf("usage: %s [options] BACKING MOUNTPOINT\n\n"
	       "Mounts the directory BACKING at MOUNTPOINT and passes every operation through,\n"
	       "wrapping rename() in tree locks (see treelockfs(1)).\n\n",
	       prog);
	config_print_help(false);
}

static int add_mount_options(struct tl_config *cfg, struct fuse_args *args)
{
	char *esc, *opt;
	int err = 0;

	/* allow_other by whatever route always comes with the kernel's
	 * permission checks and, as root, the caller's credentials */
	if (config_args_allow_other(args))
		cfg->allow_other = 1;
	if (cfg->allow_other)
		err |= fuse_opt_add_arg(args, "-oallow_other,default_permissions");
	esc = config_opt_escape(cfg->backing);
	if (!esc || asprintf(&opt, "-ofsname=%s", esc) < 0) {
		free(esc);
		return -ENOMEM;
	}
	free(esc);
	/* a default: an fsname= of the user's (config file, command line)
	 * comes later and wins */
	err |= fuse_opt_insert_arg(args, 1, opt);
	free(opt);
	err |= fuse_opt_insert_arg(args, 1, "-osubtype=treelockfs");
	return err ? -ENOMEM : 0;
}

/* Whether MNT (a real path, as libfuse gives it) lies strictly below
 * BACKING: then the mount would serve itself, and a rename that moves a
 * directory through MNT's own backing entry waits on itself for good.
 * Compares the real paths, then walks up from MNT by ".." comparing
 * st_dev/st_ino with BACKING's, which also catches bind mounts and other
 * aliases of BACKING. MOUNTPOINT == BACKING is fine: the daemon reaches
 * BACKING by an fd opened before the mount. This function can't fail: what
 * cannot be checked is left to the mount to report. */
static bool mountpoint_below_backing(const char *backing, const char *mnt)
{
	struct stat b, cur, up;
	char *rb = realpath(backing, NULL);
	bool below = false;
	int fd, upfd;

	if (rb) {
		size_t n = strcmp(rb, "/") == 0 ? 0 : strlen(rb);

		below = strncmp(mnt, rb, n) == 0 && mnt[n] == '/' && mnt[n + 1] != '\0';
		free(rb);
	}
	if (below || stat(backing, &b) != 0)
		return below;
	fd = open(mnt, O_PATH | O_DIRECTORY | O_CLOEXEC);
	while (fd != -1 && fstat(fd, &cur) == 0) {
		upfd = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		close(fd);
		fd = upfd;
		if (fd == -1 || fstat(fd, &up) != 0 ||
		    (up.st_dev == cur.st_dev && up.st_ino == cur.st_ino))
			break; /* the root */
		if (up.st_dev == b.st_dev && up.st_ino == b.st_ino) {
			below = true;
			break;
		}
	}
	if (fd != -1)
		close(fd);
	return below;
}

/* Raises the soft RLIMIT_NOFILE to the hard limit: every inode the kernel
 * remembers holds an O_PATH fd, so the usual 1024 runs out at the first
 * "ls -l" of a large directory. This function can't fail: if the limit
 * cannot be raised the mount runs with what it has (and says so). */
static void raise_nofile_limit(void)
{
	struct rlimit rl;
	rlim_t old;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == rl.rlim_max)
		return;
	old = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		tl_log(LOG_NOTICE, "cannot raise the open-file limit from %llu: %s",
		       (unsigned long long)old, strerror(errno));
	else
		tl_log(LOG_DEBUG, "raised the open-file limit from %llu to %llu",
		       (unsigned long long)old, (unsigned long long)rl.rlim_max);
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts opts = {0};
	struct fuse_loop_config *loop_cfg = NULL;
	struct tl_config cfg;
	struct tlfs fs = {.backing_fd = -1, .hold_log_fd = -1};
	struct fuse_session *se = NULL;
	struct stat st;
	int ret = 1, err;

	tl_log_init("treelockfs", LOG_NOTICE);
	if (config_init(&cfg) != 0 || config_parse(&cfg, &args, false) != 0) {
		fprintf(stderr, "treelockfs: out of memory\n");
		return 1;
	}
	if (cfg.show_version) {
		/* the libfuse running (a shared one may differ from the headers'),
		 * where the build took it from, and whether it has passthrough */
		printf("treelockfs %s (libfuse %s, %s; FUSE passthrough: %s)\n", PACKAGE_VERSION,
		       fuse_pkgversion(), TL_LIBFUSE_ORIGIN, TL_HAVE_PASSTHROUGH ? "yes" : "no");
		ret = 0;
		goto out_free_cfg;
	}
	if (cfg.show_help) {
		usage(argv[0]);
		printf("\nlibfuse options:\n");
		fuse_cmdline_help();
		fuse_lowlevel_help();
		ret = 0;
		goto out_free_cfg;
	}
	config_validate(&cfg);
	tl_log_init("treelockfs", cfg.log_level);
	if (cfg.nonopt_count < 1)
		config_error(&cfg, "missing BACKING directory");
	else if (cfg.nonopt_count < 2)
		config_error(&cfg, "missing MOUNTPOINT");
	if (cfg.backing) {
		if (stat(cfg.backing, &st) != 0)
			config_error(&cfg, "cannot use BACKING '%s': %s", cfg.backing,
				     strerror(errno));
		else if (!S_ISDIR(st.st_mode))
			config_error(&cfg, "cannot use BACKING '%s': not a directory", cfg.backing);
	}
	if (cfg.lock_store == TL_STORE_ES)
		config_load_secrets(&cfg);
	/* after a fuse_opt_parse() failure ARGS is still main's argv: leave it */
	if (cfg.backing && args.allocated && add_mount_options(&cfg, &args) != 0)
		config_error(&cfg, "out of memory");
	if (fuse_parse_cmdline(&args, &opts) != 0)
		config_error(&cfg, "cannot parse the libfuse options");
	else if (cfg.backing && opts.mountpoint &&
		 mountpoint_below_backing(cfg.backing, opts.mountpoint))
		config_error(&cfg, "cannot mount '%s' inside BACKING '%s': the mount would serve "
				   "itself and a rename through it could hang it", opts.mountpoint,
			     cfg.backing);
	if (!cfg.errors) {
		/* also reports libfuse options it does not know, on stderr */
		se = fuse_session_new(&args, &tlfs_ops, sizeof(tlfs_ops), &fs);
		if (!se)
			config_error(&cfg, "libfuse refused the options above");
	}
	if (cfg.errors) {
		const char *p = cfg.errors;

		while (*p) {
			const char *nl = strchr(p, '\n');

			fprintf(stderr, "treelockfs: %.*s\n", (int)(nl - p), p);
			p = nl + 1;
		}
		fprintf(stderr, "Try '%s --help' for more information.\n", argv[0]);
		goto out_destroy;
	}

	fs.cfg = &cfg;
	raise_nofile_limit();
	fs.backing_fd = open(cfg.backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fs.backing_fd == -1) {
		tl_log(LOG_ERR, "cannot open BACKING '%s': %s", cfg.backing, strerror(errno));
		goto out_destroy;
	}
	if (cfg.hold_log) {
		/* opened before daemonising: a relative name is the caller's */
		fs.hold_log_fd = open(cfg.hold_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
		if (fs.hold_log_fd == -1) {
			tl_log(LOG_ERR, "cannot open hold_log '%s': %s", cfg.hold_log,
			       strerror(errno));
			goto out_close_backing;
		}
	}
	fs.switch_creds = cfg.allow_other && geteuid() == 0;
	/* libcurl's global state, once, before any thread exists */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	err = lockstore_open(&cfg, &fs.store);
	if (err) {
		tl_log(LOG_ERR, "cannot open the %s lock store: %s", cfg.lock_store_s,
		       strerror(-err));
		goto out_close_backing;
	}
	lockmgr_init(&fs.mgr, fs.store, cfg.lock_timeout, cfg.owner);
	/* modes arrive with the caller's umask applied; ours must not apply again */
	umask(0);

	err = tlfs_prepare(&fs);
	if (err) {
		tl_log(LOG_ERR, "cannot prepare BACKING '%s': %s", cfg.backing, strerror(-err));
		goto out_close_store;
	}
	if (fuse_session_mount(se, opts.mountpoint) != 0)
		goto out_close_store;
	if (fuse_daemonize(opts.foreground) != 0)
		goto out_unmount;
	/* where threads that compute lock keys by getcwd() come back to */
	fs.cwd_fd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	fs.cwd_stays = strcmp(lockmgr_store_name(&fs.mgr), "mem") == 0;
	if (!opts.foreground)
		tl_log_use_syslog();
	if (fuse_set_signal_handlers(se) != 0)
		goto out_unmount;
	tl_log(LOG_NOTICE, "serving '%s' at '%s'", cfg.backing, opts.mountpoint);
	if (opts.singlethread) {
		err = fuse_session_loop(se);
	} else {
		loop_cfg = fuse_loop_cfg_create();
		if (!loop_cfg)
			goto out_signals;
		fuse_loop_cfg_set_clone_fd(loop_cfg, (unsigned)opts.clone_fd);
		/* UINT_MAX: not given; libfuse 3.14 would warn "Ignoring invalid max threads" */
		if (opts.max_idle_threads != UINT_MAX)
			fuse_loop_cfg_set_idle_threads(loop_cfg, opts.max_idle_threads);
		if (opts.max_threads && opts.max_threads <= 100000)
			fuse_loop_cfg_set_max_threads(loop_cfg, opts.max_threads);
		err = fuse_session_loop_mt(se, loop_cfg);
		fuse_loop_cfg_destroy(loop_cfg);
	}
	/* libfuse returns the number of a signal that ended the loop (SIGTERM,
	 * SIGINT, SIGHUP): a stop that was asked for, not an error; its
	 * errors come back negative */
	if (err > 0) {
		const char *sig = sigabbrev_np(err);

		tl_log(LOG_NOTICE, "stopping on SIG%s: unmounting '%s'", sig ? sig : "?",
		       opts.mountpoint);
		err = 0;
	}
	ret = err == 0 ? 0 : 1;
	if (err)
		tl_log(LOG_ERR, "the FUSE loop ended with an error: %s", strerror(-err));

out_signals:
	fuse_remove_signal_handlers(se);
out_unmount:
	fuse_session_unmount(se);
out_close_store:
	tlfs_release(&fs);
	lockstore_close(fs.store);
out_close_backing:
	if (fs.hold_log_fd != -1)
		close(fs.hold_log_fd);
	close(fs.backing_fd);
	curl_global_cleanup();
out_destroy:
	if (se)
		fuse_session_destroy(se);
	free(opts.mountpoint);
	fuse_opt_free_args(&args);
out_free_cfg:
	config_free(&cfg);
	return ret;
}
