/* lockstore_es.c - tree locks in an Elasticsearch / OpenSearch index
 *
 * One index (es_index, default treelockfs-locks) holds three kinds of
 * documents. Ids never collide: lock keys start with '/', or are "global"
 * or "sha256:<hex>" (path_lock_id(), for keys over 512 bytes); the others
 * start with "owner:" or "intent:".
 *
 *   lock  /a/b   {"lock_type":"exclusive", "path":"/a/b", "owner":O,
 *                 "holder":H, "process_id":H, "holders":{H:1}, "since":ms,
 *                 "pid":n, ["waiters":{...}]}
 *                {"lock_type":"shared", "lock_count":N, "path":"/a",
 *                 "holders":{H1:1, H2:1}, "since":ms, ["waiters":{...}]}
 *                waiters: {H: {"owner":O, "mode":"exclusive"|"shared",
 *                              "age":start_ms, "tmo":ms}}
 *   owner        {"type":"owner", "owner":O, "name":"host", "pid":n,
 *                 "started":ms, "renewed":ms, "ttl_ms":n}
 *   intent       {"type":"intent", "owner":O, "holder":H, "from":..,
 *                 "to":.., "start":ms, "pid":n, "keys":[...]}
 *
 * O, the owner id, is "<owner name>:<pid>:<nonce>", one per mount (per
 * lease). H, a holder, is "<O>#<ticket>", one per rename. "holders" counts
 * shares per holder, so a dead owner's shares are removed without touching
 * the others' and a retried request is never counted twice (the scripts
 * are idempotent: a holder already present is a noop). lock_count is the
 * guide's field: the number of shares, including those of guide-style
 * clients that do not name themselves.
 *
 * Guide interoperability. A lock taken with the guide's requests (create
 * {"lock_type":"exclusive"}, or update + upsert {"lock_type":"shared",
 * "lock_count":1} + "if exclusive throw; lock_count++") is a document of the
 * same shape without holders; our scripts refuse on it like on ours, and
 * the guide's requests are refused by our documents: create finds the id
 * taken, its script sees lock_type exclusive. Its release script
 * ("--lock_count == 0 -> delete") works on our shared documents. A
 * document with only waiter marks is {"lock_type":"shared","lock_count":0}.
 *
 * Requests, each a fixed Painless source with parameters (never built
 * from strings):
 *
 *   acquire (ONE _bulk)  intent index, then per key in plan order:
 *                        X first attempt: create (the guide's exclusive)
 *                        X after a refusal: update SCRIPT_ACQ_X + upsert
 *                        S: update SCRIPT_ACQ_S + upsert (shared, count 1)
 *   release (ONE _bulk)  per key, longest first: update SCRIPT_RELEASE
 *                        (drops H; deletes the document when no share and
 *                        no waiter is left), then delete the intent
 *   refusal              _mget the refused documents (is it ours after
 *                        all? who blocks?), _mget the blockers' owner
 *                        documents, then ONE _bulk: roll back (release),
 *                        mark waiters (SCRIPT_MARK), evict dead owners
 *                        (SCRIPT_EVICT)
 *
 * So an uncontended rename costs exactly two requests whatever its depth.
 * A script refusal is HTTP 400 wrapping script_exception, not 409.
 *
 * Per key and holder, the state chart:
 *
 *        free --acquire ok--> held --release--> free
 *          |                   ^
 *          +--refused--> waiting (mark) --acquire ok (mark dropped)
 *                          |
 *                          +--gave up (abandon: mark dropped) --> free
 *   held by a dead owner --evict (observer, at conflict)--> free
 *
 * Fairness: a request is refused on a key held in an incompatible mode, or
 * marked by an older live waiter (smaller start_ms, then holder id) in an
 * incompatible mode. A mark is stale once older than its own timeout
 * ("tmo": the waiter's lock_timeout plus one lease) measured against the
 * requester's start time, or when its owner is known dead. A directory
 * rename refused by shared holders below thus waits only for the renames
 * that held the directory when it was marked.
 *
 * Leases (dead holders). Every lease_ttl/3 a heartbeat thread re-indexes
 * the owner document with if_seq_no/if_primary_term. An observer (any
 * mount refused on a key, or treelockctl) remembers the first time it saw
 * each owner's _seq_no on its own monotonic clock; an owner is dead when
 * its document is gone or its _seq_no has not moved for 2 x lease_ttl.
 * The holder itself stops acting (lease_fresh() false, the rename fails
 * with ENOLCK) once its last successful renewal was SENT more than
 * 1 x lease_ttl ago. The renewal an observer saw last was sent before the
 * observer saw it, so the holder fences itself at least lease_ttl before
 * anybody can judge it dead: a live mount, even one whose store is slow, is
 * never robbed, provided a rename finishes within lease_ttl after its
 * lease check. No clock is compared between hosts. Take-over happens when
 * a request is refused: the blockers' owners are judged then, dead ones are
 * evicted from the blocking documents (SCRIPT_EVICT checks the owner id in
 * the script, so a live holder's share is never removed) and every lock
 * named by the dead owner's intents, then its lease document goes. Its
 * intents stay, for treelockctl intents. A mount that finds its own lease
 * document gone (a reap), or that renews it only after it lapsed (others
 * may be evicting it at that very moment), takes a new owner id and counts
 * the renames it holds under the old one as fenced.
 *
 * Bound: a rename blocked by a dead holder proceeds at most 2 x lease_ttl
 * + lease_ttl/3 + one backoff step (200 ms) after the holder died.
 *
 * Errors: conflict -> -EAGAIN; 429, 5xx, timeouts and unreachable nodes
 * are retried here (only the items that failed, three times, 50..200 ms)
 * and then -ENOLCK (lockmgr retries on its deadline); after an ambiguous
 * failure the documents are re-read (_mget) and compared with our holder
 * id before anything is decided; 401/403 and a 400 to our own request are
 * -EACCES, logged with the status (and the body for a 400). A release that
 * cannot be sent is kept and resent by the heartbeat thread.
 *
 * Lock order: store->mutex is a leaf; it is never held across a request.
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "httpc.h"
#include "lockplan.h"
#include "lockstore.h"
#include "lockstore_es.h"
#include "lockstore_i.h"
#include "log.h"
#include "path.h"
#include "tlclock.h"

#define OWNER_PREFIX "owner:"
#define INTENT_PREFIX "intent:"
#define META_NAME "treelockfs"
#define FORMAT_VERSION 1
#define ITEM_RETRIES 3
#define RETRY_BASE_MS 50
#define MAX_OBSERVED 256

/* ---- scripts (fixed sources; data only in params) ------------------------ */

/* Shared acquire. params: h holder, o owner, age, tmo, dead [owners], path. */
static const char SCRIPT_ACQ_S[] =
	"def s = ctx._source;"
	" if (s.lock_type == 'exclusive') { throw new IllegalStateException('exclusive'); }"
	" if (s.holders == null) { s.holders = new HashMap(); }"
	" if (s.holders.containsKey(params.h)) { ctx.op = 'noop'; } else {"
	" if (s.waiters != null) {"
	" for (def k : s.waiters.keySet()) { def w = s.waiters.get(k);"
	" if (k != params.h && w.mode == 'exclusive' && !params.dead.contains(w.owner)"
	" && params.age <= w.age + w.tmo"
	" && (w.age < params.age || (w.age == params.age && k.compareTo(params.h) < 0))) {"
	" throw new IllegalStateException('waiter'); } }"
	" s.waiters.remove(params.h); }"
	" s.holders.put(params.h, 1);"
	" s.lock_count = (s.lock_count == null ? 0 : s.lock_count) + 1;"
	" if (s.path == null) { s.path = params.path; } }";

/* Exclusive acquire after a refusal (the document may hold waiter marks).
 * params: as SCRIPT_ACQ_S plus since, pid. */
static const char SCRIPT_ACQ_X[] =
	"def s = ctx._source;"
	" if (s.lock_type == 'exclusive') {"
	" if (s.holder != params.h) { throw new IllegalStateException('exclusive'); }"
	" ctx.op = 'noop'; } else {"
	" if (s.lock_count != null && s.lock_count > 0) { throw new IllegalStateException('shared'); }"
	" if (s.waiters != null) {"
	" for (def k : s.waiters.keySet()) { def w = s.waiters.get(k);"
	" if (k != params.h && !params.dead.contains(w.owner) && params.age <= w.age + w.tmo"
	" && (w.age < params.age || (w.age == params.age && k.compareTo(params.h) < 0))) {"
	" throw new IllegalStateException('waiter'); } }"
	" s.waiters.remove(params.h); }"
	" s.lock_type = 'exclusive'; s.remove('lock_count'); s.path = params.path;"
	" s.owner = params.o; s.holder = params.h; s.process_id = params.h;"
	" s.holders = new HashMap(); s.holders.put(params.h, 1);"
	" s.since = params.since; s.pid = params.pid; }";

/* Release. params: h. */
static const char SCRIPT_RELEASE[] =
	"def s = ctx._source;"
	" if (s.holders == null || !s.holders.containsKey(params.h)) { ctx.op = 'noop'; } else {"
	" s.holders.remove(params.h);"
	" if (s.lock_type == 'exclusive') { s.lock_type = 'shared'; s.lock_count = 0;"
	" s.remove('owner'); s.remove('holder'); s.remove('process_id'); s.remove('since');"
	" s.remove('pid'); } else { s.lock_count = s.lock_count - 1; }"
	" if (s.lock_count <= 0 && (s.waiters == null || s.waiters.isEmpty())) {"
	" ctx.op = 'delete'; } }";

/* Waiter mark. params: h, o, mode, age, tmo. */
static const char SCRIPT_MARK[] =
	"def s = ctx._source;"
	" if (s.waiters == null) { s.waiters = new HashMap(); }"
	" if (s.waiters.containsKey(params.h)) { ctx.op = 'noop'; } else {"
	" Map w = new HashMap(); w.put('owner', params.o); w.put('mode', params.mode);"
	" w.put('age', params.age); w.put('tmo', params.tmo);"
	" s.waiters.put(params.h, w); }";

/* Drop a waiter mark (abandon). params: h. */
static const char SCRIPT_UNMARK[] =
	"def s = ctx._source;"
	" if (s.waiters == null || !s.waiters.containsKey(params.h)) { ctx.op = 'noop'; } else {"
	" s.waiters.remove(params.h);"
	" if (s.lock_type != 'exclusive' && (s.lock_count == null || s.lock_count <= 0)"
	" && s.waiters.isEmpty()) { ctx.op = 'delete'; } }";

/* Evict a dead owner's shares and marks. params: o owner, p "<o>#". */
static const char SCRIPT_EVICT[] =
	"def s = ctx._source; boolean changed = false;"
	" if (s.holders != null) { List ks = new ArrayList(s.holders.keySet());"
	" for (def k : ks) { if (k.startsWith(params.p)) { s.holders.remove(k); changed = true;"
	" if (s.lock_type != 'exclusive') { s.lock_count = s.lock_count - 1; } } } }"
	" if (s.lock_type == 'exclusive' && s.owner == params.o) { s.lock_type = 'shared';"
	" s.lock_count = 0; s.remove('owner'); s.remove('holder'); s.remove('process_id');"
	" s.remove('since'); s.remove('pid'); changed = true; }"
	" if (s.waiters != null) { List ws = new ArrayList(s.waiters.keySet());"
	" for (def k : ws) { if (k.startsWith(params.p)) { s.waiters.remove(k); changed = true; } } }"
	" if (!changed) { ctx.op = 'noop'; } else if (s.lock_type != 'exclusive'"
	" && (s.lock_count == null || s.lock_count <= 0)"
	" && (s.waiters == null || s.waiters.isEmpty())) { ctx.op = 'delete'; }";

/* ---- the store ----------------------------------------------------------- */

struct observed {
	char id[160];
	int64_t seq_no;        /* -1: document gone */
	int64_t first_ms;      /* monotonic, when seq_no was first seen */
	int64_t ttl_ms;        /* the owner's lease_ttl, from its document */
	bool dead;
	bool reaped;
};

struct pending_release {
	char *body;            /* ndjson bulk of idempotent release items */
	size_t len;
	int64_t not_before;    /* monotonic ms */
	int confirms;          /* resends left after the first success */
	struct pending_release *next;
};

struct es_store {
	struct lockstore base;
	struct httpc *http;
	char *index;           /* as given */
	char *index_esc;       /* percent-encoded for paths */
	char name[64];         /* owner= name */
	int64_t ttl_ms;
	int64_t tmo_ms;        /* lock_timeout + ttl: how long a waiter mark lives */
	unsigned int timeout_ms;
	enum tl_strategy strategy;
	char version[64];
	bool opensearch;

	pthread_mutex_t mutex;   /* leaf: never held across a request */
	/* protected by mutex: */
	char owner[160];         /* this mount's owner id */
	char nonce[24];
	int64_t owner_seq, owner_term;
	bool owner_doc;          /* our lease document exists */
	int64_t renewed_ms;      /* monotonic SEND time of the last good renewal */
	unsigned int epoch;
	unsigned int held_cur, held_old; /* holders acquired in this / older epochs */
	struct observed obs[MAX_OBSERVED];
	size_t nobs;
	struct pending_release *pending;
	bool started, stop;
	pthread_cond_t cond;
	pthread_t hb;
	bool warned_stale;
};

/* Per-holder scratch (tl_holder.priv). */
struct es_hold {
	char key[200];           /* "<owner id>#<ticket>" of the last attempt */
	unsigned int epoch;
	bool held;
};

struct sb {
	char *s;
	size_t len, cap;
	bool oom;
};

static const struct lockstore_ops es_ops;
static int reap_owner(struct es_store *es, const char *owner, bool drop_intents, size_t *nlocks);

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	if (ms > 0)
		nanosleep(&ts, NULL);
}

static void sb_add(struct sb *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		char *d;

		while (cap < b->len + n + 1)
			cap *= 2;
		d = realloc(b->s, cap);
		if (!d) {
			b->oom = true;
			return;
		}
		b->s = d;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

static void sb_adds(struct sb *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

/* Appends J as one ndjson line and frees J (accepts NULL: out of memory). */
static void sb_add_line(struct sb *b, cJSON *j)
{
	char *t;

	if (!j) {
		b->oom = true;
		return;
	}
	t = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (!t) {
		b->oom = true;
		return;
	}
	sb_adds(b, t);
	sb_add(b, "\n", 1);
	free(t);
}

static void sb_free(struct sb *b)
{
	free(b->s);
	memset(b, 0, sizeof(*b));
}

static struct es_store *es_of(struct lockstore *st)
{
	return (struct es_store *)st;
}

/* "/<index>/<api>[/<escaped id>][?query]" into BUF. */
static int es_path(struct es_store *es, char *buf, size_t size, const char *api, const char *id,
		   const char *query)
{
	snprintf(buf, size, "/%s/%s", es->index_esc, api);
	if (id) {
		if (strlen(buf) + 2 > size)
			return -ENAMETOOLONG;
		strcat(buf, "/");
		if (httpc_escape_cat(buf, size, id))
			return -ENAMETOOLONG;
	}
	if (query) {
		if (strlen(buf) + strlen(query) + 2 > size)
			return -ENAMETOOLONG;
		strcat(buf, "?");
		strcat(buf, query);
	}
	return 0;
}

/* ---- JSON helpers ---------------------------------------------------------- */

static const char *jstr(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int64_t jint(const cJSON *o, const char *name, int64_t dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

/* Prints J compactly and frees it (accepts NULL). Returns a new string or
 * NULL. */
static char *jprint_free(cJSON *j)
{
	char *t = j ? cJSON_PrintUnformatted(j) : NULL;

	cJSON_Delete(j);
	return t;
}

static cJSON *jparse(const struct httpc_response *r)
{
	return cJSON_ParseWithLengthOpts(r->body, r->len, NULL, false);
}

/* True when the error object ERR (or one it was caused by) is a
 * script_exception: our own script refused. */
static bool is_script_refusal(const cJSON *err)
{
	int depth;

	for (depth = 0; err && depth < 8; depth++) {
		const char *type = jstr(err, "type");

		if (type && strcmp(type, "script_exception") == 0)
			return true;
		err = cJSON_GetObjectItemCaseSensitive(err, "caused_by");
	}
	return false;
}

/* The error type of a response body, for logs ("" if none). */
static void error_type(const cJSON *root, char *buf, size_t size)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
	const char *t = cJSON_IsString(e) ? e->valuestring : jstr(e, "type");

	snprintf(buf, size, "%s", t ? t : "");
}

/* ---- requests -------------------------------------------------------------- */

enum call_class {
	CALL_OK = 0,     /* 2xx (or a status the caller accepts) */
	CALL_RETRY,      /* 429, 5xx, timeout, unreachable: retry, maybe ambiguous */
	CALL_FATAL,      /* 401/403, 400, other 4xx: logged */
};

/* Logs a refusal of ours by the store, once per call site and kind. */
static void log_refusal(struct es_store *es, const char *method, const char *path,
			const struct httpc_response *r)
{
	char type[96] = "";
	cJSON *root = jparse(r);

	error_type(root, type, sizeof(type));
	cJSON_Delete(root);
	if (r->status == 401 || r->status == 403)
		tl_log(LOG_ERR,
		       "lock store at '%s' refuses our credentials (HTTP %ld%s%s): check es_user, "
		       "the password or es_api_key_file",
		       httpc_node_name(es->http, r->node), r->status, *type ? " " : "", type);
	else
		tl_log(LOG_ERR, "lock store rejected our request '%s %s' (HTTP %ld): %.1000s", method,
		       path, r->status, r->body);
}

/* Sends one request. Returns the class; *R holds the response on CALL_OK
 * and on statuses (caller frees), empty on transport failures. */
static enum call_class es_call(struct es_store *es, const char *method, const char *path,
			       const char *ctype, const char *body, size_t len,
			       struct httpc_response *r, bool quiet)
{
	char errbuf[256];
	int err;

	err = httpc_request(es->http, method, path, ctype, body, len, 0, r, errbuf, sizeof(errbuf));
	if (err) {
		if (!quiet)
			tl_log(LOG_WARNING, "lock store request '%s %s' failed: %s", method, path,
			       *errbuf ? errbuf : strerror(-err));
		return err == -ENOMEM ? CALL_FATAL : CALL_RETRY;
	}
	if (r->status >= 200 && r->status < 300)
		return CALL_OK;
	if (r->status == 429 || r->status >= 500) {
		if (!quiet)
			tl_log(LOG_WARNING, "lock store request '%s %s' failed: HTTP %ld", method,
			       path, r->status);
		return CALL_RETRY;
	}
	return CALL_FATAL;
}

/* ---- bulk items ------------------------------------------------------------ */

static cJSON *action(const char *op, const char *id)
{
	cJSON *a = cJSON_CreateObject(), *m = cJSON_AddObjectToObject(a, op);

	if (!m || !cJSON_AddStringToObject(m, "_id", id)) {
		cJSON_Delete(a);
		return NULL;
	}
	return a;
}

static cJSON *script_body(const char *source, cJSON *params, cJSON *upsert)
{
	cJSON *b = cJSON_CreateObject(), *s = cJSON_AddObjectToObject(b, "script");

	cJSON_AddStringToObject(s, "source", source);
	cJSON_AddStringToObject(s, "lang", "painless");
	if (params)
		cJSON_AddItemToObject(s, "params", params);
	if (upsert)
		cJSON_AddItemToObject(b, "upsert", upsert);
	return b;
}

/* The list of owners we know dead, as script params. Takes the mutex. */
static cJSON *dead_list(struct es_store *es)
{
	cJSON *a = cJSON_CreateArray();
	size_t i;

	pthread_mutex_lock(&es->mutex);
	for (i = 0; i < es->nobs; i++)
		if (es->obs[i].dead)
			cJSON_AddItemToArray(a, cJSON_CreateString(es->obs[i].id));
	pthread_mutex_unlock(&es->mutex);
	return a;
}

struct attempt {
	const struct tl_plan *plan;
	const struct tl_holder *h;
	const char *hkey;
	char owner[160];
	char **ids;            /* lock document ids, plan order */
	bool marked;           /* a refusal happened before: scripted exclusive */
};

static cJSON *exclusive_source(const struct attempt *a, size_t i)
{
	cJSON *s = cJSON_CreateObject(), *hs;

	cJSON_AddStringToObject(s, "lock_type", "exclusive");
	cJSON_AddStringToObject(s, "path", a->plan->items[i].key);
	cJSON_AddStringToObject(s, "owner", a->owner);
	cJSON_AddStringToObject(s, "holder", a->hkey);
	cJSON_AddStringToObject(s, "process_id", a->hkey);
	hs = cJSON_AddObjectToObject(s, "holders");
	cJSON_AddNumberToObject(hs, a->hkey, 1);
	cJSON_AddNumberToObject(s, "since", (double)tl_wall_ms());
	cJSON_AddNumberToObject(s, "pid", a->h->pid);
	return s;
}

static cJSON *acquire_params(struct es_store *es, const struct attempt *a, size_t i)
{
	cJSON *p = cJSON_CreateObject();

	cJSON_AddStringToObject(p, "h", a->hkey);
	cJSON_AddStringToObject(p, "o", a->owner);
	cJSON_AddNumberToObject(p, "age", (double)a->h->start_ms);
	cJSON_AddNumberToObject(p, "tmo", (double)es->tmo_ms);
	cJSON_AddItemToObject(p, "dead", dead_list(es));
	cJSON_AddStringToObject(p, "path", a->plan->items[i].key);
	if (a->plan->items[i].mode == TL_EXCLUSIVE) {
		cJSON_AddNumberToObject(p, "since", (double)tl_wall_ms());
		cJSON_AddNumberToObject(p, "pid", a->h->pid);
	}
	return p;
}

/* Appends the acquire item of plan key I. */
static void add_acquire(struct es_store *es, struct sb *b, const struct attempt *a, size_t i)
{
	if (a->plan->items[i].mode == TL_EXCLUSIVE) {
		if (!a->marked) {
			sb_add_line(b, action("create", a->ids[i]));
			sb_add_line(b, exclusive_source(a, i));
			return;
		}
		sb_add_line(b, action("update", a->ids[i]));
		sb_add_line(b, script_body(SCRIPT_ACQ_X, acquire_params(es, a, i),
					   exclusive_source(a, i)));
		return;
	} else {
		cJSON *up = cJSON_CreateObject(), *hs;
		cJSON *act = action("update", a->ids[i]);

		cJSON_AddStringToObject(up, "lock_type", "shared");
		cJSON_AddNumberToObject(up, "lock_count", 1);
		cJSON_AddStringToObject(up, "path", a->plan->items[i].key);
		hs = cJSON_AddObjectToObject(up, "holders");
		cJSON_AddNumberToObject(hs, a->hkey, 1);
		cJSON_AddNumberToObject(up, "since", (double)tl_wall_ms());
		/* concurrent shared updates of one document retry inside ES */
		cJSON_AddNumberToObject(cJSON_GetObjectItem(act, "update"), "retry_on_conflict", 5);
		sb_add_line(b, act);
		sb_add_line(b, script_body(SCRIPT_ACQ_S, acquire_params(es, a, i), up));
	}
}

static void add_script_item(struct sb *b, const char *id, const char *source, cJSON *params)
{
	cJSON *act = action("update", id);

	cJSON_AddNumberToObject(cJSON_GetObjectItem(act, "update"), "retry_on_conflict", 5);
	sb_add_line(b, act);
	sb_add_line(b, script_body(source, params, NULL));
}

static cJSON *holder_params(const char *hkey)
{
	cJSON *p = cJSON_CreateObject();

	cJSON_AddStringToObject(p, "h", hkey);
	return p;
}

static void add_release(struct sb *b, const char *id, const char *hkey)
{
	add_script_item(b, id, SCRIPT_RELEASE, holder_params(hkey));
}

static void add_mark(struct es_store *es, struct sb *b, const struct attempt *a, size_t i)
{
	cJSON *p = cJSON_CreateObject(), *up = cJSON_CreateObject(), *ws, *w;
	cJSON *act = action("update", a->ids[i]);
	const char *mode = a->plan->items[i].mode == TL_EXCLUSIVE ? "exclusive" : "shared";

	cJSON_AddStringToObject(p, "h", a->hkey);
	cJSON_AddStringToObject(p, "o", a->owner);
	cJSON_AddStringToObject(p, "mode", mode);
	cJSON_AddNumberToObject(p, "age", (double)a->h->start_ms);
	cJSON_AddNumberToObject(p, "tmo", (double)es->tmo_ms);
	cJSON_AddStringToObject(up, "lock_type", "shared");
	cJSON_AddNumberToObject(up, "lock_count", 0);
	cJSON_AddStringToObject(up, "path", a->plan->items[i].key);
	ws = cJSON_AddObjectToObject(up, "waiters");
	w = cJSON_AddObjectToObject(ws, a->hkey);
	cJSON_AddStringToObject(w, "owner", a->owner);
	cJSON_AddStringToObject(w, "mode", mode);
	cJSON_AddNumberToObject(w, "age", (double)a->h->start_ms);
	cJSON_AddNumberToObject(w, "tmo", (double)es->tmo_ms);
	cJSON_AddNumberToObject(cJSON_GetObjectItem(act, "update"), "retry_on_conflict", 5);
	sb_add_line(b, act);
	sb_add_line(b, script_body(SCRIPT_MARK, p, up));
}

static void add_evict(struct sb *b, const char *id, const char *owner)
{
	cJSON *p = cJSON_CreateObject();
	char prefix[200];

	snprintf(prefix, sizeof(prefix), "%s#", owner);
	cJSON_AddStringToObject(p, "o", owner);
	cJSON_AddStringToObject(p, "p", prefix);
	add_script_item(b, id, SCRIPT_EVICT, p);
}

static void add_intent(struct sb *b, const struct attempt *a, const char *name)
{
	char id[256];
	cJSON *s = cJSON_CreateObject(), *keys;
	size_t i;

	snprintf(id, sizeof(id), INTENT_PREFIX "%s", a->hkey);
	cJSON_AddStringToObject(s, "type", "intent");
	cJSON_AddStringToObject(s, "owner", a->owner);
	cJSON_AddStringToObject(s, "name", name);
	cJSON_AddStringToObject(s, "holder", a->hkey);
	cJSON_AddStringToObject(s, "from", a->plan->from ? a->plan->from : "");
	if (a->plan->to)
		cJSON_AddStringToObject(s, "to", a->plan->to);
	cJSON_AddNumberToObject(s, "start", (double)a->h->start_ms);
	cJSON_AddNumberToObject(s, "pid", a->h->pid);
	keys = cJSON_AddArrayToObject(s, "keys");
	for (i = 0; i < a->plan->n; i++)
		cJSON_AddItemToArray(keys, cJSON_CreateString(a->plan->items[i].key));
	sb_add_line(b, action("index", id));
	sb_add_line(b, s);
}

static void add_intent_delete(struct sb *b, const char *hkey)
{
	char id[256];

	snprintf(id, sizeof(id), INTENT_PREFIX "%s", hkey);
	sb_add_line(b, action("delete", id));
}

/* ---- bulk execution -------------------------------------------------------- */

enum item_state {
	ITEM_OK = 0,
	ITEM_REFUSED,     /* conflict: 409 on create, script refusal */
	ITEM_RETRY,       /* 429, 5xx, update version conflict: resend */
	ITEM_FATAL,       /* our bug: logged */
};

/* Sends BODY to _bulk. On 0, *ROOT is the parsed response (caller frees).
 * Returns 0, -EAGAIN (retryable failure of the whole request: ambiguous),
 * -EACCES (refused, logged), -ENOMEM. */
static int bulk_send(struct es_store *es, const struct sb *b, cJSON **root)
{
	struct httpc_response r;
	char path[512];
	enum call_class cc;

	*root = NULL;
	if (b->oom)
		return -ENOMEM;
	es_path(es, path, sizeof(path), "_bulk", NULL, NULL);
	cc = es_call(es, "POST", path, HTTPC_NDJSON, b->s, b->len, &r, false);
	if (cc == CALL_RETRY) {
		httpc_response_free(&r);
		return -EAGAIN;
	}
	if (cc == CALL_FATAL) {
		if (r.body)
			log_refusal(es, "POST", path, &r);
		httpc_response_free(&r);
		return -EACCES;
	}
	*root = jparse(&r);
	if (!*root || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(*root, "items"))) {
		tl_log(LOG_ERR, "lock store sent a malformed bulk response: %.300s", r.body);
		cJSON_Delete(*root);
		*root = NULL;
		httpc_response_free(&r);
		return -EAGAIN;
	}
	httpc_response_free(&r);
	return 0;
}

/* Classifies bulk response item IT. */
static enum item_state item_state(const cJSON *it, long *status_out)
{
	const cJSON *body = it ? it->child : NULL; /* {"create": {...}} */
	const char *op = body ? body->string : "";
	long status = (long)jint(body, "status", 0);
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(body, "error");

	if (status_out)
		*status_out = status;
	if (status >= 200 && status < 300)
		return ITEM_OK;
	if (status == 404 && (strcmp(op, "delete") == 0 || strcmp(op, "update") == 0))
		return ITEM_OK; /* already gone: release, unmark and evict are done */
	if (status == 409)
		return strcmp(op, "create") == 0 ? ITEM_REFUSED : ITEM_RETRY;
	if (status == 400 && is_script_refusal(err))
		return ITEM_REFUSED;
	if (status == 429 || status >= 500 || status == 0)
		return ITEM_RETRY;
	return ITEM_FATAL;
}

/* ---- observation of owners -------------------------------------------------- */

static struct observed *obs_find(struct es_store *es, const char *owner)
{
	size_t i;

	for (i = 0; i < es->nobs; i++)
		if (strcmp(es->obs[i].id, owner) == 0)
			return &es->obs[i];
	if (es->nobs == MAX_OBSERVED) {
		/* forget the oldest live entry; dead ones are kept for scripts */
		for (i = 0; i < es->nobs && es->obs[i].dead; i++)
			;
		if (i == es->nobs)
			i = 0;
		memmove(&es->obs[i], &es->obs[i + 1], (es->nobs - i - 1) * sizeof(es->obs[0]));
		es->nobs--;
	}
	memset(&es->obs[es->nobs], 0, sizeof(es->obs[0]));
	snprintf(es->obs[es->nobs].id, sizeof(es->obs[0].id), "%s", owner);
	es->obs[es->nobs].seq_no = INT64_MIN;
	return &es->obs[es->nobs++];
}

/* Records that OWNER's lease document has SEQ (-1: gone) now. Returns
 * whether the owner is dead. Takes the mutex. */
static bool obs_record(struct es_store *es, const char *owner, int64_t seq, int64_t ttl_ms)
{
	struct observed *o;
	int64_t now = tl_mono_ms(), limit;
	bool dead;

	pthread_mutex_lock(&es->mutex);
	o = obs_find(es, owner);
	if (ttl_ms > 0)
		o->ttl_ms = ttl_ms;
	if (seq < 0) {
		o->dead = true;
	} else if (seq != o->seq_no) {
		o->seq_no = seq;
		o->first_ms = now;
		o->dead = false;
		o->reaped = false;
	} else {
		/* the holder fences itself after ITS lease_ttl */
		limit = 2 * (o->ttl_ms > 0 ? o->ttl_ms : es->ttl_ms);
		if (now - o->first_ms >= limit)
			o->dead = true;
	}
	dead = o->dead;
	pthread_mutex_unlock(&es->mutex);
	return dead;
}

/* The owner id of holder key H ("<owner>#<ticket>") into BUF. */
static void owner_of_holder(const char *h, char *buf, size_t size)
{
	const char *hash = strrchr(h, '#');
	size_t n = hash ? (size_t)(hash - h) : strlen(h);

	if (n >= size)
		n = size - 1;
	memcpy(buf, h, n);
	buf[n] = '\0';
}

/* "host:pid" of owner id O (drops the nonce) into BUF. */
static void owner_display(const char *o, char *buf, size_t size)
{
	const char *colon = strrchr(o, ':');
	size_t n = colon ? (size_t)(colon - o) : strlen(o);

	if (n >= size)
		n = size - 1;
	memcpy(buf, o, n);
	buf[n] = '\0';
}

/* Reads the lease documents of OWNERS (N ids) with one _mget and records
 * them. DEAD[i] tells which are dead. Returns 0 or -EAGAIN. */
static int judge_owners(struct es_store *es, char **owners, size_t n, bool *dead)
{
	struct httpc_response r;
	cJSON *req, *ids, *root, *docs, *d;
	char path[512], id[200];
	char *body;
	size_t i;
	int err = -EAGAIN;

	if (n == 0)
		return 0;
	req = cJSON_CreateObject();
	ids = cJSON_AddArrayToObject(req, "ids");
	for (i = 0; i < n; i++) {
		snprintf(id, sizeof(id), OWNER_PREFIX "%s", owners[i]);
		cJSON_AddItemToArray(ids, cJSON_CreateString(id));
	}
	body = cJSON_PrintUnformatted(req);
	cJSON_Delete(req);
	if (!body)
		return -ENOMEM;
	es_path(es, path, sizeof(path), "_mget", NULL, NULL);
	if (es_call(es, "POST", path, HTTPC_JSON, body, strlen(body), &r, false) != CALL_OK)
		goto out;
	root = jparse(&r);
	docs = cJSON_GetObjectItemCaseSensitive(root, "docs");
	i = 0;
	cJSON_ArrayForEach(d, docs)
	{
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(d, "_source");
		bool found = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "found"));

		if (i >= n)
			break;
		dead[i] = obs_record(es, owners[i], found ? jint(d, "_seq_no", 0) : -1,
				     jint(src, "ttl_ms", 0));
		i++;
	}
	cJSON_Delete(root);
	err = i == n ? 0 : -EAGAIN;
out:
	httpc_response_free(&r);
	free(body);
	return err;
}

/* ---- acquire ------------------------------------------------------------------ */

static void ids_free(char **ids, size_t n)
{
	size_t i;

	if (!ids)
		return;
	for (i = 0; i < n; i++)
		free(ids[i]);
	free(ids);
}

static int ids_make(const struct tl_plan *plan, char ***out)
{
	char **ids = calloc(plan->n ? plan->n : 1, sizeof(*ids));
	size_t i;
	int err;

	*out = NULL;
	if (!ids)
		return -ENOMEM;
	for (i = 0; i < plan->n; i++) {
		err = path_lock_id(plan->items[i].key, &ids[i]);
		if (err) {
			ids_free(ids, plan->n);
			return err;
		}
	}
	*out = ids;
	return 0;
}

static struct es_hold *hold_get(struct tl_holder *h)
{
	if (!h->priv)
		h->priv = calloc(1, sizeof(struct es_hold));
	return h->priv;
}

/* Keeps a release bulk that could not be sent, for the heartbeat. */
static void pending_add(struct es_store *es, const struct sb *b)
{
	struct pending_release *p;

	if (b->oom || !b->len)
		return;
	p = calloc(1, sizeof(*p));
	if (!p)
		return;
	p->body = malloc(b->len + 1);
	if (!p->body) {
		free(p);
		return;
	}
	memcpy(p->body, b->s, b->len + 1);
	p->len = b->len;
	p->confirms = 1;
	pthread_mutex_lock(&es->mutex);
	p->next = es->pending;
	es->pending = p;
	pthread_mutex_unlock(&es->mutex);
}

/* Sends B (idempotent release-like items) with retries; keeps it for the
 * heartbeat when it cannot be sent. Returns 0 or -ENOLCK. */
static int send_idempotent(struct es_store *es, struct sb *b)
{
	cJSON *root = NULL;
	int err = -EAGAIN, attempt;

	for (attempt = 0; attempt < ITEM_RETRIES; attempt++) {
		cJSON *it;
		bool retry = false;

		if (attempt)
			sleep_ms(RETRY_BASE_MS << attempt);
		err = bulk_send(es, b, &root);
		if (err == -EAGAIN)
			continue;
		if (err)
			break;
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "items"))
		{
			long st;

			if (item_state(it, &st) == ITEM_RETRY)
				retry = true;
			else if (item_state(it, &st) == ITEM_FATAL) {
				char *t = cJSON_PrintUnformatted(it);

				tl_log(LOG_ERR, "lock store refused a release item (HTTP %ld): %.1000s",
				       st, t ? t : "?");
				free(t);
			}
		}
		cJSON_Delete(root);
		root = NULL;
		if (!retry)
			return 0;
		err = -EAGAIN; /* resending the whole body is safe: idempotent */
	}
	if (err == -EAGAIN) {
		pending_add(es, b);
		tl_log(LOG_WARNING, "lock store unavailable: release kept for a later retry");
	}
	return -ENOLCK;
}

/* Reads the documents IDS[idx[0..n)] with one _mget. Returns the parsed
 * response (docs in order) or NULL. */
static cJSON *mget_ids(struct es_store *es, char **ids, const size_t *idx, size_t n)
{
	struct httpc_response r;
	cJSON *req, *arr, *root = NULL;
	char path[512];
	char *body;
	size_t i;

	req = cJSON_CreateObject();
	arr = cJSON_AddArrayToObject(req, "ids");
	for (i = 0; i < n; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(ids[idx[i]]));
	body = cJSON_PrintUnformatted(req);
	cJSON_Delete(req);
	if (!body)
		return NULL;
	es_path(es, path, sizeof(path), "_mget", NULL, NULL);
	if (es_call(es, "POST", path, HTTPC_JSON, body, strlen(body), &r, false) == CALL_OK)
		root = jparse(&r);
	httpc_response_free(&r);
	free(body);
	return root;
}

/* Collects into OWNERS (unique, at most MAXN) the owners blocking us in
 * lock document source SRC, and describes the first one in WHY. */
static void blockers_of(struct es_store *es, const cJSON *src, const struct attempt *a,
			size_t i, char **owners, size_t *n, size_t maxn, struct tl_conflict *why,
			bool *described)
{
	const char *type = jstr(src, "lock_type");
	const cJSON *hs = cJSON_GetObjectItemCaseSensitive(src, "holders");
	const cJSON *ws = cJSON_GetObjectItemCaseSensitive(src, "waiters");
	const cJSON *e;
	char o[160], desc[128] = "";
	size_t k;

	(void)es;
#define ADD_OWNER(x)                                                                               \
	do {                                                                                       \
		for (k = 0; k < *n && strcmp(owners[k], (x)) != 0; k++)                            \
			;                                                                          \
		if (k == *n && *n < maxn && strcmp((x), a->owner) != 0) {                           \
			owners[*n] = strdup(x);                                                    \
			if (owners[*n])                                                            \
				(*n)++;                                                            \
		}                                                                                  \
	} while (0)
	cJSON_ArrayForEach(e, hs)
	{
		owner_of_holder(e->string, o, sizeof(o));
		ADD_OWNER(o);
		if (!*desc)
			owner_display(o, desc, sizeof(desc));
	}
	if (type && strcmp(type, "exclusive") == 0 && jstr(src, "owner"))
		ADD_OWNER(jstr(src, "owner"));
	cJSON_ArrayForEach(e, ws)
	{
		const char *wo = jstr(e, "owner");

		if (!wo || strcmp(wo, a->owner) == 0)
			continue;
		ADD_OWNER(wo);
		if (!*desc) {
			owner_display(wo, desc, sizeof(desc));
			strncat(desc, " (waiting)", sizeof(desc) - strlen(desc) - 1);
		}
	}
#undef ADD_OWNER
	if (!*described) {
		*described = true;
		snprintf(why->key, sizeof(why->key), "%s", a->plan->items[i].key);
		if (!*desc)
			snprintf(desc, sizeof(desc), "a client without owner (guide-style lock)");
		snprintf(why->holder, sizeof(why->holder), "%s%s", desc,
			 type && strcmp(type, "exclusive") == 0 ? " (exclusive)" : " (shared)");
		if (jint(src, "since", -1) > 0)
			why->held_ms = tl_wall_ms() - jint(src, "since", 0);
	}
}

/* Takes over everything a dead OWNER holds: every lock its intents name,
 * the documents in EXTRA (ids of refused keys), its lease document. */
static void takeover(struct es_store *es, const char *owner, char **extra, size_t nextra)
{
	char shown[160];
	size_t nlocks = 0;
	struct sb b = {0};
	size_t i;

	owner_display(owner, shown, sizeof(shown));
	tl_log(LOG_WARNING,
	       "owner '%s' (%s) holds locks but its lease has not been renewed for 2 x lease_ttl: "
	       "taking its locks over",
	       owner, shown);
	for (i = 0; i < nextra; i++)
		add_evict(&b, extra[i], owner);
	if (b.len)
		send_idempotent(es, &b);
	sb_free(&b);
	if (reap_owner(es, owner, false, &nlocks) == 0) {
		pthread_mutex_lock(&es->mutex);
		obs_find(es, owner)->reaped = true;
		pthread_mutex_unlock(&es->mutex);
	}
}

/* The refusal path: decides which refused items are ours after all
 * (ambiguous earlier attempts), who blocks, takes over dead owners, rolls
 * back and leaves waiter marks. Returns 0 when it turns out everything is
 * held, -EAGAIN (conflict), -ENOLCK. */
static int on_refusal(struct es_store *es, struct attempt *a, enum item_state *st,
		      struct tl_conflict *why)
{
	size_t n = a->plan->n, nref = 0, i, nown = 0, j;
	size_t *ref = calloc(n, sizeof(*ref));
	char *owners[32];
	bool dead[32] = {false}, described = false;
	char *dead_docs[64];
	size_t ndead_docs;
	cJSON *root = NULL, *d;
	struct sb b = {0};
	int err = -EAGAIN;

	if (!ref)
		return -ENOLCK;
	for (i = 0; i < n; i++)
		if (st[i] == ITEM_REFUSED)
			ref[nref++] = i;
	root = mget_ids(es, a->ids, ref, nref);
	if (!root) {
		err = -ENOLCK;
		goto out_rollback;
	}
	j = 0;
	cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(root, "docs"))
	{
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(d, "_source");
		const cJSON *hs = cJSON_GetObjectItemCaseSensitive(src, "holders");

		if (j >= nref)
			break;
		i = ref[j++];
		if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "found"))) {
			st[i] = ITEM_RETRY; /* released since: try again at once */
			continue;
		}
		if (cJSON_GetObjectItemCaseSensitive(hs, a->hkey)) {
			st[i] = ITEM_OK; /* our own earlier, ambiguous success */
			continue;
		}
		blockers_of(es, src, a, i, owners, &nown, 32, why, &described);
	}
	for (i = 0; i < n && st[i] != ITEM_REFUSED; i++)
		;
	if (i == n) {
		bool all = true;

		for (i = 0; i < n; i++)
			if (st[i] != ITEM_OK)
				all = false;
		if (all) {
			err = 0;
			goto out;
		}
		/* some were released meanwhile: roll back and retry soon */
	}
	if (nown && judge_owners(es, owners, nown, dead) == 0) {
		for (i = 0; i < nown; i++) {
			bool reaped;

			if (!dead[i])
				continue;
			pthread_mutex_lock(&es->mutex);
			reaped = obs_find(es, owners[i])->reaped;
			pthread_mutex_unlock(&es->mutex);
			ndead_docs = 0;
			for (j = 0; j < nref && ndead_docs < 64; j++)
				dead_docs[ndead_docs++] = a->ids[ref[j]];
			if (!reaped)
				takeover(es, owners[i], dead_docs, ndead_docs);
			else
				for (j = 0; j < ndead_docs; j++)
					add_evict(&b, dead_docs[j], owners[i]);
		}
	}

out_rollback:
	/* roll back (idempotent: noop where we hold nothing) and mark; the
	 * intent stays while we wait, so a reap finds our marks too */
	for (i = n; i-- > 0;)
		add_release(&b, a->ids[i], a->hkey);
	for (i = 0; i < n; i++)
		add_mark(es, &b, a, i);
	if (send_idempotent(es, &b) == 0)
		((struct tl_holder *)a->h)->marked = true;
	else
		err = -ENOLCK;
out:
	for (i = 0; i < nown; i++)
		free(owners[i]);
	cJSON_Delete(root);
	sb_free(&b);
	free(ref);
	return err;
}

/* Rolls back everything of attempt A (after a failure). */
static void rollback(struct es_store *es, const struct attempt *a)
{
	struct sb b = {0};
	size_t i;

	for (i = a->plan->n; i-- > 0;)
		add_release(&b, a->ids[i], a->hkey);
	add_intent_delete(&b, a->hkey);
	send_idempotent(es, &b);
	sb_free(&b);
}

static bool lease_fresh_locked(struct es_store *es, int64_t now)
{
	return es->renewed_ms > 0 && now - es->renewed_ms < es->ttl_ms;
}

static int es_try_acquire(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h,
			  struct tl_conflict *why)
{
	struct es_store *es = es_of(st);
	struct es_hold *hold = hold_get(h);
	enum item_state *state = NULL;
	struct attempt a = {.plan = plan, .h = h};
	struct sb b = {0};
	cJSON *root = NULL;
	bool fresh, any_refused, intent_ok = false;
	size_t i;
	int err = -ENOMEM, round;

	if (!hold)
		return -ENOMEM;
	pthread_mutex_lock(&es->mutex);
	fresh = lease_fresh_locked(es, tl_mono_ms());
	snprintf(a.owner, sizeof(a.owner), "%s", es->owner);
	hold->epoch = es->epoch;
	if (!fresh && !es->warned_stale) {
		es->warned_stale = true;
		tl_log(LOG_ERR, "owner '%s' has no fresh lease (last renewal over %.1f s ago): "
		       "refusing to take locks", es->owner, (double)es->ttl_ms / 1000);
	}
	pthread_mutex_unlock(&es->mutex);
	if (!fresh)
		return -ENOLCK;
	snprintf(hold->key, sizeof(hold->key), "%s#%" PRIu64, a.owner, h->ticket);
	a.hkey = hold->key;
	a.marked = h->marked;
	err = ids_make(plan, &a.ids);
	if (err)
		return err;
	err = -ENOMEM;
	state = calloc(plan->n, sizeof(*state));
	if (!state)
		goto out;
	for (i = 0; i < plan->n; i++)
		state[i] = ITEM_RETRY;

	for (round = 0; round < ITEM_RETRIES; round++) {
		size_t k = 0;
		cJSON *it;

		if (round)
			sleep_ms(RETRY_BASE_MS << round);
		sb_free(&b);
		if (!intent_ok)
			add_intent(&b, &a, es->name);
		for (i = 0; i < plan->n; i++)
			if (state[i] == ITEM_RETRY)
				add_acquire(es, &b, &a, i);
		/* a whole request that failed may have been applied: the
		 * retry is safe (scripts are idempotent; a create that 409s
		 * is checked against our holder id in on_refusal()) */
		err = bulk_send(es, &b, &root);
		if (err == -EAGAIN)
			continue;
		if (err)
			goto out_rollback;
		it = cJSON_GetObjectItemCaseSensitive(root, "items")->child;
		if (!intent_ok) {
			intent_ok = item_state(it, NULL) == ITEM_OK;
			it = it ? it->next : NULL;
		}
		for (i = 0; i < plan->n; i++) {
			long status;

			if (state[i] != ITEM_RETRY)
				continue;
			state[i] = item_state(it, &status);
			if (state[i] == ITEM_FATAL) {
				char *t = cJSON_PrintUnformatted(it);

				tl_log(LOG_ERR, "lock store rejected lock '%s' (HTTP %ld): %.1000s",
				       plan->items[i].key, status, t ? t : "?");
				free(t);
				err = -EACCES;
				goto out_rollback;
			}
			it = it ? it->next : NULL;
		}
		cJSON_Delete(root);
		root = NULL;
		any_refused = false;
		for (i = 0; i < plan->n; i++)
			if (state[i] == ITEM_REFUSED)
				any_refused = true;
		if (any_refused)
			break;
		for (k = 0, i = 0; i < plan->n; i++)
			if (state[i] == ITEM_RETRY)
				k++;
		if (k == 0 && intent_ok)
			break;
	}
	for (i = 0; i < plan->n && state[i] != ITEM_REFUSED; i++)
		;
	if (i < plan->n) {
		err = on_refusal(es, &a, state, why);
		if (err == 0)
			goto out_held;
		goto out;
	}
	for (i = 0; i < plan->n; i++)
		if (state[i] != ITEM_OK) {
			err = -ENOLCK;
			goto out_rollback;
		}

out_held:
	err = 0;
	hold->held = true;
	pthread_mutex_lock(&es->mutex);
	if (hold->epoch == es->epoch)
		es->held_cur++;
	else
		es->held_old++;
	pthread_mutex_unlock(&es->mutex);
	goto out;

out_rollback:
	rollback(es, &a);
	if (err != -EACCES)
		err = -ENOLCK;
out:
	cJSON_Delete(root);
	sb_free(&b);
	free(state);
	ids_free(a.ids, plan->n);
	return err;
}

static void hold_done(struct es_store *es, struct tl_holder *h)
{
	struct es_hold *hold = h->priv;

	if (hold && hold->held) {
		pthread_mutex_lock(&es->mutex);
		if (hold->epoch == es->epoch) {
			if (es->held_cur)
				es->held_cur--;
		} else if (es->held_old) {
			es->held_old--;
		}
		pthread_mutex_unlock(&es->mutex);
	}
	free(hold);
	h->priv = NULL;
}

static int es_release(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h)
{
	struct es_store *es = es_of(st);
	struct es_hold *hold = h->priv;
	struct sb b = {0};
	char **ids = NULL;
	size_t i;
	int err;

	if (!hold)
		return 0;
	err = ids_make(plan, &ids);
	if (err)
		goto out;
	for (i = plan->n; i-- > 0;)
		add_release(&b, ids[i], hold->key);
	add_intent_delete(&b, hold->key);
	err = send_idempotent(es, &b);
out:
	sb_free(&b);
	ids_free(ids, plan->n);
	hold_done(es, h);
	return err;
}

static void es_abandon(struct lockstore *st, const struct tl_plan *plan, struct tl_holder *h)
{
	struct es_store *es = es_of(st);
	struct es_hold *hold = h->priv;
	struct sb b = {0};
	char **ids = NULL;
	size_t i;

	if (hold && h->marked && ids_make(plan, &ids) == 0) {
		for (i = 0; i < plan->n; i++)
			add_script_item(&b, ids[i], SCRIPT_UNMARK, holder_params(hold->key));
		add_intent_delete(&b, hold->key);
		send_idempotent(es, &b);
	}
	sb_free(&b);
	ids_free(ids, plan->n);
	h->marked = false;
	if (hold)
		hold->held = false;
	hold_done(es, h);
}

static bool es_lease_fresh(struct lockstore *st)
{
	struct es_store *es = es_of(st);
	bool fresh;

	pthread_mutex_lock(&es->mutex);
	fresh = lease_fresh_locked(es, tl_mono_ms()) && es->held_old == 0;
	pthread_mutex_unlock(&es->mutex);
	return fresh;
}

static uint64_t es_requests(struct lockstore *st)
{
	return httpc_requests(es_of(st)->http);
}

/* ---- the lease --------------------------------------------------------------- */

static cJSON *owner_source(struct es_store *es, const char *owner)
{
	cJSON *s = cJSON_CreateObject();
	char host[256] = "";

	gethostname(host, sizeof(host) - 1);
	cJSON_AddStringToObject(s, "type", "owner");
	cJSON_AddStringToObject(s, "owner", owner);
	cJSON_AddStringToObject(s, "name", es->name);
	cJSON_AddStringToObject(s, "host", host);
	cJSON_AddNumberToObject(s, "pid", getpid());
	cJSON_AddNumberToObject(s, "renewed", (double)tl_wall_ms());
	cJSON_AddNumberToObject(s, "ttl_ms", (double)es->ttl_ms);
	return s;
}

static void make_owner_id(struct es_store *es)
{
	unsigned char r[8];
	size_t i;

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		uint64_t x = (uint64_t)tl_mono_ms() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)tl_wall_ms();

		memcpy(r, &x, sizeof(r));
	}
	for (i = 0; i < sizeof(r); i++)
		snprintf(es->nonce + 2 * i, 3, "%02x", r[i]);
	snprintf(es->owner, sizeof(es->owner), "%s:%d:%s", es->name, (int)getpid(), es->nonce);
}

/* After a 409 on our lease document: an earlier write of ours may have
 * been applied without us seeing the answer (timeout, reset). Nobody but a
 * reaper touches the document, and a reaper deletes it. Returns -EAGAIN
 * (it is ours: seq_no adopted, renew again) or -ESTALE (gone: reaped). */
static int lease_reread(struct es_store *es, const char *owner)
{
	struct httpc_response r;
	char id[200], path[600];
	enum call_class cc;
	cJSON *root;
	int err = -EAGAIN;

	snprintf(id, sizeof(id), OWNER_PREFIX "%s", owner);
	if (es_path(es, path, sizeof(path), "_doc", id, NULL))
		return -EAGAIN;
	cc = es_call(es, "GET", path, NULL, NULL, 0, &r, true);
	if (cc == CALL_OK) {
		root = jparse(&r);
		pthread_mutex_lock(&es->mutex);
		if (strcmp(owner, es->owner) == 0) {
			es->owner_seq = jint(root, "_seq_no", 0);
			es->owner_term = jint(root, "_primary_term", 1);
			es->owner_doc = true;
		}
		pthread_mutex_unlock(&es->mutex);
		cJSON_Delete(root);
	} else if (r.status == 404) {
		err = -ESTALE;
	}
	httpc_response_free(&r);
	return err;
}

/* Creates (CREATE) or renews our lease document. Returns 0, -ESTALE (it
 * was removed: we were reaped), -ETIME (renewed, but after the lease had
 * lapsed: others may be taking our locks over, so this owner id must not
 * act again), -EAGAIN. */
static int lease_write(struct es_store *es, bool create)
{
	struct httpc_response r;
	char owner[160], id[200], path[600], query[96];
	int64_t seq, term, sent;
	enum call_class cc;
	cJSON *root;
	char *body;
	int err = -EAGAIN;

	pthread_mutex_lock(&es->mutex);
	snprintf(owner, sizeof(owner), "%s", es->owner);
	seq = es->owner_seq;
	term = es->owner_term;
	pthread_mutex_unlock(&es->mutex);
	snprintf(id, sizeof(id), OWNER_PREFIX "%s", owner);
	snprintf(query, sizeof(query), "if_seq_no=%" PRId64 "&if_primary_term=%" PRId64, seq, term);
	if (es_path(es, path, sizeof(path), create ? "_create" : "_doc", id, create ? NULL : query))
		return -ENAMETOOLONG;
	body = jprint_free(owner_source(es, owner));
	if (!body)
		return -ENOMEM;
	sent = tl_mono_ms();
	cc = es_call(es, "PUT", path, HTTPC_JSON, body, strlen(body), &r, true);
	free(body);
	if (cc == CALL_OK) {
		root = jparse(&r);
		pthread_mutex_lock(&es->mutex);
		err = 0;
		if (strcmp(owner, es->owner) == 0) {
			es->owner_seq = jint(root, "_seq_no", 0);
			es->owner_term = jint(root, "_primary_term", 1);
			es->owner_doc = true;
			/* a renewal after the lease lapsed does not make it
			 * fresh again: observers may be taking it over now */
			if (!create && es->renewed_ms > 0 && sent - es->renewed_ms >= es->ttl_ms) {
				err = -ETIME;
			} else {
				es->renewed_ms = sent;
				es->warned_stale = false;
			}
		}
		pthread_mutex_unlock(&es->mutex);
		cJSON_Delete(root);
	} else if (r.status == 409 || r.status == 404) {
		err = lease_reread(es, owner);
	} else if (r.status) {
		char type[96] = "";

		root = jparse(&r);
		error_type(root, type, sizeof(type));
		cJSON_Delete(root);
		tl_log(LOG_WARNING, "cannot renew the lease of owner '%s': HTTP %ld %s", owner,
		       r.status, type);
	}
	httpc_response_free(&r);
	return err;
}

/* Resends kept releases that are due. */
static void pending_flush(struct es_store *es)
{
	struct pending_release *list, *p, *next, *keep = NULL;
	int64_t now = tl_mono_ms();

	pthread_mutex_lock(&es->mutex);
	list = es->pending;
	es->pending = NULL;
	pthread_mutex_unlock(&es->mutex);
	for (p = list; p; p = next) {
		struct sb b = {.s = p->body, .len = p->len, .cap = p->len + 1};
		cJSON *root = NULL;

		next = p->next;
		if (p->not_before > now || bulk_send(es, &b, &root) != 0) {
			p->next = keep;
			keep = p;
			continue;
		}
		cJSON_Delete(root);
		/* A request that timed out may still run after this one: send
		 * it once more after a timeout's time. */
		if (p->confirms-- > 0) {
			p->not_before = now + es->timeout_ms;
			p->next = keep;
			keep = p;
			continue;
		}
		tl_log(LOG_NOTICE, "kept lock release sent to the lock store");
		free(p->body);
		free(p);
	}
	if (keep) {
		pthread_mutex_lock(&es->mutex);
		for (p = keep; p->next; p = p->next)
			;
		p->next = es->pending;
		es->pending = keep;
		pthread_mutex_unlock(&es->mutex);
	}
}

static void *heartbeat(void *arg)
{
	struct es_store *es = arg;
	int64_t period = es->ttl_ms / 3 > 50 ? es->ttl_ms / 3 : 50;
	int64_t next = tl_mono_ms() + period;
	int err;

	for (;;) {
		struct timespec ts;
		bool stop, have_doc;

		pthread_mutex_lock(&es->mutex);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		while (!es->stop) {
			int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
			struct timespec until;

			if (now >= next)
				break;
			until.tv_sec = next / 1000;
			until.tv_nsec = (next % 1000) * 1000000;
			pthread_cond_timedwait(&es->cond, &es->mutex, &until);
			clock_gettime(CLOCK_MONOTONIC, &ts);
		}
		stop = es->stop;
		have_doc = es->owner_doc;
		pthread_mutex_unlock(&es->mutex);
		if (stop)
			break;
		next = tl_mono_ms() + period;
		err = lease_write(es, !have_doc);
		if (err)
			next = tl_mono_ms() + period / 3; /* failing: retry sooner */
		if (err == -ESTALE || err == -ETIME) {
			char old[160];

			pthread_mutex_lock(&es->mutex);
			snprintf(old, sizeof(old), "%s", es->owner);
			if (have_doc) {
				/* reaped: new identity; renames held under the
				 * old one are fenced */
				make_owner_id(es);
				es->epoch++;
				es->held_old += es->held_cur;
				es->held_cur = 0;
				es->owner_doc = false;
				es->renewed_ms = 0;
			}
			pthread_mutex_unlock(&es->mutex);
			if (have_doc) {
				if (err == -ESTALE)
					tl_log(LOG_ERR,
					       "the lease of owner '%s' was removed by another client: "
					       "locks taken under it are lost; continuing as a new owner",
					       old);
				else
					tl_log(LOG_ERR,
					       "the lease of owner '%s' lapsed (no renewal for %.1f s): "
					       "locks taken under it may be taken over; continuing as a "
					       "new owner",
					       old, (double)es->ttl_ms / 1000);
				char now_id[160];

				pthread_mutex_lock(&es->mutex);
				snprintf(now_id, sizeof(now_id), "%s", es->owner);
				pthread_mutex_unlock(&es->mutex);
				httpc_set_opaque_id(es->http, now_id);
				next = tl_mono_ms(); /* create the new document at once */
			}
		}
		pending_flush(es);
	}
	return NULL;
}

static int es_start(struct lockstore *st)
{
	struct es_store *es = es_of(st);
	int err;

	pthread_mutex_lock(&es->mutex);
	make_owner_id(es); /* after the fork: our pid */
	pthread_mutex_unlock(&es->mutex);
	err = httpc_set_opaque_id(es->http, es->owner);
	if (err)
		return err;
	err = lease_write(es, true);
	if (err) {
		tl_log(LOG_ERR, "cannot create the lease of owner '%s' in the lock store", es->owner);
		return -ENOLCK;
	}
	err = pthread_create(&es->hb, NULL, heartbeat, es);
	if (err)
		return -err;
	es->started = true;
	tl_log(LOG_INFO, "lock store owner '%s', lease_ttl %.1f s", es->owner,
	       (double)es->ttl_ms / 1000);
	return 0;
}

/* ---- listing --------------------------------------------------------------------- */

/* Refreshes the index and returns every document (up to 10000) as parsed
 * hits, or NULL. QUERY is the query object (taken over) or NULL. */
static cJSON *search_all(struct es_store *es, cJSON *query)
{
	struct httpc_response r;
	cJSON *req, *root = NULL;
	char path[512];
	char *body;

	es_path(es, path, sizeof(path), "_refresh", NULL, NULL);
	es_call(es, "POST", path, HTTPC_JSON, NULL, 0, &r, false);
	httpc_response_free(&r);
	req = cJSON_CreateObject();
	cJSON_AddNumberToObject(req, "size", 10000);
	cJSON_AddBoolToObject(req, "seq_no_primary_term", true);
	if (!query) {
		query = cJSON_CreateObject();
		cJSON_AddObjectToObject(query, "match_all");
	}
	cJSON_AddItemToObject(req, "query", query);
	body = cJSON_PrintUnformatted(req);
	cJSON_Delete(req);
	if (!body)
		return NULL;
	es_path(es, path, sizeof(path), "_search", NULL, NULL);
	if (es_call(es, "POST", path, HTTPC_JSON, body, strlen(body), &r, false) == CALL_OK)
		root = jparse(&r);
	else if (r.body)
		log_refusal(es, "POST", path, &r);
	httpc_response_free(&r);
	free(body);
	return root;
}

static const cJSON *hits_of(const cJSON *root)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "hits"),
						"hits");
}

static bool is_lock_id(const char *id)
{
	return strncmp(id, OWNER_PREFIX, strlen(OWNER_PREFIX)) != 0 &&
	       strncmp(id, INTENT_PREFIX, strlen(INTENT_PREFIX)) != 0;
}

static int es_list(struct lockstore *st, const char *prefix, struct tl_lock_info **out, size_t *n)
{
	struct es_store *es = es_of(st);
	struct tl_lock_info *list = NULL;
	cJSON *root = search_all(es, NULL);
	const cJSON *hit;
	size_t cnt = 0, cap = 0;

	*out = NULL;
	*n = 0;
	if (!root)
		return -ENOLCK;
	cJSON_ArrayForEach(hit, hits_of(root))
	{
		const char *id = jstr(hit, "_id");
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(hit, "_source");
		const char *key = jstr(src, "path"), *type = jstr(src, "lock_type");
		const cJSON *e;
		struct tl_lock_info *li;
		struct sb hb = {0};
		unsigned int holders = 0;

		if (!id || !is_lock_id(id))
			continue;
		if (!key)
			key = id;
		if (prefix && strcmp(prefix, "/") != 0 && strcmp(key, prefix) != 0 &&
		    !path_is_ancestor(prefix, key))
			continue;
		if (cnt == cap) {
			struct tl_lock_info *nl;

			cap = cap ? 2 * cap : 16;
			nl = realloc(list, cap * sizeof(*list));
			if (!nl)
				break;
			list = nl;
		}
		li = &list[cnt];
		memset(li, 0, sizeof(*li));
		li->key = strdup(key);
		li->mode = type && strcmp(type, "exclusive") == 0 ? TL_EXCLUSIVE : TL_SHARED;
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(src, "holders"))
		{
			if (holders++)
				sb_adds(&hb, ", ");
			sb_adds(&hb, e->string);
		}
		if (!holders && li->mode == TL_EXCLUSIVE)
			sb_adds(&hb, jstr(src, "process_id") ? jstr(src, "process_id") : "(no owner)");
		li->holders = hb.s ? hb.s : strdup("");
		li->count = li->mode == TL_EXCLUSIVE
				    ? 1
				    : (unsigned int)jint(src, "lock_count", holders);
		li->age_ms = jint(src, "since", -1) > 0 ? tl_wall_ms() - jint(src, "since", 0) : -1;
		li->waiters = (unsigned int)cJSON_GetArraySize(
			cJSON_GetObjectItemCaseSensitive(src, "waiters"));
		cnt++;
	}
	cJSON_Delete(root);
	*out = list;
	*n = cnt;
	return 0;
}

/* ---- open, bootstrap, close ---------------------------------------------------- */

static cJSON *mapping_body(enum tl_strategy s)
{
	static const char *const keywords[] = {"path",   "lock_type", "owner", "holder",
					       "process_id", "type", "name",  "from", "to"};
	cJSON *b = cJSON_CreateObject(), *m, *props, *meta, *tl;
	size_t i;

	cJSON_AddItemToObject(cJSON_AddObjectToObject(b, "settings"), "number_of_shards",
			      cJSON_CreateNumber(1));
	m = cJSON_AddObjectToObject(b, "mappings");
	cJSON_AddFalseToObject(m, "dynamic");
	meta = cJSON_AddObjectToObject(m, "_meta");
	tl = cJSON_AddObjectToObject(meta, META_NAME);
	cJSON_AddStringToObject(tl, "strategy", lockplan_strategy_name(s));
	cJSON_AddNumberToObject(tl, "format", FORMAT_VERSION);
	props = cJSON_AddObjectToObject(m, "properties");
	for (i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
		cJSON_AddStringToObject(cJSON_AddObjectToObject(props, keywords[i]), "type",
					"keyword");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "lock_count"), "type", "integer");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "since"), "type", "long");
	/* per-holder maps have one key per holder: never mapped */
	cJSON_AddFalseToObject(cJSON_AddObjectToObject(props, "holders"), "enabled");
	cJSON_AddFalseToObject(cJSON_AddObjectToObject(props, "waiters"), "enabled");
	return b;
}

/* Reads the index mapping. Returns 0 with *STRATEGY (NULL when the index
 * has no _meta of ours; caller frees) , -ENOENT (no index), -ENOLCK,
 * -EACCES. */
static int read_mapping(struct es_store *es, char **strategy, bool *keyword_path)
{
	struct httpc_response r;
	enum call_class cc;
	char path[512];
	cJSON *root, *idx, *m, *tl;
	const char *s;

	*strategy = NULL;
	if (keyword_path)
		*keyword_path = false;
	es_path(es, path, sizeof(path), "_mapping", NULL, NULL);
	cc = es_call(es, "GET", path, NULL, NULL, 0, &r, true);
	if (cc != CALL_OK) {
		int err = r.status == 404 ? -ENOENT : cc == CALL_RETRY ? -ENOLCK : -EACCES;

		if (err == -EACCES)
			log_refusal(es, "GET", path, &r);
		httpc_response_free(&r);
		return err;
	}
	root = jparse(&r);
	httpc_response_free(&r);
	idx = root ? root->child : NULL; /* {"<index>": {"mappings": ...}} */
	m = cJSON_GetObjectItemCaseSensitive(idx, "mappings");
	tl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "_meta"),
					      META_NAME);
	s = jstr(tl, "strategy");
	if (s)
		*strategy = strdup(s);
	if (keyword_path) {
		const cJSON *p = cJSON_GetObjectItemCaseSensitive(
			cJSON_GetObjectItemCaseSensitive(m, "properties"), "path");

		*keyword_path = jstr(p, "type") && strcmp(jstr(p, "type"), "keyword") == 0;
	}
	cJSON_Delete(root);
	return 0;
}

/* Creates the index if missing (two mounts may race: "already exists" is
 * fine) and checks the strategy recorded in it. */
static int bootstrap(struct es_store *es, bool for_ctl)
{
	struct httpc_response r;
	const char *want = lockplan_strategy_name(es->strategy);
	char *have = NULL, path[512], type[96] = "";
	enum call_class cc;
	cJSON *root;
	char *body;
	int err;

	err = read_mapping(es, &have, NULL);
	if (err == -ENOENT && !for_ctl) {
		body = jprint_free(mapping_body(es->strategy));
		if (!body)
			return -ENOMEM;
		snprintf(path, sizeof(path), "/%s", es->index_esc);
		cc = es_call(es, "PUT", path, HTTPC_JSON, body, strlen(body), &r, false);
		free(body);
		root = jparse(&r);
		error_type(root, type, sizeof(type));
		cJSON_Delete(root);
		if (cc == CALL_OK) {
			tl_log(LOG_NOTICE, "created lock index '%s' for strategy '%s'", es->index,
			       want);
		} else if (r.status == 400 && strcmp(type, "resource_already_exists_exception") == 0) {
			tl_log(LOG_INFO, "lock index '%s' was created by another client", es->index);
		} else {
			if (r.status)
				log_refusal(es, "PUT", path, &r);
			httpc_response_free(&r);
			return -ENOLCK;
		}
		httpc_response_free(&r);
		err = read_mapping(es, &have, NULL);
	}
	if (err == -ENOENT && for_ctl)
		return 0;
	if (err)
		return err == -EACCES ? -ENOLCK : err;
	if (!for_ctl && have && strcmp(have, want) != 0) {
		tl_log(LOG_ERR,
		       "lock index '%s' is used with lock_strategy=%s; this mount asks for %s: "
		       "refusing to mix strategies (use another es_index)",
		       es->index, have, want);
		free(have);
		return -EINVAL;
	}
	if (!have && !for_ctl)
		tl_log(LOG_WARNING, "lock index '%s' records no strategy (not made by treelockfs?)",
		       es->index);
	free(have);
	return 0;
}

/* GET /: reachable, credentials accepted, which product. */
static int check_cluster(struct es_store *es)
{
	struct httpc_response r;
	char errbuf[256];
	cJSON *root, *ver;
	const char *num, *dist;
	int err;

	err = httpc_request(es->http, "GET", "/", NULL, NULL, 0, 0, &r, errbuf, sizeof(errbuf));
	if (err) {
		if (*errbuf)
			tl_log(LOG_ERR, "cannot reach the lock store: %s", errbuf);
		else
			tl_log(LOG_ERR, "cannot reach the lock store at '%s': %s",
			       httpc_node_name(es->http, 0), strerror(-err));
		return -ENOLCK;
	}
	if (r.status != 200) {
		if (r.status == 401 || r.status == 403)
			log_refusal(es, "GET", "/", &r);
		else
			tl_log(LOG_ERR, "lock store at '%s' answers HTTP %ld to GET /",
			       httpc_node_name(es->http, r.node), r.status);
		httpc_response_free(&r);
		return -ENOLCK;
	}
	root = jparse(&r);
	ver = cJSON_GetObjectItemCaseSensitive(root, "version");
	num = jstr(ver, "number");
	dist = jstr(ver, "distribution");
	es->opensearch = dist && strcmp(dist, "opensearch") == 0;
	snprintf(es->version, sizeof(es->version), "%s %s", es->opensearch ? "OpenSearch" : "Elasticsearch",
		 num ? num : "?");
	cJSON_Delete(root);
	httpc_response_free(&r);
	if (!num) {
		tl_log(LOG_ERR, "'%s' does not look like Elasticsearch or OpenSearch (no version)",
		       httpc_node_name(es->http, 0));
		return -ENOLCK;
	}
	tl_log(LOG_INFO, "lock store: %s at '%s'", es->version, httpc_node_name(es->http, r.node));
	return 0;
}

static void es_close(struct lockstore *st)
{
	struct es_store *es = es_of(st);
	struct pending_release *p, *next;

	if (!es)
		return;
	if (es->started) {
		pthread_mutex_lock(&es->mutex);
		es->stop = true;
		pthread_cond_signal(&es->cond);
		pthread_mutex_unlock(&es->mutex);
		pthread_join(es->hb, NULL);
		pending_flush(es);
		/* a clean unmount ends the lease at once */
		if (es->owner_doc) {
			struct httpc_response r;
			char id[200], path[600];

			snprintf(id, sizeof(id), OWNER_PREFIX "%s", es->owner);
			if (es_path(es, path, sizeof(path), "_doc", id, NULL) == 0) {
				es_call(es, "DELETE", path, NULL, NULL, 0, &r, true);
				httpc_response_free(&r);
			}
		}
	}
	for (p = es->pending; p; p = next) {
		next = p->next;
		free(p->body);
		free(p);
	}
	httpc_close(es->http);
	free(es->index);
	free(es->index_esc);
	pthread_cond_destroy(&es->cond);
	pthread_mutex_destroy(&es->mutex);
	free(es);
}

static int es_open(const struct tl_config *cfg, struct lockstore **out, bool for_ctl)
{
	struct httpc_config hc = {0};
	struct es_store *es;
	pthread_condattr_t ca;
	int err = -ENOMEM;

	*out = NULL;
	es = calloc(1, sizeof(*es));
	if (!es)
		return -ENOMEM;
	es->base.ops = &es_ops;
	es->base.cfg = cfg;
	pthread_mutex_init(&es->mutex, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&es->cond, &ca);
	pthread_condattr_destroy(&ca);
	es->strategy = cfg->lock_strategy;
	es->ttl_ms = (int64_t)((cfg->lease_ttl > 0 ? cfg->lease_ttl : TL_DEFAULT_LEASE_TTL) * 1000);
	es->tmo_ms = (int64_t)(cfg->lock_timeout * 1000) + es->ttl_ms;
	es->timeout_ms = cfg->es_timeout_ms ? cfg->es_timeout_ms : TL_DEFAULT_ES_TIMEOUT_MS;
	if (cfg->owner && *cfg->owner) {
		snprintf(es->name, sizeof(es->name), "%s", cfg->owner);
	} else {
		gethostname(es->name, sizeof(es->name) - 1);
		if (!es->name[0])
			snprintf(es->name, sizeof(es->name), "localhost");
	}
	es->index = strdup(cfg->es_index && *cfg->es_index ? cfg->es_index : TL_DEFAULT_ES_INDEX);
	if (!es->index)
		goto out_close;
	es->index_esc = httpc_escape(es->index, strlen(es->index));
	if (!es->index_esc)
		goto out_close;
	make_owner_id(es);

	hc.urls = cfg->es_url;
	hc.user = cfg->es_user;
	hc.password = cfg->es_password;
	hc.api_key = cfg->es_api_key;
	hc.cacert = cfg->es_cacert;
	hc.insecure = cfg->es_insecure;
	hc.timeout_ms = es->timeout_ms;
	hc.opaque_id = es->owner;
	err = httpc_open(&hc, &es->http);
	if (err) {
		err = err == -ENOMEM ? err : -EINVAL;
		goto out_close;
	}
	if (cfg->es_insecure)
		tl_log(LOG_WARNING, "es_insecure: TLS certificates of the lock store are not verified");
	err = check_cluster(es);
	if (err)
		goto out_close;
	err = bootstrap(es, for_ctl);
	if (err)
		goto out_close;
	*out = &es->base;
	return 0;

out_close:
	es_close(&es->base);
	return err;
}

int lockstore_es_open(const struct tl_config *cfg, struct lockstore **out)
{
	return es_open(cfg, out, false);
}

int lockstore_es_open_ctl(const struct tl_config *cfg, struct lockstore **out)
{
	return es_open(cfg, out, true);
}

static const struct lockstore_ops es_ops = {
	.name = "es",
	.start = es_start,
	.try_acquire = es_try_acquire,
	.wait = NULL,
	.abandon = es_abandon,
	.release = es_release,
	.lease_fresh = es_lease_fresh,
	.list = es_list,
	.requests = es_requests,
	.close = es_close,
};

/* ---- treelockctl ------------------------------------------------------------------- */

static struct es_store *es_checked(struct lockstore *st)
{
	return st && st->ops == &es_ops ? es_of(st) : NULL;
}

int lockstore_es_check(struct lockstore *st, FILE *out)
{
	struct es_store *es = es_checked(st);
	char *have = NULL;
	bool kw = false;
	int err;

	if (!es)
		return -EINVAL;
	fprintf(out, "store:    %s at %s\n", es->version, httpc_node_name(es->http, 0));
	fprintf(out, "index:    %s\n", es->index);
	err = read_mapping(es, &have, &kw);
	if (err == -ENOENT) {
		fprintf(out, "status:   index missing (a mount creates it)\n");
		return -ENOENT;
	}
	if (err)
		return -ENOLCK;
	fprintf(out, "mapping:  %s\n", kw ? "ok (path is a keyword)" : "NOT OURS (path is not a keyword)");
	fprintf(out, "strategy: %s\n", have ? have : "(none recorded)");
	err = kw && have ? 0 : -EPROTO;
	free(have);
	return err;
}

static void owner_info_fill(struct es_owner_info *o, const cJSON *hit)
{
	const cJSON *src = cJSON_GetObjectItemCaseSensitive(hit, "_source");

	o->id = strdup(jstr(src, "owner") ? jstr(src, "owner") : "?");
	o->name = strdup(jstr(src, "name") ? jstr(src, "name") : "?");
	o->seq_no = jint(hit, "_seq_no", -1);
	o->renewed_ms = jint(src, "renewed", -1);
	o->ttl_ms = jint(src, "ttl_ms", 0);
	o->state = ES_OWNER_UNKNOWN;
}

int lockstore_es_owners(struct lockstore *st, unsigned int observe_ms, struct es_owner_info **out,
			size_t *n)
{
	struct es_store *es = es_checked(st);
	struct es_owner_info *list = NULL;
	int64_t until;
	cJSON *root;
	const cJSON *hit;
	size_t cnt = 0, i, unknown;

	*out = NULL;
	*n = 0;
	if (!es)
		return -EINVAL;
	root = search_all(es, NULL);
	if (!root)
		return -ENOLCK;
	list = calloc((size_t)cJSON_GetArraySize(hits_of(root)) + 1, sizeof(*list));
	if (!list) {
		cJSON_Delete(root);
		return -ENOMEM;
	}
	cJSON_ArrayForEach(hit, hits_of(root))
	{
		const char *id = jstr(hit, "_id");

		if (!id || strncmp(id, OWNER_PREFIX, strlen(OWNER_PREFIX)) != 0)
			continue;
		owner_info_fill(&list[cnt], hit);
		/* alive once its seq_no moves while we watch, dead after
		 * 2 x its lease_ttl unmoved: no clock of its is trusted */
		obs_record(es, list[cnt].id, list[cnt].seq_no, list[cnt].ttl_ms);
		cnt++;
	}
	cJSON_Delete(root);
	/* watch the others with our monotonic clock until told apart */
	until = tl_mono_ms() + observe_ms;
	for (;;) {
		char **ids = calloc(cnt + 1, sizeof(*ids));
		bool *dead = calloc(cnt + 1, sizeof(*dead));
		size_t *map = calloc(cnt + 1, sizeof(*map));

		unknown = 0;
		for (i = 0; ids && dead && map && i < cnt; i++)
			if (list[i].state == ES_OWNER_UNKNOWN) {
				map[unknown] = i;
				ids[unknown++] = list[i].id;
			}
		if (unknown && judge_owners(es, ids, unknown, dead) == 0) {
			for (i = 0; i < unknown; i++) {
				struct observed *ob;
				bool moved;

				pthread_mutex_lock(&es->mutex);
				ob = obs_find(es, ids[i]);
				moved = ob->seq_no != list[map[i]].seq_no;
				pthread_mutex_unlock(&es->mutex);
				if (dead[i])
					list[map[i]].state = ES_OWNER_DEAD;
				else if (moved)
					list[map[i]].state = ES_OWNER_ALIVE;
			}
		}
		free(ids);
		free(dead);
		free(map);
		unknown = 0;
		for (i = 0; i < cnt; i++)
			if (list[i].state == ES_OWNER_UNKNOWN)
				unknown++;
		if (!unknown || tl_mono_ms() >= until)
			break;
		sleep_ms(200);
	}
	*out = list;
	*n = cnt;
	return 0;
}

void lockstore_es_free_owners(struct es_owner_info *o, size_t n)
{
	size_t i;

	if (!o)
		return;
	for (i = 0; i < n; i++) {
		free(o[i].id);
		free(o[i].name);
	}
	free(o);
}

int lockstore_es_intents(struct lockstore *st, unsigned int observe_ms,
			 struct es_intent_info **out, size_t *n)
{
	struct es_store *es = es_checked(st);
	struct es_owner_info *owners = NULL;
	struct es_intent_info *list = NULL;
	size_t nown = 0, cnt = 0, i;
	cJSON *root;
	const cJSON *hit;
	int err;

	*out = NULL;
	*n = 0;
	if (!es)
		return -EINVAL;
	err = lockstore_es_owners(st, observe_ms, &owners, &nown);
	if (err)
		return err;
	root = search_all(es, NULL);
	if (!root) {
		lockstore_es_free_owners(owners, nown);
		return -ENOLCK;
	}
	list = calloc((size_t)cJSON_GetArraySize(hits_of(root)) + 1, sizeof(*list));
	cJSON_ArrayForEach(hit, hits_of(root))
	{
		const char *id = jstr(hit, "_id");
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(hit, "_source");
		struct es_intent_info *it;

		if (!list || !id || strncmp(id, INTENT_PREFIX, strlen(INTENT_PREFIX)) != 0)
			continue;
		it = &list[cnt++];
		it->holder = strdup(jstr(src, "holder") ? jstr(src, "holder") : id);
		it->owner = strdup(jstr(src, "owner") ? jstr(src, "owner") : "?");
		it->from = strdup(jstr(src, "from") ? jstr(src, "from") : "?");
		it->to = jstr(src, "to") ? strdup(jstr(src, "to")) : NULL;
		it->start_ms = jint(src, "start", -1);
		it->nkeys = (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(src, "keys"));
		it->owner_state = ES_OWNER_DEAD; /* no lease document at all */
		for (i = 0; i < nown; i++)
			if (strcmp(owners[i].id, it->owner) == 0)
				it->owner_state = owners[i].state;
	}
	cJSON_Delete(root);
	lockstore_es_free_owners(owners, nown);
	if (!list)
		return -ENOMEM;
	*out = list;
	*n = cnt;
	return 0;
}

void lockstore_es_free_intents(struct es_intent_info *it, size_t n)
{
	size_t i;

	if (!it)
		return;
	for (i = 0; i < n; i++) {
		free(it[i].holder);
		free(it[i].owner);
		free(it[i].from);
		free(it[i].to);
	}
	free(it);
}

int lockstore_es_break(struct lockstore *st, const char *key)
{
	struct es_store *es = es_checked(st);
	struct httpc_response r;
	char path[2048];
	char *id = NULL;
	enum call_class cc;
	int err;

	if (!es)
		return -EINVAL;
	err = path_lock_id(key, &id);
	if (err)
		return err;
	err = es_path(es, path, sizeof(path), "_doc", id, "refresh=true");
	free(id);
	if (err)
		return err;
	cc = es_call(es, "DELETE", path, NULL, NULL, 0, &r, false);
	if (cc == CALL_OK)
		err = 0;
	else if (r.status == 404)
		err = -ENOENT;
	else
		err = -ENOLCK;
	if (err == 0)
		tl_log(LOG_NOTICE, "lock '%s' broken", key);
	httpc_response_free(&r);
	return err;
}

/* Evicts OWNER from every lock its intents and exclusive locks name, in
 * one bulk, then deletes its lease document; with DROP_INTENTS its intents
 * too. Returns 0 or -ENOLCK. */
static int reap_owner(struct es_store *es, const char *owner, bool drop_intents, size_t *nlocks)
{
	struct httpc_response r;
	struct sb b = {0};
	cJSON *q, *root;
	const cJSON *hit, *k;
	char id[200], path[600], *kid;
	size_t nitems = 0;
	int err = 0;

	*nlocks = 0;
	q = cJSON_CreateObject();
	cJSON_AddStringToObject(cJSON_AddObjectToObject(q, "term"), "owner", owner);
	root = search_all(es, q);
	if (!root)
		return -ENOLCK;
	cJSON_ArrayForEach(hit, hits_of(root))
	{
		const char *hid = jstr(hit, "_id");
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(hit, "_source");

		if (!hid || strcmp(jstr(src, "owner") ? jstr(src, "owner") : "", owner) != 0)
			continue;
		if (strncmp(hid, INTENT_PREFIX, strlen(INTENT_PREFIX)) == 0) {
			/* every key the owner's plan named */
			cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(src, "keys"))
			{
				if (!cJSON_IsString(k) || path_lock_id(k->valuestring, &kid) != 0)
					continue;
				add_evict(&b, kid, owner);
				free(kid);
				nitems++;
			}
			if (drop_intents) {
				sb_add_line(&b, action("delete", hid));
				nitems++;
			}
		} else if (is_lock_id(hid)) {
			add_evict(&b, hid, owner);
			nitems++;
		}
	}
	cJSON_Delete(root);
	if (nitems) {
		cJSON *resp = NULL;

		err = bulk_send(es, &b, &resp);
		if (err == 0) {
			cJSON_ArrayForEach(hit, cJSON_GetObjectItemCaseSensitive(resp, "items"))
			{
				const char *res = jstr(hit->child, "result");

				if (res && strcmp(hit->child->string, "update") == 0 &&
				    (strcmp(res, "updated") == 0 || strcmp(res, "deleted") == 0))
					(*nlocks)++;
			}
		}
		cJSON_Delete(resp);
	}
	sb_free(&b);
	if (err)
		return -ENOLCK;
	snprintf(id, sizeof(id), OWNER_PREFIX "%s", owner);
	if (es_path(es, path, sizeof(path), "_doc", id, NULL) == 0) {
		es_call(es, "DELETE", path, NULL, NULL, 0, &r, true);
		httpc_response_free(&r);
	}
	tl_log(LOG_NOTICE, "reaped owner '%s': %zu lock documents changed", owner, *nlocks);
	return 0;
}

int lockstore_es_reap(struct lockstore *st, const char *owner, size_t *nlocks)
{
	struct es_store *es = es_checked(st);

	*nlocks = 0;
	if (!es)
		return -EINVAL;
	return reap_owner(es, owner, true, nlocks);
}
