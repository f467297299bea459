/* renameflags.c - which rename flags a backing filesystem refuses, see
 * renameflags.h */
#include <config.h>

#include <errno.h>
#include <stdio.h>

#include "base/log.h"
#include "base/path.h"
#include "fs/renameflags.h"

/* The slot of rf->refused_on for rename FLAGS (one of them set). */
static unsigned int flag_slot(unsigned int flags)
{
	return (flags & RENAME_EXCHANGE) ? 1 : 0;
}

bool renameflags_refused(struct renameflags *rf, dev_t dev, unsigned int flags)
{
	return flags && __atomic_load_n(&rf->refused_on[flag_slot(flags)], __ATOMIC_RELAXED) ==
				(uint64_t)dev + 1;
}

/* A hash of the rename FROM -> TO in filesystem DEV (FNV-1a), never 0.
 * This function can't fail. */
static uint64_t suspect_hash(dev_t dev, const char *from, const char *to)
{
	uint64_t h = 14695981039346656037ULL ^ (uint64_t)dev;
	const char *s;

	for (s = from; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	h = (h ^ 0xff) * 1099511628211ULL; /* no byte of a key */
	for (s = to; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h ? h : 1;
}

/* Notes that filesystem DEV refuses the flag of slot SLOT. */
static void refuse(struct renameflags *rf, dev_t dev, unsigned int slot)
{
	__atomic_store_n(&rf->refused_on[slot], (uint64_t)dev + 1, __ATOMIC_RELAXED);
	tl_log(LOG_INFO, "the backing refuses %s: such renames are refused before locking",
	       slot ? "RENAME_EXCHANGE" : "RENAME_NOREPLACE");
}

void renameflags_learn(struct renameflags *rf, dev_t dev, unsigned int flags, int res,
		       const char *from, const char *to)
{
	if ((flags & RENAME_EXCHANGE) && res == -EINVAL) {
		if (!path_is_ancestor(from, to) && !path_is_ancestor(to, from))
			refuse(rf, dev, 1);
		return;
	}
	if (flags && res == -EINVAL) {
		__atomic_store_n(&rf->suspect, suspect_hash(dev, from, to), __ATOMIC_RELAXED);
		return;
	}
	if (flags || res || !__atomic_load_n(&rf->suspect, __ATOMIC_RELAXED))
		return;
	if (__atomic_load_n(&rf->suspect, __ATOMIC_RELAXED) == suspect_hash(dev, from, to)) {
		__atomic_store_n(&rf->suspect, 0, __ATOMIC_RELAXED);
		refuse(rf, dev, 0);
	}
}
