/* ctl_find.c - treelockctl find's tests, see ctl_find.h
 */
#include <config.h>

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/path.h"
#include "ctl/ctl_find.h"
#include "es/es_fsdoc.h"

#define DAY_NS (86400LL * 1000000000LL)

int ctl_find_num(const char *arg, bool size, struct ctl_num *out)
{
	const char *p = arg;
	char *end;
	long long n;

	memset(out, 0, sizeof(*out));
	out->unit = 512;
	if (*p == '+') {
		out->cmp = CTL_CMP_GT;
		p++;
	} else if (*p == '-') {
		out->cmp = CTL_CMP_LT;
		p++;
	}
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	errno = 0;
	n = strtoll(p, &end, 10);
	if (errno || n < 0)
		return -EINVAL;
	out->n = n;
	if (*end && size && !end[1]) {
		switch (*end) {
		case 'c':
			out->unit = 1;
			break;
		case 'w':
			out->unit = 2;
			break;
		case 'b':
			out->unit = 512;
			break;
		case 'k':
			out->unit = 1024;
			break;
		case 'M':
			out->unit = 1024 * 1024;
			break;
		case 'G':
			out->unit = 1024 * 1024 * 1024;
			break;
		default:
			return -EINVAL;
		}
		end++;
	}
	return *end ? -EINVAL : 0;
}

bool ctl_find_size_match(const struct ctl_num *t, int64_t size)
{
	/* find's units: the size rounded up */
	int64_t units = size <= 0 ? 0 : (size - 1) / t->unit + 1;

	switch (t->cmp) {
	case CTL_CMP_GT:
		return units > t->n;
	case CTL_CMP_LT:
		return units < t->n;
	default:
		return units == t->n;
	}
}

bool ctl_find_size_range(const struct ctl_num *t, int64_t *lo, int64_t *hi)
{
	/* units == N: (N-1)*u < size <= N*u; units > N: size > N*u;
	 * units < N: size <= (N-1)*u */
	switch (t->cmp) {
	case CTL_CMP_GT:
		*lo = t->n * t->unit + 1;
		*hi = -1;
		return true;
	case CTL_CMP_LT:
		if (t->n == 0)
			return false;
		*lo = 0;
		*hi = (t->n - 1) * t->unit;
		return true;
	default:
		if (t->n == 0) {
			*lo = *hi = 0;
			return true;
		}
		*lo = (t->n - 1) * t->unit + 1;
		*hi = t->n * t->unit;
		return true;
	}
}

bool ctl_find_mtime_match(const struct ctl_num *t, int64_t now_ns, int64_t mtime,
			  int64_t mtime_ns)
{
	int64_t age = now_ns - (mtime * 1000000000LL + mtime_ns);
	/* whole days, rounded down (toward minus infinity: a change in
	 * the future is -1 days ago) */
	int64_t days = age >= 0 ? age / DAY_NS : -((-age + DAY_NS - 1) / DAY_NS);

	switch (t->cmp) {
	case CTL_CMP_GT:
		return days > t->n;
	case CTL_CMP_LT:
		return days < t->n;
	default:
		return days == t->n;
	}
}

void ctl_find_mtime_range(const struct ctl_num *t, int64_t now_ns, int64_t *lo, int64_t *hi)
{
	int64_t now = now_ns / 1000000000LL;

	/* days == N: now - (N+1) d < mtime <= now - N d */
	*lo = *hi = -1;
	switch (t->cmp) {
	case CTL_CMP_GT: /* days >= N+1: mtime <= now - (N+1) d */
		*hi = now - (t->n + 1) * 86400 + 1;
		break;
	case CTL_CMP_LT: /* days <= N-1: mtime > now - N d */
		*lo = now - t->n * 86400 - 1;
		break;
	default:
		*lo = now - (t->n + 1) * 86400 - 1;
		*hi = now - t->n * 86400 + 1;
		break;
	}
}

/* The length of the bracket expression at P ('['), as fnmatch(3) reads
 * one, or 0 when it has no end (the '[' is then itself). */
static size_t class_len(const char *p)
{
	const char *q = p + 1;

	if (*q == '!' || *q == '^')
		q++;
	if (*q == ']')
		q++; /* a first ']' is a member */
	for (; *q && *q != ']'; q++)
		if (q[0] == '[' && (q[1] == ':' || q[1] == '.' || q[1] == '=')) {
			const char *e = strchr(q + 2, q[1]);

			if (!e || e[1] != ']')
				return 0;
			q = e + 1;
		}
	return *q ? (size_t)(q - p) + 1 : 0;
}

char *ctl_find_wildcard(const char *pat, bool *literal, bool *exact)
{
	size_t n = strlen(pat), o = 0, k;
	char *w = malloc(2 * n + 1);
	bool lit = true, ex = true;

	if (!w)
		return NULL;
	for (; *pat; pat++) {
		k = *pat == '[' ? class_len(pat) : 0;
		if (k > 0) {
			/* one character of a class: any one, judged after */
			w[o++] = '?';
			pat += k - 1;
			lit = ex = false;
			continue;
		}
		if (*pat == '*' || *pat == '?') {
			lit = false;
			w[o++] = *pat;
			continue;
		}
		if (*pat == '\\' && pat[1])
			pat++; /* fnmatch's escape: the next character as it is */
		if (*pat == '*' || *pat == '?' || *pat == '\\')
			w[o++] = '\\';
		w[o++] = *pat;
	}
	w[o] = '\0';
	if (literal)
		*literal = lit;
	if (exact)
		*exact = ex;
	if (lit) {
		/* the literal text, without wildcard escapes */
		size_t i, j = 0;

		for (i = 0; i < o; i++) {
			if (w[i] == '\\')
				i++;
			w[j++] = w[i];
		}
		w[j] = '\0';
	}
	return w;
}

void ctl_find_free(struct ctl_find *f)
{
	free(f->tests);
	memset(f, 0, sizeof(*f));
}

static int user_uid(const char *arg, uid_t *out)
{
	struct passwd *pw;
	char *end;
	unsigned long v;

	pw = getpwnam(arg);
	if (pw) {
		*out = pw->pw_uid;
		return 0;
	}
	errno = 0;
	v = strtoul(arg, &end, 10);
	if (!*arg || *end || errno || v > UINT32_MAX || !isdigit((unsigned char)*arg))
		return -EINVAL;
	*out = (uid_t)v;
	return 0;
}

int ctl_find_parse(int argc, char *const *argv, struct ctl_find *f, char *err, size_t errlen)
{
	int i;

	memset(f, 0, sizeof(*f));
	f->tests = calloc((size_t)argc + 1, sizeof(*f->tests));
	if (!f->tests)
		return -ENOMEM;
	for (i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		struct ctl_test *t = &f->tests[f->ntests];

		if (strcmp(a, "--json") == 0) {
			f->json = true;
			continue;
		}
		if (strcmp(a, "--limit") == 0 || strncmp(a, "--limit=", 8) == 0) {
			const char *n = a[7] == '=' ? a + 8 : v;
			char *end;

			if (a[7] != '=')
				i++;
			end = NULL;
			if (n && isdigit((unsigned char)*n))
				f->limit = strtoul(n, &end, 10);
			if (!end || *end || !f->limit) {
				snprintf(err, errlen, "--limit wants a positive number");
				goto out_invalid;
			}
			continue;
		}
		if (strcmp(a, "-name") != 0 && strcmp(a, "-path") != 0 && strcmp(a, "-type") != 0 &&
		    strcmp(a, "-size") != 0 && strcmp(a, "-mtime") != 0 && strcmp(a, "-user") != 0) {
			snprintf(err, errlen, "unknown test '%s' (tests: -name, -path, -type, -size, "
					      "-mtime, -user; --json, --limit N)", a);
			goto out_invalid;
		}
		if (!v) {
			snprintf(err, errlen, "missing argument to '%s'", a);
			goto out_invalid;
		}
		i++;
		if (strcmp(a, "-name") == 0) {
			t->kind = CTL_T_NAME;
			t->pat = v;
		} else if (strcmp(a, "-path") == 0) {
			t->kind = CTL_T_PATH;
			t->pat = v;
		} else if (strcmp(a, "-type") == 0) {
			const char *p = v;
			size_t n = 0;
			bool bad = false;

			t->kind = CTL_T_TYPE;
			/* letters joined by ',': "f", "f,d" */
			for (;;) {
				if (!*p || !strchr("fdlpscb", *p) || (p[1] && p[1] != ',') ||
				    n >= sizeof(t->types) - 1) {
					bad = true;
					break;
				}
				if (!strchr(t->types, *p))
					t->types[n++] = *p;
				if (!p[1])
					break;
				p += 2;
			}
			if (bad) {
				snprintf(err, errlen, "unknown argument to -type: '%s' (one of "
						      "f d l p s c b, or several joined by ',')", v);
				goto out_invalid;
			}
		} else if (strcmp(a, "-size") == 0 || strcmp(a, "-mtime") == 0) {
			bool size = a[1] == 's';

			t->kind = size ? CTL_T_SIZE : CTL_T_MTIME;
			if (ctl_find_num(v, size, &t->num) != 0) {
				snprintf(err, errlen, "invalid argument '%s' to '%s'", v, a);
				goto out_invalid;
			}
		} else {
			t->kind = CTL_T_USER;
			if (user_uid(v, &t->uid) != 0) {
				snprintf(err, errlen, "'%s' is not the name of a known user", v);
				goto out_invalid;
			}
		}
		f->ntests++;
	}
	return 0;

out_invalid:
	ctl_find_free(f);
	return -EINVAL;
}

/* Adds {"KIND": {FIELD: V}} to array A. */
static void add_leaf(cJSON *a, const char *kind, const char *field, cJSON *v)
{
	cJSON *q = cJSON_CreateObject();

	cJSON_AddItemToObject(cJSON_AddObjectToObject(q, kind), field, v);
	cJSON_AddItemToArray(a, q);
}

/* Adds {"range": {FIELD: {gte: LO, lte: HI}}} (-1: no bound) to A. */
static void add_range(cJSON *a, const char *field, int64_t lo, int64_t hi)
{
	cJSON *r = cJSON_CreateObject();

	if (lo >= 0)
		cJSON_AddNumberToObject(r, "gte", (double)lo);
	if (hi >= 0)
		cJSON_AddNumberToObject(r, "lte", (double)hi);
	add_leaf(a, "range", field, r);
}

/* Adds to A the glob PAT on FIELD where it says something exactly, as
 * "matches PAT, or is a bytes: text" (those are judged after). */
static void add_glob(cJSON *a, const char *field, const char *pat)
{
	bool lit = false;
	char *w = ctl_find_wildcard(pat, &lit, NULL);
	cJSON *q, *b, *should;

	if (!w)
		return;
	q = cJSON_CreateObject();
	b = cJSON_AddObjectToObject(q, "bool");
	should = cJSON_AddArrayToObject(b, "should");
	add_leaf(should, lit ? "term" : "wildcard", field, cJSON_CreateString(w));
	add_leaf(should, "prefix", field, cJSON_CreateString(PATH_BYTES_PREFIX));
	cJSON_AddNumberToObject(b, "minimum_should_match", 1);
	cJSON_AddItemToArray(a, q);
	free(w);
}

cJSON *ctl_find_query(const struct ctl_find *f, const char *start, const char *mnt,
		      int64_t now_ns)
{
	cJSON *q = cJSON_CreateObject(), *b = cJSON_AddObjectToObject(q, "bool");
	cJSON *filter = cJSON_AddArrayToObject(b, "filter"), *under = es_fsdoc_under_query(start);
	size_t i, ml = strlen(mnt);

	if (!filter || !under) {
		cJSON_Delete(under);
		cJSON_Delete(q);
		return NULL;
	}
	cJSON_AddItemToArray(filter, under);
	for (i = 0; i < f->ntests; i++) {
		const struct ctl_test *t = &f->tests[i];
		int64_t lo, hi;
		size_t k;

		switch (t->kind) {
		case CTL_T_NAME:
			add_glob(filter, "name", t->pat);
			break;
		case CTL_T_PATH:
			/* MNT is printed before every key: a PAT that starts
			 * with it, then '/', is that rest on the key */
			if (strncmp(t->pat, mnt, ml) == 0 && t->pat[ml] == '/' &&
			    !strpbrk(mnt, "*?[\\"))
				add_glob(filter, "path", t->pat + ml);
			break;
		case CTL_T_TYPE: {
			cJSON *terms = cJSON_CreateArray();

			for (k = 0; t->types[k]; k++) {
				char one[2] = {t->types[k], '\0'};

				cJSON_AddItemToArray(terms, cJSON_CreateString(one));
			}
			add_leaf(filter, "terms", "type", terms);
			break;
		}
		case CTL_T_SIZE:
			if (ctl_find_size_range(&t->num, &lo, &hi))
				add_range(filter, "size", lo, hi);
			else
				add_range(filter, "size", 1, 0); /* none */
			break;
		case CTL_T_MTIME:
			ctl_find_mtime_range(&t->num, now_ns, &lo, &hi);
			/* a negative bound is a bound too here */
			{
				cJSON *r = cJSON_CreateObject();

				if (t->num.cmp != CTL_CMP_GT)
					cJSON_AddNumberToObject(r, "gte", (double)lo);
				if (t->num.cmp != CTL_CMP_LT)
					cJSON_AddNumberToObject(r, "lte", (double)hi);
				add_leaf(filter, "range", "mtime", r);
			}
			break;
		case CTL_T_USER:
			add_leaf(filter, "term", "uid", cJSON_CreateNumber((double)t->uid));
			break;
		}
	}
	return q;
}

bool ctl_find_match(const struct ctl_find *f, const struct es_fsentry *e, const char *printed,
		    int64_t now_ns)
{
	const char *slash = strrchr(printed, '/');
	const char *name = slash && slash[1] ? slash + 1 : printed;
	size_t i;

	for (i = 0; i < f->ntests; i++) {
		const struct ctl_test *t = &f->tests[i];
		bool ok = true;

		switch (t->kind) {
		case CTL_T_NAME:
			ok = fnmatch(t->pat, name, 0) == 0;
			break;
		case CTL_T_PATH:
			ok = fnmatch(t->pat, printed, 0) == 0;
			break;
		case CTL_T_TYPE:
			ok = e->type && strchr(t->types, e->type) != NULL;
			break;
		case CTL_T_SIZE:
			ok = ctl_find_size_match(&t->num, e->size);
			break;
		case CTL_T_MTIME:
			ok = ctl_find_mtime_match(&t->num, now_ns, e->mtime, e->mtime_ns);
			break;
		case CTL_T_USER:
			ok = e->uid == t->uid;
			break;
		}
		if (!ok)
			return false;
	}
	return true;
}
