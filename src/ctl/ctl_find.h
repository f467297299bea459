/* ctl_find.h - treelockctl find's tests: find's arguments, their meanings,
 * and the query that narrows the index to them (pure)
 *
 * The tests are find's, spelled as find spells them, joined by AND:
 *
 *   -name PAT     the entry's name matches the glob PAT (fnmatch(3), no
 *                 flags: '*', '?' and '[...]' match a leading '.' too)
 *   -path PAT     the path as printed (MOUNTPOINT/a/b) matches PAT ('*'
 *                 matches '/' too, as find's does)
 *   -type C       the type: f d l p s c b, or several joined by ','
 *   -size [+-]N[cwbkMG]  the size in units (b, 512 bytes, by default),
 *                 rounded up as find does: -size -1M is an empty file
 *   -mtime [+-]N  the days since the last change of its data, rounded
 *                 down as find does: -mtime 0 is less than 24 h ago
 *   -user NAME|UID  the owner
 *
 * +N is more than N, -N less than N, N exactly N. The query
 * (ctl_find_query()) is a superset where a test cannot be said in the
 * index's terms exactly (a '[' class in a glob, a name that is not UTF-8): each
 * hit is held to ctl_find_match() after it, which is the whole truth.
 *
 * Thread rules: none; every function may run in any thread.
 */
#ifndef TREELOCKFS_CTL_CTL_FIND_H
#define TREELOCKFS_CTL_CTL_FIND_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "es/es_fsdoc.h"

enum ctl_cmp {
	CTL_CMP_EQ = 0,   /* N */
	CTL_CMP_GT,       /* +N */
	CTL_CMP_LT,       /* -N */
};

/* One numeric test: -size or -mtime. */
struct ctl_num {
	enum ctl_cmp cmp;
	int64_t n;
	int64_t unit;     /* -size: bytes per unit; -mtime: unused */
};

enum ctl_test_kind {
	CTL_T_NAME = 0,
	CTL_T_PATH,
	CTL_T_TYPE,
	CTL_T_SIZE,
	CTL_T_MTIME,
	CTL_T_USER,
};

struct ctl_test {
	enum ctl_test_kind kind;
	const char *pat;      /* -name, -path: the argument (argv's) */
	char types[8];        /* -type: the letters, NUL-terminated */
	struct ctl_num num;   /* -size, -mtime */
	uid_t uid;            /* -user */
};

/* What `treelockctl find` was asked. */
struct ctl_find {
	struct ctl_test *tests;
	size_t ntests;
	bool json;
	size_t limit;         /* --limit N: 0, none */
};

/* Parses the tests and flags ARGV[0..ARGC) (what follows MOUNTPOINT and
 * PATH) into F (ctl_find_free() it). -user NAME is looked up with
 * getpwnam(); a number is a uid. Returns 0, or -EINVAL with a message
 * (no final newline) in ERR, or -ENOMEM. */
int ctl_find_parse(int argc, char *const *argv, struct ctl_find *f, char *err, size_t errlen);

/* Frees what F holds; accepts an empty one. */
void ctl_find_free(struct ctl_find *f);

/* Parses find's numeric argument ARG ("[+-]N" then, for -size, a unit
 * letter, DEFUNIT bytes without one) into *OUT. SIZE: whether units are
 * allowed. Returns 0 or -EINVAL. */
int ctl_find_num(const char *arg, bool size, struct ctl_num *out);

/* -size: whether SIZE bytes pass T (find's rounding: the size in units
 * rounded up). */
bool ctl_find_size_match(const struct ctl_num *t, int64_t size);

/* -size: the bytes that pass T as [*LO, *HI] (*HI -1: no bound); false
 * when none pass. */
bool ctl_find_size_range(const struct ctl_num *t, int64_t *lo, int64_t *hi);

/* -mtime: whether a change at MTIME (s) + MTIME_NS passes T at NOW_NS
 * (ns since the epoch): the whole days since it, rounded down. */
bool ctl_find_mtime_match(const struct ctl_num *t, int64_t now_ns, int64_t mtime,
			  int64_t mtime_ns);

/* -mtime: the mtimes (whole seconds) that may pass T at NOW_NS, as
 * [*LO, *HI] (-1: no bound), one second wider on each side than the
 * exact window. */
void ctl_find_mtime_range(const struct ctl_num *t, int64_t now_ns, int64_t *lo, int64_t *hi);

/* The glob PAT (fnmatch(3), no flags) as an Elasticsearch wildcard
 * pattern, as a new string (NULL when out of memory): one that matches the
 * same strings, or (*EXACT false) more of them where PAT has a bracket
 * expression, which becomes '?' (one character). *LITERAL tells whether
 * PAT has no wildcard at all, and the result is then the literal text.
 * LITERAL and EXACT may be NULL. */
char *ctl_find_wildcard(const char *pat, bool *literal, bool *exact);

/* The query of F's tests over the entries strictly below START (a key),
 * each printed as MNT and its key (MNT alone for the root), at NOW_NS: a
 * new object (caller frees), or NULL when out of memory. */
cJSON *ctl_find_query(const struct ctl_find *f, const char *start, const char *mnt,
		      int64_t now_ns);

/* Whether entry E, printed as PRINTED (its name: PRINTED's last
 * component), passes every test of F at NOW_NS. */
bool ctl_find_match(const struct ctl_find *f, const struct es_fsentry *e, const char *printed,
		    int64_t now_ns);

#endif /* TREELOCKFS_CTL_CTL_FIND_H */
