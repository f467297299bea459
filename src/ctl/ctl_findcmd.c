/* ctl_findcmd.c - treelockctl find and the entry points of the fs-index
 * commands: arguments, the mount, the pages of results and who may see
 * them
 *
 * Visibility is decided with access(2) through the mount, as the caller:
 * an entry is shown when the caller may read and search every directory
 * from the root to its parent (root sees everything), each directory
 * asked once. That is the check the kernel makes when the caller walks
 * there (ACLs, supplementary groups and the mount's own refusals
 * included), the rule .treelockfs/locks applies, and it holds now, not
 * when a document was written.
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/escape.h"
#include "base/log.h"
#include "base/path.h"
#include "ctl/ctl.h"
#include "ctl/ctl_find.h"
#include "ctl/ctl_i.h"
#include "es/es_fsctl.h"
#include "es/es_fsdoc.h"

#define PAGE_SIZE 5000

/* ---- who may see what ---- */

struct vis_slot {
	char *dir;
	bool ok;
};

struct vis {
	int rootfd;
	bool all;            /* root: everything */
	struct vis_slot *v;
	size_t cap, n;
};

static uint64_t vis_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static struct vis_slot *vis_slot(struct vis *v, const char *dir, bool *found)
{
	size_t i;

	if ((v->n + 1) * 2 > v->cap) {
		size_t ncap = v->cap ? v->cap * 2 : 256, j;
		struct vis_slot *nv = calloc(ncap, sizeof(*nv));

		if (!nv)
			return NULL;
		for (i = 0; i < v->cap; i++) {
			if (!v->v[i].dir)
				continue;
			for (j = vis_hash(v->v[i].dir) & (ncap - 1); nv[j].dir; j = (j + 1) & (ncap - 1))
				;
			nv[j] = v->v[i];
		}
		free(v->v);
		v->v = nv;
		v->cap = ncap;
	}
	for (i = vis_hash(dir) & (v->cap - 1); v->v[i].dir; i = (i + 1) & (v->cap - 1))
		if (strcmp(v->v[i].dir, dir) == 0) {
			*found = true;
			return &v->v[i];
		}
	*found = false;
	return &v->v[i];
}

/* Whether the caller may reach directory DIR and list and search it. */
static bool dir_walkable(struct vis *v, const char *dir)
{
	struct vis_slot *s;
	bool found, ok;
	size_t plen;

	s = vis_slot(v, dir, &found);
	if (!s)
		return false;
	if (found)
		return s->ok;
	plen = path_parent_len(dir, strlen(dir));
	ok = true;
	if (plen) {
		char *parent = strndup(dir, plen);

		ok = parent && dir_walkable(v, parent);
		free(parent);
		/* the table may have grown: find the slot again */
		s = vis_slot(v, dir, &found);
		if (!s)
			return false;
		if (found)
			return s->ok;
	}
	ok = ok && faccessat(v->rootfd, path_rel(dir), R_OK | X_OK, 0) == 0;
	s->dir = strdup(dir);
	if (!s->dir)
		return false;
	s->ok = ok;
	v->n++;
	return ok;
}

/* Whether the caller could reach KEY by walking. */
static bool visible(struct vis *v, const char *key)
{
	size_t plen = path_parent_len(key, strlen(key));
	char *parent;
	bool ok;

	if (v->all || !plen)
		return true;
	parent = strndup(key, plen);
	ok = parent && dir_walkable(v, parent);
	free(parent);
	return ok;
}

static void vis_free(struct vis *v)
{
	size_t i;

	for (i = 0; i < v->cap; i++)
		free(v->v[i].dir);
	free(v->v);
}

/* ---- find ---- */

struct out {
	const struct ctl_mount *m;
	const struct ctl_find *f;
	size_t n;
};

static void emit(struct out *o, const struct es_fsentry *e)
{
	if (!o->f->json) {
		ctl_print_path(o->m, e->key, stdout);
		putchar('\n');
	} else {
		cJSON *j = cJSON_CreateObject();
		char *shown = ctl_shown_path(o->m, e->key), *text;
		char type[2] = {e->type, '\0'};

		cJSON_AddStringToObject(j, "path", shown ? shown : "");
		cJSON_AddStringToObject(j, "type", type);
		cJSON_AddNumberToObject(j, "size", (double)e->size);
		cJSON_AddNumberToObject(j, "mtime", (double)e->mtime);
		cJSON_AddNumberToObject(j, "mode", e->mode);
		cJSON_AddNumberToObject(j, "uid", e->uid);
		cJSON_AddNumberToObject(j, "gid", e->gid);
		text = cJSON_PrintUnformatted(j);
		printf("%s%s", o->n ? ",\n" : "", text ? text : "{}");
		free(text);
		free(shown);
		cJSON_Delete(j);
	}
	o->n++;
}

/* The key of PATH, a starting point under the mount M: MOUNTPOINT/a, /a
 * or a, as a new string in *OUT. */
static int start_key(const struct ctl_mount *m, const char *path, char **out)
{
	size_t n = strlen(m->shown);
	char *tmp = NULL;
	int err;

	if (strncmp(path, m->shown, n) == 0 && (path[n] == '/' || !path[n]))
		path += n;
	if (!*path)
		path = "/";
	if (path[0] != '/') {
		if (asprintf(&tmp, "/%s", path) < 0)
			return -ENOMEM;
		path = tmp;
	}
	err = path_normalise(path, out);
	free(tmp);
	return err;
}

static int run_find(struct ctl_mount *m, const char *key, const struct ctl_find *f)
{
	struct vis v = {m->rootfd, getuid() == 0, NULL, 0, 0};
	struct out o = {m, f, 0};
	struct es_fsentry self, *page = calloc(PAGE_SIZE, sizeof(*page));
	int64_t now = ctl_now_ns();
	cJSON *q = ctl_find_query(f, key, m->shown, now);
	char *after = NULL, why[256];
	size_t got, i;
	int more = 1, err, rc = 0;

	if (!page || !q) {
		fprintf(stderr, "treelockctl: out of memory\n");
		free(page);
		cJSON_Delete(q);
		return CTL_EXIT_STORE;
	}
	if (f->json)
		printf("[");
	/* the starting point first, as find prints it */
	err = es_fsctl_get(m->fs, key, &self);
	if (err == -ENOENT) {
		fprintf(stderr, "treelockctl: '");
		ctl_print_path(m, key, stderr);
		fprintf(stderr, "': not in fs index '%s'\n", es_fsctl_index(m->fs));
		rc = CTL_EXIT_USAGE;
		err = 0;
		more = 0;
	} else if (!err) {
		char *raw = ctl_raw_path(m, key);

		if (raw && visible(&v, key) && ctl_find_match(f, &self, raw, now))
			emit(&o, &self);
		free(raw);
		es_fsentry_free(&self);
	}
	while (!err && more > 0 && !(f->limit && o.n >= f->limit)) {
		more = es_fsctl_page(m->fs, q, &after, PAGE_SIZE, page, &got);
		if (more < 0) {
			err = more;
			break;
		}
		for (i = 0; i < got; i++) {
			char *raw = ctl_raw_path(m, page[i].key);

			if (raw && !(f->limit && o.n >= f->limit) && visible(&v, page[i].key) &&
			    ctl_find_match(f, &page[i], raw, now))
				emit(&o, &page[i]);
			free(raw);
			es_fsentry_free(&page[i]);
		}
	}
	if (f->json)
		printf("%s]\n", o.n ? "\n" : "");
	if (err) {
		es_fsctl_last_error(m->fs, why, sizeof(why));
		fprintf(stderr, "treelockctl: cannot search fs index '%s': %s\n",
			es_fsctl_index(m->fs), err == -ENOENT ? "no such index" : *why ? why
									 : strerror(-err));
		rc = CTL_EXIT_STORE;
	}
	vis_free(&v);
	free(after);
	free(page);
	cJSON_Delete(q);
	return rc;
}

/* ---- entry points ---- */

/* The command line of an fs-index command, split. */
struct cmdline {
	char *pos[4];         /* positional arguments */
	size_t npos;
	char **store;         /* store options: -o X, --name=value */
	size_t nstore;
	char **rest;          /* find's tests, in order */
	size_t nrest;
	const char *index;
	bool quiet, repair, json, no_wait, help;
};

static int split_args(int argc, char **argv, bool find, struct cmdline *c)
{
	int i;

	memset(c, 0, sizeof(*c));
	c->store = calloc((size_t)argc + 1, sizeof(*c->store));
	c->rest = calloc((size_t)argc + 1, sizeof(*c->rest));
	if (!c->store || !c->rest)
		return -ENOMEM;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--index") == 0 && i + 1 < argc) {
			c->index = argv[++i];
		} else if (strncmp(a, "--index=", 8) == 0) {
			c->index = a + 8;
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			c->help = true;
		} else if (!find && (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0)) {
			c->quiet = true;
		} else if (!find && strcmp(a, "--repair") == 0) {
			c->repair = true;
		} else if (!find && strcmp(a, "--json") == 0) {
			c->json = true;
		} else if (!find && strcmp(a, "--no-wait") == 0) {
			c->no_wait = true;
		} else if (strcmp(a, "-o") == 0 && i + 1 < argc) {
			c->store[c->nstore++] = argv[i];
			c->store[c->nstore++] = argv[++i];
		} else if ((strncmp(a, "-o", 2) == 0 && a[2]) ||
			   (strncmp(a, "--", 2) == 0 && strchr(a, '=') && strncmp(a, "--limit", 7) != 0)) {
			c->store[c->nstore++] = argv[i];
		} else if (a[0] == '-' && find) {
			/* a test and its argument */
			c->rest[c->nrest++] = argv[i];
			if (strcmp(a, "--json") != 0 && !strchr(a, '=') && i + 1 < argc)
				c->rest[c->nrest++] = argv[++i];
		} else if (a[0] == '-') {
			fprintf(stderr, "treelockctl: unknown option '%s'\n", a);
			return -EINVAL;
		} else if (c->npos < sizeof(c->pos) / sizeof(c->pos[0])) {
			c->pos[c->npos++] = argv[i];
		} else {
			fprintf(stderr, "treelockctl: too many arguments\n");
			return -EINVAL;
		}
	}
	return 0;
}

static void cmdline_free(struct cmdline *c)
{
	free(c->store);
	free(c->rest);
}

static const char index_usage[] =
	"usage: treelockctl index build MOUNTPOINT [PATH] [--quiet]\n"
	"       treelockctl index verify MOUNTPOINT [PATH] [--repair] [--json]\n"
	"       treelockctl index repair MOUNTPOINT [--no-wait] [--quiet]\n"
	"       (each takes --index NAME and store options: -o es_url=URL, ...)\n";

static const char find_usage[] =
	"usage: treelockctl find MOUNTPOINT [PATH] [-name PAT] [-path PAT] [-type C]\n"
	"       [-size [+-]N[cwbkMG]] [-mtime [+-]N] [-user NAME|UID] [--json] [--limit N]\n"
	"       [--index NAME]\n";

int ctl_index_main(int argc, char **argv)
{
	struct cmdline c;
	struct ctl_mount m;
	const char *sub;
	char *key = NULL;
	int rc = CTL_EXIT_USAGE;

	tl_log_init("treelockctl", LOG_WARNING);
	if (split_args(argc, argv, false, &c) != 0)
		goto out_usage;
	if (c.help) {
		fputs(index_usage, stdout);
		rc = 0;
		goto out;
	}
	sub = c.npos ? c.pos[0] : "";
	if (!((strcmp(sub, "build") == 0 && (c.npos == 2 || c.npos == 3)) ||
	      (strcmp(sub, "verify") == 0 && (c.npos == 2 || c.npos == 3)) ||
	      (strcmp(sub, "repair") == 0 && c.npos == 2)))
		goto out_usage;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	rc = ctl_mount_open(c.pos[1], c.index, c.store, c.nstore, &m);
	if (rc)
		goto out_curl;
	if (start_key(&m, c.npos == 3 ? c.pos[2] : "/", &key) != 0) {
		fprintf(stderr, "treelockctl: '%s' is not a path under the mount\n", c.pos[2]);
		rc = CTL_EXIT_USAGE;
	} else if (strcmp(sub, "build") == 0) {
		rc = ctl_index_build(&m, key, c.quiet);
	} else if (strcmp(sub, "verify") == 0) {
		rc = ctl_index_verify(&m, key, c.repair, c.json);
	} else {
		rc = ctl_index_repair(&m, c.quiet, c.no_wait);
	}
	free(key);
	ctl_mount_close(&m);
out_curl:
	curl_global_cleanup();
	goto out;
out_usage:
	fputs(index_usage, stderr);
out:
	cmdline_free(&c);
	return rc;
}

int ctl_find_main(int argc, char **argv)
{
	struct cmdline c;
	struct ctl_find f;
	struct ctl_mount m;
	char err[256], *key = NULL;
	int rc = CTL_EXIT_USAGE;

	tl_log_init("treelockctl", LOG_WARNING);
	memset(&f, 0, sizeof(f));
	if (split_args(argc, argv, true, &c) != 0)
		goto out_usage;
	if (c.help) {
		fputs(find_usage, stdout);
		rc = 0;
		goto out;
	}
	if (c.npos < 1 || c.npos > 2)
		goto out_usage;
	if (ctl_find_parse((int)c.nrest, c.rest, &f, err, sizeof(err)) != 0) {
		fprintf(stderr, "treelockctl: find: %s\n", err);
		goto out_usage;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	rc = ctl_mount_open(c.pos[0], c.index, c.store, c.nstore, &m);
	if (!rc) {
		if (start_key(&m, c.npos == 2 ? c.pos[1] : "/", &key) != 0) {
			fprintf(stderr, "treelockctl: '%s' is not a path under the mount\n", c.pos[1]);
			rc = CTL_EXIT_USAGE;
		} else {
			rc = run_find(&m, key, &f);
		}
		free(key);
		ctl_mount_close(&m);
	}
	curl_global_cleanup();
	goto out;
out_usage:
	fputs(find_usage, stderr);
out:
	ctl_find_free(&f);
	cmdline_free(&c);
	return rc;
}
