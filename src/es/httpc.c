/* httpc.c - thin libcurl wrapper, see httpc.h
 *
 * Node choice: c->preferred is where requests go first. A request walks the
 * nodes from there, skipping those marked dead (dead_until in the future)
 * unless all are dead, and tries each node at most once. A transport
 * failure marks the node dead for HTTPC_NODE_RETRY_MS and moves on; the
 * first node that answers (any HTTP status) becomes the preferred one.
 *
 * Handles: one CURL easy handle per (thread, client), found through a
 * pthread key and listed in c->handles so that httpc_close() can free the
 * handles of threads that are still alive. The key destructor frees the
 * handle of a thread that exits first.
 */
#include <config.h>

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "es/httpc.h"
#include "base/log.h"
#include "base/tlclock.h"

/* Between URLs of the node list: ',' (';' where ',' separates -o options). */
#define URL_SEPARATORS ",; \t"

struct httpc_node {
	char *url;           /* base URL without a trailing '/' (may hold userinfo) */
	char *name;          /* url with userinfo removed, for logs */
	int64_t dead_until;  /* monotonic ms; protected by httpc.mutex */
};

struct httpc_handle {
	CURL *easy;
	struct httpc *c;
	struct httpc_handle *prev, *next; /* protected by httpc.mutex */
};

struct httpc {
	struct httpc_node *nodes;
	int nnodes;
	int preferred;              /* protected by mutex */
	char *user, *password;      /* secrets: never logged */
	char *auth_header;          /* "Authorization: ApiKey ..." (secret) */
	char *cacert;
	bool insecure;
	unsigned int timeout_ms, connect_timeout_ms;
	size_t max_body;
	char *opaque_header;        /* "X-Opaque-Id: ..."; protected by mutex */
	uint64_t requests;          /* atomic */
	uint64_t failures;          /* atomic: attempts with no answer */
	uint64_t bytes_sent;        /* atomic */
	uint64_t bytes_received;    /* atomic */
	struct tl_hist seconds;     /* the attempts' durations (atomics) */
	int64_t served_us;          /* atomic: monotonic us of the last answer
				     * that was not a failure (no 5xx, no 429),
				     * 0: none yet */
	int64_t end_ms;             /* atomic; httpc_set_end(), 0: none */
	pthread_key_t key;
	struct httpc_handle *handles; /* protected by mutex */
	pthread_mutex_t mutex;      /* leaf lock: never held across a request */
};

/* Frees one handle; the caller has unlinked it. */
static void handle_free(struct httpc_handle *h)
{
	if (!h)
		return;
	curl_easy_cleanup(h->easy);
	free(h);
}

static void handle_unlink(struct httpc *c, struct httpc_handle *h)
{
	if (h->prev)
		h->prev->next = h->next;
	else
		c->handles = h->next;
	if (h->next)
		h->next->prev = h->prev;
	h->prev = h->next = NULL;
}

/* pthread key destructor: a thread that used the client is exiting. */
static void handle_destroy(void *p)
{
	struct httpc_handle *h = p;
	struct httpc *c = h->c;

	pthread_mutex_lock(&c->mutex);
	handle_unlink(c, h);
	pthread_mutex_unlock(&c->mutex);
	handle_free(h);
}

/* The calling thread's handle, made on first use. Returns NULL on ENOMEM. */
static struct httpc_handle *handle_get(struct httpc *c)
{
	struct httpc_handle *h = pthread_getspecific(c->key);

	if (h)
		return h;
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	h->easy = curl_easy_init();
	if (!h->easy) {
		free(h);
		return NULL;
	}
	h->c = c;
	if (pthread_setspecific(c->key, h) != 0) {
		handle_free(h);
		return NULL;
	}
	pthread_mutex_lock(&c->mutex);
	h->next = c->handles;
	if (c->handles)
		c->handles->prev = h;
	c->handles = h;
	pthread_mutex_unlock(&c->mutex);
	return h;
}

/* Copies URL without "user:pass@" into a new string, for logs: libcurl's
 * URL parser takes the userinfo out. A URL it cannot parse is shown as
 * "<scheme>://(unparsable)" so that nothing after the scheme (a password)
 * reaches a log. Returns NULL when out of memory. */
static char *url_strip_userinfo(const char *url)
{
	CURLU *u = curl_url();
	char *got = NULL, *out = NULL;
	const char *sep = strstr(url, "://");
	size_t len, ulen = strlen(url);

	if (!u)
		return NULL;
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_USER, NULL, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_PASSWORD, NULL, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_URL, &got, 0) == CURLUE_OK) {
		len = strlen(got);
		/* libcurl gives a bare host the path "/"; our node URLs have
		 * their trailing '/' removed */
		if (len && got[len - 1] == '/' && ulen && url[ulen - 1] != '/')
			got[--len] = '\0';
		out = strdup(got);
	} else if (asprintf(&out, "%.*s://(unparsable)", sep ? (int)(sep - url) : 0, url) < 0) {
		out = NULL;
	}
	curl_free(got);
	curl_url_cleanup(u);
	return out;
}

static int parse_nodes(struct httpc *c, const char *urls)
{
	const char *p = urls;
	int n = 1;

	for (; *p; p++)
		if (strchr(URL_SEPARATORS, *p))
			n++;
	c->nodes = calloc((size_t)n, sizeof(*c->nodes));
	if (!c->nodes)
		return -ENOMEM;
	p = urls;
	while (*p) {
		size_t len = strcspn(p, URL_SEPARATORS);
		const char *end = p[len] ? p + len : NULL;
		struct httpc_node *node = &c->nodes[c->nnodes];

		while (len && p[len - 1] == '/')
			len--;
		if (len) {
			node->url = strndup(p, len);
			if (!node->url)
				return -ENOMEM;
			node->name = url_strip_userinfo(node->url);
			if (!node->name)
				return -ENOMEM;
			c->nnodes++;
		}
		if (!end)
			break;
		p = end + 1;
	}
	return c->nnodes ? 0 : -EINVAL;
}

static char *dup_or_null(const char *s, int *err)
{
	char *d;

	if (!s)
		return NULL;
	d = strdup(s);
	if (!d)
		*err = -ENOMEM;
	return d;
}

/* "Authorization: ApiKey <encoded>" for KEY given as "id:key" (encoded
 * here: base64 has no ':') or already encoded. Returns NULL on ENOMEM. */
static char *api_key_header(const char *key)
{
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	static const char prefix[] = "Authorization: ApiKey ";
	size_t len = strcspn(key, "\r\n"), i, o;
	const unsigned char *k = (const unsigned char *)key;
	char *h;

	h = malloc(sizeof(prefix) + 4 * (len / 3 + 1) + 1);
	if (!h)
		return NULL;
	memcpy(h, prefix, sizeof(prefix) - 1);
	o = sizeof(prefix) - 1;
	if (!memchr(key, ':', len)) {
		memcpy(h + o, key, len);
		h[o + len] = '\0';
		return h;
	}
	for (i = 0; i + 2 < len; i += 3) {
		h[o++] = b64[k[i] >> 2];
		h[o++] = b64[((k[i] & 3) << 4) | (k[i + 1] >> 4)];
		h[o++] = b64[((k[i + 1] & 15) << 2) | (k[i + 2] >> 6)];
		h[o++] = b64[k[i + 2] & 63];
	}
	if (len - i == 1) {
		h[o++] = b64[k[i] >> 2];
		h[o++] = b64[(k[i] & 3) << 4];
		h[o++] = '=';
		h[o++] = '=';
	} else if (len - i == 2) {
		h[o++] = b64[k[i] >> 2];
		h[o++] = b64[((k[i] & 3) << 4) | (k[i + 1] >> 4)];
		h[o++] = b64[(k[i + 1] & 15) << 2];
		h[o++] = '=';
	}
	h[o] = '\0';
	return h;
}

int httpc_open(const struct httpc_config *cfg, struct httpc **out)
{
	struct httpc *c;
	int err = -ENOMEM;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->mutex, NULL);
	if (pthread_key_create(&c->key, handle_destroy) != 0) {
		pthread_mutex_destroy(&c->mutex);
		free(c);
		return -ENOMEM;
	}
	err = parse_nodes(c, cfg->urls ? cfg->urls : "");
	if (err == -EINVAL)
		tl_log(LOG_ERR, "no lock store URL given");
	if (err)
		goto out_free;
	err = 0;
	c->user = dup_or_null(cfg->user, &err);
	c->password = dup_or_null(cfg->password, &err);
	c->cacert = dup_or_null(cfg->cacert, &err);
	if (cfg->api_key && *cfg->api_key) {
		c->auth_header = api_key_header(cfg->api_key);
		if (!c->auth_header)
			err = -ENOMEM;
	}
	if (err)
		goto out_free;
	c->insecure = cfg->insecure;
	c->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 5000;
	c->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms
							: (c->timeout_ms < 2000 ? c->timeout_ms : 2000);
	c->max_body = cfg->max_body ? cfg->max_body : HTTPC_DEFAULT_MAX_BODY;
	err = httpc_set_opaque_id(c, cfg->opaque_id);
	if (err)
		goto out_free;
	*out = c;
	return 0;

out_free:
	httpc_close(c);
	return err;
}

/* Overwrites a secret before freeing it. */
static void free_secret(char *s)
{
	if (!s)
		return;
	explicit_bzero(s, strlen(s));
	free(s);
}

void httpc_close(struct httpc *c)
{
	struct httpc_handle *h, *next;
	int i;

	if (!c)
		return;
	/* After pthread_key_delete() no destructor runs; free what is left. */
	pthread_key_delete(c->key);
	for (h = c->handles; h; h = next) {
		next = h->next;
		handle_free(h);
	}
	for (i = 0; i < c->nnodes; i++) {
		free(c->nodes[i].url);
		free(c->nodes[i].name);
	}
	free(c->nodes);
	free_secret(c->user);
	free_secret(c->password);
	free_secret(c->auth_header);
	free(c->cacert);
	free(c->opaque_header);
	pthread_mutex_destroy(&c->mutex);
	free(c);
}

int httpc_set_opaque_id(struct httpc *c, const char *id)
{
	char *hdr = NULL, *old;
	size_t n;

	if (id && *id) {
		n = strlen(id) + sizeof("X-Opaque-Id: ");
		hdr = malloc(n);
		if (!hdr)
			return -ENOMEM;
		snprintf(hdr, n, "X-Opaque-Id: %s", id);
		/* a header value ends at the first CR or LF */
		hdr[strcspn(hdr, "\r\n")] = '\0';
	}
	pthread_mutex_lock(&c->mutex);
	old = c->opaque_header;
	c->opaque_header = hdr;
	pthread_mutex_unlock(&c->mutex);
	free(old);
	return 0;
}

const char *httpc_node_name(const struct httpc *c, int i)
{
	if (!c || i < 0 || i >= c->nnodes)
		return "?";
	return c->nodes[i].name;
}

uint64_t httpc_requests(const struct httpc *c)
{
	return __atomic_load_n(&c->requests, __ATOMIC_RELAXED);
}

void httpc_counters(const struct httpc *c, struct httpc_counters *out)
{
	out->requests = stats_get(&c->requests);
	out->failures = stats_get(&c->failures);
	out->bytes_sent = stats_get(&c->bytes_sent);
	out->bytes_received = stats_get(&c->bytes_received);
	out->seconds = &c->seconds;
	out->served_us = __atomic_load_n(&c->served_us, __ATOMIC_RELAXED);
}

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct buf *b = userdata;
	size_t n = size * nmemb;

	/* a short count makes libcurl fail with CURLE_WRITE_ERROR */
	return buf_add(b, ptr, n) == 0 ? n : 0;
}

/* Maps a libcurl failure to -errno (transport only; HTTP statuses are not
 * errors here). */
/* libcurl's progress callback: ends a transfer once the client's end
 * (httpc_set_end()) has passed. Called at least about once a second, also
 * while nothing is transferred. */
static int end_cb(void *clientp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		  curl_off_t ulnow)
{
	const struct httpc *c = clientp;
	int64_t end = __atomic_load_n(&c->end_ms, __ATOMIC_RELAXED);

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return end && tl_mono_ms() >= end;
}

void httpc_set_end(struct httpc *c, int64_t end_ms)
{
	__atomic_store_n(&c->end_ms, end_ms, __ATOMIC_RELAXED);
}

int64_t httpc_end(const struct httpc *c)
{
	return __atomic_load_n(&c->end_ms, __ATOMIC_RELAXED);
}

static int curl_errno(CURLcode rc, bool toobig)
{
	if (toobig)
		return -EMSGSIZE;
	switch (rc) {
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_ABORTED_BY_CALLBACK: /* the client's end (httpc_set_end()) */
		return -ETIMEDOUT;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_USE_SSL_FAILED:
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
		return -EPROTO;
	default:
		return -ECONNREFUSED;
	}
}

/* Picks the node to try after having tried the nodes in TRIED. Returns
 * the index, or -1 when every node has been tried. */
static int next_node(struct httpc *c, const bool *tried)
{
	int64_t now = tl_mono_ms(), best_dead = INT64_MAX;
	int i, k, pick = -1, dead_pick = -1;

	pthread_mutex_lock(&c->mutex);
	for (k = 0; k < c->nnodes; k++) {
		i = (c->preferred + k) % c->nnodes;
		if (tried[i])
			continue;
		if (c->nodes[i].dead_until <= now) {
			pick = i;
			break;
		}
		if (c->nodes[i].dead_until < best_dead) {
			best_dead = c->nodes[i].dead_until;
			dead_pick = i;
		}
	}
	pthread_mutex_unlock(&c->mutex);
	return pick >= 0 ? pick : dead_pick;
}

static void node_result(struct httpc *c, int i, bool ok)
{
	pthread_mutex_lock(&c->mutex);
	if (ok) {
		c->nodes[i].dead_until = 0;
		c->preferred = i;
	} else {
		c->nodes[i].dead_until = tl_mono_ms() + HTTPC_NODE_RETRY_MS;
		if (c->preferred == i)
			c->preferred = (i + 1) % c->nnodes;
	}
	pthread_mutex_unlock(&c->mutex);
}

/* One attempt against node I. Returns 0 with *RESP filled, or -errno. */
static int request_node(struct httpc *c, struct httpc_handle *h, int i, const char *method,
			const char *path, const char *ctype, const char *body, size_t len,
			unsigned int timeout_ms, struct httpc_response *resp, char *errbuf,
			size_t errlen)
{
	char curl_err[CURL_ERROR_SIZE] = "";
	char ct_header[128];
	struct curl_slist *hdrs = NULL, *tmp;
	struct buf b;
	CURL *e = h->easy;
	char *url = NULL;
	CURLcode rc;
	int64_t t0;
	int err = -ENOMEM;
	size_t ulen;

	buf_init(&b, c->max_body);
	ulen = strlen(c->nodes[i].url) + strlen(path) + 1;
	url = malloc(ulen);
	if (!url)
		goto out;
	snprintf(url, ulen, "%s%s", c->nodes[i].url, path);

	snprintf(ct_header, sizeof(ct_header), "Content-Type: %s", ctype ? ctype : HTTPC_JSON);
	tmp = curl_slist_append(hdrs, ct_header);
	if (!tmp)
		goto out_free_headers;
	hdrs = tmp;
	tmp = curl_slist_append(hdrs, "Accept: application/json");
	if (!tmp)
		goto out_free_headers;
	hdrs = tmp;
	/* no "Expect: 100-continue" round trip on larger bodies */
	tmp = curl_slist_append(hdrs, "Expect:");
	if (!tmp)
		goto out_free_headers;
	hdrs = tmp;
	pthread_mutex_lock(&c->mutex);
	tmp = c->opaque_header ? curl_slist_append(hdrs, c->opaque_header) : hdrs;
	pthread_mutex_unlock(&c->mutex);
	if (!tmp)
		goto out_free_headers;
	hdrs = tmp;
	if (c->auth_header) {
		tmp = curl_slist_append(hdrs, c->auth_header);
		if (!tmp)
			goto out_free_headers;
		hdrs = tmp;
	}

	curl_easy_reset(e);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout_ms ? timeout_ms : c->timeout_ms));
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)(timeout_ms && timeout_ms < c->connect_timeout_ms ? timeout_ms
										: c->connect_timeout_ms));
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, curl_err);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, end_cb);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, c);
	curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	if (strcmp(method, "HEAD") == 0)
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	else if (strcmp(method, "GET") != 0)
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	if (c->user) {
		curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		curl_easy_setopt(e, CURLOPT_USERNAME, c->user);
		curl_easy_setopt(e, CURLOPT_PASSWORD, c->password ? c->password : "");
	}
	if (c->cacert)
		curl_easy_setopt(e, CURLOPT_CAINFO, c->cacert);
	if (c->insecure) {
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
	}

	__atomic_add_fetch(&c->requests, 1, __ATOMIC_RELAXED);
	t0 = tl_mono_us();
	rc = curl_easy_perform(e);
	stats_hist_record(&c->seconds, (uint64_t)(tl_mono_us() - t0));
	if (body)
		stats_add(&c->bytes_sent, len);
	/* nothing of ours may outlive this call inside the handle */
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, NULL);
	if (c->user) {
		curl_easy_setopt(e, CURLOPT_USERNAME, NULL);
		curl_easy_setopt(e, CURLOPT_PASSWORD, NULL);
	}
	if (rc != CURLE_OK) {
		bool toobig = b.err == -EMSGSIZE;

		stats_add(&c->failures, 1);
		err = curl_errno(rc, toobig);
		if (errbuf && errlen)
			snprintf(errbuf, errlen, "%s: %s", c->nodes[i].name,
				 toobig ? "response too big" : (curl_err[0] ? curl_err : curl_easy_strerror(rc)));
		buf_free(&b);
		goto out_free_headers;
	}
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &resp->status);
	stats_add(&c->bytes_received, b.len);
	if (resp->status > 0 && resp->status < 500 && resp->status != 429)
		__atomic_store_n(&c->served_us, tl_mono_us(), __ATOMIC_RELAXED);
	resp->body = buf_detach(&b, &resp->len);
	if (!resp->body) {
		err = -ENOMEM;
		goto out_free_headers;
	}
	resp->node = i;
	err = 0;

out_free_headers:
	curl_slist_free_all(hdrs);
out:
	free(url);
	return err;
}

int httpc_request(struct httpc *c, const char *method, const char *path, const char *ctype,
		  const char *body, size_t len, unsigned int timeout_ms, struct httpc_response *resp,
		  char *errbuf, size_t errlen)
{
	struct httpc_handle *h;
	bool *tried;
	int i, k, err = -ECONNREFUSED;
	/* an explicit TIMEOUT_MS bounds the whole request, every node tried */
	int64_t end = timeout_ms ? tl_mono_ms() + timeout_ms : 0, left;

	memset(resp, 0, sizeof(*resp));
	if (errbuf && errlen)
		errbuf[0] = '\0';
	h = handle_get(c);
	if (!h)
		return -ENOMEM;
	tried = calloc((size_t)c->nnodes, sizeof(*tried));
	if (!tried)
		return -ENOMEM;
	for (k = 0; k < c->nnodes; k++) {
		/* the client's end caps every attempt (httpc_set_end()) */
		int64_t cend = __atomic_load_n(&c->end_ms, __ATOMIC_RELAXED);
		unsigned int t = timeout_ms;

		i = next_node(c, tried);
		if (i < 0)
			break;
		tried[i] = true;
		if (end) {
			left = end - tl_mono_ms();
			if (left <= 0) {
				err = -ETIMEDOUT;
				break;
			}
			t = (unsigned int)left;
		}
		if (cend) {
			left = cend - tl_mono_ms();
			if (left <= 0) {
				err = -ETIMEDOUT;
				if (errbuf && errlen)
					snprintf(errbuf, errlen, "%s: the client is stopping",
						 c->nodes[i].name);
				break;
			}
			if (left < (t ? t : c->timeout_ms))
				t = (unsigned int)left;
		}
		err = request_node(c, h, i, method, path, ctype, body, len, t, resp, errbuf,
				   errlen);
		if (err == 0) {
			node_result(c, i, true);
			break;
		}
		if (err == -ENOMEM || err == -EMSGSIZE)
			break;
		node_result(c, i, false);
		tl_log(LOG_DEBUG, "lock store node '%s' failed: %s", c->nodes[i].name,
		       errbuf && *errbuf ? errbuf : strerror(-err));
	}
	free(tried);
	return err;
}

char *httpc_escape(const char *s)
{
	/* the handle argument is unused by libcurl's escaping */
	char *e = curl_easy_escape(NULL, s, 0);
	char *out = e ? strdup(e) : NULL;

	curl_free(e);
	return out;
}

void httpc_response_free(struct httpc_response *r)
{
	if (!r)
		return;
	free(r->body);
	memset(r, 0, sizeof(*r));
}
