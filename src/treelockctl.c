/* treelockctl.c - the control tool of the Elasticsearch lock store
 *
 *   treelockctl [store options] check | locks [PATH] | owners | intents
 *               | break PATH | reap OWNER|--dead
 *   treelockctl metrics MOUNTPOINT
 *   treelockctl index build|verify|repair MOUNTPOINT [PATH] | find MOUNTPOINT ...
 *
 * Store options are the mount's (config.h), parsed the same way, so one
 * config file serves both. treelockctl never takes a lease: it observes.
 * Exit status: 0 ok, 1 usage or configuration error, 2 store error.
 *
 * Depends on: base, config, lock, es (admin: es_store.h), ctl (fs index: ctl.h).
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_opt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/escape.h"
#include "config/config.h"
#include "ctl/ctl.h"
#include "lock/lockstore.h"
#include "es/es_store.h"
#include "base/log.h"
#include "base/mountchain.h"
#include "base/path.h"
#include "base/tlclock.h"

#define EXIT_USAGE 1
#define EXIT_STORE 2
/* the type /proc/self/mountinfo gives a treelockfs mount (its subtype=) */
#define TREELOCKFS_FSTYPE "fuse.treelockfs"
/* How long owners are watched to tell dead ones apart (capped by 2 x their
 * lease_ttl inside the store). */
#define OBSERVE_MAX_MS 120000

struct ctl_opts {
	bool force;
	bool dead;
	bool all;
	bool no_wait;
	bool json;
};

static void usage(FILE *f)
{
	fputs("usage: treelockctl [options] COMMAND [ARGS]\n"
	      "\n"
	      "commands:\n"
	      "    check              reachability, version, index, mapping, strategy,\n"
	      "                       scripts (stored or inline)\n"
	      "    locks [PATH]       locks (under PATH): mode, holders, age, waiters,\n"
	      "                       delegated directories\n"
	      "    owners             mounts with a lease: age of the lease, delegations,\n"
	      "                       alive or dead\n"
	      "    intents            unfinished operations of dead owners (--all: every one)\n"
	      "    break PATH         delete the lock on PATH (asks unless --force)\n"
	      "    reap OWNER|--dead  remove a dead owner's locks, intents and lease\n"
	      "    metrics MOUNTPOINT the metrics of a mount (any store), in Prometheus's\n"
	      "                       text format\n"
	      "    index build|verify|repair MOUNTPOINT [PATH]\n"
	      "                       the mount's fs index (fs_index=) held against its\n"
	      "                       tree: crawl, compare and repair, dead owners' intents\n"
	      "                       (treelockctl index --help)\n"
	      "    find MOUNTPOINT [PATH] [-name PAT] [-path PAT] [-type C] [-size N]\n"
	      "                       [-mtime N] [-user U] [--json]: the fs index searched\n"
	      "                       as find(1) would walk the tree\n"
	      "\n"
	      "treelockctl options:\n"
	      "    --force            break/reap without asking, reap a live owner\n"
	      "    --all              intents: list those of live owners too\n"
	      "    --no-wait          owners/intents/reap: do not watch owners whose state\n"
	      "                       is not yet known (up to 2 x their lease_ttl)\n"
	      "    --json             check/locks/owners/intents: one JSON document\n"
	      "    -h, --help         this help\n"
	      "    -V, --version      version\n"
	      "\n",
	      f);
}

/* Takes treelockctl's own flags out of ARGV (config_parse would refuse them). */
static void take_own_flags(int *argc, char **argv, struct ctl_opts *o)
{
	int i, j = 1;

	for (i = 1; i < *argc; i++) {
		if (strcmp(argv[i], "--force") == 0 || strcmp(argv[i], "-f") == 0)
			o->force = true;
		else if (strcmp(argv[i], "--dead") == 0)
			o->dead = true;
		else if (strcmp(argv[i], "--all") == 0)
			o->all = true;
		else if (strcmp(argv[i], "--no-wait") == 0)
			o->no_wait = true;
		else if (strcmp(argv[i], "--json") == 0)
			o->json = true;
		else
			argv[j++] = argv[i];
	}
	argv[j] = NULL;
	*argc = j;
}

static const char *state_name(enum es_owner_state s)
{
	switch (s) {
	case ES_OWNER_ALIVE:
		return "alive";
	case ES_OWNER_DEAD:
		return "dead";
	default:
		return "unknown";
	}
}

static void fmt_age(int64_t ms, char *buf, size_t size)
{
	if (ms < 0)
		snprintf(buf, size, "-");
	else if (ms < 10000)
		snprintf(buf, size, "%.1fs", (double)ms / 1000);
	else
		snprintf(buf, size, "%" PRId64 "s", ms / 1000);
}

/* Prints ROOT (a JSON object, consumed) as one document on standard
 * output. Returns 0, or EXIT_STORE when out of memory. */
static int print_json(cJSON *root)
{
	char *text = root ? cJSON_Print(root) : NULL;

	cJSON_Delete(root);
	if (!text) {
		fprintf(stderr, "treelockctl: out of memory\n");
		return EXIT_STORE;
	}
	printf("%s\n", text);
	free(text);
	return 0;
}

/* MS as a JSON number, or null when unknown (negative). */
static void add_ms(cJSON *o, const char *name, int64_t ms)
{
	if (ms < 0)
		cJSON_AddNullToObject(o, name);
	else
		cJSON_AddNumberToObject(o, name, (double)ms);
}

/* "a#1, b#2" as a JSON array of strings. */
static void add_holders(cJSON *o, const char *holders)
{
	cJSON *arr = cJSON_AddArrayToObject(o, "holders");
	const char *p = holders;

	while (arr && p && *p) {
		size_t n = strcspn(p, ",");
		char *one = strndup(p, n);

		if (one && *one)
			cJSON_AddItemToArray(arr, cJSON_CreateString(one));
		free(one);
		p += n;
		while (*p == ',' || *p == ' ')
			p++;
	}
}

/* Normalises a user-given key: a path (its bytes, UTF-8 or not),
 * "global", or a key as listings print one ("bytes:/...",
 * path_key_shown(), or as the store holds it, path_key_text()), decoded.
 * A "bytes:" text that is neither is kept as given (the store's id). */
static int user_key(const char *arg, char **out)
{
	int err;

	if (strcmp(arg, TL_GLOBAL_KEY) == 0) {
		*out = strdup(arg);
		return *out ? 0 : -ENOMEM;
	}
	if (strncmp(arg, PATH_BYTES_PREFIX, strlen(PATH_BYTES_PREFIX)) == 0) {
		err = path_key_from_shown(arg, out);
		if (err == -EINVAL)
			err = path_key_from_text(arg, out);
		if (err == -EINVAL) {
			*out = strdup(arg);
			err = *out ? 0 : -ENOMEM;
		}
		return err;
	}
	return path_normalise(arg, out);
}

/* TEXT, a key as the store holds it (path_key_text()), as listings show
 * it (path_key_shown(): no control character, no bidirectional control;
 * in --json too, whose strings hold the four characters \xHH, not the
 * byte); a text that is no key's (a document treelockfs did not write) is
 * shown escaped (escape.h). Returns a new string, or NULL when out of
 * memory. */
static char *shown_key(const char *text)
{
	char *key = NULL, *out = NULL;
	int err;

	if (!text)
		return NULL; /* a copy that failed */
	err = path_key_from_text(text, &key);
	if (err == -EINVAL) {
		size_t size = 4 * strlen(text) + 1;

		out = malloc(size);
		if (out)
			escape_text(out, size, text);
		return out;
	}
	if (!err && path_key_shown(key, &out) != 0)
		out = NULL;
	free(key);
	return out;
}

/* Adds KEY_TEXT (path_key_text()) to O as NAME, as listings show it
 * (shown_key()). Returns 0 or -ENOMEM. */
static int add_key(cJSON *o, const char *name, const char *key_text)
{
	char *shown = shown_key(key_text);
	int err = shown && cJSON_AddStringToObject(o, name, shown) ? 0 : -ENOMEM;

	free(shown);
	return err;
}

/* LI's "delegation": null, or the directory delegated (LI's key, as
 * listings show it), its mode there and the delegation's holder id.
 * Returns 0 or -ENOMEM. */
static int add_delegation(cJSON *o, const struct tl_lock_info *li)
{
	const char *mode;
	cJSON *d;

	if (!li->delegation)
		return cJSON_AddNullToObject(o, "delegation") ? 0 : -ENOMEM;
	mode = li->mode == TL_EXCLUSIVE ? "exclusive" : "shared";
	d = cJSON_AddObjectToObject(o, "delegation");
	if (!d || add_key(d, "directory", li->key) != 0 ||
	    !cJSON_AddStringToObject(d, "mode", mode) ||
	    !cJSON_AddStringToObject(d, "holder", li->holders))
		return -ENOMEM;
	return 0;
}

static int cmd_locks(struct lockstore *st, const char *prefix, bool json)
{
	struct tl_lock_info *list = NULL;
	char *key = NULL, age[32];
	size_t n = 0, i;
	int err;

	if (prefix) {
		err = user_key(prefix, &key);
		if (err) {
			fprintf(stderr, "treelockctl: '%s' is not a path\n", prefix);
			return EXIT_USAGE;
		}
	}
	err = lockstore_list(st, key, &list, &n);
	free(key);
	if (err) {
		fprintf(stderr, "treelockctl: cannot list locks: %s\n", strerror(-err));
		return EXIT_STORE;
	}
	if (json) {
		cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "locks");

		for (i = 0; arr && i < n; i++) {
			cJSON *l = cJSON_CreateObject();

			cJSON_AddItemToArray(arr, l);
			if (add_key(l, "key", list[i].key) != 0)
				err = -ENOMEM;
			cJSON_AddStringToObject(l, "mode", list[i].mode == TL_EXCLUSIVE ? "exclusive"
											: "shared");
			cJSON_AddNumberToObject(l, "count", list[i].count);
			add_ms(l, "age_ms", list[i].age_ms);
			cJSON_AddNumberToObject(l, "waiters", list[i].waiters);
			add_holders(l, list[i].holders);
			if (add_delegation(l, &list[i]) != 0)
				err = -ENOMEM;
		}
		lockstore_free_list(list, n);
		if (err) {
			cJSON_Delete(root);
			root = NULL; /* print_json() says "out of memory" */
		}
		return print_json(root);
	}
	/* DELEGATION last: the columns before it stay where they were */
	printf("%-40s %-9s %5s %7s %7s  %-40s  %s\n", "KEY", "MODE", "COUNT", "AGE", "WAITERS",
	       "HOLDERS", "DELEGATION");
	for (i = 0; i < n; i++) {
		char *shown = shown_key(list[i].key);

		fmt_age(list[i].age_ms, age, sizeof(age));
		printf("%-40s %-9s %5u %7s %7u  %-40s  %s\n", shown ? shown : "(out of memory)",
		       list[i].mode == TL_EXCLUSIVE ? "exclusive" : "shared", list[i].count, age,
		       list[i].waiters, list[i].holders, list[i].delegation ? "delegated" : "-");
		free(shown);
	}
	lockstore_free_list(list, n);
	return 0;
}

static int cmd_owners(struct lockstore *st, const struct ctl_opts *o)
{
	struct es_owner_info *own = NULL;
	char age[32];
	size_t n = 0, i;
	int err;

	err = es_store_owners(st, o->no_wait ? 0 : OBSERVE_MAX_MS, &own, &n);
	if (err) {
		fprintf(stderr, "treelockctl: cannot list owners: %s\n", strerror(-err));
		return EXIT_STORE;
	}
	if (o->json) {
		cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "owners");

		for (i = 0; arr && i < n; i++) {
			cJSON *w = cJSON_CreateObject();

			cJSON_AddItemToArray(arr, w);
			cJSON_AddStringToObject(w, "id", own[i].id);
			cJSON_AddStringToObject(w, "name", own[i].name);
			add_ms(w, "renewed_age_ms",
			       own[i].renewed_ms > 0 ? tl_wall_ms() - own[i].renewed_ms : -1);
			cJSON_AddNumberToObject(w, "ttl_ms", (double)own[i].ttl_ms);
			cJSON_AddStringToObject(w, "state", state_name(own[i].state));
			cJSON_AddNumberToObject(w, "delegations", own[i].delegations);
		}
		es_store_free_owners(own, n);
		return print_json(root);
	}
	/* STATE last, as before: DELEGATIONS (directories delegated) before it */
	printf("%-48s %-16s %8s %8s %11s  %s\n", "OWNER", "NAME", "RENEWED", "TTL", "DELEGATIONS",
	       "STATE");
	for (i = 0; i < n; i++) {
		fmt_age(own[i].renewed_ms > 0 ? tl_wall_ms() - own[i].renewed_ms : -1, age, sizeof(age));
		printf("%-48s %-16s %8s %7.1fs %11u  %s\n", own[i].id, own[i].name, age,
		       (double)own[i].ttl_ms / 1000, own[i].delegations, state_name(own[i].state));
	}
	es_store_free_owners(own, n);
	return 0;
}

static int cmd_intents(struct lockstore *st, const struct ctl_opts *o)
{
	struct es_intent_info *it = NULL;
	char age[32], *from, *to;
	size_t n = 0, i;
	int err;

	err = es_store_intents(st, o->no_wait ? 0 : OBSERVE_MAX_MS, &it, &n);
	if (err) {
		fprintf(stderr, "treelockctl: cannot list intents: %s\n", strerror(-err));
		return EXIT_STORE;
	}
	if (o->json) {
		cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "intents");

		for (i = 0; arr && i < n; i++) {
			cJSON *t;

			if (!o->all && it[i].owner_state != ES_OWNER_DEAD)
				continue;
			t = cJSON_CreateObject();
			cJSON_AddItemToArray(arr, t);
			cJSON_AddStringToObject(t, "holder", it[i].holder);
			cJSON_AddStringToObject(t, "owner", it[i].owner);
			cJSON_AddStringToObject(t, "owner_state", state_name(it[i].owner_state));
			add_ms(t, "age_ms", it[i].start_ms > 0 ? tl_wall_ms() - it[i].start_ms : -1);
			cJSON_AddStringToObject(t, "operation", it[i].to ? "rename" : "change");
			if (add_key(t, "from", it[i].from) != 0 ||
			    (it[i].to ? add_key(t, "to", it[i].to)
				      : !cJSON_AddNullToObject(t, "to") ? -ENOMEM : 0) != 0)
				err = -ENOMEM;
		}
		es_store_free_intents(it, n);
		if (err) {
			cJSON_Delete(root);
			root = NULL; /* print_json() says "out of memory" */
		}
		return print_json(root);
	}
	printf("%-52s %-7s %7s  %s\n", "HOLDER", "OWNER", "AGE", "OPERATION");
	for (i = 0; i < n; i++) {
		if (!o->all && it[i].owner_state != ES_OWNER_DEAD)
			continue;
		fmt_age(it[i].start_ms > 0 ? tl_wall_ms() - it[i].start_ms : -1, age, sizeof(age));
		from = shown_key(it[i].from);
		to = it[i].to ? shown_key(it[i].to) : NULL;
		if (it[i].to)
			printf("%-52s %-7s %7s  rename '%s' -> '%s'\n", it[i].holder,
			       state_name(it[i].owner_state), age, from ? from : "(out of memory)",
			       to ? to : "(out of memory)");
		else
			printf("%-52s %-7s %7s  change of '%s'\n", it[i].holder,
			       state_name(it[i].owner_state), age, from ? from : "(out of memory)");
		free(from);
		free(to);
	}
	es_store_free_intents(it, n);
	return 0;
}

/* Asks on the terminal. Returns true for "y"/"yes". */
static bool confirm(const char *what)
{
	char line[16];
	FILE *tty = fopen("/dev/tty", "r+");
	bool yes;

	if (!tty || !isatty(fileno(tty))) {
		if (tty)
			fclose(tty);
		fprintf(stderr, "treelockctl: no terminal to confirm %s: use --force\n", what);
		return false;
	}
	fprintf(tty, "%s? [y/N] ", what);
	fflush(tty);
	yes = fgets(line, sizeof(line), tty) && (strcmp(line, "y\n") == 0 || strcmp(line, "yes\n") == 0);
	fclose(tty);
	return yes;
}

static int cmd_break(struct lockstore *st, const char *arg, const struct ctl_opts *o)
{
	char *key = NULL, *shown = NULL, what[600];
	int err;

	if (user_key(arg, &key)) {
		fprintf(stderr, "treelockctl: '%s' is not a path\n", arg);
		return EXIT_USAGE;
	}
	/* shown as listings show it (path_key_shown()) */
	if (path_key_shown(key, &shown)) {
		free(key);
		fprintf(stderr, "treelockctl: out of memory\n");
		return EXIT_STORE;
	}
	snprintf(what, sizeof(what), "break the lock on '%s'", shown);
	if (!o->force && !confirm(what)) {
		free(shown);
		free(key);
		return EXIT_USAGE;
	}
	err = es_store_break(st, key);
	if (err == -ENOENT)
		fprintf(stderr, "treelockctl: no lock on '%s'\n", shown);
	else if (err)
		fprintf(stderr, "treelockctl: cannot break the lock on '%s': %s\n", shown,
			strerror(-err));
	else
		printf("broke the lock on '%s'\n", shown);
	free(shown);
	free(key);
	return err ? EXIT_STORE : 0;
}

static int reap_one(struct lockstore *st, const char *owner)
{
	size_t nlocks = 0;
	int err = es_store_reap(st, owner, &nlocks);

	if (err) {
		fprintf(stderr, "treelockctl: cannot reap '%s': %s\n", owner, strerror(-err));
		return EXIT_STORE;
	}
	printf("reaped '%s': %zu lock documents changed\n", owner, nlocks);
	return 0;
}

/* True when ARG names owner id ID (NAME its owner= name, may be NULL): the
 * id itself, its name, or "name:pid". */
static bool owner_matches(const char *arg, const char *id, const char *name)
{
	size_t n = strlen(arg);

	return strcmp(arg, id) == 0 || (name && strcmp(arg, name) == 0) ||
	       (strncmp(id, arg, n) == 0 && id[n] == ':');
}

/* Reaps OWNER (an id, a name or "name:pid") or, with OWNER NULL, every dead
 * owner: those whose lease document is dead, and those that intents, locks
 * or waiter marks still name without any lease document. A live or
 * undecided owner is reaped only when named, with --force. Matching
 * nothing is an error. */
static int cmd_reap(struct lockstore *st, const char *owner, const struct ctl_opts *o)
{
	struct es_owner_info *own = NULL;
	char **orph = NULL;
	size_t n = 0, norph = 0, i, found = 0;
	int err, rc = 0;

	err = es_store_owners(st, o->no_wait ? 0 : OBSERVE_MAX_MS, &own, &n);
	if (!err)
		err = es_store_orphans(st, &orph, &norph);
	if (err) {
		fprintf(stderr, "treelockctl: cannot list owners: %s\n", strerror(-err));
		es_store_free_owners(own, n);
		return EXIT_STORE;
	}
	for (i = 0; i < n; i++) {
		if (owner && !owner_matches(owner, own[i].id, own[i].name))
			continue;
		found++;
		if (own[i].state != ES_OWNER_DEAD && !(owner && o->force)) {
			if (owner) {
				fprintf(stderr, "treelockctl: owner '%s' is %s: not reaped (--force "
						"reaps it anyway)\n",
					own[i].id, state_name(own[i].state));
				rc = EXIT_STORE;
			}
			continue;
		}
		if (owner && !o->force) {
			char what[300];

			snprintf(what, sizeof(what), "reap owner '%s'", own[i].id);
			if (!confirm(what)) {
				rc = EXIT_USAGE;
				continue;
			}
		}
		if (reap_one(st, own[i].id))
			rc = EXIT_STORE;
	}
	/* owners without a lease document are dead: their intents, shares
	 * and marks are what is left of them */
	for (i = 0; i < norph; i++) {
		if (owner && !owner_matches(owner, orph[i], NULL))
			continue;
		found++;
		if (owner && !o->force) {
			char what[300];

			snprintf(what, sizeof(what), "reap owner '%s' (no lease document)", orph[i]);
			if (!confirm(what)) {
				rc = EXIT_USAGE;
				continue;
			}
		}
		if (reap_one(st, orph[i]))
			rc = EXIT_STORE;
	}
	if (owner && !found) {
		fprintf(stderr,
			"treelockctl: no owner matches '%s': give an owner id, name or name:pid "
			"as 'treelockctl owners' or 'intents --all' shows them\n",
			owner);
		rc = EXIT_STORE;
	}
	if (!owner && !found)
		printf("no dead owner\n");
	es_store_free_owners(own, n);
	for (i = 0; i < norph; i++)
		free(orph[i]);
	free(orph);
	return rc;
}

/* Opens the root of the treelockfs mount at MOUNTPOINT (O_PATH) into
 * *FD and its device into *DEV. Returns 0, or prints why MOUNTPOINT is no
 * such root and returns EXIT_USAGE: a directory with a file of that name
 * in it is not the mount. */
static int open_mount_root(const char *mountpoint, int *fd, dev_t *dev)
{
	struct mountchain_mount m;
	char real[PATH_MAX], why[160];
	struct stat st, up;
	int dfd, upfd, err;

	if (!realpath(mountpoint, real)) {
		fprintf(stderr, "treelockctl: cannot read the metrics of '%s': %s\n", mountpoint,
			strerror(errno));
		return EXIT_USAGE;
	}
	err = mountchain_mount_find(real, &m);
	if (err && err != -ENOENT) {
		fprintf(stderr, "treelockctl: cannot read the metrics of '%s': cannot read the "
				"mount table: %s\n", mountpoint, strerror(-err));
		return EXIT_USAGE;
	}
	why[0] = '\0';
	if (err)
		snprintf(why, sizeof(why), "nothing is mounted there");
	else if (strcmp(m.fstype, TREELOCKFS_FSTYPE) != 0)
		snprintf(why, sizeof(why), "the mount there is of type '%s'", m.fstype);
	else if (!m.whole)
		snprintf(why, sizeof(why), "a bind mount of a directory below the root of one");
	if (why[0]) {
		fprintf(stderr, "treelockctl: cannot read the metrics of '%s': not a treelockfs "
				"mount (%s)\n", mountpoint, why);
		return EXIT_USAGE;
	}
	dfd = open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd == -1 || fstat(dfd, &st) != 0) {
		fprintf(stderr, "treelockctl: cannot read the metrics of '%s': %s\n", mountpoint,
			strerror(errno));
		if (dfd != -1)
			close(dfd);
		return EXIT_USAGE;
	}
	/* the directory the path leads to now is that mount's root, not one
	 * that a mount on a directory above hides it by */
	upfd = openat(dfd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (st.st_dev != m.dev || upfd == -1 || fstat(upfd, &up) != 0 ||
	    (up.st_dev == st.st_dev && up.st_ino != st.st_ino)) {
		fprintf(stderr, "treelockctl: cannot read the metrics of '%s': not a treelockfs "
				"mount (the mount there is hidden by another one)\n", mountpoint);
		if (upfd != -1)
			close(upfd);
		close(dfd);
		return EXIT_USAGE;
	}
	close(upfd);
	*fd = dfd;
	*dev = m.dev;
	return 0;
}

/* Copies MOUNTPOINT/.treelockfs/metrics to standard output: the mount
 * renders it when it is opened. Needs no store options. MOUNTPOINT must be
 * the root of a treelockfs mount. */
static int cmd_metrics(const char *mountpoint)
{
	char buf[65536];
	struct stat st;
	size_t n;
	dev_t dev;
	FILE *f;
	int rc, dfd, fd;

	rc = open_mount_root(mountpoint, &dfd, &dev);
	if (rc)
		return rc;
	fd = openat(dfd, ".treelockfs/metrics", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	close(dfd);
	if (fd == -1 || fstat(fd, &st) != 0) {
		fprintf(stderr, "treelockctl: cannot read the metrics of '%s': %s\n", mountpoint,
			strerror(errno));
		if (fd != -1)
			close(fd);
		return EXIT_USAGE;
	}
	if (st.st_dev != dev || !S_ISREG(st.st_mode)) {
		fprintf(stderr, "treelockctl: cannot read the metrics of '%s': the mount does not "
				"serve them\n", mountpoint);
		close(fd);
		return EXIT_USAGE;
	}
	f = fdopen(fd, "r");
	if (!f) {
		fprintf(stderr, "treelockctl: cannot read the metrics of '%s': %s\n", mountpoint,
			strerror(errno));
		close(fd);
		return EXIT_STORE;
	}
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		if (fwrite(buf, 1, n, stdout) != n)
			rc = EXIT_STORE;
	if (ferror(f)) {
		fprintf(stderr, "treelockctl: cannot read the metrics of '%s': %s\n", mountpoint,
			strerror(errno));
		rc = EXIT_STORE;
	}
	fclose(f);
	if (fflush(stdout) != 0)
		rc = EXIT_STORE;
	return rc;
}

int main(int argc, char **argv)
{
	struct fuse_args args;
	struct tl_config cfg;
	struct ctl_opts o = {0};
	struct lockstore *st = NULL;
	const char *cmd;
	char **av;
	int ac, rc = EXIT_USAGE, err;

	/* the fs index's commands take a mount, whose options they read */
	if (argc >= 2 && strcmp(argv[1], "index") == 0)
		return ctl_index_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "find") == 0)
		return ctl_find_main(argc - 1, argv + 1);
	tl_log_init("treelockctl", LOG_WARNING);
	take_own_flags(&argc, argv, &o);
	/* a mount's own file: no store options, no config */
	if (argc >= 2 && strcmp(argv[1], "metrics") == 0) {
		if (argc != 3) {
			fprintf(stderr, "treelockctl: bad command line: metrics MOUNTPOINT\n");
			usage(stderr);
			return EXIT_USAGE;
		}
		return cmd_metrics(argv[2]);
	}
	if (config_init(&cfg)) {
		fprintf(stderr, "treelockctl: out of memory\n");
		return EXIT_USAGE;
	}
	args = (struct fuse_args)FUSE_ARGS_INIT(argc, argv);
	if (config_parse(&cfg, &args, true))
		goto out_free_args;
	if (cfg.show_help) {
		usage(stdout);
		config_print_help(true);
		rc = 0;
		goto out_free_args;
	}
	if (cfg.show_version) {
		printf("treelockctl %s\n", PACKAGE_VERSION);
		rc = 0;
		goto out_free_args;
	}
	/* the store is es when an URL is given, whatever the default */
	if (es_store_configured(&cfg) && cfg.lock_store_s && strcmp(cfg.lock_store_s, "mem") == 0) {
		free(cfg.lock_store_s);
		cfg.lock_store_s = strdup("es");
		if (!cfg.lock_store_s)
			goto out_free_args;
	}
	err = config_validate(&cfg);
	if (!err)
		err = config_load_secrets(&cfg);
	if (err || cfg.errors) {
		const char *p = cfg.errors ? cfg.errors : "invalid options\n";

		/* one problem a line, as the mount prints them */
		while (*p) {
			const char *nl = strchr(p, '\n');

			fprintf(stderr, "treelockctl: %.*s\n", (int)(nl - p), p);
			p = nl + 1;
		}
		goto out_free_args;
	}
	/* notices are for daemons; the tool prints its results itself */
	tl_log_level = cfg.debug ? LOG_DEBUG : cfg.log_level > LOG_NOTICE ? cfg.log_level : LOG_WARNING;
	if (cfg.lock_store != TL_STORE_ES) {
		fprintf(stderr, "treelockctl: needs the Elasticsearch store: give --es_url=URL "
				"(the mem store lives inside one mount: see MOUNT/.treelockfs/locks)\n");
		goto out_free_args;
	}
	ac = args.argc;
	av = args.argv;
	if (ac < 2) {
		usage(stderr);
		goto out_free_args;
	}
	cmd = av[1];
	if (!((strcmp(cmd, "check") == 0 && ac == 2) || (strcmp(cmd, "locks") == 0 && ac <= 3) ||
	      (strcmp(cmd, "owners") == 0 && ac == 2) || (strcmp(cmd, "intents") == 0 && ac == 2) ||
	      (strcmp(cmd, "break") == 0 && ac == 3) ||
	      (strcmp(cmd, "reap") == 0 && ((ac == 3) != o.dead)))) {
		fprintf(stderr, "treelockctl: bad command line\n");
		usage(stderr);
		goto out_free_args;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	err = es_store_open_ctl(&cfg, &st);
	if (err) {
		rc = err == -EINVAL ? EXIT_USAGE : EXIT_STORE;
		goto out_cleanup_curl;
	}
	if (strcmp(cmd, "check") == 0) {
		err = es_store_check(st, stdout, o.json);
		if (err == -ENOLCK)
			fprintf(stderr, "treelockctl: cannot read the index: %s\n", strerror(-err));
		rc = err ? EXIT_STORE : 0;
	} else if (strcmp(cmd, "locks") == 0) {
		rc = cmd_locks(st, ac == 3 ? av[2] : NULL, o.json);
	} else if (strcmp(cmd, "owners") == 0) {
		rc = cmd_owners(st, &o);
	} else if (strcmp(cmd, "intents") == 0) {
		rc = cmd_intents(st, &o);
	} else if (strcmp(cmd, "break") == 0) {
		rc = cmd_break(st, av[2], &o);
	} else {
		rc = cmd_reap(st, o.dead ? NULL : av[2], &o);
	}
	lockstore_close(st);
out_cleanup_curl:
	curl_global_cleanup();
out_free_args:
	fuse_opt_free_args(&args);
	config_free(&cfg);
	return rc;
}
