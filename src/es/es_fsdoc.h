/* es_fsdoc.h - the documents of the fs index (fs_index=NAME): one per
 * entry of the tree, its path in it (pure)
 *
 * The data model. One document per file, directory or other entry, in an
 * index of its own beside the lock index, with the entry's path as the
 * lock store writes keys (path_key_text(): "/" for the root, UTF-8 or the
 * "bytes:" form) and its _id the entry's lock id (path_lock_id()), so a
 * path's document is found without a search. A directory's rename
 * deletes the documents under the old path and writes those under the
 * new one (the guide's denormalised paths), so a search by path, by
 * prefix or by name needs no join.
 *
 * Versions. Every write states what the tree held at one moment and
 * carries that moment (wall clock, nanoseconds since the epoch) as an
 * external version: the engine keeps the newest truth whichever request
 * arrives last, across mounts and hosts, and a delete leaves a tombstone
 * (index.gc_deletes, set to 10 minutes by es_fsdoc_index_body()) that an
 * older write arriving late cannot pass. A write refused with 409 (a newer
 * truth is already there) is not an error.
 *
 * Fields: path, name, parent (keywords; the root's name is "/" and it has
 * no parent), depth (the root 0), type ("f", "d", "l", "p", "s", "c", "b"),
 * size, mtime (seconds), mtime_ns (its nanoseconds), ctime, mode (the
 * permission bits with set-ID and sticky), uid, gid, nlink, ino (longs),
 * at (wall clock ms of the stat) and by (the owner id that wrote it, or
 * "treelockctl").
 *
 * Builders append ndjson bulk lines to a struct buf and never fail on
 * their own (the buffer is left failed, b->err). Thread rules: any thread.
 */
#ifndef TREELOCKFS_ES_ES_FSDOC_H
#define TREELOCKFS_ES_ES_FSDOC_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "base/buf.h"

/* The index's _meta.treelockfs: {"kind": ES_FSDOC_KIND, "format":
 * ES_FSDOC_FORMAT}; another kind or format is not an fs index of ours. */
#define ES_FSDOC_KIND "fs"
#define ES_FSDOC_FORMAT 1

/* One entry as the index holds it (es_fsdoc_read()). */
struct es_fsentry {
	char *key;        /* the normalised key, "/a/b" (path_key_from_text()) */
	char type;        /* 'f', 'd', 'l', 'p', 's', 'c', 'b' */
	int64_t size, mtime, mtime_ns, ctime, ino, at;
	uint32_t mode, uid, gid, nlink;
	int64_t version;  /* the document's _version, -1 when not returned */
};

/* The body that creates the index: its settings and its mapping (dynamic
 * strict). Returns NULL when memory runs out. */
cJSON *es_fsdoc_index_body(void);

/* True when MAPPINGS (an index's "mappings" object as GET _mapping
 * returns it) is the mapping of an fs index of ours, this format. */
bool es_fsdoc_is_ours(const cJSON *mappings);

/* The query matching every document strictly below KEY ("/a": "/a/x",
 * "/a/x/y", not "/a" nor "/ab"; the root: all but the root), whichever
 * text form (UTF-8 or bytes:) a descendant's path has. Returns a new
 * object or NULL when memory runs out. */
cJSON *es_fsdoc_under_query(const char *key);

/* The type letter of MODE (st_mode), '?' for none of the above. */
char es_fsdoc_type(mode_t mode);

/* Appends to B the bulk item that indexes KEY with the attributes ST, at
 * VERSION (ns since the epoch), written by BY. */
void es_fsdoc_put(struct buf *b, const char *index, const char *key, const struct stat *st,
		  int64_t version, const char *by);

/* Appends to B the bulk item that deletes KEY's document at VERSION. */
void es_fsdoc_del(struct buf *b, const char *index, const char *key, int64_t version);

/* Reads the _source SRC of a document (and its _version V, or -1) into
 * OUT. Returns 0, -EINVAL (not a document of ours) or -ENOMEM. */
int es_fsdoc_read(const cJSON *src, int64_t v, struct es_fsentry *out);

/* Frees what es_fsdoc_read() allocated in E (not E itself). */
void es_fsentry_free(struct es_fsentry *e);

#endif /* TREELOCKFS_ES_ES_FSDOC_H */
