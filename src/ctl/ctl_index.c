/* ctl_index.c - treelockctl index build, verify and repair: the fs index
 * held against the tree, crawled whole or where dead owners' intents say
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/escape.h"
#include "base/path.h"
#include "ctl/ctl_i.h"
#include "es/es_fsctl.h"
#include "es/es_fsdoc.h"
#include "es/es_store.h"
#include "lock/lockstore.h"

/* Items per bulk request, and requests in flight. */
#define BULK_ITEMS 2000
#define BULK_SENDERS 3
/* Documents per page of a search. */
#define PAGE_SIZE 5000
/* Who writes what treelockctl writes (the documents' "by"). */
#define CTL_BY "treelockctl"
/* How long owners are watched to tell dead ones apart. */
#define OBSERVE_MAX_MS 120000

/* ---- bulks sent by a few threads ---- */

struct sender {
	struct es_fsctl *fs;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	/* protected by mutex */
	struct buf queue[BULK_SENDERS * 2];
	size_t head, count;
	bool done;
	int err;                 /* the first request that failed */
	pthread_t threads[BULK_SENDERS];
	size_t nthreads;
	struct es_fsctl_counts counts;
	struct buf cur;          /* the producer's */
	size_t cur_items;
};

static void *sender_main(void *arg)
{
	struct sender *s = arg;

	for (;;) {
		struct buf b;
		int err;

		pthread_mutex_lock(&s->mutex);
		while (!s->count && !s->done)
			pthread_cond_wait(&s->cond, &s->mutex);
		if (!s->count) {
			pthread_mutex_unlock(&s->mutex);
			return NULL;
		}
		b = s->queue[s->head];
		s->head = (s->head + 1) % (BULK_SENDERS * 2);
		s->count--;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->mutex);
		err = es_fsctl_bulk(s->fs, b.data, b.len, &s->counts);
		buf_free(&b);
		if (err) {
			pthread_mutex_lock(&s->mutex);
			if (!s->err)
				s->err = err;
			pthread_mutex_unlock(&s->mutex);
		}
	}
}

static void sender_start(struct sender *s, struct es_fsctl *fs)
{
	size_t i;

	memset(s, 0, sizeof(*s));
	s->fs = fs;
	pthread_mutex_init(&s->mutex, NULL);
	pthread_cond_init(&s->cond, NULL);
	for (i = 0; i < BULK_SENDERS; i++)
		if (pthread_create(&s->threads[s->nthreads], NULL, sender_main, s) == 0)
			s->nthreads++;
}

/* Hands the producer's bulk to the senders (waits while they are busy);
 * sends it here when no thread could start. */
static void sender_flush(struct sender *s)
{
	if (!s->cur_items)
		return;
	if (s->cur.err) {
		if (!s->err)
			s->err = s->cur.err;
		buf_free(&s->cur);
		s->cur_items = 0;
		return;
	}
	if (!s->nthreads) {
		int err = es_fsctl_bulk(s->fs, s->cur.data, s->cur.len, &s->counts);

		if (err && !s->err)
			s->err = err;
		buf_free(&s->cur);
	} else {
		pthread_mutex_lock(&s->mutex);
		while (s->count == BULK_SENDERS * 2)
			pthread_cond_wait(&s->cond, &s->mutex);
		s->queue[(s->head + s->count) % (BULK_SENDERS * 2)] = s->cur;
		s->count++;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->mutex);
	}
	memset(&s->cur, 0, sizeof(s->cur));
	s->cur_items = 0;
}

/* One more item was appended to s->cur. */
static void sender_item(struct sender *s)
{
	if (++s->cur_items >= BULK_ITEMS)
		sender_flush(s);
}

/* Sends what is left and waits for every request. Returns the first
 * request's failure, or 0. */
static int sender_finish(struct sender *s)
{
	size_t i;

	sender_flush(s);
	pthread_mutex_lock(&s->mutex);
	s->done = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->mutex);
	for (i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	s->nthreads = 0;
	pthread_mutex_destroy(&s->mutex);
	pthread_cond_destroy(&s->cond);
	return s->err;
}

/* ---- build ---- */

struct build {
	struct ctl_mount *m;
	struct sender s;
	size_t entries;
	int64_t t0_ns, last_shown_ns;
	bool progress;
};

static double secs_since(int64_t t0)
{
	return (double)(ctl_now_ns() - t0) / 1e9;
}

static void show_progress(struct build *b, bool last)
{
	double el = secs_since(b->t0_ns);

	fprintf(stderr, "\r%zu entries, %.0f entries/s, %.1f s%s", b->entries,
		el > 0 ? (double)b->entries / el : 0.0, el, last ? "\n" : "   ");
	fflush(stderr);
}

static int build_one(void *arg, const char *key, const struct stat *st, int64_t at_ns)
{
	struct build *b = arg;

	es_fsdoc_put(&b->s.cur, es_fsctl_index(b->m->fs), key, st, at_ns, CTL_BY);
	sender_item(&b->s);
	b->entries++;
	if (b->progress && at_ns - b->last_shown_ns > 250000000) {
		b->last_shown_ns = at_ns;
		show_progress(b, false);
	}
	return 0;
}

/* The query of KEY's document and those below it. */
static cJSON *self_and_under(const char *key)
{
	cJSON *q = cJSON_CreateObject(), *b = cJSON_AddObjectToObject(q, "bool");
	cJSON *should = cJSON_AddArrayToObject(b, "should"), *t = cJSON_CreateObject();
	char *text = NULL;

	if (!should || !t || path_key_text(key, &text) != 0) {
		cJSON_Delete(t);
		cJSON_Delete(q);
		return NULL;
	}
	cJSON_AddStringToObject(cJSON_AddObjectToObject(t, "term"), "path", text);
	free(text);
	cJSON_AddItemToArray(should, t);
	cJSON_AddItemToArray(should, es_fsdoc_under_query(key));
	cJSON_AddNumberToObject(b, "minimum_should_match", 1);
	return q;
}

/* Deletes, at version START_NS, the documents of KEY and below stated
 * before START_NS (their "at" no later): what a crawl that started then
 * did not see. A document written since (a mount's, the crawl's) carries a
 * newer version and stays. *N gets the deletes sent. */
static int delete_stale(struct ctl_mount *m, const char *key, int64_t start_ns, size_t *n,
			struct es_fsctl_counts *counts)
{
	cJSON *q = self_and_under(key), *top, *filter, *r;
	struct es_fsentry *page = calloc(PAGE_SIZE, sizeof(*page));
	struct buf b = BUF_INIT;
	char *after = NULL;
	size_t got, i, items = 0;
	int more = 1, err = 0;

	*n = 0;
	top = cJSON_CreateObject();
	filter = cJSON_AddArrayToObject(cJSON_AddObjectToObject(top, "bool"), "filter");
	r = cJSON_CreateObject();
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(r, "range"), "at"),
				"lte", (double)(start_ns / 1000000));
	if (!q || !filter || !page) {
		cJSON_Delete(q);
		cJSON_Delete(r);
		cJSON_Delete(top);
		free(page);
		return -ENOMEM;
	}
	cJSON_AddItemToArray(filter, q);
	cJSON_AddItemToArray(filter, r);
	err = es_fsctl_refresh(m->fs);
	while (!err && more > 0) {
		more = es_fsctl_page(m->fs, top, &after, PAGE_SIZE, page, &got);
		if (more < 0) {
			err = more == -ENOENT ? 0 : more;
			break;
		}
		for (i = 0; i < got; i++) {
			es_fsdoc_del(&b, es_fsctl_index(m->fs), page[i].key, start_ns);
			es_fsentry_free(&page[i]);
			(*n)++;
			if (++items >= BULK_ITEMS) {
				err = b.err ? b.err : es_fsctl_bulk(m->fs, b.data, b.len, counts);
				buf_free(&b);
				items = 0;
			}
		}
	}
	if (!err && items)
		err = b.err ? b.err : es_fsctl_bulk(m->fs, b.data, b.len, counts);
	buf_free(&b);
	free(after);
	free(page);
	cJSON_Delete(top);
	return err;
}

/* Crawls KEY and below into the index, then deletes the documents there
 * the crawl did not see. Fills *B's counts. */
static int crawl(struct ctl_mount *m, const char *key, struct build *b, size_t *deleted,
		 struct es_fsctl_counts *dcounts, size_t *unreadable)
{
	int64_t start;
	int err, err2;

	b->m = m;
	start = b->t0_ns = b->last_shown_ns = ctl_now_ns();
	sender_start(&b->s, m->fs);
	err = ctl_walk(m, key, build_one, b, unreadable);
	err2 = sender_finish(&b->s);
	if (b->progress)
		show_progress(b, true);
	if (err == -ENOENT)
		err = 0; /* KEY is gone: its documents go */
	if (err)
		return err;
	if (err2)
		return err2;
	return delete_stale(m, key, start, deleted, dcounts);
}

static const char *via(const struct ctl_mount *m)
{
	return m->via_backing ? "the backing directory" : "the mount";
}

int ctl_index_build(struct ctl_mount *m, const char *key, bool quiet)
{
	struct build b = {0};
	struct es_fsctl_counts dc = {0};
	size_t deleted = 0, unreadable = 0;
	char why[256];
	double el;
	int created = 0, err;

	err = es_fsctl_ensure(m->fs, &created);
	if (err) {
		es_fsctl_last_error(m->fs, why, sizeof(why));
		fprintf(stderr, "treelockctl: cannot use fs index '%s': %s\n", es_fsctl_index(m->fs),
			err == -EPROTO ? why : *why ? why : strerror(-err));
		return CTL_EXIT_STORE;
	}
	if (!quiet) {
		if (created)
			fprintf(stderr, "created fs index '%s'\n", es_fsctl_index(m->fs));
		fprintf(stderr, "crawling ");
		ctl_print_path(m, key, stderr);
		fprintf(stderr, " through %s%s%s%s\n", via(m), m->via_backing ? " '" : "",
			m->via_backing ? m->backing : "", m->via_backing ? "'" : "");
	}
	b.progress = !quiet && isatty(2);
	err = crawl(m, key, &b, &deleted, &dc, &unreadable);
	el = secs_since(b.t0_ns);
	printf("indexed %zu entries in %.1f s (%.0f entries/s) through %s: %zu written, %zu newer "
	       "already there, %zu failed; %zu stale documents deleted\n",
	       b.entries, el, el > 0 ? (double)b.entries / el : 0.0, via(m), b.s.counts.ok,
	       b.s.counts.stale, b.s.counts.failed + dc.failed, dc.ok);
	if (err) {
		es_fsctl_last_error(m->fs, why, sizeof(why));
		fprintf(stderr, "treelockctl: cannot build the fs index: %s\n",
			*why ? why : strerror(-err));
		return CTL_EXIT_STORE;
	}
	if (b.s.counts.failed || dc.failed) {
		es_fsctl_last_error(m->fs, why, sizeof(why));
		fprintf(stderr, "treelockctl: %zu documents failed: %s\n",
			b.s.counts.failed + dc.failed, why);
		return CTL_EXIT_STORE;
	}
	if (unreadable)
		fprintf(stderr, "treelockctl: %zu directories could not be read: their entries "
				"are not indexed (run as root for the whole tree)\n", unreadable);
	return 0;
}

/* ---- verify ---- */

/* What verify compares of an entry. */
struct seen {
	char *key;
	char type;
	int64_t size, mtime, mtime_ns;
	uint32_t mode, uid, gid;
	bool matched;
};

/* An open-addressing table of struct seen by key. */
struct table {
	struct seen *v;
	size_t cap, n;
};

static uint64_t hash_key(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static struct seen *table_find(struct table *t, const char *key)
{
	size_t i;

	if (!t->cap)
		return NULL;
	for (i = hash_key(key) & (t->cap - 1); t->v[i].key; i = (i + 1) & (t->cap - 1))
		if (strcmp(t->v[i].key, key) == 0)
			return &t->v[i];
	return NULL;
}

static int table_add(struct table *t, const struct seen *e)
{
	size_t i;

	if ((t->n + 1) * 2 > t->cap) {
		struct table nt = {0};
		size_t ncap = t->cap ? t->cap * 2 : 1024;

		nt.v = calloc(ncap, sizeof(*nt.v));
		if (!nt.v)
			return -ENOMEM;
		nt.cap = ncap;
		for (i = 0; i < t->cap; i++)
			if (t->v[i].key) {
				size_t j = hash_key(t->v[i].key) & (ncap - 1);

				while (nt.v[j].key)
					j = (j + 1) & (ncap - 1);
				nt.v[j] = t->v[i];
			}
		nt.n = t->n;
		free(t->v);
		*t = nt;
	}
	for (i = hash_key(e->key) & (t->cap - 1); t->v[i].key; i = (i + 1) & (t->cap - 1))
		;
	t->v[i] = *e;
	t->n++;
	return 0;
}

static void table_free(struct table *t)
{
	size_t i;

	for (i = 0; i < t->cap; i++)
		free(t->v[i].key);
	free(t->v);
	memset(t, 0, sizeof(*t));
}

static void seen_of_stat(struct seen *s, const struct stat *st)
{
	s->type = es_fsdoc_type(st->st_mode);
	s->size = st->st_size;
	s->mtime = st->st_mtim.tv_sec;
	s->mtime_ns = st->st_mtim.tv_nsec;
	s->mode = st->st_mode & 07777;
	s->uid = st->st_uid;
	s->gid = st->st_gid;
}

static void seen_of_entry(struct seen *s, const struct es_fsentry *e)
{
	s->type = e->type;
	s->size = e->size;
	s->mtime = e->mtime;
	s->mtime_ns = e->mtime_ns;
	s->mode = e->mode;
	s->uid = e->uid;
	s->gid = e->gid;
}

/* Appends to B the fields where tree T and index I differ ("size 3 != 5,
 * mode ..."); returns how many. Directories' sizes are the filesystem's
 * bookkeeping and are not compared. */
static int diff_fields(const struct seen *t, const struct seen *i, struct buf *b)
{
	char line[160];
	int n = 0;

#define DIFF(cond, ...)                                                                           \
	do {                                                                                      \
		if (cond) {                                                                       \
			snprintf(line, sizeof(line), __VA_ARGS__);                                \
			if (n++)                                                                  \
				buf_adds(b, ", ");                                                \
			buf_adds(b, line);                                                        \
		}                                                                                 \
	} while (0)
	DIFF(t->type != i->type, "type %c (index %c)", t->type, i->type);
	DIFF(t->type != 'd' && t->size != i->size, "size %" PRId64 " (index %" PRId64 ")", t->size,
	     i->size);
	DIFF(t->mtime != i->mtime || t->mtime_ns != i->mtime_ns,
	     "mtime %" PRId64 ".%09" PRId64 " (index %" PRId64 ".%09" PRId64 ")", t->mtime,
	     t->mtime_ns, i->mtime, i->mtime_ns);
	DIFF(t->mode != i->mode, "mode %04o (index %04o)", t->mode, i->mode);
	DIFF(t->uid != i->uid, "uid %u (index %u)", t->uid, i->uid);
	DIFF(t->gid != i->gid, "gid %u (index %u)", t->gid, i->gid);
#undef DIFF
	return n;
}

static int verify_one(void *arg, const char *key, const struct stat *st, int64_t at_ns)
{
	struct table *t = arg;
	struct seen s = {0};

	(void)at_ns;
	seen_of_stat(&s, st);
	s.key = strdup(key);
	if (!s.key || table_add(t, &s) != 0) {
		free(s.key);
		return -ENOMEM;
	}
	return 0;
}

enum diff_kind { D_MISSING, D_EXTRA, D_DIFFERS };

struct diff {
	enum diff_kind kind;
	char *key;
};

static const char *const diff_names[] = {"missing", "extra", "differs"};

/* Appends a difference of KIND to *D (*N of them, room for *CAP), taking
 * the key *KEY over (left NULL). Returns 0 or -ENOMEM (nothing taken). */
static int diff_add(struct diff **d, size_t *n, size_t *cap, enum diff_kind kind, char **key)
{
	if (*n == *cap) {
		struct diff *more = realloc(*d, (*cap * 2 + 64) * sizeof(**d));

		if (!more)
			return -ENOMEM;
		*d = more;
		*cap = *cap * 2 + 64;
	}
	(*d)[*n].kind = kind;
	(*d)[*n].key = *key;
	*key = NULL;
	(*n)++;
	return 0;
}

/* Looks at KEY again (the tree, then the index). Returns -1 when they now
 * agree (or both lack it), else the kind; FIELDS gets the differences;
 * *ST and *AT the tree's stat when it has KEY. */
static int recheck(struct ctl_mount *m, const char *key, struct buf *fields, struct stat *st,
		   int64_t *at, bool *in_tree, int *err)
{
	struct es_fsentry e;
	struct seen ts = {0}, is = {0};
	int g;

	*at = ctl_now_ns();
	*in_tree = fstatat(m->treefd, ctl_rel(key), st, AT_SYMLINK_NOFOLLOW) == 0;
	g = es_fsctl_get(m->fs, key, &e);
	if (g && g != -ENOENT) {
		*err = g;
		return -1;
	}
	if (!*in_tree) {
		if (!g)
			es_fsentry_free(&e);
		return g ? -1 : D_EXTRA;
	}
	if (g)
		return D_MISSING;
	seen_of_stat(&ts, st);
	seen_of_entry(&is, &e);
	es_fsentry_free(&e);
	return diff_fields(&ts, &is, fields) ? D_DIFFERS : -1;
}

int ctl_index_verify(struct ctl_mount *m, const char *key, bool repair, bool json)
{
	struct table t = {0};
	struct diff *d = NULL;
	size_t nd = 0, capd = 0, i, unreadable = 0, ndocs = 0, got, reported = 0;
	struct es_fsentry *page = calloc(PAGE_SIZE, sizeof(*page));
	struct es_fsctl_counts counts = {0};
	struct buf bulk = BUF_INIT;
	cJSON *q = self_and_under(key), *arr = json ? cJSON_CreateArray() : NULL;
	char *after = NULL, why[256];
	int more = 1, err, rc = 0;

	if (!page || !q || (json && !arr)) {
		err = -ENOMEM;
		goto out;
	}
	err = ctl_walk(m, key, verify_one, &t, &unreadable);
	if (err == -ENOENT)
		err = 0;
	if (!err)
		err = es_fsctl_refresh(m->fs);
	while (!err && more > 0) {
		more = es_fsctl_page(m->fs, q, &after, PAGE_SIZE, page, &got);
		if (more < 0) {
			err = more;
			break;
		}
		for (i = 0; i < got && !err; i++) {
			struct seen *s = table_find(&t, page[i].key), is = {0};
			struct buf fb = BUF_INIT;
			enum diff_kind k = D_DIFFERS;
			bool differs = !s;

			ndocs++;
			if (s) {
				s->matched = true;
				seen_of_entry(&is, &page[i]);
				differs = diff_fields(s, &is, &fb) > 0;
			} else {
				k = D_EXTRA;
			}
			buf_free(&fb);
			if (differs) {
				if ((err = diff_add(&d, &nd, &capd, k, &page[i].key)) != 0)
					break;
			}
			es_fsentry_free(&page[i]);
		}
		for (; i < got; i++)
			es_fsentry_free(&page[i]);
	}
	if (err == -ENOENT) {
		fprintf(stderr, "treelockctl: no fs index '%s' (treelockctl index build makes it)\n",
			es_fsctl_index(m->fs));
		rc = CTL_EXIT_STORE;
		goto out;
	}
	for (i = 0; !err && i < t.cap; i++) {
		if (!t.v[i].key || t.v[i].matched)
			continue;
		if ((err = diff_add(&d, &nd, &capd, D_MISSING, &t.v[i].key)) != 0)
			break;
	}
	/* each difference once more: it may be a change a mount was
	 * indexing while we looked */
	for (i = 0; !err && i < nd; i++) {
		struct buf fields = BUF_INIT;
		struct stat st;
		int64_t at;
		bool in_tree;
		int k = recheck(m, d[i].key, &fields, &st, &at, &in_tree, &err);

		if (k < 0) {
			buf_free(&fields);
			continue;
		}
		reported++;
		if (json) {
			cJSON *o = cJSON_CreateObject();
			char *shown = ctl_shown_path(m, d[i].key);

			cJSON_AddStringToObject(o, "path", shown ? shown : "");
			cJSON_AddStringToObject(o, "difference", diff_names[k]);
			if (k == D_DIFFERS)
				cJSON_AddStringToObject(o, "fields", fields.data ? fields.data : "");
			cJSON_AddItemToArray(arr, o);
			free(shown);
		} else {
			printf("%-8s ", diff_names[k]);
			ctl_print_path(m, d[i].key, stdout);
			if (k == D_DIFFERS)
				printf("  %s", fields.data ? fields.data : "");
			putchar('\n');
		}
		buf_free(&fields);
		if (repair) {
			/* the state at the re-check's stat */
			if (in_tree)
				es_fsdoc_put(&bulk, es_fsctl_index(m->fs), d[i].key, &st, at, CTL_BY);
			else
				es_fsdoc_del(&bulk, es_fsctl_index(m->fs), d[i].key, at);
		}
	}
	if (json) {
		char *text = cJSON_Print(arr);

		if (text)
			printf("%s\n", text);
		free(text);
	}
	if (!err && repair && bulk.len)
		err = bulk.err ? bulk.err : es_fsctl_bulk(m->fs, bulk.data, bulk.len, &counts);
	if (err) {
		es_fsctl_last_error(m->fs, why, sizeof(why));
		fprintf(stderr, "treelockctl: cannot verify the fs index: %s\n",
			*why ? why : strerror(-err));
		rc = CTL_EXIT_STORE;
		goto out;
	}
	fprintf(stderr, "%zu entries in the tree, %zu documents, %zu differences%s\n", t.n, ndocs,
		reported, unreadable ? " (some directories could not be read)" : "");
	if (repair && reported) {
		fprintf(stderr, "repaired %zu (%zu newer already there), %zu failed\n", counts.ok,
			counts.stale, counts.failed);
		rc = counts.failed ? CTL_EXIT_STORE : 0;
		if (!counts.failed)
			es_fsctl_refresh(m->fs);
	} else {
		rc = reported ? CTL_EXIT_DIFF : 0;
	}
out:
	if (err == -ENOMEM)
		fprintf(stderr, "treelockctl: out of memory\n");
	for (i = 0; i < nd; i++)
		free(d[i].key);
	free(d);
	free(after);
	free(page);
	buf_free(&bulk);
	cJSON_Delete(q);
	cJSON_Delete(arr);
	table_free(&t);
	return err && !rc ? CTL_EXIT_STORE : rc;
}

/* ---- repair from the store ---- */

/* States the entry of the first LEN bytes of KEY (alone) as the tree
 * holds it now: its document written, or deleted when it is gone. */
static int restate_one(struct ctl_mount *m, const char *key, size_t len,
		       struct es_fsctl_counts *c)
{
	struct buf b = BUF_INIT;
	char *k = strndup(key, len);
	struct stat st;
	int64_t at = ctl_now_ns();
	int err;

	if (!k)
		return -ENOMEM;
	if (fstatat(m->treefd, ctl_rel(k), &st, AT_SYMLINK_NOFOLLOW) == 0)
		es_fsdoc_put(&b, es_fsctl_index(m->fs), k, &st, at, CTL_BY);
	else
		es_fsdoc_del(&b, es_fsctl_index(m->fs), k, at);
	err = b.err ? b.err : es_fsctl_bulk(m->fs, b.data, b.len, c);
	buf_free(&b);
	free(k);
	return err;
}

/* Reconciles KEY_TEXT (a key as the store holds it) and below, and its
 * parent's own entry. */
static int reconcile(struct ctl_mount *m, const char *key_text, bool quiet, size_t *entries)
{
	struct build b = {0};
	struct es_fsctl_counts dc = {0}, pc = {0};
	size_t deleted = 0;
	char *key = NULL;
	int err;

	if (path_key_from_text(key_text, &key) != 0 || key[0] != '/') {
		free(key);
		return 0; /* "global", or no path */
	}
	err = crawl(m, key, &b, &deleted, &dc, NULL);
	/* the operation changed its parent too (mtime, ctime, size) */
	if (!err && strcmp(key, "/") != 0)
		err = restate_one(m, key, path_parent_len(key, strlen(key)), &pc);
	if (!quiet) {
		printf("reconciled ");
		ctl_print_path(m, key, stdout);
		printf(": %zu entries indexed, %zu stale documents deleted\n", b.entries, dc.ok);
	}
	*entries += b.entries;
	free(key);
	if (!err && (b.s.counts.failed || dc.failed || pc.failed))
		err = -ENOLCK;
	return err;
}

int ctl_index_repair(struct ctl_mount *m, bool quiet, bool no_wait)
{
	struct lockstore *st = NULL;
	struct es_intent_info *it = NULL;
	size_t n = 0, i, done = 0, entries = 0;
	int err, rc = 0;

	err = es_fsctl_ensure(m->fs, NULL);
	if (!err)
		err = es_store_open_ctl(&m->cfg, &st);
	if (err) {
		fprintf(stderr, "treelockctl: cannot open the store: %s\n", strerror(-err));
		return CTL_EXIT_STORE;
	}
	err = es_store_intents(st, no_wait ? 0 : OBSERVE_MAX_MS, &it, &n);
	if (err) {
		fprintf(stderr, "treelockctl: cannot list intents: %s\n", strerror(-err));
		lockstore_close(st);
		return CTL_EXIT_STORE;
	}
	for (i = 0; i < n; i++) {
		if (it[i].owner_state != ES_OWNER_DEAD)
			continue;
		done++;
		err = reconcile(m, it[i].from, quiet, &entries);
		if (!err && it[i].to)
			err = reconcile(m, it[i].to, quiet, &entries);
		if (err) {
			fprintf(stderr, "treelockctl: cannot reconcile the intent of '%s': %s\n",
				it[i].holder, strerror(-err));
			rc = CTL_EXIT_STORE;
		}
	}
	printf("%zu intents of dead owners reconciled (%zu entries indexed)\n", done, entries);
	es_store_free_intents(it, n);
	lockstore_close(st);
	return rc;
}
