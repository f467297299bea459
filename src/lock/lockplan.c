/* lockplan.c - lock plans, see lockplan.h
 *
 * Building a plan: collect {key, mode} candidates, sort them with
 * path_cmp(), then merge equal keys keeping the strongest mode. The sort
 * gives the one total order every acquirer uses, which together with
 * all-or-nothing acquisition rules out deadlock between plans.
 */
#include <config.h>

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lock/lockplan.h"
#include "base/path.h"

static const char *const strategy_names[] = {
	[TL_STRATEGY_TREE] = "tree",
	[TL_STRATEGY_GLOBAL] = "global",
	[TL_STRATEGY_DOCUMENT] = "document",
	[TL_STRATEGY_NONE] = "none",
};

const char *lockplan_strategy_name(enum tl_strategy s)
{
	if ((unsigned)s >= sizeof(strategy_names) / sizeof(strategy_names[0]))
		return "?";
	return strategy_names[s];
}

int lockplan_strategy_parse(const char *name, enum tl_strategy *out)
{
	unsigned i;

	for (i = 0; name && i < sizeof(strategy_names) / sizeof(strategy_names[0]); i++) {
		if (strcmp(name, strategy_names[i]) == 0) {
			*out = (enum tl_strategy)i;
			return 0;
		}
	}
	return -EINVAL;
}

/* Candidate keys point into the caller's strings until the plan is built. */
struct cand {
	const char *key;
	size_t len;
	size_t depth;           /* prefix_depth() of the key, computed once */
	enum tl_lock_mode mode;
};

/* A rename's candidates fit in STACK; more go to the heap. */
struct cands {
	struct cand *v;
	size_t n, cap;
	struct cand stack[24];
};

static void cands_init(struct cands *c)
{
	c->v = c->stack;
	c->n = 0;
	c->cap = sizeof(c->stack) / sizeof(c->stack[0]);
}

static void cands_free(struct cands *c)
{
	if (c->v != c->stack)
		free(c->v);
}

static size_t prefix_depth(const char *k, size_t len);

/* Adds KEY (its first LEN bytes) of prefix_depth() DEPTH in MODE. */
static int cands_add_d(struct cands *c, const char *key, size_t len, size_t depth,
		       enum tl_lock_mode mode)
{
	if (c->n == c->cap) {
		size_t cap = c->cap * 2;
		struct cand *v = c->v == c->stack ? malloc(cap * sizeof(*v))
						  : realloc(c->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		if (c->v == c->stack)
			memcpy(v, c->stack, c->n * sizeof(*v));
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n].key = key;
	c->v[c->n].len = len;
	c->v[c->n].depth = depth;
	c->v[c->n].mode = mode;
	c->n++;
	return 0;
}

static int cands_add(struct cands *c, const char *key, size_t len, enum tl_lock_mode mode)
{
	return cands_add_d(c, key, len, prefix_depth(key, len), mode);
}

/* Adds shared candidates for every proper ancestor of P but the root,
 * shallowest first (so that a rename's candidates come nearly sorted),
 * skipping those that are also proper ancestors of SEEN (whose own
 * ancestors are candidates already), if SEEN is not NULL. One pass over
 * P; sets *DEPTH to P's own prefix_depth(). */
static int cands_add_ancestors(struct cands *c, const char *p, const char *seen, size_t *depth)
{
	size_t i, d = 1, common = 0;
	int err;

	/* P's first COMMON bytes are SEEN's: a prefix of P that ends before
	 * them (at a '/') is a proper ancestor of SEEN too */
	if (seen)
		while (p[common] && p[common] == seen[common])
			common++;
	for (i = 1; p[i]; i++) {
		if (p[i] != '/')
			continue;
		if (i >= common) {
			err = cands_add_d(c, p, i, d, TL_SHARED);
			if (err)
				return err;
		}
		d++;
	}
	*depth = p[1] ? d : 0;
	return 0;
}

/* Compares two candidates as path_cmp() compares their keys. Keys are not
 * NUL-terminated at LEN, so depth and bytes are computed on the prefix. */
static size_t prefix_depth(const char *k, size_t len)
{
	size_t d = 0, i;

	if (len <= 1 || k[0] != '/')
		return 0;
	for (i = 0; i < len; i++)
		if (k[i] == '/')
			d++;
	return d;
}

static int cand_cmp(const void *pa, const void *pb)
{
	const struct cand *a = pa, *b = pb;
	bool ap = a->key[0] == '/', bp = b->key[0] == '/';
	size_t da, db, n;
	int c;

	if (ap != bp)
		return ap ? 1 : -1;
	da = a->depth;
	db = b->depth;
	if (da != db)
		return da < db ? -1 : 1;
	n = a->len < b->len ? a->len : b->len;
	c = memcmp(a->key, b->key, n);
	if (c)
		return c;
	if (a->len != b->len)
		return a->len < b->len ? -1 : 1;
	/* equal keys: exclusive first, so the merge keeps it */
	return (int)b->mode - (int)a->mode;
}

/* Sorts C's candidates with cand_cmp(): by insertion while they are few
 * (a rename's dozen or so: no allocation, no indirect calls), else qsort(). */
static void cands_sort(struct cands *c)
{
	size_t i, j;

	if (c->n > 32) {
		qsort(c->v, c->n, sizeof(c->v[0]), cand_cmp);
		return;
	}
	for (i = 1; i < c->n; i++) {
		struct cand x = c->v[i];

		for (j = i; j > 0 && cand_cmp(&c->v[j - 1], &x) > 0; j--)
			c->v[j] = c->v[j - 1];
		c->v[j] = x;
	}
}

/* The plan is one allocation: the struct, its items, then the strings
 * (from, to, every key), so lockplan_free() is one free(). */
static int plan_build(enum tl_strategy s, struct cands *c, const char *from, const char *to,
		      unsigned int flags, struct tl_plan **out)
{
	struct tl_plan *plan;
	size_t i, n = 0, size, flen = strlen(from), tlen = to ? strlen(to) : 0;
	char *str;

	cands_sort(c);
	size = sizeof(*plan) + flen + 1 + (to ? tlen + 1 : 0);
	for (i = 0; i < c->n; i++) {
		if (i > 0 && c->v[i].len == c->v[i - 1].len &&
		    memcmp(c->v[i].key, c->v[i - 1].key, c->v[i].len) == 0)
			continue; /* the first of equal keys has the strongest mode */
		if (c->v[i].len > UINT_MAX)
			return -ENOMEM; /* tl_lock_item.len; no memory holds such a key */
		size += sizeof(plan->items[0]) + c->v[i].len + 1;
		n++;
	}
	plan = malloc(size);
	if (!plan)
		return -ENOMEM;
	memset(plan, 0, sizeof(*plan));
	plan->strategy = s;
	plan->flags = flags;
	plan->items = n ? (struct tl_lock_item *)(plan + 1) : NULL;
	str = (char *)(plan + 1) + n * sizeof(plan->items[0]);
	plan->from = memcpy(str, from, flen + 1);
	str += flen + 1;
	if (to) {
		plan->to = memcpy(str, to, tlen + 1);
		str += tlen + 1;
	}
	for (i = 0; i < c->n; i++) {
		struct tl_lock_item *it;

		if (i > 0 && c->v[i].len == c->v[i - 1].len &&
		    memcmp(c->v[i].key, c->v[i - 1].key, c->v[i].len) == 0)
			continue;
		it = &plan->items[plan->n++];
		it->key = memcpy(str, c->v[i].key, c->v[i].len);
		str[c->v[i].len] = '\0';
		str += c->v[i].len + 1;
		it->mode = c->v[i].mode;
		it->len = (unsigned int)c->v[i].len;
	}
	*out = plan;
	return 0;
}

int lockplan_rename(enum tl_strategy s, const char *from, const char *to, unsigned int flags,
		    const char *const *below, size_t nbelow, struct tl_plan **out)
{
	struct cands c;
	size_t i, dfrom, dto;
	int err;

	*out = NULL;
	if (!path_is_normal(from) || !path_is_normal(to))
		return -EINVAL;
	cands_init(&c);
	switch (s) {
	case TL_STRATEGY_TREE:
		err = cands_add_ancestors(&c, from, NULL, &dfrom);
		if (!err)
			err = cands_add_ancestors(&c, to, from, &dto);
		if (!err && from[1])
			err = cands_add_d(&c, from, strlen(from), dfrom, TL_EXCLUSIVE);
		if (!err && to[1])
			err = cands_add_d(&c, to, strlen(to), dto, TL_EXCLUSIVE);
		break;
	case TL_STRATEGY_GLOBAL:
		err = cands_add(&c, TL_GLOBAL_KEY, strlen(TL_GLOBAL_KEY), TL_EXCLUSIVE);
		break;
	case TL_STRATEGY_DOCUMENT:
		err = 0;
		if (from[1])
			err = cands_add(&c, from, strlen(from), TL_EXCLUSIVE);
		for (i = 0; !err && i < nbelow; i++) {
			if (!path_is_normal(below[i]) || !path_is_ancestor(from, below[i])) {
				err = -EINVAL;
				break;
			}
			err = cands_add(&c, below[i], strlen(below[i]), TL_EXCLUSIVE);
		}
		if (!err && to[1])
			err = cands_add(&c, to, strlen(to), TL_EXCLUSIVE);
		break;
	case TL_STRATEGY_NONE:
		err = 0;
		break;
	default:
		err = -EINVAL;
	}
	if (!err)
		err = plan_build(s, &c, from, to, flags, out);
	cands_free(&c);
	return err;
}

/* How many whole components P and Q share from the start ("/a/b" and
 * "/a/bc" share one). */
static size_t common_components(const char *p, const char *q)
{
	size_t i, c = 0;

	if (!p[1] || !q[1])
		return 0; /* "/" has none */
	for (i = 1;; i++) {
		bool pe = p[i] == '/' || !p[i], qe = q[i] == '/' || !q[i];

		if (pe || qe) {
			if (!pe || !qe)
				return c;
			c++;
			if (!p[i] || !q[i])
				return c;
		} else if (p[i] != q[i]) {
			return c;
		}
	}
}

int lockplan_rename_endpoints(const char *from, const char *to, unsigned int flags,
			      struct tl_plan *out)
{
	memset(out, 0, sizeof(*out));
	if (!path_is_normal(from) || !path_is_normal(to))
		return -EINVAL;
	out->strategy = TL_STRATEGY_TREE;
	/* every key is a prefix of FROM or of TO that ends at a component:
	 * depth(FROM) of them, depth(TO), less those the two share */
	out->n = path_depth(from) + path_depth(to) - common_components(from, to);
	out->from = (char *)from;
	out->to = (char *)to;
	out->flags = flags;
	return 0;
}

int lockplan_tree_full(const struct tl_plan *p, struct tl_plan **out)
{
	int err = p->to ? lockplan_rename(TL_STRATEGY_TREE, p->from, p->to, p->flags, NULL, 0, out)
			: lockplan_entry(TL_STRATEGY_TREE, p->from, out);

	return err == -EINVAL ? -ENOMEM : err; /* its endpoints were checked */
}

/* True when the LEN bytes at A are the key B (BLEN bytes) or a proper
 * ancestor of it. */
static bool at_or_above(const char *a, size_t len, const char *b, size_t blen)
{
	return len <= blen && memcmp(a, b, len) == 0 && (len == blen || b[len] == '/');
}

/* P's endpoints that lock a key, into E (lengths in L): "/" locks none. */
static size_t endpoints(const struct tl_plan *p, const char *e[2], size_t l[2])
{
	size_t n = 0;

	if (p->from[1]) {
		e[n] = p->from;
		l[n++] = strlen(p->from);
	}
	if (p->to && p->to[1]) {
		e[n] = p->to;
		l[n++] = strlen(p->to);
	}
	return n;
}

bool lockplan_tree_conflict(const struct tl_plan *a, const struct tl_plan *b, const char **key,
			    size_t *len)
{
	const char *ea[2], *eb[2];
	size_t la[2], lb[2], na = endpoints(a, ea, la), nb = endpoints(b, eb, lb), i, j;

	/* an endpoint is locked exclusive; every key above it, shared */
	for (i = 0; i < na; i++)
		for (j = 0; j < nb; j++) {
			if (at_or_above(ea[i], la[i], eb[j], lb[j])) {
				*key = ea[i];
				*len = la[i];
				return true;
			}
			if (at_or_above(eb[j], lb[j], ea[i], la[i])) {
				*key = eb[j];
				*len = lb[j];
				return true;
			}
		}
	return false;
}

int lockplan_tree_mode(const struct tl_plan *p, const char *key, size_t len)
{
	const char *e[2];
	size_t l[2], n = endpoints(p, e, l), i;
	int mode = 0;

	if (len <= 1)
		return 0; /* "/" */
	for (i = 0; i < n; i++) {
		if (len == l[i] && memcmp(key, e[i], len) == 0)
			return 2;
		if (at_or_above(key, len, e[i], l[i]))
			mode = 1;
	}
	return mode;
}

int lockplan_entry(enum tl_strategy s, const char *path, struct tl_plan **out)
{
	struct cands c;
	size_t depth;
	int err = 0;

	*out = NULL;
	if (!path_is_normal(path))
		return -EINVAL;
	cands_init(&c);
	switch (s) {
	case TL_STRATEGY_TREE:
		err = cands_add_ancestors(&c, path, NULL, &depth);
		if (!err && path[1])
			err = cands_add_d(&c, path, strlen(path), depth, TL_EXCLUSIVE);
		break;
	case TL_STRATEGY_DOCUMENT:
		if (path[1])
			err = cands_add(&c, path, strlen(path), TL_EXCLUSIVE);
		break;
	case TL_STRATEGY_GLOBAL:
		err = cands_add(&c, TL_GLOBAL_KEY, strlen(TL_GLOBAL_KEY), TL_EXCLUSIVE);
		break;
	case TL_STRATEGY_NONE:
		break;
	default:
		err = -EINVAL;
	}
	if (!err)
		err = plan_build(s, &c, path, NULL, 0, out);
	cands_free(&c);
	return err;
}

void lockplan_free(struct tl_plan *plan)
{
	free(plan); /* one allocation (plan_build()) */
}
