/* treelockfs.c - main(): options, validation, store, mount, loop
 *
 *   treelockfs [options] BACKING MOUNTPOINT
 *
 * Everything that can be wrong with the options is reported at once, before
 * anything is mounted (exit 1). The backing directory is opened before the
 * mount, so mounting over BACKING itself works. The lock store is opened
 * (and, for es, checked and bootstrapped) before daemonising; its threads
 * start in the FUSE init callback, after the fork.
 *
 * Depends on: base, config, lock, fs.
 */
#include <config.h>

#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/escape.h"
#include "config/config.h"
#include "fs/fs.h"
#include "lock/lockstore.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/tlclock.h"
#include "fs/remount.h"
#include "base/mountchain.h"

/* lockmgr keeps owner= whole (config.h) */
_Static_assert(sizeof(((struct lockmgr *)0)->owner) > TL_OWNER_MAX, "owner= must fit lockmgr");

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
	struct stat b;
	char *rb = realpath(backing, NULL);
	bool below = false;

	if (rb) {
		size_t n = strcmp(rb, "/") == 0 ? 0 : strlen(rb);

		below = strncmp(mnt, rb, n) == 0 && mnt[n] == '/' && mnt[n + 1] != '\0';
		free(rb);
	}
	if (below || stat(backing, &b) != 0)
		return below;
	return mountchain_path_below_dir(mnt, &b);
}

/* Notes in FS the chain of BACKING (mountchain.h) and refuses MNT when
 * it lies below a directory that BACKING is served from through a FUSE
 * mount: "treelockfs bA mA; treelockfs mA bA/sub" would make the two
 * mounts serve each other, and one rename through them hangs both. The
 * first line of the chain, BACKING itself, is mountpoint_below_backing()'s.
 * Problems are appended to CFG. */
static void check_mount_cycle(struct tl_config *cfg, struct tlfs *fs, const char *mnt)
{
	int fd, err;

	fd = open(cfg->backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd == -1)
		return; /* reported when BACKING is opened */
	err = mountchain_of_dir(fd, &fs->backing_chain);
	close(fd);
	if (err) {
		config_error(cfg, "cannot use BACKING '%s': %s", cfg->backing, strerror(-err));
		return;
	}
	if (mountchain_below(fs->backing_chain, 1, mnt))
		config_error(cfg, "cannot mount '%s': BACKING '%s' is reached through a FUSE mount "
				  "served from a directory that contains '%s'; the mounts would serve "
				  "each other and a rename through them could hang both",
			     mnt, cfg->backing, mnt);
}

/* Opens hold_log FILE for appending, as the man page promises: a
 * symbolic link is not followed (O_NOFOLLOW), a new file is created mode
 * 0600, and an existing one is refused unless it is a regular file with
 * one name, owned by the daemon's user and not accessible by group or
 * others, so that a file planted in a shared directory can neither
 * redirect the appends nor read them. A FIFO does not block the open
 * (O_NONBLOCK). Returns the fd, or -1 with the problem appended to CFG. */
static int open_hold_log(struct tl_config *cfg, const char *file)
{
	char why[96];
	struct stat st;
	int fd;

	fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
				O_CLOEXEC,
		  0600);
	if (fd == -1) {
		config_error(cfg, "cannot open hold_log '%s': %s", file,
			     errno == ELOOP ? "a symbolic link" : strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0) {
		config_error(cfg, "cannot open hold_log '%s': %s", file, strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		config_error(cfg, "cannot use hold_log '%s': not a regular file", file);
		goto out_close;
	}
	/* the daemon's own: not root's for a daemon that is not root */
	if (!config_file_trusted(&st, geteuid(), false, why, sizeof(why))) {
		config_error(cfg, "cannot use hold_log '%s': %s", file, why);
		goto out_close;
	}
	if (st.st_mode & 077) {
		config_error(cfg, "cannot use hold_log '%s': accessible by group or others: "
				  "chmod 600 it", file);
		goto out_close;
	}
	if (st.st_nlink != 1) {
		config_error(cfg, "cannot use hold_log '%s': it has %lu names (hard links)", file,
			     (unsigned long)st.st_nlink);
		goto out_close;
	}
	if (fcntl(fd, F_SETFL, O_APPEND) == -1) {
		config_error(cfg, "cannot open hold_log '%s': %s", file, strerror(errno));
		goto out_close;
	}
	return fd;

out_close:
	close(fd);
	return -1;
}

/* Opens the directory of metrics_file FILE (metrics_dir_open(): no
 * symbolic link followed, only directories the daemon trusts), before
 * daemonising, so that a refusal ends the start. Returns the descriptor,
 * or -1 with the problem appended to CFG. */
static int open_metrics_dir(struct tl_config *cfg, const char *file)
{
	char why[PATH_MAX + 256];
	int fd = metrics_dir_open(file, why, sizeof(why));

	if (fd < 0) {
		config_error(cfg, "cannot use metrics_file '%s': %s", file, why);
		return -1;
	}
	return fd;
}

/* libfuse's own messages (an unknown option of the command line, its
 * debug lines) go where libfuse would print them, stderr, but escaped
 * (escape.h): they quote bytes a user typed or a config file
 * held, which must not reach a terminal or a log raw. libfuse prints some
 * messages in pieces, so only a piece's final newline is kept as is. */
static void fuse_log_escaped(enum fuse_log_level level, const char *fmt, va_list ap)
{
	char msg[2048], esc[4 * sizeof(msg) + 1];
	size_t n;
	bool nl;

	(void)level;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	nl = n > 0 && msg[n - 1] == '\n';
	if (nl)
		msg[n - 1] = '\0';
	escape_text(esc, sizeof(esc), msg);
	fprintf(stderr, "%s%s", esc, nl ? "\n" : "");
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

/* ---- the end of a mount --------------------------------------------------------
 *
 * An unmount (or SIGTERM) ends libfuse's loop only once every request
 * thread is done, and closing the store then sends what is left: kept
 * releases, the lease's deletion. A store that hangs, or a rename of a
 * large plan, must not keep the daemon alive: from the moment the
 * session ends, the store's requests end within 3/4 of lock_timeout
 * (lockmgr_shutdown()), and should the daemon still run at lock_timeout
 * it unmounts (when a signal ended it) and exits, logging why. */

struct stop_watch {
	struct fuse_session *se;
	struct lockmgr *mgr;
	int64_t budget_ms;        /* lock_timeout */
	pthread_mutex_t mutex;    /* leaf */
	pthread_cond_t cond;      /* CLOCK_MONOTONIC */
	bool done;                /* protected by mutex: the daemon is ending */
	int64_t ended_ms;         /* protected by mutex: the session ended, 0: not yet */
	bool unmounted;           /* protected by mutex */
	pthread_t thread;
	bool running;
};

/* How often the watch looks whether the session ended. */
#define STOP_POLL_MS 100
/* A stop still under way this long after the session ended (or a quarter
 * of lock_timeout, if less) is logged once: the store's last requests are
 * what it waits for, up to 3/4 of lock_timeout. */
#define STOP_SLOW_MS 5000

/* Unmounts SE once, from whichever thread comes first. */
static void stop_unmount(struct stop_watch *w)
{
	bool first;

	pthread_mutex_lock(&w->mutex);
	first = !w->unmounted;
	w->unmounted = true;
	pthread_mutex_unlock(&w->mutex);
	if (first)
		fuse_session_unmount(w->se);
}

/* The session ended (now or earlier): starts the clock and ends the
 * store's requests by 3/4 of lock_timeout from then. With WAIT (the
 * thread that closes the store next), returns only once that is done,
 * whichever thread began it. */
static void stop_begin(struct stop_watch *w, bool wait)
{
	int64_t end;
	bool first;

	pthread_mutex_lock(&w->mutex);
	first = !w->ended_ms;
	if (first)
		w->ended_ms = tl_mono_ms();
	end = w->ended_ms + w->budget_ms * 3 / 4;
	pthread_mutex_unlock(&w->mutex);
	if (first || wait)
		lockmgr_shutdown(w->mgr, end);
}

static void *stop_watch_main(void *arg)
{
	struct stop_watch *w = arg;
	int64_t wake, ended, slow = w->budget_ms / 4 < STOP_SLOW_MS ? w->budget_ms / 4 : STOP_SLOW_MS;
	bool told = false;
	struct timespec ts;

	pthread_mutex_lock(&w->mutex);
	while (!w->done) {
		ended = w->ended_ms;
		if (!ended && fuse_session_exited(w->se)) {
			pthread_mutex_unlock(&w->mutex);
			stop_begin(w, false);
			pthread_mutex_lock(&w->mutex);
			continue;
		}
		if (ended && tl_mono_ms() >= ended + w->budget_ms)
			break;
		if (ended && !told && tl_mono_ms() >= ended + slow) {
			told = true;
			tl_log(LOG_NOTICE, "still stopping %.1f s after the session ended: waiting "
			       "for the lock store's last requests (releases, the lease), at most "
			       "%.1f s more", (double)slow / 1000,
			       (double)(w->budget_ms * 3 / 4 - slow) / 1000);
			continue;
		}
		wake = !ended ? tl_mono_ms() + STOP_POLL_MS
			      : told ? ended + w->budget_ms : ended + slow;
		ts.tv_sec = wake / 1000;
		ts.tv_nsec = (wake % 1000) * 1000000;
		pthread_cond_timedwait(&w->cond, &w->mutex, &ts);
	}
	if (w->done) {
		pthread_mutex_unlock(&w->mutex);
		return NULL;
	}
	pthread_mutex_unlock(&w->mutex);
	tl_log(LOG_ERR, "still stopping %.1f s after the session ended (lock_timeout): exiting "
	       "now; locks not released expire with the lease", (double)w->budget_ms / 1000);
	stop_unmount(w);
	_exit(1);
}

static int stop_watch_start(struct stop_watch *w, struct fuse_session *se, struct lockmgr *mgr,
			    double lock_timeout)
{
	pthread_condattr_t ca;
	int err;

	memset(w, 0, sizeof(*w));
	w->se = se;
	w->mgr = mgr;
	w->budget_ms = (int64_t)(lock_timeout * 1000);
	if (w->budget_ms < 1000)
		w->budget_ms = 1000;
	pthread_mutex_init(&w->mutex, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	err = pthread_create(&w->thread, NULL, stop_watch_main, w);
	if (err) {
		tl_log(LOG_WARNING, "cannot watch the end of the mount: %s", strerror(err));
		return -err;
	}
	w->running = true;
	return 0;
}

/* The daemon is done: ends the watch. */
static void stop_watch_end(struct stop_watch *w)
{
	if (!w->running)
		return;
	pthread_mutex_lock(&w->mutex);
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->mutex);
	pthread_join(w->thread, NULL);
	w->running = false;
}

/* libfuse cancels its worker threads when the session ends, and glibc
 * loads the unwinder a cancellation needs (libgcc_s) only at the first
 * one: a daemon out of descriptors then (every inode the kernel remembers
 * holds one) cannot open it, and glibc aborts the process. Loaded now, it
 * is found among the loaded objects then, without a descriptor. This
 * function can't fail: where it cannot be loaded, nothing changes. */
static void unwinder_preload(void)
{
	if (!dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_NODELETE))
		tl_log(LOG_DEBUG, "cannot load libgcc_s.so.1 ahead: %s", dlerror());
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts opts = {0};
	struct fuse_loop_config *loop_cfg = NULL;
	struct metrics_writer metrics = {0};
	struct tl_config cfg;
	struct tlfs fs = {.backing_fd = -1};
	int hold_log_fd = -1, metrics_dir_fd = -1;
	struct fuse_session *se = NULL;
	struct stop_watch watch = {0};
	struct stat st;
	int ret = 1, err;

	/* mount(8) -o remount comes here through mount.fuse3: no new daemon */
	if (remount_requested(argc, argv))
		return remount_run(argc, argv);
	tl_log_init("treelockfs", LOG_NOTICE);
	fuse_set_log_func(fuse_log_escaped);
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
	else if (cfg.backing && opts.mountpoint && !cfg.errors)
		check_mount_cycle(&cfg, &fs, opts.mountpoint);
	/* opened before daemonising: a relative name is the caller's */
	if (cfg.hold_log && !cfg.errors)
		hold_log_fd = open_hold_log(&cfg, cfg.hold_log);
	if (cfg.metrics_file && !cfg.errors)
		metrics_dir_fd = open_metrics_dir(&cfg, cfg.metrics_file);
	if (cfg.passthrough == TL_PASSTHROUGH_ON && cfg.backing) {
		const char *why = passthrough_refusal(cfg.backing);

		if (why)
			config_error(&cfg, "%s", why);
		else if (cfg.noatime)
			config_error(&cfg, "passthrough=on cannot keep noatime: the kernel's reads of "
					   "the backing files would update their access times");
	}
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
	fs.given_options = remount_given_options(argc, argv);
	if (!fs.given_options) {
		tl_log(LOG_ERR, "out of memory");
		goto out_destroy;
	}
	fs.se = se;
	raise_nofile_limit();
	unwinder_preload();
	fs.backing_fd = open(cfg.backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fs.backing_fd == -1) {
		tl_log(LOG_ERR, "cannot open BACKING '%s': %s", cfg.backing, strerror(errno));
		goto out_destroy;
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
	lockmgr_set_hold_log(&fs.mgr, hold_log_fd);
	/* modes arrive with the caller's umask applied; ours must not apply again */
	umask(0);

	err = tlfs_prepare(&fs);
	if (err) {
		tl_log(LOG_ERR, "cannot prepare BACKING '%s': %s", cfg.backing, strerror(-err));
		goto out_close_store;
	}
	err = cfg.export_support ? inode_export_prepare(&fs) : 0;
	if (err) {
		tl_log(LOG_ERR, "cannot use export_support: BACKING '%s' gives no file handles: %s",
		       cfg.backing, strerror(-err));
		goto out_close_store;
	}
	if (fuse_session_mount(se, opts.mountpoint) != 0)
		goto out_close_store;
	/* read from /proc: a request to the mount would wait for the loop */
	err = mountchain_mount_dev(opts.mountpoint, &fs.own_dev);
	if (err)
		tl_log(LOG_NOTICE, "cannot find the device of '%s': %s; lookups that lead back "
				   "into this mount are not refused", opts.mountpoint, strerror(-err));
	if (fuse_daemonize(opts.foreground) != 0)
		goto out_unmount;
	/* where threads that compute lock keys by getcwd() come back to */
	/* no relative path is resolved on a request thread (a store's files
	 * were made absolute when the options were validated): a thread that
	 * computes keys may stay where its last key put it */
	keys_set_home(&fs.keys, open(".", O_PATH | O_DIRECTORY | O_CLOEXEC), true);
	if (!opts.foreground)
		tl_log_use_syslog();
	if (fuse_set_signal_handlers(se) != 0)
		goto out_unmount;
	fs.mountpoint = opts.mountpoint;
	fs.start_ms = tl_wall_ms();
	/* a thread: after daemonising; a failure is logged, the mount goes on */
	if (metrics_dir_fd != -1) {
		metrics_writer_start(&metrics, metrics_dir_fd, cfg.metrics_file,
				     cfg.metrics_interval, ctl_render_metrics, &fs);
		metrics_dir_fd = -1; /* the writer's now, started or not */
	}
	tl_log(LOG_NOTICE, "serving '%s' at '%s'", cfg.backing, opts.mountpoint);
	stop_watch_start(&watch, se, &fs.mgr, cfg.lock_timeout);
	if (opts.singlethread) {
		err = fuse_session_loop(se);
	} else {
		loop_cfg = fuse_loop_cfg_create();
		if (!loop_cfg)
			goto out_signals;
		fuse_loop_cfg_set_clone_fd(loop_cfg, (unsigned)opts.clone_fd);
		/* UINT_MAX: not given; libfuse 3.14 would warn "Ignoring invalid max threads";
		 * a value given was checked (config.c: 0 to TL_MAX_THREADS) */
		if (opts.max_idle_threads != UINT_MAX)
			fuse_loop_cfg_set_idle_threads(loop_cfg, opts.max_idle_threads);
		/* 1 to TL_MAX_THREADS when given (config.c); 0: a libfuse
		 * without a default */
		if (opts.max_threads && opts.max_threads <= TL_MAX_THREADS)
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
	ret = err == 0 && !fs.pt_failed ? 0 : 1;
	if (err)
		tl_log(LOG_ERR, "the FUSE loop ended with an error: %s", strerror(-err));

out_signals:
	metrics_writer_stop(&metrics);
	fuse_remove_signal_handlers(se);
out_unmount:
	if (watch.running) {
		stop_begin(&watch, true);
		stop_unmount(&watch);
	} else {
		fuse_session_unmount(se);
	}
out_close_store:
	tlfs_release(&fs);
	lockstore_close(fs.store);
	stop_watch_end(&watch);
out_close_backing:
	close(fs.backing_fd);
	curl_global_cleanup();
out_destroy:
	if (hold_log_fd != -1)
		close(hold_log_fd);
	if (metrics_dir_fd != -1)
		close(metrics_dir_fd);
	free(fs.backing_chain);
	if (se)
		fuse_session_destroy(se);
	free(opts.mountpoint);
	fuse_opt_free_args(&args);
out_free_cfg:
	free(fs.given_options);
	config_free(&cfg);
	return ret;
}
