/* es_batch.h - group commit: the es store's _bulk requests, batched
 *
 * Every _bulk of the lock protocol (acquire, refusal, rollback, release,
 * take-over, reap, kept releases) goes through here; one request is sent
 * by es_bulk_post() (es_client.h). This layer decides how many requests
 * are in flight, which bulks travel together, cuts large bulks into
 * chunks, and keeps the sender thread that sends handed-off releases. It
 * retries nothing (es_retry.h); a bulk still queued at its deadline fails
 * without being sent.
 *
 * Thread rules: every function may be called from many threads at once,
 * except es_batch_open()/es_batch_close() (one thread, nothing in
 * flight). Lock order: es_batch.mutex is a leaf; it is never held across a
 * request or a callback.
 */
#ifndef TREELOCKFS_ES_ES_BATCH_H
#define TREELOCKFS_ES_ES_BATCH_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "es/es_client.h"

/* Group commit: at most max_inflight (es_inflight=, default
 * ES_BATCH_INFLIGHT) _bulk requests of one client are in flight at once;
 * bulks submitted meanwhile queue and the next thread to find a slot open
 * sends every queued one (up to ES_BATCH_MAX of them, ES_BATCH_MAX_BYTES)
 * as one _bulk. A bulk submitted when nothing is in flight is sent at
 * once, alone: a lone rename never waits. With one request out, a further
 * slot opens only once ES_BATCH_EXTRA_MIN renames wait in the queue (a
 * handed-off release, below, holds up no rename and does not count; under
 * load each request then carries several renames, which costs the node
 * less than more, smaller requests) or the oldest has waited
 * ES_BATCH_AGE_MS (a slow request holds up the rest no longer than that). */
/*
 * Releases need not be waited for: a release submitted with
 * es_batch_send_detached() is handed to the client's sender thread and the
 * rename goes on at once (a rename alone costs one round trip, its
 * acquire); its items leave at once when a slot is free, else with the
 * next request (the same queue, the same rules), and its outcome reaches
 * a callback. An acquire whose documents a
 * handed-off release still holds in flight in another request does not
 * leave before that answer: the store would refuse it on our own lock. In
 * one request the items keep their order, so a release queued before an
 * acquire of the same document is applied first.
 */
#define ES_BATCH_INFLIGHT 2
#define ES_BATCH_INFLIGHT_MAX 16
#define ES_BATCH_EXTRA_MIN 4
#define ES_BATCH_AGE_MS 50
#define ES_BATCH_MAX 64
#define ES_BATCH_MAX_BYTES (4u << 20)
/* Items of one _bulk request at most: a larger bulk (a document-strategy
 * plan of a large directory) goes in chunks of this many, one after the
 * other, so that no answer nears the response cap (an item's answer is a
 * few hundred bytes, a refusal's about 2 KB). */
#define ES_BULK_MAX_ITEMS 1000

struct es_batch_req;

struct es_batch {
	struct es_client *cl;        /* sends each request (not owned) */
	pthread_mutex_t mutex;       /* leaf, guards the queue and inflight */
	pthread_cond_t cond;         /* CLOCK_MONOTONIC */
	struct es_batch_req *queue, *queue_tail;
	unsigned int inflight;       /* _bulk requests being sent */
	unsigned int inflight_released; /* of those, the ones that carry only
					 * handed-off bulks: no rename waits
					 * for them */
	unsigned int max_inflight;   /* at most, 1..ES_BATCH_INFLIGHT_MAX */
	unsigned int queued;         /* bulks in the queue */
	unsigned int extra_min;      /* queued bulks that open a further slot */
	int64_t age_ms;              /* or the queue's age that does */
	bool ready;                  /* the mutex and conds exist */
	bool solo;                   /* no group commit: releases waited for */
	/* handed-off bulks (es_batch_send_detached()): queued, and in
	 * flight (linked by fly_next); the sender thread sends the queue
	 * while it holds any */
	unsigned int detached_queued;
	unsigned int detached_live;  /* queued or in flight */
	struct es_batch_req *flying;
	pthread_t sender;
	pthread_cond_t sender_cond;  /* CLOCK_MONOTONIC; the sender's alone */
	bool sender_on, sender_stop;
};

/* Makes G send through C with at most MAX_INFLIGHT (1..
 * ES_BATCH_INFLIGHT_MAX, es_inflight=) _bulk requests in flight;
 * MAX_INFLIGHT 0 turns group commit off (no_es_group_commit): each bulk
 * leaves at once, alone, while fewer than ES_BATCH_INFLIGHT_MAX are out.
 * Returns 0. */
int es_batch_open(struct es_batch *g, struct es_client *c, unsigned int max_inflight);

/* Stops the sender thread (sending what was handed off) and frees what G
 * holds; accepts a G never opened (zeroed). */
void es_batch_close(struct es_batch *g);

/* Sends the ndjson of B to _bulk. On 0, *ROOT is the parsed response with
 * its "items" array (caller frees), holding exactly the items of B, in
 * order. Returns 0, -EAGAIN (the whole request failed in a retryable way:
 * it may or may not have been applied), -ETIMEDOUT (DEADLINE, monotonic
 * ms, passed while B was still queued: it was not sent), -EACCES
 * (refused, logged), -ENOMEM (B failed while being built).
 *
 * B may travel in one _bulk with the bulks of other threads (group commit,
 * see max_inflight): the items of each caller are applied in its
 * order, a failure of the whole request is every caller's, and the
 * request's timeout is capped by the earliest deadline among them.
 * A B of more than ES_BULK_MAX_ITEMS items goes in chunks, in order; a
 * chunk that fails ends it (-EAGAIN once an earlier chunk was sent: those
 * may have been applied), and so does DEADLINE passing between two
 * chunks. *ROOT then holds the items of every chunk. */
int es_batch_send(struct es_batch *g, const struct buf *b, int64_t deadline, cJSON **root);

/* Called with the outcome of a bulk handed off by
 * es_batch_send_detached(), on whichever thread sent its request (the
 * sender thread, or a rename's that led the queue), without G's locks:
 * ERR and ROOT as es_batch_send() returns them (ROOT is the callback's to
 * free), B the bulk as submitted, NUL-terminated. */
typedef void es_detached_fn(void *arg, int err, cJSON *root, const struct buf *b);

/* Starts G's sender thread (once the process runs as it will: after a
 * fork). Returns 0 or -errno. Without it every bulk is sent and waited
 * for by its submitter. */
int es_batch_start_sender(struct es_batch *g);

/* Sends B as es_batch_send() does under DEADLINE (its return value and
 * *ROOT) when no sender thread runs (or it is stopping), group commit is
 * off, or B is too large for one request. Otherwise hands a copy of B to the sender thread, which sends it with the queue
 * (under no deadline) and calls DONE(ARG, ...) once the answer or the
 * failure is known, and returns 1 at once (*ROOT NULL). */
int es_batch_send_detached(struct es_batch *g, const struct buf *b, int64_t deadline,
			   cJSON **root, es_detached_fn *done, void *arg);

/* Waits until no handed-off bulk is queued or in flight. */
void es_batch_drain(struct es_batch *g);

/* Sends what was handed off, waits for it, and ends the sender thread;
 * from then on every bulk is waited for. Accepts a G without one. */
void es_batch_stop_sender(struct es_batch *g);

#endif /* TREELOCKFS_ES_ES_BATCH_H */
