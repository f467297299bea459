/* lockplan.c - lock plans, see lockplan.h
 *
 * Building a plan: collect {key, mode} candidates, sort them with
 * path_cmp(), then merge equal keys keeping the strongest mode. The sort
 * gives the one total order every acquirer uses, which together with
 * all-or-nothing acquisition rules out deadlock between plans.
 */
#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lockplan.h"
#include "path.h"

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
	enum tl_lock_mode mode;
};

struct cands {
	struct cand *v;
	size_t n, cap;
};

static int cands_add(struct cands *c, const char *key, size_t len, enum tl_lock_mode mode)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct cand *v = realloc(c->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n].key = key;
	c->v[c->n].len = len;
	c->v[c->n].mode = mode;
	c->n++;
	return 0;
}

/* Adds shared candidates for every proper ancestor of P but the root. */
static int cands_add_ancestors(struct cands *c, const char *p)
{
	size_t len = strlen(p);
	int err;

	for (len = path_parent_len(p, len); len > 1; len = path_parent_len(p, len)) {
		err = cands_add(c, p, len, TL_SHARED);
		if (err)
			return err;
	}
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
	da = prefix_depth(a->key, a->len);
	db = prefix_depth(b->key, b->len);
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

static int plan_build(enum tl_strategy s, struct cands *c, const char *from, const char *to,
		      unsigned int flags, struct tl_plan **out)
{
	struct tl_plan *plan;
	size_t i;
	int err = -ENOMEM;

	plan = calloc(1, sizeof(*plan));
	if (!plan)
		goto out;
	plan->strategy = s;
	plan->flags = flags;
	plan->from = strdup(from);
	if (!plan->from)
		goto out_free_plan;
	if (to) {
		plan->to = strdup(to);
		if (!plan->to)
			goto out_free_plan;
	}
	if (c->n) {
		qsort(c->v, c->n, sizeof(c->v[0]), cand_cmp);
		plan->items = calloc(c->n, sizeof(plan->items[0]));
		if (!plan->items)
			goto out_free_plan;
	}
	for (i = 0; i < c->n; i++) {
		struct tl_lock_item *it;

		if (i > 0 && c->v[i].len == c->v[i - 1].len &&
		    memcmp(c->v[i].key, c->v[i - 1].key, c->v[i].len) == 0)
			continue; /* the first of equal keys has the strongest mode */
		it = &plan->items[plan->n];
		it->key = strndup(c->v[i].key, c->v[i].len);
		if (!it->key)
			goto out_free_plan;
		it->mode = c->v[i].mode;
		plan->n++;
	}
	*out = plan;
	return 0;

out_free_plan:
	lockplan_free(plan);
out:
	return err;
}

int lockplan_rename(enum tl_strategy s, const char *from, const char *to, unsigned int flags,
		    const char *const *below, size_t nbelow, struct tl_plan **out)
{
	struct cands c = {0};
	size_t i;
	int err;

	*out = NULL;
	if (!path_is_normal(from) || !path_is_normal(to))
		return -EINVAL;
	switch (s) {
	case TL_STRATEGY_TREE:
		err = cands_add_ancestors(&c, from);
		if (!err)
			err = cands_add_ancestors(&c, to);
		if (!err && from[1])
			err = cands_add(&c, from, strlen(from), TL_EXCLUSIVE);
		if (!err && to[1])
			err = cands_add(&c, to, strlen(to), TL_EXCLUSIVE);
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
	free(c.v);
	return err;
}

int lockplan_entry(enum tl_strategy s, const char *path, struct tl_plan **out)
{
	struct cands c = {0};
	int err = 0;

	*out = NULL;
	if (!path_is_normal(path))
		return -EINVAL;
	switch (s) {
	case TL_STRATEGY_TREE:
		err = cands_add_ancestors(&c, path);
		/* fall through */
	case TL_STRATEGY_DOCUMENT:
		if (!err && path[1])
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
	free(c.v);
	return err;
}

void lockplan_free(struct tl_plan *plan)
{
	size_t i;

	if (!plan)
		return;
	for (i = 0; i < plan->n; i++)
		free(plan->items[i].key);
	free(plan->items);
	free(plan->from);
	free(plan->to);
	free(plan);
}
