/* es_fsindex.h - the fs index of a mount (fs_index=NAME): what changed
 * through the mount, written as documents of the tree (es_fsdoc.h) by a
 * thread of its own
 *
 * The request path only records: a note (a key whose entry changed) goes
 * into a set under a mutex, where notes of one key coalesce; a directory's
 * rename becomes a job. The index thread takes the set every
 * fs_index_delay (sooner when it is large, at once for a job), looks each
 * key up in the backing tree (relative to the backing root, one component
 * at a time, never through a symlink) and writes what it finds there: the
 * document (es_fsdoc_put()) or its delete (es_fsdoc_del()), versioned by
 * the moment of the look-up, in bulks of ES_FSINDEX_CHUNK documents. The
 * write always states what the tree held when it was sent, so coalescing,
 * retries and the order among hosts are settled by the external versions
 * (a 409 is a newer truth already there, not an error).
 *
 * A directory rename FROM -> TO (a job): every document below FROM is read
 * back (a refresh, then a search by path prefix, search_after) and each
 * one's path looked up again (gone: deleted), then TO's subtree is crawled
 * and written. The rename's release of its store locks is parked here
 * (es_fsindex_park()) until those writes were answered: another host's
 * rename inside TO waits for the move to be indexed, and a mount killed
 * before leaves its intent in the store, which the mount that takes its
 * locks over repairs (es_fsindex_repair(), the same job). Each job also
 * sweeps FROM (its documents and itself) and TO (crawled) once more
 * ES_FSINDEX_SWEEP_MS later: a write another host looked up before the
 * move but that arrived after its search, or looked up in a client cache
 * that still showed the old tree, is put right then.
 *
 * Every key a round wrote is looked up once more fs_index_settle later
 * (a second look, not itself looked at again): a host whose client cache
 * (NFS attribute and entry caches, a FUSE mount's timeouts) still showed
 * an entry removed or changed by another host wrote the old state,
 * versioned later than the right one; the second look, past the cache's
 * lifetime, writes what the tree holds. A key noted again meanwhile gets
 * its look and one second look after it.
 *
 * A note may carry the entry's inode (an open file, a directory): when
 * the look-up (or the second look) finds no entry at the key or another
 * inode, the entry was renamed (by another host, under this host's
 * cached name) and the change belongs to its new path: the documents of
 * that inode (a refresh, then a term query on ino) are looked up again.
 *
 * An unreachable store: notes stay in the set (up to ES_FSINDEX_MAX_NOTES;
 * past it they are dropped, counted and logged: `treelockctl index verify
 * --repair` is needed), jobs are retried; a parked release goes once its
 * job gave up (locks are held longer than without the index, never
 * shorter).
 *
 * Thread rules: es_fsindex_note(), es_fsindex_tree(), es_fsindex_repair(),
 * es_fsindex_park() and es_fsindex_format() from any thread; open, start,
 * stop and close from one. Lock order: es_fsindex.mutex is a leaf, never
 * held across a request or a syscall.
 */
#ifndef TREELOCKFS_ES_ES_FSINDEX_H
#define TREELOCKFS_ES_ES_FSINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

struct es_store;
struct es_client;
struct es_fsindex;

/* Notes kept while the store cannot take them, at most. */
#define ES_FSINDEX_MAX_NOTES 1000000
/* A set this large is sent before its window ends. */
#define ES_FSINDEX_FLUSH_NOTES 4096
/* Documents of one _bulk request. */
#define ES_FSINDEX_CHUNK 500
/* A job's second look below FROM, this long after it. */
#define ES_FSINDEX_SWEEP_MS 8000

/* Makes index NAME through C when it is missing (es_fsdoc_index_body()),
 * or checks that it is an fs index of ours. Returns 0, -EINVAL (NAME is
 * an index of another mapping: logged), -EACCES (refused, logged) or
 * -ENOLCK (the store failed; retry). DEADLINE: monotonic ms. */
int es_fsindex_ensure(struct es_client *c, const char *name, int64_t deadline);

/* Makes the fs index of ES for index NAME (already ensured) over the
 * backing tree BACKING (opened now: before the mount can cover it),
 * notes gathered DELAY_S seconds, each key written looked up again
 * SETTLE_S seconds later (0: not). Returns 0, -ENOMEM or the -errno of
 * opening BACKING. */
int es_fsindex_open(struct es_store *es, const char *name, const char *backing, double delay_s,
		    double settle_s, struct es_fsindex **out);

/* Starts the index thread. Returns 0 or -errno. */
int es_fsindex_start(struct es_fsindex *fx);

/* Notes that KEY's entry changed. This function can't fail (without
 * memory, or past ES_FSINDEX_MAX_NOTES, the note is dropped and counted). */
void es_fsindex_note(struct es_fsindex *fx, const char *key);

/* es_fsindex_note() of an entry that had inode number INO (0: unknown):
 * when its look-up finds no entry at KEY or another inode, every
 * document of INO in the index (after a refresh) is looked up again: a
 * change made through a name or an open file that another host renamed
 * reaches the entry's new path. */
void es_fsindex_note_ino(struct es_fsindex *fx, const char *key, uint64_t ino);

/* A directory rename FROM -> TO was done: a job. Returns its ticket (for
 * es_fsindex_park()), 0 when it could not be recorded (no memory: the
 * keys are noted instead). */
uint64_t es_fsindex_tree(struct es_fsindex *fx, const char *from, const char *to);

/* The ticket of the last job recorded (0: none). */
uint64_t es_fsindex_last(struct es_fsindex *fx);

/* A dead owner's intent FROM -> TO (texts, path_key_text()) was taken
 * over: both are reconciled as a rename job's are (nothing waits for it).
 * This function can't fail (logged). */
void es_fsindex_repair(struct es_fsindex *fx, const char *from_text, const char *to_text);

/* Holds the release bulk B (copied) of the lock documents IDS[0..N)
 * (EXCL[i]: held exclusive) until the jobs up to ticket SEQ were answered
 * (or gave up); the index thread then sends it (es_send_release()).
 * Returns 1 (parked), 0 (nothing to wait for: send it now) or -ENOMEM. */
int es_fsindex_park(struct es_fsindex *fx, uint64_t seq, const struct buf *b, char *const *ids,
		    const bool *excl, size_t n);

/* An acquire of this mount about to ask for lock documents IDS[0..N)
 * (EXCL[i]: exclusive): waits (until DEADLINE, monotonic ms, 0: none)
 * while a parked release holds one of them in a conflicting mode, so that
 * it goes once that release is sent rather than being refused on our own
 * lock and backing off. This function can't fail. */
void es_fsindex_wait_parked(struct es_fsindex *fx, char *const *ids, const bool *excl, size_t n,
			    int64_t deadline);

/* Stops the thread, then sends what is noted and the jobs of this mount's
 * renames (each request bounded by the client's timeout, and by the end
 * the store's shutdown set), then the parked releases. Notes coming later
 * are dropped. Accepts NULL. */
void es_fsindex_stop(struct es_fsindex *fx);

/* Frees FX (stopped); accepts NULL. */
void es_fsindex_close(struct es_fsindex *fx);

/* Appends the stats lines (fs_index_notes, fs_index_writes,
 * fs_index_conflicts, fs_index_errors, fs_index_dropped, fs_index_jobs,
 * fs_index_settles: second looks made, fs_index_chased: paths looked up
 * again by inode, fs_index_lag_ms) to BUF (LEN used of SIZE); returns the new length. */
size_t es_fsindex_format(struct es_fsindex *fx, char *buf, size_t size, size_t len);

#endif /* TREELOCKFS_ES_ES_FSINDEX_H */
