/* test_httpc.c - httpc against a canned responder, and the responder itself
 *
 * The responder is a tiny HTTP/1.1 server thread on 127.0.0.1 (like curl's
 * tests/data <reply>/<verify>): it records every request (method, path,
 * headers we care about, body) and answers from a queue of canned replies
 * or from a handler function. test_lockstore_es.c uses it too.
 */
#include <config.h>

#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "es/httpc.h"
#include "responder.h"
#include "unit.h"

/* ---- the responder ------------------------------------------------------- */

static void header_value(const char *hdrs, const char *name, char *out, size_t size)
{
	const char *p = hdrs;
	size_t n = strlen(name);

	out[0] = '\0';
	while (p && *p) {
		if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
			const char *v = p + n + 1, *end;

			while (*v == ' ')
				v++;
			end = strstr(v, "\r\n");
			if (!end)
				end = v + strlen(v);
			snprintf(out, size, "%.*s", (int)(end - v), v);
			return;
		}
		p = strstr(p, "\r\n");
		if (p)
			p += 2;
	}
}

/* Reads one request from FD into REQ. Returns 0, or -1 on EOF/error. */
static int read_request(int fd, struct resp_req *req)
{
	char buf[1 << 16];
	size_t len = 0, need;
	char *end, lenbuf[32];
	ssize_t n;

	memset(req, 0, sizeof(*req));
	for (;;) {
		n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			return -1;
		len += (size_t)n;
		buf[len] = '\0';
		end = strstr(buf, "\r\n\r\n");
		if (end)
			break;
		if (len == sizeof(buf) - 1)
			return -1;
	}
	end[2] = '\0';
	sscanf(buf, "%15s %1023s", req->method, req->path);
	header_value(strchr(buf, '\n') + 1, "Content-Type", req->ctype, sizeof(req->ctype));
	header_value(strchr(buf, '\n') + 1, "Accept", req->accept, sizeof(req->accept));
	header_value(strchr(buf, '\n') + 1, "X-Opaque-Id", req->opaque, sizeof(req->opaque));
	header_value(strchr(buf, '\n') + 1, "Authorization", req->auth, sizeof(req->auth));
	header_value(strchr(buf, '\n') + 1, "Content-Length", lenbuf, sizeof(lenbuf));
	need = (size_t)atol(lenbuf);
	req->body = malloc(need + 1);
	if (!req->body)
		return -1;
	req->len = len - (size_t)(end + 4 - buf);
	if (req->len > need)
		req->len = need;
	memcpy(req->body, end + 4, req->len);
	while (req->len < need) {
		n = read(fd, req->body + req->len, need - req->len);
		if (n <= 0) {
			free(req->body);
			req->body = NULL;
			return -1;
		}
		req->len += (size_t)n;
	}
	req->body[req->len] = '\0';
	return 0;
}

static void send_reply(int fd, int status, const char *body)
{
	char head[256];
	size_t blen = strlen(body);
	int n;

	n = snprintf(head, sizeof(head),
		     "HTTP/1.1 %d X\r\nContent-Type: application/json; charset=UTF-8\r\n"
		     "Content-Length: %zu\r\n\r\n",
		     status, blen);
	/* the client may have given up already: no SIGPIPE */
	if (send(fd, head, (size_t)n, MSG_NOSIGNAL) < 0 || send(fd, body, blen, MSG_NOSIGNAL) < 0)
		return;
}

/* Answers the requests of connection C until it closes or R stops. */
static void serve(struct responder *r, int c)
{
	for (;;) {
		struct resp_req req;
		struct canned reply = {.status = 500, .body = "{}"};
		char *dyn = NULL;
		int idx;

		struct pollfd pc = {.fd = c, .events = POLLIN};

		while (!__atomic_load_n(&r->stop, __ATOMIC_SEQ_CST) && poll(&pc, 1, 50) == 0)
			;
		if (__atomic_load_n(&r->stop, __ATOMIC_SEQ_CST) || read_request(c, &req))
			break;
		pthread_mutex_lock(&r->mu);
		idx = r->nreqs;
		if (r->nreqs < RESP_MAX_REQS)
			r->reqs[r->nreqs++] = req;
		else
			free(req.body);
		if (r->handler) {
			reply.status = r->handler(r, &r->reqs[idx < RESP_MAX_REQS ? idx : 0], &dyn);
			reply.body = dyn ? dyn : "{}";
			if (r->hang_next_ms) {
				reply.action = RESP_HANG;
				reply.hang_ms = r->hang_next_ms;
				r->hang_next_ms = 0;
			}
		} else if (r->next < r->nreplies) {
			reply = r->replies[r->next++];
		}
		pthread_mutex_unlock(&r->mu);
		if (reply.action == RESP_CLOSE) {
			free(dyn);
			break;
		}
		if (reply.action == RESP_HANG)
			usleep(reply.hang_ms * 1000);
		send_reply(c, reply.status, reply.body);
		free(dyn);
	}
	close(c);
}

struct conn_arg {
	struct responder *r;
	int c;
};

static void *serve_main(void *arg)
{
	struct conn_arg *a = arg;

	serve(a->r, a->c);
	free(a);
	return NULL;
}

static void *responder_main(void *arg)
{
	struct responder *r = arg;

	while (!__atomic_load_n(&r->stop, __ATOMIC_SEQ_CST)) {
		struct pollfd p = {.fd = r->fd, .events = POLLIN};
		struct conn_arg *a;
		int c;

		if (poll(&p, 1, 50) <= 0)
			continue;
		c = accept(r->fd, NULL, NULL);
		if (c < 0)
			continue;
		if (!r->concurrent || r->nconn == RESP_MAX_CONNS ||
		    !(a = malloc(sizeof(*a)))) {
			serve(r, c);
			continue;
		}
		a->r = r;
		a->c = c;
		if (pthread_create(&r->conn_th[r->nconn], NULL, serve_main, a) == 0) {
			r->nconn++;
		} else {
			free(a);
			serve(r, c);
		}
	}
	return NULL;
}

int responder_start(struct responder *r)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t alen = sizeof(a);
	int one = 1;

	pthread_mutex_init(&r->mu, NULL);
	r->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (r->fd < 0)
		return -errno;
	setsockopt(r->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(r->fd, (struct sockaddr *)&a, sizeof(a)) || listen(r->fd, 8) ||
	    getsockname(r->fd, (struct sockaddr *)&a, &alen))
		return -errno;
	r->port = ntohs(a.sin_port);
	snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%d", r->port);
	return -pthread_create(&r->th, NULL, responder_main, r);
}

void responder_stop(struct responder *r)
{
	int i;

	__atomic_store_n(&r->stop, true, __ATOMIC_SEQ_CST);
	pthread_join(r->th, NULL);
	for (i = 0; i < r->nconn; i++)
		pthread_join(r->conn_th[i], NULL);
	close(r->fd);
	for (i = 0; i < r->nreqs; i++)
		free(r->reqs[i].body);
	pthread_mutex_destroy(&r->mu);
}

void responder_reply(struct responder *r, int status, const char *body)
{
	r->replies[r->nreplies].status = status;
	r->replies[r->nreplies].body = body;
	r->nreplies++;
}

/* ---- tests ------------------------------------------------------------------ */

static struct httpc *client(const char *urls, const char *user, const char *pass,
			    const char *api_key, size_t max_body, unsigned int timeout_ms)
{
	struct httpc_config cfg = {.urls = urls,
				   .user = user,
				   .password = pass,
				   .api_key = api_key,
				   .max_body = max_body,
				   .timeout_ms = timeout_ms,
				   .opaque_id = "hostA:42:cafe"};
	struct httpc *c = NULL;

	ck_assert_int_eq(httpc_open(&cfg, &c), 0);
	return c;
}

START_TEST(test_httpc__sends_what_we_say)
{
	struct responder r = {0};
	struct httpc_response resp;
	struct httpc *c;

	ck_assert_int_eq(responder_start(&r), 0);
	responder_reply(&r, 201, "{\"result\":\"created\"}");
	c = client(r.url, NULL, NULL, NULL, 0, 0);
	ck_assert_int_eq(httpc_request(c, "PUT", "/idx/_create/%2Fa", NULL, "{\"x\":1}", 7, 0, &resp,
				       NULL, 0),
			 0);
	ck_assert_int_eq(resp.status, 201);
	ck_assert_str_eq(resp.body, "{\"result\":\"created\"}");
	httpc_response_free(&resp);
	ck_assert_int_eq(r.nreqs, 1);
	ck_assert_str_eq(r.reqs[0].method, "PUT");
	ck_assert_str_eq(r.reqs[0].path, "/idx/_create/%2Fa");
	ck_assert_str_eq(r.reqs[0].ctype, "application/json");
	ck_assert_str_eq(r.reqs[0].accept, "application/json");
	ck_assert_str_eq(r.reqs[0].opaque, "hostA:42:cafe");
	ck_assert_str_eq(r.reqs[0].body, "{\"x\":1}");
	ck_assert_str_eq(r.reqs[0].auth, "");
	ck_assert_uint_eq(httpc_requests(c), 1);
	httpc_close(c);
	responder_stop(&r);
}
END_TEST

START_TEST(test_httpc__content_type_always_explicit)
{
	struct responder r = {0};
	struct httpc_response resp;
	struct httpc *c;

	ck_assert_int_eq(responder_start(&r), 0);
	responder_reply(&r, 200, "{}");
	responder_reply(&r, 200, "{}");
	c = client(r.url, NULL, NULL, NULL, 0, 0);
	ck_assert_int_eq(httpc_request(c, "GET", "/", NULL, NULL, 0, 0, &resp, NULL, 0), 0);
	httpc_response_free(&resp);
	ck_assert_int_eq(httpc_request(c, "POST", "/_bulk", HTTPC_NDJSON, "{}\n", 3, 0, &resp, NULL, 0),
			 0);
	httpc_response_free(&resp);
	ck_assert_int_eq(r.nreqs, 2);
	/* never libcurl's default application/x-www-form-urlencoded */
	ck_assert_str_eq(r.reqs[0].ctype, "application/json");
	ck_assert_str_eq(r.reqs[1].ctype, "application/x-ndjson");
	ck_assert_str_eq(r.reqs[1].method, "POST");
	ck_assert_str_eq(r.reqs[1].body, "{}\n");
	httpc_close(c);
	responder_stop(&r);
}
END_TEST

START_TEST(test_httpc__basic_and_api_key)
{
	struct responder r = {0};
	struct httpc_response resp;
	struct httpc *c;

	ck_assert_int_eq(responder_start(&r), 0);
	responder_reply(&r, 200, "{}");
	responder_reply(&r, 200, "{}");
	responder_reply(&r, 200, "{}");
	c = client(r.url, "elastic", "s3cret", NULL, 0, 0);
	ck_assert_int_eq(httpc_request(c, "GET", "/", NULL, NULL, 0, 0, &resp, NULL, 0), 0);
	httpc_response_free(&resp);
	httpc_close(c);
	c = client(r.url, NULL, NULL, "aWQ6a2V5", 0, 0);
	ck_assert_int_eq(httpc_request(c, "GET", "/", NULL, NULL, 0, 0, &resp, NULL, 0), 0);
	httpc_response_free(&resp);
	httpc_close(c);
	/* "id:key" is encoded for us */
	c = client(r.url, NULL, NULL, "id:key1", 0, 0);
	ck_assert_int_eq(httpc_request(c, "GET", "/", NULL, NULL, 0, 0, &resp, NULL, 0), 0);
	httpc_response_free(&resp);
	httpc_close(c);
	ck_assert_str_eq(r.reqs[0].auth, "Basic ZWxhc3RpYzpzM2NyZXQ=");
	ck_assert_str_eq(r.reqs[1].auth, "ApiKey aWQ6a2V5");
	ck_assert_str_eq(r.reqs[2].auth, "ApiKey aWQ6a2V5MQ==");
	responder_stop(&r);
}
END_TEST

START_TEST(test_httpc__failover_skips_dead_node)
{
	struct responder r = {0};
	struct httpc_response resp;
	struct httpc *c;
	char urls[256];

	ck_assert_int_eq(responder_start(&r), 0);
	responder_reply(&r, 200, "{\"n\":1}");
	responder_reply(&r, 200, "{\"n\":2}");
	/* port 1 on loopback refuses connections */
	snprintf(urls, sizeof(urls), "http://127.0.0.1:1; %s/", r.url);
	c = client(urls, NULL, NULL, NULL, 0, 0);
	ck_assert_str_eq(httpc_node_name(c, 1), r.url);
	ck_assert_str_eq(httpc_node_name(c, 2), "?");
	ck_assert_int_eq(httpc_request(c, "GET", "/", NULL, NULL, 0, 0, &resp, NULL, 0), 0);
	ck_assert_int_eq(resp.node, 1);
	httpc_response_free(&resp);
	/* the dead node is skipped now: one attempt only */
	ck_assert_int_eq(httpc_request(c, "GET", "/", NULL, NULL, 0, 0, &resp, NULL, 0), 0);
	ck_assert_int_eq(resp.node, 1);
	ck_assert_str_eq(resp.body, "{\"n\":2}");
	httpc_response_free(&resp);
	ck_assert_uint_eq(httpc_requests(c), 3);
	httpc_close(c);
	responder_stop(&r);
}
END_TEST

START_TEST(test_httpc__unreachable_without_secrets)
{
	struct httpc_response resp;
	struct httpc *c;
	char err[256];
	int rc;

	c = client("http://elastic:hunter2@127.0.0.1:1", NULL, NULL, NULL, 0, 0);
	ck_assert_str_eq(httpc_node_name(c, 0), "http://127.0.0.1:1");
	rc = httpc_request(c, "GET", "/", NULL, NULL, 0, 0, &resp, err, sizeof(err));
	ck_assert_int_eq(rc, -ECONNREFUSED);
	ck_assert_ptr_null(strstr(err, "hunter2"));
	ck_assert_ptr_nonnull(strstr(err, "127.0.0.1"));
	httpc_close(c);
}
END_TEST

START_TEST(test_httpc__body_cap)
{
	static char big[8192];
	struct responder r = {0};
	struct httpc_response resp;
	struct httpc *c;

	memset(big, 'x', sizeof(big) - 1);
	ck_assert_int_eq(responder_start(&r), 0);
	responder_reply(&r, 200, big);
	c = client(r.url, NULL, NULL, NULL, 1024, 0);
	ck_assert_int_eq(httpc_request(c, "GET", "/", NULL, NULL, 0, 0, &resp, NULL, 0), -EMSGSIZE);
	ck_assert_ptr_null(resp.body);
	httpc_close(c);
	responder_stop(&r);
}
END_TEST

START_TEST(test_httpc__timeout)
{
	struct responder r = {0};
	struct httpc_response resp;
	struct httpc *c;

	ck_assert_int_eq(responder_start(&r), 0);
	r.replies[0] = (struct canned){.status = 200, .body = "{}", .action = RESP_HANG, .hang_ms = 600};
	r.nreplies = 1;
	c = client(r.url, NULL, NULL, NULL, 0, 200);
	ck_assert_int_eq(httpc_request(c, "GET", "/", NULL, NULL, 0, 0, &resp, NULL, 0), -ETIMEDOUT);
	httpc_close(c);
	responder_stop(&r);
}
END_TEST

START_TEST(test_httpc__keeps_connection)
{
	struct responder r = {0};
	struct httpc_response resp;
	struct httpc *c;
	int i;

	ck_assert_int_eq(responder_start(&r), 0);
	for (i = 0; i < 5; i++)
		responder_reply(&r, 200, "{}");
	c = client(r.url, NULL, NULL, NULL, 0, 0);
	for (i = 0; i < 5; i++) {
		ck_assert_int_eq(httpc_request(c, "GET", "/", NULL, NULL, 0, 0, &resp, NULL, 0), 0);
		ck_assert_int_eq(resp.status, 200);
		httpc_response_free(&resp);
	}
	/* the responder serves one connection at a time, in order: all five
	 * answered means the same easy handle kept working */
	ck_assert_int_eq(r.nreqs, 5);
	httpc_close(c);
	responder_stop(&r);
}
END_TEST

START_TEST(test_httpc__escape_one_segment)
{
	char *e;

	/* unreserved bytes stay, everything else (the separators '/', '?',
	 * '#', '%', a space, UTF-8) becomes %XX: one path segment */
	e = httpc_escape("Az09-._~");
	ck_assert_str_eq(e, "Az09-._~");
	free(e);
	e = httpc_escape("/a b?c#d%e/\xc3\xa9");
	ck_assert_str_eq(e, "%2Fa%20b%3Fc%23d%25e%2F%C3%A9");
	free(e);
	e = httpc_escape("");
	ck_assert_str_eq(e, "");
	free(e);
}
END_TEST

Suite *make_suite_httpc(void)
{
	Suite *s = suite_create("httpc");
	TCase *tc = tcase_create("core");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, test_httpc__sends_what_we_say);
	tcase_add_test(tc, test_httpc__content_type_always_explicit);
	tcase_add_test(tc, test_httpc__basic_and_api_key);
	tcase_add_test(tc, test_httpc__failover_skips_dead_node);
	tcase_add_test(tc, test_httpc__unreachable_without_secrets);
	tcase_add_test(tc, test_httpc__body_cap);
	tcase_add_test(tc, test_httpc__timeout);
	tcase_add_test(tc, test_httpc__keeps_connection);
	tcase_add_test(tc, test_httpc__escape_one_segment);
	suite_add_tcase(s, tc);
	return s;
}
