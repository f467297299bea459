/* lockplan.h - which locks an operation needs, in which order (pure)
 *
 * A plan is the list of {key, mode} an operation must hold, sorted in the
 * one total order of path_cmp() (fewer components first, then bytewise) and
 * de-duplicated; a key wanted both shared and exclusive is exclusive.
 * Acquire in order, release in reverse order: the longest paths first.
 *
 *   strategy   rename(from, to)                          entry op on p
 *   tree       S on every proper ancestor of from/to,     S on ancestors, X on p
 *              X on from and on to; "/" never locked
 *   global     X on "global"                             X on "global"
 *   document   X on from, on every entry below it (the   X on p
 *              caller walks the backing tree), X on to
 *   none       nothing                                   nothing
 *
 * Entry plans are for lock_scope=namespace (create, mkdir, unlink, ...).
 * Nothing here does I/O, takes locks, logs or keeps state: it is unit-tested
 * as tables.
 */
#ifndef TREELOCKFS_LOCK_LOCKPLAN_H
#define TREELOCKFS_LOCK_LOCKPLAN_H

#include <stdbool.h>
#include <stddef.h>

enum tl_strategy {
	TL_STRATEGY_TREE = 0,
	TL_STRATEGY_GLOBAL,
	TL_STRATEGY_DOCUMENT,
	TL_STRATEGY_NONE,
};

enum tl_lock_mode {
	TL_SHARED = 0,
	TL_EXCLUSIVE = 1,
};

/* The key of the global strategy: not a path, so it never meets one. */
#define TL_GLOBAL_KEY "global"

struct tl_lock_item {
	char *key;              /* normalised path, or TL_GLOBAL_KEY */
	enum tl_lock_mode mode;
	unsigned int len;       /* strlen(key): stores compare lengths first */
};

struct tl_plan {
	enum tl_strategy strategy;
	struct tl_lock_item *items; /* sorted by path_cmp(), unique keys; NULL
				     * in an endpoint plan (below) */
	size_t n;                   /* how many keys it locks */
	char *from;                 /* the operation, for logs and intents */
	char *to;                   /* NULL for entry plans */
	unsigned int flags;         /* RENAME_* flags, as given */
};

/* Strategy names: "tree", "global", "document", "none". */
const char *lockplan_strategy_name(enum tl_strategy s);

/* Parses a strategy name. Returns 0 or -EINVAL. */
int lockplan_strategy_parse(const char *name, enum tl_strategy *out);

/* Plans rename(FROM, TO, FLAGS). FROM and TO are normalised keys (see
 * path.h). BELOW lists the keys of every entry below FROM (document strategy
 * only; ignored otherwise; may be NULL with NBELOW 0). Writes a new plan to
 * *OUT (free with lockplan_free()). Returns 0, -EINVAL for a key that is not
 * normalised, -ENOMEM. */
int lockplan_rename(enum tl_strategy s, const char *from, const char *to, unsigned int flags,
		    const char *const *below, size_t nbelow, struct tl_plan **out);

/* The tree plan of rename(FROM, TO, FLAGS) by its endpoints only, into
 * *OUT (the caller's, not freed): items NULL, n the number of keys the
 * full plan has. A tree plan's keys follow from its endpoints (FROM and TO,
 * or the one path of an entry plan), and so does whether two tree plans
 * conflict (lockplan_tree_conflict()); a store that says so
 * (TL_CAP_ENDPOINT_PLANS) takes such a plan instead of the full one,
 * which then costs no sort, copy or allocation. FROM and TO are borrowed:
 * they must stay as they are until the plan is released. Returns 0 or
 * -EINVAL for a key that is not normalised. */
int lockplan_rename_endpoints(const char *from, const char *to, unsigned int flags,
			      struct tl_plan *out);

/* The full plan of tree plan P (an endpoint plan or not) into *OUT (free
 * with lockplan_free()), for what lists its keys. Returns 0 or -ENOMEM. */
int lockplan_tree_full(const struct tl_plan *p, struct tl_plan **out);

/* True when tree plans A and B (rename or entry, endpoint plans or not)
 * share a key that either wants exclusive: an endpoint of one is an
 * endpoint of the other or an ancestor of one ("/" is never locked). Sets
 * *KEY and *LEN to such a key (one of those endpoints; not NUL-terminated
 * at *LEN). This function can't fail. */
bool lockplan_tree_conflict(const struct tl_plan *a, const struct tl_plan *b, const char **key,
			    size_t *len);

/* The mode in which tree plan P locks the LEN bytes of KEY: 1 shared, 2
 * exclusive, 0 not at all. This function can't fail. */
int lockplan_tree_mode(const struct tl_plan *p, const char *key, size_t len);

/* Plans an operation that creates or removes the entry PATH. */
int lockplan_entry(enum tl_strategy s, const char *path, struct tl_plan **out);

/* Frees a plan (not an endpoint plan); accepts NULL. */
void lockplan_free(struct tl_plan *plan);

#endif /* TREELOCKFS_LOCK_LOCKPLAN_H */
