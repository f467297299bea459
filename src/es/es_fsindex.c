/* es_fsindex.c - the fs index of a mount: notes, jobs, the index thread,
 * see es_fsindex.h
 *
 * The thread's round: take the note set and the due jobs (under the
 * mutex), write the notes (sorted, so that siblings share one open
 * parent), then each job in order, then hand the releases whose jobs were
 * answered to es_send_release(). Everything it sends goes straight to
 * _bulk (es_bulk_post()), beside the lock protocol's group commit: an
 * index bulk of ES_FSINDEX_CHUNK documents never holds up an acquire.
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/path.h"
#include "base/tlclock.h"
#include "config/config.h"
#include "es/es_client.h"
#include "es/es_docs.h"
#include "es/es_fsdoc.h"
#include "es/es_fsindex.h"
#include "es/es_internal.h"
#include "es/es_kept.h"
#include "es/httpc.h"

#define FX_BUCKETS 4096
/* search_after pages */
#define FX_PAGE 10000
/* documents of one inode looked up again, at most (hard links: as many
 * as it has names) */
#define FX_INO_MAX 100
/* a failed request is tried this many times before its round gives up */
#define FX_TRIES 3
/* a job whose writes failed is tried again this long later, at most */
#define FX_RETRY_MAX_MS 30000
/* errors are logged at most once this often */
#define FX_LOG_EVERY_MS 10000
/* how deep a crawl goes */
#define FX_DEPTH_MAX 1024

struct fx_note {
	struct fx_note *next;
	uint64_t ino;            /* the entry's inode when noted, 0: unknown */
	char key[];
};

/* The notes not sent yet: a chained hash set of keys. */
struct fx_set {
	struct fx_note **b;      /* FX_BUCKETS chains, NULL until the first note */
	size_t n;
	int64_t first_ms;        /* monotonic: the oldest note's arrival */
};

enum fx_kind {
	FX_MOVE,   /* a rename of this mount: FROM's documents go, TO's come */
	FX_REPAIR, /* a dead owner's intent: the same, nothing waits */
	FX_SWEEP,  /* FROM and TO reconciled again, later */
};

struct fx_job {
	struct fx_job *next;
	enum fx_kind kind;
	uint64_t seq;            /* FX_MOVE: its ticket; else 0 */
	char *from, *to;         /* keys */
	int64_t due_ms;          /* monotonic */
	unsigned int tries;
};

/* The keys one round wrote, looked up once more at DUE_MS. */
struct fx_settle {
	struct fx_settle *next;
	int64_t due_ms;          /* monotonic */
	char **keys;             /* sorted */
	uint64_t *inos;          /* each key's inode when noted (0: unknown) */
	size_t n;
};

struct fx_parked {
	struct fx_parked *next;
	uint64_t seq;
	struct buf b;
	char **ids;              /* the lock documents it releases */
	bool *excl;              /* ... held exclusive */
	size_t n;
};

struct es_fsindex {
	struct es_store *es;
	char *name;
	char *search_path, *refresh_path;
	int root_fd;             /* O_PATH | O_DIRECTORY on BACKING */
	int64_t delay_ms;
	int64_t settle_ms;       /* 0: no second look */

	pthread_mutex_t mutex;   /* leaf; never held across a request or syscall */
	pthread_cond_t cond;     /* CLOCK_MONOTONIC */
	pthread_cond_t parked_cond; /* CLOCK_MONOTONIC: parked releases sent */
	/* protected by mutex: */
	struct fx_set set;
	struct fx_job *jobs, *jobs_tail;
	struct fx_settle *settles, *settles_tail; /* in order of due time */
	struct fx_parked *parked;
	uint64_t next_seq;       /* the last ticket given */
	uint64_t done_seq;       /* every ticket up to it was answered */
	bool started, stop, closed;
	int64_t logged_ms;       /* the last error logged (monotonic) */
	bool drop_logged;
	pthread_t thread;

	/* atomic: */
	int64_t last_version;
	uint64_t notes, writes, conflicts, errors, dropped, jobs_done, settles_done, chased;
};

/* ---- small things ---------------------------------------------------------------- */

static uint32_t key_hash(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

/* A version for a look-up just made: the wall clock in ns, strictly
 * growing in this process (two look-ups never share one). */
static int64_t fx_version(struct es_fsindex *fx)
{
	struct timespec ts;
	int64_t v, last;

	clock_gettime(CLOCK_REALTIME, &ts);
	v = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	last = __atomic_load_n(&fx->last_version, __ATOMIC_RELAXED);
	do {
		if (v <= last)
			v = last + 1;
	} while (!__atomic_compare_exchange_n(&fx->last_version, &last, v, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return v;
}

static void count(uint64_t *c, uint64_t n)
{
	__atomic_add_fetch(c, n, __ATOMIC_RELAXED);
}

/* Logs an error at most once every FX_LOG_EVERY_MS. */
static void fx_log_error(struct es_fsindex *fx, const char *what, int err)
{
	int64_t now = tl_mono_ms();
	bool log;

	pthread_mutex_lock(&fx->mutex);
	log = fx->logged_ms == 0 || now - fx->logged_ms >= FX_LOG_EVERY_MS;
	if (log)
		fx->logged_ms = now;
	pthread_mutex_unlock(&fx->mutex);
	if (log)
		tl_log(LOG_ERR, "fs index '%s': %s: %s (retried; further errors are counted, "
		       "fs_index_errors)", fx->name, what, strerror(-err));
}

/* The parent key of KEY ("/a" for "/a/b", "/" for "/a") as a new string,
 * and in *NAME the last component (inside KEY); NULL when out of memory. */
static char *parent_of(const char *key, const char **name)
{
	const char *slash = strrchr(key, '/');

	*name = slash + 1;
	return slash == key ? strdup("/") : strndup(key, (size_t)(slash - key));
}

/* Opens directory KEY of the backing tree one component at a time
 * (O_NOFOLLOW: a symlink is no directory of the tree), with FLAGS for
 * the last one (O_PATH or O_RDONLY, with O_DIRECTORY). Returns the fd or
 * -errno (-ENOENT also for a symlink or a non-directory on the way). */
static int open_dir(struct es_fsindex *fx, const char *key, int flags)
{
	const char *p = key, *e;
	char comp[NAME_MAX + 1];
	int fd = -1, next, at = fx->root_fd;

	while (*p == '/')
		p++;
	if (!*p)
		return openat(fx->root_fd, ".", flags | O_DIRECTORY | O_CLOEXEC);
	for (;;) {
		bool last;

		e = strchrnul(p, '/');
		if ((size_t)(e - p) > NAME_MAX) {
			if (fd >= 0)
				close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(comp, p, (size_t)(e - p));
		comp[e - p] = '\0';
		while (*e == '/')
			e++;
		last = !*e;
		next = openat(at, comp,
			      (last ? flags : O_PATH) | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next == -1) {
			int err = errno == ELOOP || errno == ENOTDIR ? -ENOENT : -errno;

			if (fd >= 0)
				close(fd);
			return err;
		}
		if (fd >= 0)
			close(fd);
		fd = at = next;
		if (last)
			return fd;
		p = e;
	}
}

/* ---- sending --------------------------------------------------------------------- */

/* A bulk being filled: its ndjson and, for notes, the keys of its items
 * (put back in the set when it fails). */
struct fx_bulk {
	struct buf b;
	size_t n;                /* documents */
	char **keys;             /* NULL: not kept */
	bool keep;
};

/* Counts the items of bulk response ROOT. Returns how many failed. */
static size_t judge_items(struct es_fsindex *fx, const cJSON *root)
{
	const cJSON *it;
	size_t ok = 0, conflicts = 0, failed = 0;

	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "items"))
	{
		const cJSON *body = it->child;
		int64_t st = es_jint(body, "status", 0);

		if ((st >= 200 && st < 300) || (st == 404 && strcmp(body->string, "delete") == 0))
			ok++;
		else if (st == 409)
			conflicts++;
		else
			failed++;
	}
	count(&fx->writes, ok);
	count(&fx->conflicts, conflicts);
	count(&fx->errors, failed);
	return failed;
}

/* Sends B now, tried FX_TRIES times while the store fails. Returns 0 or
 * -errno (-ENOLCK: it failed every time). */
static int fx_send(struct es_fsindex *fx, struct buf *b)
{
	unsigned int tries;
	int err = -ENOLCK;

	if (b->err)
		return b->err;
	if (!b->len)
		return 0;
	for (tries = 0; tries < FX_TRIES; tries++) {
		cJSON *root = NULL;
		int64_t deadline = tl_mono_ms() + fx->es->cl.timeout_ms;

		if (tries) {
			struct timespec ts = {0, 100000000L << tries};

			nanosleep(&ts, NULL);
		}
		err = es_bulk_post(&fx->es->cl, b->data, b->len, deadline, &root);
		if (err == 0) {
			size_t failed = judge_items(fx, root);

			cJSON_Delete(root);
			if (failed)
				fx_log_error(fx, "documents refused", -EPROTO);
			return 0;
		}
		if (err != -EAGAIN)
			break;
	}
	count(&fx->errors, 1);
	fx_log_error(fx, "cannot write documents", err);
	return err;
}

static void bulk_init(struct fx_bulk *k, bool keep)
{
	memset(k, 0, sizeof(*k));
	buf_init(&k->b, 0);
	k->keep = keep;
}

/* Puts the kept keys of a bulk that failed back in the set. */
static void requeue_keys(struct es_fsindex *fx, struct fx_bulk *k)
{
	size_t i;

	for (i = 0; i < k->n && k->keys; i++)
		if (k->keys[i])
			es_fsindex_note(fx, k->keys[i]);
}

static void bulk_reset(struct fx_bulk *k)
{
	size_t i;

	for (i = 0; i < k->n && k->keys; i++)
		free(k->keys[i]);
	free(k->keys);
	k->keys = NULL;
	k->n = 0;
	buf_free(&k->b);
	buf_init(&k->b, 0);
}

/* Sends K (when it holds anything) and empties it. Returns 0 or -errno;
 * a note bulk that failed goes back to the set (sent again next round). */
static int bulk_flush(struct es_fsindex *fx, struct fx_bulk *k)
{
	int err = 0;

	if (k->n || k->b.err)
		err = fx_send(fx, &k->b);
	if (err && k->keep)
		requeue_keys(fx, k);
	bulk_reset(k);
	return err;
}

/* Adds to K what the tree holds at KEY: ST (ERR 0) or its absence
 * (-ENOENT); sends K when it is full. Returns 0 or -errno of a send. */
static int bulk_add(struct es_fsindex *fx, struct fx_bulk *k, const char *key, int err,
		    const struct stat *st, int64_t version)
{
	if (err == 0)
		es_fsdoc_put(&k->b, fx->name, key, st, version, fx->es->owner);
	else if (err == -ENOENT)
		es_fsdoc_del(&k->b, fx->name, key, version);
	else
		return 0; /* unreadable now (EACCES, EIO): left as it is */
	if (k->keep) {
		char **v = realloc(k->keys, (k->n + 1) * sizeof(*v));

		if (v) {
			k->keys = v;
			k->keys[k->n] = strdup(key);
		}
	}
	k->n++;
	return k->n >= ES_FSINDEX_CHUNK ? bulk_flush(fx, k) : 0;
}

/* ---- looking keys up ------------------------------------------------------------- */

/* Looks up sorted keys one after the other: consecutive keys of one
 * directory share its open fd. */
struct fx_lookup {
	char *dir;               /* the key of the open directory, or NULL */
	int fd;                  /* -1, or -errno of opening DIR */
};

static void lookup_done(struct fx_lookup *l)
{
	if (l->fd >= 0)
		close(l->fd);
	free(l->dir);
	l->dir = NULL;
	l->fd = -1;
}

/* Stats KEY into ST (not following a symlink anywhere). Returns 0,
 * -ENOENT (no such entry in the tree) or -errno. */
static int lookup_key(struct es_fsindex *fx, struct fx_lookup *l, const char *key,
		      struct stat *st)
{
	const char *name;
	char *dir;

	if (strcmp(key, "/") == 0)
		return fstat(fx->root_fd, st) == -1 ? -errno : 0;
	dir = parent_of(key, &name);
	if (!dir)
		return -ENOMEM;
	if (!l->dir || strcmp(l->dir, dir) != 0) {
		lookup_done(l);
		l->dir = dir;
		l->fd = open_dir(fx, dir, O_PATH);
	} else {
		free(dir);
	}
	if (l->fd < 0)
		return l->fd;
	if (!*name || strlen(name) > NAME_MAX)
		return -ENOENT;
	return fstatat(l->fd, name, st, AT_SYMLINK_NOFOLLOW) == -1 ? -errno : 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

struct fx_kv {
	char *key;
	uint64_t ino;
};

static int cmp_kv(const void *a, const void *b)
{
	return strcmp(((const struct fx_kv *)a)->key, ((const struct fx_kv *)b)->key);
}

/* Sorts KEYS[0..N) and INOS alike (without memory: INOS are forgotten,
 * zeroed). */
static void sort_pairs(char **keys, uint64_t *inos, size_t n)
{
	struct fx_kv *kv = n ? malloc(n * sizeof(*kv)) : NULL;
	size_t i;

	if (!kv) {
		memset(inos, 0, n * sizeof(*inos));
		qsort(keys, n, sizeof(*keys), cmp_str);
		return;
	}
	for (i = 0; i < n; i++) {
		kv[i].key = keys[i];
		kv[i].ino = inos[i];
	}
	qsort(kv, n, sizeof(*kv), cmp_kv);
	for (i = 0; i < n; i++) {
		keys[i] = kv[i].key;
		inos[i] = kv[i].ino;
	}
	free(kv);
}

static int chase_inos(struct es_fsindex *fx, const uint64_t *inos, size_t n);

/* Writes what the tree holds at each of KEYS[0..N) (sorted here; with
 * INOS, each key's inode when noted, already sorted and unique). With
 * KEEP the keys go back to the set when their bulk fails. A key that no
 * longer holds its noted inode: the documents of that inode are looked
 * up again (chase_inos()). Returns 0 or the -errno of the last send that
 * failed. */
static int write_keys(struct es_fsindex *fx, char **keys, size_t n, bool keep,
		      const uint64_t *inos)
{
	struct fx_lookup l = {NULL, -1};
	struct fx_bulk k;
	struct stat st;
	uint64_t *moved = NULL;
	size_t i, nm = 0;
	int err, res = 0;

	if (!inos)
		qsort(keys, n, sizeof(*keys), cmp_str);
	bulk_init(&k, keep);
	for (i = 0; i < n; i++) {
		int64_t v;

		err = lookup_key(fx, &l, keys[i], &st);
		v = fx_version(fx);
		if (inos && inos[i] &&
		    (err == -ENOENT || (err == 0 && (uint64_t)st.st_ino != inos[i]))) {
			/* renamed or replaced since it was noted (by another
			 * host, under this host's cached name): its change
			 * belongs to wherever the inode is now */
			uint64_t *nv = realloc(moved, (nm + 1) * sizeof(*nv));

			if (nv) {
				moved = nv;
				moved[nm++] = inos[i];
			}
		}
		err = bulk_add(fx, &k, keys[i], err, &st, v);
		if (err)
			res = err;
	}
	lookup_done(&l);
	err = bulk_flush(fx, &k);
	if (nm && !err)
		err = chase_inos(fx, moved, nm);
	free(moved);
	return err ? err : res;
}

/* ---- the documents below a key ----------------------------------------------------- */

/* Refreshes the index, so a search sees every write answered before.
 * Returns 0 or -ENOLCK. */
static int fx_refresh(struct es_fsindex *fx)
{
	struct httpc_response r = {0};
	enum es_call_class cls = es_call(&fx->es->cl, "POST", fx->refresh_path, NULL, "", 0,
					 tl_mono_ms() + fx->es->cl.timeout_ms, &r, true);

	httpc_response_free(&r);
	return cls == ES_CALL_OK ? 0 : -ENOLCK;
}

/* Sends the search REQ (deleted here) and leaves its parsed answer in
 * *ROOT (the caller deletes it). Returns 0, -ENOMEM, -EACCES (refused,
 * logged) or -ENOLCK. */
static int fx_search(struct es_fsindex *fx, cJSON *req, cJSON **root)
{
	struct httpc_response r = {0};
	enum es_call_class cls;
	char *body = cJSON_PrintUnformatted(req);

	cJSON_Delete(req);
	*root = NULL;
	if (!body)
		return -ENOMEM;
	cls = es_call(&fx->es->cl, "POST", fx->search_path, NULL, body, strlen(body),
		      tl_mono_ms() + fx->es->cl.timeout_ms, &r, true);
	free(body);
	*root = cls == ES_CALL_OK ? es_parse(&r) : NULL;
	if (cls == ES_CALL_FATAL)
		es_log_refusal(&fx->es->cl, "POST", fx->search_path, &r);
	httpc_response_free(&r);
	if (!*root)
		return cls == ES_CALL_FATAL ? -EACCES : -ENOLCK;
	return 0;
}

/* Adds to *V (N of them, CAP) the key of every document below KEY, as the
 * index holds them after a refresh. Returns 0 or -errno. */
static int docs_below(struct es_fsindex *fx, const char *key, char ***v, size_t *n, size_t *cap)
{
	char *after = NULL;
	int err = 0;

	if ((err = fx_refresh(fx)) != 0)
		return err;
	for (;;) {
		cJSON *req = cJSON_CreateObject(), *q = es_fsdoc_under_query(key), *root, *sort;
		const cJSON *hit;
		size_t got = 0;

		cJSON_AddNumberToObject(req, "size", FX_PAGE);
		cJSON_AddItemToArray(cJSON_AddArrayToObject(req, "_source"),
				     cJSON_CreateString("path"));
		cJSON_AddFalseToObject(req, "track_total_hits");
		if (!cJSON_AddItemToObject(req, "query", q))
			cJSON_Delete(q);
		sort = cJSON_CreateObject();
		cJSON_AddStringToObject(cJSON_AddObjectToObject(sort, "path"), "order", "asc");
		if (!cJSON_AddItemToArray(cJSON_AddArrayToObject(req, "sort"), sort))
			cJSON_Delete(sort);
		if (after)
			cJSON_AddItemToArray(cJSON_AddArrayToObject(req, "search_after"),
					     cJSON_CreateString(after));
		if ((err = fx_search(fx, req, &root)) != 0)
			break;
		cJSON_ArrayForEach(hit, es_hits(root))
		{
			const char *text = es_jstr(cJSON_GetObjectItemCaseSensitive(hit, "_source"),
						   "path");
			char *k = NULL;

			got++;
			if (!text)
				continue;
			free(after);
			after = strdup(text);
			if (path_key_from_text(text, &k) != 0)
				continue;
			if (*n == *cap) {
				size_t c = *cap ? 2 * *cap : 256;
				char **nv = realloc(*v, c * sizeof(*nv));

				if (!nv) {
					free(k);
					err = -ENOMEM;
					break;
				}
				*v = nv;
				*cap = c;
			}
			(*v)[(*n)++] = k;
		}
		cJSON_Delete(root);
		if (err || got < FX_PAGE || !after)
			break;
	}
	free(after);
	return err;
}

/* Looks up again the path of every document of each inode of
 * INOS[0..N) (at most FX_INO_MAX each), as the index holds them after a
 * refresh: an entry noted under a name that another host renamed it
 * from was written (if at all) under its old name; its new name's
 * document still shows the state before the change. Returns 0 or
 * -errno of a request. */
static int chase_inos(struct es_fsindex *fx, const uint64_t *inos, size_t n)
{
	char **v = NULL;
	size_t nv = 0, cap = 0, i;
	int err = 0;

	if ((err = fx_refresh(fx)) != 0)
		return err;
	for (i = 0; i < n && !err; i++) {
		cJSON *req = cJSON_CreateObject(), *root;
		const cJSON *hit;

		if (i && inos[i] == inos[i - 1])
			continue;
		cJSON_AddNumberToObject(req, "size", FX_INO_MAX);
		cJSON_AddItemToArray(cJSON_AddArrayToObject(req, "_source"),
				     cJSON_CreateString("path"));
		cJSON_AddNumberToObject(
			cJSON_AddObjectToObject(cJSON_AddObjectToObject(req, "query"), "term"),
			"ino", (double)inos[i]);
		if ((err = fx_search(fx, req, &root)) != 0)
			break;
		cJSON_ArrayForEach(hit, es_hits(root))
		{
			const char *text = es_jstr(cJSON_GetObjectItemCaseSensitive(hit, "_source"),
						   "path");
			char *k = NULL;

			if (!text || path_key_from_text(text, &k) != 0)
				continue;
			if (nv == cap) {
				size_t c = cap ? 2 * cap : 16;
				char **nk = realloc(v, c * sizeof(*nk));

				if (!nk) {
					free(k);
					err = -ENOMEM;
					break;
				}
				v = nk;
				cap = c;
			}
			v[nv++] = k;
		}
		cJSON_Delete(root);
	}
	if (!err && nv) {
		count(&fx->chased, nv);
		err = write_keys(fx, v, nv, false, NULL);
	}
	for (i = 0; i < nv; i++)
		free(v[i]);
	free(v);
	return err;
}

/* ---- crawling ---------------------------------------------------------------------- */

/* Writes the document of every entry below directory DFD (its key KEY,
 * LEN bytes of a buffer of CAP) into K, depth first. Returns 0 or the
 * -errno of a send that failed. */
static int crawl_dir(struct es_fsindex *fx, struct fx_bulk *k, int dfd, char **key, size_t len,
		     size_t *cap, unsigned int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	int err = 0, res = 0;

	if (!d) {
		close(dfd);
		return 0;
	}
	while ((de = readdir(d)) != NULL) {
		size_t nl = strlen(de->d_name);
		struct stat st;
		int serr;
		int64_t v;

		if (de->d_name[0] == '.' &&
		    (de->d_name[1] == '\0' || (de->d_name[1] == '.' && de->d_name[2] == '\0')))
			continue;
		if (len + 1 + nl + 1 > *cap) {
			size_t c = 2 * (len + 1 + nl + 1);
			char *nk = realloc(*key, c);

			if (!nk)
				continue;
			*key = nk;
			*cap = c;
		}
		if (len == 1) { /* the root "/" */
			memcpy(*key + 1, de->d_name, nl + 1);
		} else {
			(*key)[len] = '/';
			memcpy(*key + len + 1, de->d_name, nl + 1);
		}
		serr = fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == -1 ? -errno : 0;
		v = fx_version(fx);
		err = bulk_add(fx, k, *key, serr, &st, v);
		if (err)
			res = err;
		if (!serr && S_ISDIR(st.st_mode) && depth < FX_DEPTH_MAX) {
			int sub = openat(dirfd(d), de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub >= 0) {
				size_t sl = len == 1 ? 1 + nl : len + 1 + nl;

				err = crawl_dir(fx, k, sub, key, sl, cap, depth + 1);
				if (err)
					res = err;
			}
		}
		(*key)[len] = '\0';
	}
	closedir(d);
	return res;
}

/* Reconciles the index below and at KEY with the tree: every document
 * below it is looked up again (SWEEP: only those), KEY itself, and (but
 * for SWEEP) its subtree crawled. Returns 0 or -errno of a request. */
static int reconcile(struct es_fsindex *fx, const char *key, bool sweep)
{
	char **v = NULL, *kb;
	size_t n = 0, cap = 0, i, len;
	int err, res;
	struct fx_bulk k;
	int dfd;

	res = docs_below(fx, key, &v, &n, &cap);
	if (res == 0) {
		char *self = sweep ? NULL : strdup(key);

		if (self) {
			char **nv = realloc(v, (n + 1) * sizeof(*nv));

			if (nv) {
				v = nv;
				v[n++] = self;
			} else {
				free(self);
			}
		}
		res = write_keys(fx, v, n, false, NULL);
	}
	for (i = 0; i < n; i++)
		free(v[i]);
	free(v);
	if (res || sweep)
		return res;
	dfd = open_dir(fx, key, O_RDONLY);
	if (dfd < 0)
		return 0; /* not a directory (now): nothing below */
	len = strlen(key);
	cap = len + NAME_MAX + 2;
	kb = malloc(cap);
	if (!kb) {
		close(dfd);
		return -ENOMEM;
	}
	memcpy(kb, key, len + 1);
	bulk_init(&k, false);
	res = crawl_dir(fx, &k, dfd, &kb, len, &cap, 0);
	err = bulk_flush(fx, &k);
	free(kb);
	return err ? err : res;
}

/* ---- notes and jobs ---------------------------------------------------------------- */

/* Drops every note of the set (past the bound). Under the mutex. */
static void set_clear_locked(struct fx_set *s)
{
	size_t i;

	for (i = 0; s->b && i < FX_BUCKETS; i++) {
		while (s->b[i]) {
			struct fx_note *nt = s->b[i];

			s->b[i] = nt->next;
			free(nt);
		}
	}
	s->n = 0;
}

void es_fsindex_note(struct es_fsindex *fx, const char *key)
{
	es_fsindex_note_ino(fx, key, 0);
}

void es_fsindex_note_ino(struct es_fsindex *fx, const char *key, uint64_t ino)
{
	uint32_t h = key_hash(key) % FX_BUCKETS;
	struct fx_note *nt;
	size_t len = strlen(key);
	bool wake = false, dropped_log = false;
	size_t dropped = 0;

	count(&fx->notes, 1);
	pthread_mutex_lock(&fx->mutex);
	if (fx->closed)
		goto out;
	if (!fx->set.b) {
		fx->set.b = calloc(FX_BUCKETS, sizeof(*fx->set.b));
		if (!fx->set.b) {
			dropped = 1;
			goto out;
		}
	}
	for (nt = fx->set.b[h]; nt; nt = nt->next)
		if (strcmp(nt->key, key) == 0) {
			if (ino)
				nt->ino = ino;
			goto out; /* coalesced */
		}
	if (fx->set.n >= ES_FSINDEX_MAX_NOTES) {
		dropped = fx->set.n + 1;
		set_clear_locked(&fx->set);
		dropped_log = !fx->drop_logged;
		fx->drop_logged = true;
		goto out;
	}
	nt = malloc(sizeof(*nt) + len + 1);
	if (!nt) {
		dropped = 1;
		goto out;
	}
	memcpy(nt->key, key, len + 1);
	nt->ino = ino;
	nt->next = fx->set.b[h];
	fx->set.b[h] = nt;
	if (fx->set.n++ == 0)
		fx->set.first_ms = tl_mono_ms();
	/* the first note starts the window; a full set ends it */
	wake = fx->set.n == 1 || fx->set.n == ES_FSINDEX_FLUSH_NOTES;
out:
	if (wake)
		pthread_cond_signal(&fx->cond);
	pthread_mutex_unlock(&fx->mutex);
	if (dropped)
		count(&fx->dropped, dropped);
	if (dropped_log)
		tl_log(LOG_ERR, "fs index '%s': %d changes could not be sent and were dropped: run "
		       "'treelockctl index verify --repair' once the store is back",
		       fx->name, ES_FSINDEX_MAX_NOTES);
}

/* Appends job J to the queue and wakes the thread. Under the mutex. */
static void job_add_locked(struct es_fsindex *fx, struct fx_job *j)
{
	j->next = NULL;
	if (fx->jobs_tail)
		fx->jobs_tail->next = j;
	else
		fx->jobs = j;
	fx->jobs_tail = j;
	pthread_cond_signal(&fx->cond);
}

static void job_free(struct fx_job *j)
{
	if (!j)
		return;
	free(j->from);
	free(j->to);
	free(j);
}

/* A new job of KIND (FROM, TO taken over), due DUE_MS; NULL when out of
 * memory (FROM and TO freed). */
static struct fx_job *job_new(enum fx_kind kind, char *from, char *to, int64_t due_ms)
{
	struct fx_job *j = calloc(1, sizeof(*j));

	if (!j || !from || !to) {
		free(j);
		free(from);
		free(to);
		return NULL;
	}
	j->kind = kind;
	j->from = from;
	j->to = to;
	j->due_ms = due_ms;
	return j;
}

uint64_t es_fsindex_tree(struct es_fsindex *fx, const char *from, const char *to)
{
	struct fx_job *j = job_new(FX_MOVE, strdup(from), strdup(to), 0);
	uint64_t seq = 0;

	count(&fx->notes, 1);
	if (!j) {
		es_fsindex_note(fx, from);
		es_fsindex_note(fx, to);
		return 0;
	}
	pthread_mutex_lock(&fx->mutex);
	if (fx->closed) {
		pthread_mutex_unlock(&fx->mutex);
		job_free(j);
		return 0;
	}
	seq = j->seq = ++fx->next_seq;
	job_add_locked(fx, j);
	pthread_mutex_unlock(&fx->mutex);
	return seq;
}

uint64_t es_fsindex_last(struct es_fsindex *fx)
{
	uint64_t seq;

	pthread_mutex_lock(&fx->mutex);
	seq = fx->next_seq;
	pthread_mutex_unlock(&fx->mutex);
	return seq;
}

void es_fsindex_repair(struct es_fsindex *fx, const char *from_text, const char *to_text)
{
	char *from = NULL, *to = NULL, *up[2] = {NULL, NULL};
	struct fx_job *j;
	const char *name;
	size_t i;

	if (!from_text || path_key_from_text(from_text, &from) != 0)
		return;
	if (!to_text || path_key_from_text(to_text, &to) != 0)
		to = strdup(from);
	/* the directories the rename changed too: a dead mount may have made
	 * one just before it (and its note died with it) */
	if (strcmp(from, "/") != 0)
		up[0] = parent_of(from, &name);
	if (strcmp(to, "/") != 0)
		up[1] = parent_of(to, &name);
	for (i = 0; i < 2; i++)
		if (up[i]) {
			es_fsindex_note(fx, up[i]);
			free(up[i]);
		}
	j = job_new(FX_REPAIR, from, to, 0);
	if (!j) {
		tl_log(LOG_ERR, "fs index '%s': cannot repair '%s': %s", fx->name, from_text,
		       strerror(ENOMEM));
		return;
	}
	tl_log(LOG_NOTICE, "fs index '%s': repairing '%s' -> '%s' (a dead mount's rename)",
	       fx->name, from_text, to_text ? to_text : from_text);
	pthread_mutex_lock(&fx->mutex);
	if (fx->closed) {
		pthread_mutex_unlock(&fx->mutex);
		job_free(j);
		return;
	}
	job_add_locked(fx, j);
	pthread_mutex_unlock(&fx->mutex);
}

static void parked_free(struct fx_parked *p)
{
	size_t i;

	for (i = 0; i < p->n; i++)
		free(p->ids[i]);
	free(p->ids);
	free(p->excl);
	buf_free(&p->b);
	free(p);
}

int es_fsindex_park(struct es_fsindex *fx, uint64_t seq, const struct buf *b, char *const *ids,
		    const bool *excl, size_t n)
{
	struct fx_parked *p;
	size_t i;

	pthread_mutex_lock(&fx->mutex);
	if (seq <= fx->done_seq || !fx->started) {
		pthread_mutex_unlock(&fx->mutex);
		return 0;
	}
	pthread_mutex_unlock(&fx->mutex);
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	buf_init(&p->b, 0);
	p->ids = calloc(n ? n : 1, sizeof(*p->ids));
	p->excl = calloc(n ? n : 1, sizeof(*p->excl));
	if (!p->ids || !p->excl || buf_add(&p->b, b->data, b->len) != 0) {
		parked_free(p);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		p->ids[i] = strdup(ids[i]);
		p->excl[i] = excl[i];
		if (!p->ids[i]) {
			p->n = i;
			parked_free(p);
			return -ENOMEM;
		}
	}
	p->n = n;
	p->seq = seq;
	pthread_mutex_lock(&fx->mutex);
	if (seq <= fx->done_seq) {
		/* answered meanwhile */
		pthread_mutex_unlock(&fx->mutex);
		parked_free(p);
		return 0;
	}
	p->next = fx->parked;
	fx->parked = p;
	pthread_mutex_unlock(&fx->mutex);
	return 1;
}

/* Sends the parked releases of tickets up to DONE. */
static void release_parked(struct es_fsindex *fx, uint64_t done, bool all)
{
	struct fx_parked *p, **pp, *ready = NULL;

	pthread_mutex_lock(&fx->mutex);
	if (done > fx->done_seq)
		fx->done_seq = done;
	for (pp = &fx->parked; (p = *pp) != NULL;) {
		if (all || p->seq <= fx->done_seq) {
			*pp = p->next;
			p->next = ready;
			ready = p;
		} else {
			pp = &p->next;
		}
	}
	pthread_mutex_unlock(&fx->mutex);
	if (!ready)
		return;
	while (ready) {
		int64_t deadline = tl_mono_ms() + (int64_t)(fx->es->base.cfg->lock_timeout * 1000);

		p = ready;
		ready = p->next;
		if (es_send_release(fx->es, &p->b, deadline) == -ENOLCK)
			tl_log(LOG_WARNING, "fs index '%s': a rename's release could not be sent: "
			       "its locks expire with the lease", fx->name);
		parked_free(p);
	}
	/* handed to the store: an acquire of ours waiting for them goes now
	 * (queued behind the release, es_batch.h) */
	pthread_mutex_lock(&fx->mutex);
	pthread_cond_broadcast(&fx->parked_cond);
	pthread_mutex_unlock(&fx->mutex);
}

/* True when a parked release holds one of IDS[0..N) in a mode that
 * conflicts with EXCL. Under the mutex. */
static bool parked_conflict_locked(struct es_fsindex *fx, char *const *ids, const bool *excl,
				   size_t n)
{
	const struct fx_parked *p;
	size_t i, j;

	for (p = fx->parked; p; p = p->next)
		for (i = 0; i < p->n; i++)
			for (j = 0; j < n; j++)
				if ((p->excl[i] || excl[j]) && strcmp(p->ids[i], ids[j]) == 0)
					return true;
	return false;
}

void es_fsindex_wait_parked(struct es_fsindex *fx, char *const *ids, const bool *excl, size_t n,
			    int64_t deadline)
{
	pthread_mutex_lock(&fx->mutex);
	while (fx->parked && parked_conflict_locked(fx, ids, excl, n)) {
		struct timespec ts;
		int64_t until = deadline ? deadline : tl_mono_ms() + 1000;

		if (deadline && tl_mono_ms() >= deadline)
			break;
		ts.tv_sec = until / 1000;
		ts.tv_nsec = (long)(until % 1000) * 1000000;
		pthread_cond_timedwait(&fx->parked_cond, &fx->mutex, &ts);
	}
	pthread_mutex_unlock(&fx->mutex);
}

/* Runs job J. Returns 0 or -errno (its writes failed). */
static int run_job(struct es_fsindex *fx, struct fx_job *j)
{
	int err;

	/* a sweep: FROM's documents and FROM itself looked up again (a
	 * host whose cache still showed FROM wrote there), TO's crawled
	 * again (entries made in the moved directory by a host that named
	 * it by its old path were noted there) */
	err = reconcile(fx, j->from, j->kind == FX_SWEEP);
	if (!err && j->kind == FX_SWEEP)
		err = write_keys(fx, &j->from, 1, false, NULL);
	if (!err && strcmp(j->to, j->from) != 0)
		err = reconcile(fx, j->to, false);
	return err;
}

/* ---- the thread -------------------------------------------------------------------- */

/* Takes the set into *NOTES (N keys, new strings) and *INOS (theirs).
 * Under the mutex. */
static void take_notes_locked(struct es_fsindex *fx, char ***notes, uint64_t **inos, size_t *n)
{
	struct fx_set *s = &fx->set;
	char **v;
	uint64_t *iv;
	size_t i, k = 0;

	*notes = NULL;
	*inos = NULL;
	*n = 0;
	if (!s->n)
		return;
	v = malloc(s->n * sizeof(*v));
	iv = malloc(s->n * sizeof(*iv));
	if (!v || !iv) {
		free(v);
		free(iv);
		return; /* kept for the next round */
	}
	for (i = 0; i < FX_BUCKETS; i++) {
		while (s->b[i]) {
			struct fx_note *nt = s->b[i];

			s->b[i] = nt->next;
			iv[k] = nt->ino;
			/* the note's memory becomes the key's: the key sits at
			 * its start once moved */
			memmove(nt, nt->key, strlen(nt->key) + 1);
			v[k++] = (char *)nt;
		}
	}
	s->n = 0;
	*notes = v;
	*inos = iv;
	*n = k;
}

/* True when the round should start now. Under the mutex. */
static bool due_locked(struct es_fsindex *fx, int64_t now, int64_t *wait_ms)
{
	int64_t w = -1;
	const struct fx_job *j;

	/* any job: they are queued in order of arrival, not of due time (a
	 * move behind a sweep or a retry due later is due at once) */
	for (j = fx->jobs; j; j = j->next) {
		if (j->due_ms <= now)
			return true;
		if (w < 0 || j->due_ms - now < w)
			w = j->due_ms - now;
	}
	if (fx->settles) {
		if (fx->settles->due_ms <= now)
			return true;
		if (w < 0 || fx->settles->due_ms - now < w)
			w = fx->settles->due_ms - now;
	}
	if (fx->set.n) {
		int64_t due = fx->set.first_ms + fx->delay_ms;

		if (due <= now || fx->set.n >= ES_FSINDEX_FLUSH_NOTES)
			return true;
		if (w < 0 || due - now < w)
			w = due - now;
	}
	*wait_ms = w;
	return false;
}

/* Takes the jobs that are due (all with ALL) into a list, in order. Under
 * the mutex. Jobs not due stay, in order. */
static struct fx_job *take_jobs_locked(struct es_fsindex *fx, int64_t now, bool all)
{
	struct fx_job *due = NULL, **dt = &due, *keep = NULL, **kt = &keep, *j;

	while ((j = fx->jobs) != NULL) {
		fx->jobs = j->next;
		j->next = NULL;
		if (all || j->due_ms <= now) {
			*dt = j;
			dt = &j->next;
		} else {
			*kt = j;
			kt = &j->next;
		}
	}
	fx->jobs = keep;
	fx->jobs_tail = NULL;
	for (j = keep; j; j = j->next)
		fx->jobs_tail = j;
	return due;
}

static void settle_free(struct fx_settle *t)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		free(t->keys[i]);
	free(t->keys);
	free(t->inos);
	free(t);
}

/* Takes the second looks due at NOW (all with ALL), in order. Under the
 * mutex. */
static struct fx_settle *take_settles_locked(struct es_fsindex *fx, int64_t now, bool all)
{
	struct fx_settle *due = fx->settles, **tp = &fx->settles, *t;

	while ((t = *tp) != NULL && (all || t->due_ms <= now))
		tp = &t->next;
	if (tp == &fx->settles)
		return NULL;
	fx->settles = *tp;
	*tp = NULL;
	if (!fx->settles)
		fx->settles_tail = NULL;
	return due;
}

/* Looks the keys of the second looks TS up again (freed), but those in
 * NOTES[0..N) (sorted: written just now, and looked at again later) and
 * but a key's repeats. */
static void settle_run(struct es_fsindex *fx, struct fx_settle *ts, char **notes, size_t n)
{
	struct fx_settle *t;
	char **v = NULL;
	uint64_t *iv = NULL;
	size_t total = 0, m = 0, i, j = 0;

	for (t = ts; t; t = t->next)
		total += t->n;
	if (total) {
		v = malloc(total * sizeof(*v));
		iv = malloc(total * sizeof(*iv));
	}
	for (t = ts; t && v && iv; t = t->next) {
		memcpy(v + m, t->keys, t->n * sizeof(*v));
		if (t->inos)
			memcpy(iv + m, t->inos, t->n * sizeof(*iv));
		else
			memset(iv + m, 0, t->n * sizeof(*iv));
		m += t->n;
		t->n = 0; /* the keys are v's now */
	}
	while ((t = ts) != NULL) {
		ts = t->next;
		settle_free(t);
	}
	if (!v || !iv) {
		free(v);
		free(iv);
		return; /* without memory: the first look stands */
	}
	sort_pairs(v, iv, m);
	total = m;
	m = 0;
	for (i = 0; i < total; i++) {
		int c = 1;

		if (m && strcmp(v[m - 1], v[i]) == 0) {
			if (iv[i])
				iv[m - 1] = iv[i];
			free(v[i]);
			continue;
		}
		while (j < n && (c = strcmp(notes[j], v[i])) < 0)
			j++;
		if (j < n && c == 0) {
			free(v[i]);
			continue;
		}
		iv[m] = iv[i];
		v[m++] = v[i];
	}
	if (m) {
		write_keys(fx, v, m, false, iv);
		count(&fx->settles_done, m);
	}
	free(iv);
	for (i = 0; i < m; i++)
		free(v[i]);
	free(v);
}

/* One round: NOTES, then the second looks TS, then JOBS; the releases
 * their answers free. With FINAL nothing is retried or looked at again
 * later. */
static void round_run(struct es_fsindex *fx, char **notes, uint64_t *inos, size_t n,
		      struct fx_settle *ts, struct fx_job *jobs, bool final)
{
	uint64_t done = 0;
	size_t i;

	if (n) {
		sort_pairs(notes, inos, n);
		write_keys(fx, notes, n, !final, inos);
	}
	if (ts)
		settle_run(fx, ts, notes, n);
	if (n && fx->settle_ms > 0 && !final) {
		/* a second look at what was just written: the first may
		 * have looked through a client cache (an NFS client's, a
		 * FUSE mount's) that still showed an older entry, and its
		 * write, versioned now, would outrank the right one of a
		 * host that looked earlier; a second look is not looked at
		 * again (else it would never end) */
		struct fx_settle *t = calloc(1, sizeof(*t));

		if (t) {
			t->keys = notes;
			t->inos = inos;
			t->n = n;
			t->due_ms = tl_mono_ms() + fx->settle_ms;
			notes = NULL;
			inos = NULL;
			n = 0;
			pthread_mutex_lock(&fx->mutex);
			if (fx->settles_tail)
				fx->settles_tail->next = t;
			else
				fx->settles = t;
			fx->settles_tail = t;
			pthread_mutex_unlock(&fx->mutex);
		}
	}
	for (i = 0; i < n; i++)
		free(notes[i]);
	free(notes);
	free(inos);
	while (jobs) {
		struct fx_job *j = jobs;
		int err;

		jobs = j->next;
		err = run_job(fx, j);
		if (j->seq > done)
			done = j->seq;
		if (err && !final) {
			/* tried again later, as a repair: the release waits no
			 * longer (locks held longer, never shorter) */
			int64_t back = 1000LL << (j->tries < 5 ? j->tries : 5);

			fx_log_error(fx, "cannot move the documents of a rename", err);
			j->kind = j->kind == FX_SWEEP ? FX_SWEEP : FX_REPAIR;
			j->seq = 0;
			j->tries++;
			j->due_ms = tl_mono_ms() + (back < FX_RETRY_MAX_MS ? back : FX_RETRY_MAX_MS);
			pthread_mutex_lock(&fx->mutex);
			job_add_locked(fx, j);
			pthread_mutex_unlock(&fx->mutex);
			j = NULL;
		} else if (err) {
			fx_log_error(fx, "cannot move the documents of a rename", err);
		} else {
			count(&fx->jobs_done, 1);
			if (j->kind != FX_SWEEP && !final) {
				/* a second look at FROM and TO later: writes of
				 * other hosts looked up before the move that arrived
				 * after its search, or looked up in a cache that still
				 * showed the old tree */
				struct fx_job *s = job_new(FX_SWEEP, strdup(j->from), strdup(j->to),
							   tl_mono_ms() + ES_FSINDEX_SWEEP_MS);

				if (s) {
					pthread_mutex_lock(&fx->mutex);
					job_add_locked(fx, s);
					pthread_mutex_unlock(&fx->mutex);
				}
			}
		}
		job_free(j);
		/* a release waits for its job only */
		if (done)
			release_parked(fx, done, false);
	}
}

static void *fx_thread(void *arg)
{
	struct es_fsindex *fx = arg;

	pthread_mutex_lock(&fx->mutex);
	while (!fx->stop) {
		int64_t now = tl_mono_ms(), wait_ms = -1;
		struct fx_job *jobs;
		struct fx_settle *looks;
		char **notes;
		uint64_t *inos;
		size_t n;

		if (!due_locked(fx, now, &wait_ms)) {
			if (wait_ms < 0) {
				pthread_cond_wait(&fx->cond, &fx->mutex);
			} else {
				struct timespec ts;
				int64_t until = tl_mono_us() + wait_ms * 1000;

				ts.tv_sec = until / 1000000;
				ts.tv_nsec = (long)(until % 1000000) * 1000;
				pthread_cond_timedwait(&fx->cond, &fx->mutex, &ts);
			}
			continue;
		}
		take_notes_locked(fx, &notes, &inos, &n);
		jobs = take_jobs_locked(fx, now, false);
		looks = take_settles_locked(fx, now, false);
		pthread_mutex_unlock(&fx->mutex);
		round_run(fx, notes, inos, n, looks, jobs, false);
		pthread_mutex_lock(&fx->mutex);
	}
	pthread_mutex_unlock(&fx->mutex);
	return NULL;
}

/* ---- open, start, stop --------------------------------------------------------------- */

int es_fsindex_ensure(struct es_client *c, const char *name, int64_t deadline)
{
	struct httpc_response r = {0};
	cJSON *body = es_fsdoc_index_body(), *root = NULL;
	char *esc = httpc_escape(name), *path = NULL, *text = NULL;
	enum es_call_class cls;
	int err = -ENOMEM;

	if (!body || !esc)
		goto out;
	text = cJSON_PrintUnformatted(body);
	if (!text || asprintf(&path, "/%s", esc) < 0) {
		path = NULL;
		goto out;
	}
	cls = es_call(c, "PUT", path, NULL, text, strlen(text), deadline, &r, false);
	if (cls == ES_CALL_OK) {
		tl_log(LOG_NOTICE, "fs index '%s' created", name);
		err = 0;
		goto out;
	}
	if (cls == ES_CALL_RETRY) {
		es_client_set_error(c, "cannot create fs index '%s'", name);
		err = -ENOLCK;
		goto out;
	}
	root = es_parse(&r);
	if (r.status != 400 || !root || !strstr(r.body ? r.body : "", "already_exists")) {
		es_log_refusal(c, "PUT", path, &r);
		err = -EACCES;
		goto out;
	}
	/* there already: ours? */
	cJSON_Delete(root);
	root = NULL;
	httpc_response_free(&r);
	free(path);
	if (asprintf(&path, "/%s/_mapping", esc) < 0) {
		path = NULL;
		goto out;
	}
	cls = es_call(c, "GET", path, NULL, NULL, 0, deadline, &r, false);
	if (cls != ES_CALL_OK) {
		if (cls == ES_CALL_FATAL)
			es_log_refusal(c, "GET", path, &r);
		err = cls == ES_CALL_RETRY ? -ENOLCK : -EACCES;
		goto out;
	}
	root = es_parse(&r);
	{
		/* {"<name>": {"mappings": {...}}}: the one index named */
		const cJSON *idx = root ? root->child : NULL;

		if (idx && es_fsdoc_is_ours(cJSON_GetObjectItemCaseSensitive(idx, "mappings"))) {
			err = 0;
		} else {
			tl_log(LOG_ERR, "fs_index=%s: index '%s' exists with another mapping (not an "
			       "fs index of treelockfs, or another format): choose another name",
			       name, name);
			err = -EINVAL;
		}
	}
out:
	httpc_response_free(&r);
	cJSON_Delete(root);
	cJSON_Delete(body);
	free(text);
	free(path);
	free(esc);
	return err;
}

int es_fsindex_open(struct es_store *es, const char *name, const char *backing, double delay_s,
		    double settle_s, struct es_fsindex **out)
{
	struct es_fsindex *fx = calloc(1, sizeof(*fx));
	pthread_condattr_t ca;
	char *esc = NULL;
	int err = -ENOMEM;

	*out = NULL;
	if (!fx)
		return -ENOMEM;
	fx->root_fd = -1;
	fx->es = es;
	fx->delay_ms = (int64_t)(delay_s * 1000 + 0.5);
	fx->settle_ms = (int64_t)(settle_s * 1000 + 0.5);
	fx->name = strdup(name);
	esc = httpc_escape(name);
	if (!fx->name || !esc || asprintf(&fx->search_path, "/%s/_search", esc) < 0 ||
	    asprintf(&fx->refresh_path, "/%s/_refresh", esc) < 0)
		goto out_free;
	fx->root_fd = open(backing, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fx->root_fd == -1) {
		err = -errno;
		tl_log(LOG_ERR, "fs index '%s': cannot open '%s': %s", name, backing, strerror(errno));
		goto out_free;
	}
	pthread_mutex_init(&fx->mutex, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&fx->cond, &ca);
	pthread_cond_init(&fx->parked_cond, &ca);
	pthread_condattr_destroy(&ca);
	free(esc);
	*out = fx;
	return 0;

out_free:
	free(esc);
	if (fx->root_fd >= 0)
		close(fx->root_fd);
	free(fx->search_path);
	free(fx->refresh_path);
	free(fx->name);
	free(fx);
	return err;
}

int es_fsindex_start(struct es_fsindex *fx)
{
	int err;

	pthread_mutex_lock(&fx->mutex);
	fx->started = true;
	pthread_mutex_unlock(&fx->mutex);
	err = pthread_create(&fx->thread, NULL, fx_thread, fx);
	if (err) {
		pthread_mutex_lock(&fx->mutex);
		fx->started = false;
		pthread_mutex_unlock(&fx->mutex);
		return -err;
	}
	return 0;
}

void es_fsindex_stop(struct es_fsindex *fx)
{
	struct fx_job *jobs, *j;
	struct fx_settle *ts;
	char **notes;
	uint64_t *inos;
	size_t n;
	bool started;

	if (!fx)
		return;
	pthread_mutex_lock(&fx->mutex);
	started = fx->started;
	fx->stop = true;
	pthread_cond_broadcast(&fx->cond);
	pthread_mutex_unlock(&fx->mutex);
	if (started)
		pthread_join(fx->thread, NULL);
	pthread_mutex_lock(&fx->mutex);
	fx->closed = true;
	fx->started = false;
	take_notes_locked(fx, &notes, &inos, &n);
	jobs = take_jobs_locked(fx, 0, true);
	ts = take_settles_locked(fx, 0, true);
	pthread_mutex_unlock(&fx->mutex);
	/* the last round: notes, the second looks not made yet (now: the
	 * mount goes), then the jobs this mount's renames wait for (sweeps
	 * and repairs left over are not worth the wait) */
	{
		struct fx_job *mine = NULL, **mt = &mine;

		while ((j = jobs) != NULL) {
			jobs = j->next;
			j->next = NULL;
			if (j->kind == FX_MOVE) {
				*mt = j;
				mt = &j->next;
			} else {
				job_free(j);
			}
		}
		round_run(fx, notes, inos, n, ts, mine, true);
	}
	release_parked(fx, UINT64_MAX, true);
	if (__atomic_load_n(&fx->dropped, __ATOMIC_RELAXED))
		tl_log(LOG_WARNING, "fs index '%s': %" PRIu64 " changes were not indexed: run "
		       "'treelockctl index verify --repair'", fx->name,
		       __atomic_load_n(&fx->dropped, __ATOMIC_RELAXED));
}

void es_fsindex_close(struct es_fsindex *fx)
{
	if (!fx)
		return;
	pthread_mutex_lock(&fx->mutex);
	set_clear_locked(&fx->set);
	pthread_mutex_unlock(&fx->mutex);
	free(fx->set.b);
	while (fx->jobs) {
		struct fx_job *j = fx->jobs;

		fx->jobs = j->next;
		job_free(j);
	}
	while (fx->settles) {
		struct fx_settle *t = fx->settles;

		fx->settles = t->next;
		settle_free(t);
	}
	while (fx->parked) {
		struct fx_parked *p = fx->parked;

		fx->parked = p->next;
		parked_free(p);
	}
	pthread_cond_destroy(&fx->parked_cond);
	pthread_cond_destroy(&fx->cond);
	pthread_mutex_destroy(&fx->mutex);
	if (fx->root_fd >= 0)
		close(fx->root_fd);
	free(fx->search_path);
	free(fx->refresh_path);
	free(fx->name);
	free(fx);
}

size_t es_fsindex_format(struct es_fsindex *fx, char *buf, size_t size, size_t len)
{
	int64_t lag = 0;
	int w;

	pthread_mutex_lock(&fx->mutex);
	if (fx->set.n)
		lag = tl_mono_ms() - fx->set.first_ms;
	pthread_mutex_unlock(&fx->mutex);
	if (len >= size)
		return len;
	w = snprintf(buf + len, size - len,
		     "fs_index_notes %" PRIu64 "\nfs_index_writes %" PRIu64
		     "\nfs_index_conflicts %" PRIu64 "\nfs_index_errors %" PRIu64
		     "\nfs_index_dropped %" PRIu64 "\nfs_index_jobs %" PRIu64
		     "\nfs_index_settles %" PRIu64 "\nfs_index_chased %" PRIu64
		     "\nfs_index_lag_ms %" PRId64 "\n",
		     __atomic_load_n(&fx->notes, __ATOMIC_RELAXED),
		     __atomic_load_n(&fx->writes, __ATOMIC_RELAXED),
		     __atomic_load_n(&fx->conflicts, __ATOMIC_RELAXED),
		     __atomic_load_n(&fx->errors, __ATOMIC_RELAXED),
		     __atomic_load_n(&fx->dropped, __ATOMIC_RELAXED),
		     __atomic_load_n(&fx->jobs_done, __ATOMIC_RELAXED),
		     __atomic_load_n(&fx->settles_done, __ATOMIC_RELAXED),
		     __atomic_load_n(&fx->chased, __ATOMIC_RELAXED), lag);
	if (w < 0)
		return len;
	len += (size_t)w;
	return len < size ? len : size - 1;
}
