/* responder.h - a canned HTTP responder for unit tests (test_httpc.c)
 *
 * A server thread on 127.0.0.1 that records each request and answers it
 * from REPLIES in order, or from HANDLER when set (HANDLER runs under mu,
 * returns the status and may set *BODY to a malloc'd reply body). One
 * connection at a time, unless CONCURRENT: then each connection (up to
 * RESP_MAX_CONNS) is served by its own thread (clients that send from
 * several threads keep one connection per thread).
 */
#ifndef TREELOCKFS_RESPONDER_H
#define TREELOCKFS_RESPONDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#define RESP_MAX_REQS 256
#define RESP_MAX_CONNS 32

enum resp_action {
	RESP_REPLY = 0,
	RESP_CLOSE,            /* close the connection without answering */
	RESP_HANG,             /* wait hang_ms, then answer */
};

struct resp_req {
	char method[16];
	char path[1024];
	char ctype[128];
	char accept[64];
	char opaque[160];
	char auth[256];
	char *body;
	size_t len;
};

struct canned {
	int status;
	const char *body;
	enum resp_action action;
	int hang_ms;
};

struct responder {
	int fd, port;
	char url[64];
	pthread_t th;
	pthread_mutex_t mu;
	struct canned replies[64];
	int nreplies, next;
	int (*handler)(struct responder *r, const struct resp_req *req, char **body);
	void *user;
	struct resp_req reqs[RESP_MAX_REQS]; /* protected by mu */
	int nreqs;
	bool stop;
	bool concurrent;
	int hang_next_ms;      /* set by HANDLER: this reply waits so long,
				* without mu (other connections go on) */
	pthread_t conn_th[RESP_MAX_CONNS];
	int nconn;
};

int responder_start(struct responder *r);
void responder_stop(struct responder *r);
void responder_reply(struct responder *r, int status, const char *body);

#endif /* TREELOCKFS_RESPONDER_H */
