/* lockdeleg.h - directory delegations: store locks a mount keeps so that
 * its renames below a directory lock in its own memory
 *
 * A delegation of directory D is, in the store, the plan an entry
 * operation on D takes in the tree strategy (shared on D's ancestors,
 * exclusive on D) under a holder id of its own ("<owner>#d<ticket>"). It
 * excludes every other holder at or below D and every rename of an
 * ancestor, so while the mount holds it (and its lease is fresh) a
 * rename whose endpoints both lie strictly below delegated directories
 * takes its plan in a private mem store and sends nothing to the store.
 *
 *   granted: a mount renames within D (an endpoint's parent is D) the
 *            second time within a second (the first went through the
 *            store), D is not "/", not at, below or above another
 *            delegation of the mount, and not in its cooldown: ONE try,
 *            made when that second rename is routed, which, granted and
 *            its endpoints then both covered, is the delegation's first
 *            user; a refusal costs nothing more (that rename takes the
 *            store path)
 *   used:    by covered renames (users counted, and those it served)
 *   idle:    no rename used it for delegation_idle: the poller gives it
 *            back at its next round (no cooldown: nobody asked for it),
 *            so another host's first rename there waits for no recall
 *            and the poller, with nothing held, sends nothing
 *   recalled: another owner's waiter mark on D (any mode) or on an
 *            ancestor (exclusive), seen by the poller every
 *            delegation_recall/2 (one _mget; /3 below 0.5 s, as a
 *            waiter's backoff may oversleep the give-back by up to
 *            what it waited, 200 ms at most); or this mount's lease is
 *            not fresh; or a rename of this mount needs a store lock at
 *            or below D or exclusive on an ancestor (given back first,
 *            else the mount would wait for itself); or the mount ends
 *   released: once its users are done, by whichever thread sees the last
 *            one go; new renames wait for the release, then take the
 *            store path
 * A recall by another owner starts D's cooldown: 30 s, doubling at each
 * recall of D up to 10 min; so does a rename of this mount within D that
 * had to wait in the store (it met another host there: had it taken the
 * delegation, the other host's next rename would recall it).
 *
 * Thread rules: any thread; one mutex (a leaf but across the store's
 * release of a delegation, which holds no other lock) and one condition.
 */
#ifndef TREELOCKFS_LOCK_LOCKDELEG_H
#define TREELOCKFS_LOCK_LOCKDELEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/stats.h"

struct lockmgr;
struct tl_delegs;
struct tl_deleg;

/* True when KEY lies strictly below directory DIR (both normalised
 * keys). This function can't fail. */
bool deleg_covers(const char *dir, const char *key);

/* True when a store lock a rename of KEY takes (exclusive on KEY, shared
 * on its ancestors) conflicts with a delegation of DIR held by the same
 * mount: KEY at or below DIR, or an ancestor of it. This function can't
 * fail. */
bool deleg_conflicts(const char *dir, const char *key);

/* Makes the delegations of M (its store, its owner) with the recall
 * bound RECALL_S seconds and the idle time IDLE_S seconds after which an
 * unused delegation is given back, and starts the poller. Returns 0,
 * -ENOMEM or -errno of the private store or the thread. */
int delegs_open(struct lockmgr *m, double recall_s, double idle_s, struct tl_delegs **out);

/* Gives every delegation back (releases bounded by END_MS, monotonic ms),
 * stops the poller and frees D; accepts NULL. */
void delegs_close(struct tl_delegs *d, int64_t end_ms);

/* Routes rename FROM -> TO: returns true when both endpoints are covered
 * by delegations held with a fresh lease (their users counted in USE,
 * to end with delegs_done()), one of them maybe granted now for this
 * rename (the one try at it, a store request made without the mutex);
 * else gives back first every delegation the rename's store locks would
 * conflict with and returns false. */
bool delegs_route(struct tl_delegs *d, const char *from, const char *to, struct tl_deleg *use[2]);

/* The lock manager over the private store covered renames lock in. */
struct lockmgr *delegs_local(struct tl_delegs *d);

/* A covered rename ended: its users of USE go. This function can't fail. */
void delegs_done(struct tl_delegs *d, struct tl_deleg *use[2]);

/* A rename FROM -> TO took its locks in the store and released them:
 * counts it for the heuristic and may take a delegation (one
 * delegs_route() did not try, e.g. of the other directory of a rename
 * between two, or after a refused try the cooldown ran out). WAITED: it was
 * refused at least once (another holder, e.g. another host's delegation,
 * was in its way): its directories are shared, and start their cooldown
 * instead, so that two hosts taking turns in a directory do not take the
 * delegation from each other at every turn. */
void delegs_note(struct tl_delegs *d, const char *from, const char *to, bool waited);

/* The delegation counters, for the metrics. */
struct tl_deleg_counters {
	uint64_t granted;          /* delegations taken */
	uint64_t recalled;         /* recalled because another owner asked */
	uint64_t idle_returned;    /* given back unused for delegation_idle */
	uint64_t held;             /* gauge: held now (recalled ones until released) */
	uint64_t renames_local;    /* renames locked in the mount's own memory */
	const struct tl_hist *recall_wait; /* from a recall by another owner
					    * being noticed to the release */
};

/* Fills OUT with D's counters; the histogram stays D's (read it with
 * stats_get() while D is open). This function can't fail. */
void delegs_counters(struct tl_delegs *d, struct tl_deleg_counters *out);

/* What D knows of its delegation of the directory whose key text
 * (path_key_text()) is KEY_TEXT, held in the store under holder ID (a
 * listing's; its owner part is the store's owner id, which D does not
 * know: the ticket "#d<n>" and the directory tell it): the renames
 * using it now (*USERS), those it served (*SERVED) and its state
 * ("held", "recalled", "releasing"). Returns false (nothing written)
 * when D holds no such delegation, or out of memory. */
bool delegs_describe(struct tl_delegs *d, const char *key_text, const char *id,
		     unsigned int *users, uint64_t *served, const char **state);

/* Appends the delegation counters as "name value" lines to BUF (SIZE
 * bytes, LEN used). Returns the new length. */
size_t delegs_format(struct tl_delegs *d, char *buf, size_t size, size_t len);

#endif /* TREELOCKFS_LOCK_LOCKDELEG_H */
