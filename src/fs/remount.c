/* remount.c - "mount -o remount" of a treelockfs mount, see remount.h
 *
 * The mount's state comes from /proc/self/mountinfo (its flags, its
 * source, type and FUSE options) and from MOUNTPOINT/.treelockfs/options
 * (what the daemon was started with). An option is accepted when it
 * changes nothing or is a flag the kernel changes by itself; the remount
 * is all or nothing.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "base/mountchain.h"
#include "base/escape.h"
#include "fs/remount.h"

/* Prints one message "treelockfs: ..." to stderr, escaped (escape.h):
 * it quotes options and paths as given, which may hold any byte. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char *msg = NULL, *esc = NULL;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (n >= 0)
		esc = malloc(4 * (size_t)n + 1);
	if (esc)
		escape_text(esc, 4 * (size_t)n + 1, msg);
	fprintf(stderr, "treelockfs: %s\n", esc ? esc : "out of memory");
	free(esc);
	free(msg);
}

/* A list of option tokens. */
struct toks {
	char **v;
	size_t n;
};

static void toks_free(struct toks *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i]);
	free(t->v);
	t->v = NULL;
	t->n = 0;
}

static int toks_add(struct toks *t, const char *s, size_t len)
{
	char **v;

	if (len == 0)
		return 0;
	v = realloc(t->v, (t->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	t->v = v;
	v[t->n] = strndup(s, len);
	if (!v[t->n])
		return -ENOMEM;
	t->n++;
	return 0;
}

/* Adds the options of comma-separated LIST (a backslash escapes a comma),
 * kept as written. */
static int toks_add_list(struct toks *t, const char *list)
{
	const char *p = list, *start = list;
	int err = 0;

	for (; *p && !err; p++) {
		if (*p == '\\' && p[1]) {
			p++;
		} else if (*p == ',') {
			err = toks_add(t, start, (size_t)(p - start));
			start = p + 1;
		}
	}
	return err ? err : toks_add(t, start, (size_t)(p - start));
}

static bool toks_has(const struct toks *t, const char *s)
{
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->v[i], s) == 0)
			return true;
	return false;
}

/* The options of ARGV into T, and its last positional argument (the
 * mount point) into *LAST when LAST is not NULL. */
static int toks_of_argv(int argc, char *argv[], struct toks *t, const char **last)
{
	int err = 0, i;

	for (i = 1; i < argc && !err; i++) {
		const char *a = argv[i];

		if (strcmp(a, "-o") == 0 && i + 1 < argc) {
			err = toks_add_list(t, argv[++i]);
		} else if (strncmp(a, "-o", 2) == 0) {
			err = toks_add_list(t, a + 2);
		} else if (strcmp(a, "--config") == 0 && i + 1 < argc) {
			char *c;

			if (asprintf(&c, "config=%s", argv[++i]) < 0)
				return -ENOMEM;
			err = toks_add(t, c, strlen(c));
			free(c);
		} else if (strncmp(a, "--", 2) == 0 && a[2]) {
			err = toks_add(t, a + 2, strlen(a + 2));
		} else if (a[0] != '-' && last) {
			*last = a;
		}
	}
	return err;
}

bool remount_requested(int argc, char *argv[])
{
	struct toks t = {0};
	bool yes;

	if (toks_of_argv(argc, argv, &t, NULL) != 0)
		yes = false; /* out of memory: the mount then fails on its own */
	else
		yes = toks_has(&t, "remount");
	toks_free(&t);
	return yes;
}

char *remount_given_options(int argc, char *argv[])
{
	struct toks t = {0};
	char *out = NULL;
	size_t len = 0, i;

	if (toks_of_argv(argc, argv, &t, NULL) != 0)
		goto out;
	for (i = 0; i < t.n; i++)
		len += strlen(t.v[i]) + 1;
	out = malloc(len + 1);
	if (!out)
		goto out;
	len = 0;
	for (i = 0; i < t.n; i++) {
		size_t n = strlen(t.v[i]);

		memcpy(out + len, t.v[i], n);
		out[len + n] = '\n';
		len += n + 1;
	}
	out[len] = '\0';
out:
	toks_free(&t);
	return out;
}

/* ---- the mount as it is ---- */

struct mount_now {
	char *fstype;
	char *source;
	struct toks flags;       /* per-mount options: rw, nosuid, relatime, ... */
	struct toks super;       /* the filesystem's: rw, user_id=0, allow_other, ... */
};

static void mount_now_free(struct mount_now *m)
{
	free(m->fstype);
	free(m->source);
	toks_free(&m->flags);
	toks_free(&m->super);
}

/* The topmost mount at MNT (a canonical path) into M. Returns 0,
 * -ENOENT when MNT is no mount point, or -errno. */
static int mount_now_find(const char *mnt, struct mount_now *m)
{
	char *line = NULL;
	size_t cap = 0;
	int err = -ENOENT;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char *field[6], *save = NULL, *dash, *post[3];
		int i;

		dash = strstr(line, " - ");
		if (!dash)
			continue;
		*dash = '\0';
		field[0] = strtok_r(line, " ", &save);
		for (i = 1; i < 6 && field[i - 1]; i++)
			field[i] = strtok_r(NULL, " ", &save);
		if (!field[5] || strcmp(mountchain_unescape(field[4]), mnt) != 0)
			continue;
		save = NULL;
		post[0] = strtok_r(dash + 3, " \n", &save);
		post[1] = post[0] ? strtok_r(NULL, " \n", &save) : NULL;
		post[2] = post[1] ? strtok_r(NULL, " \n", &save) : NULL;
		if (!post[2])
			continue;
		mount_now_free(m);
		memset(m, 0, sizeof(*m));
		m->fstype = strdup(post[0]);
		m->source = strdup(mountchain_unescape(post[1]));
		err = -ENOMEM;
		if (!m->fstype || !m->source || toks_add_list(&m->flags, field[5]) != 0 ||
		    toks_add_list(&m->super, post[2]) != 0)
			break;
		err = 0; /* and on: a later line is a mount on top */
	}
	free(line);
	fclose(f);
	return err;
}

/* The lines of MNT/.treelockfs/options into T. Returns 0 or -errno. */
static int daemon_options(const char *mnt, struct toks *t)
{
	char path[PATH_MAX + 32], *line = NULL;
	size_t cap = 0;
	ssize_t n;
	FILE *f;
	int err = 0;

	snprintf(path, sizeof(path), "%s/.treelockfs/options", mnt);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (!err && (n = getline(&line, &cap, f)) > 0) {
		if (line[n - 1] == '\n')
			line[--n] = '\0';
		err = toks_add(t, line, (size_t)n);
	}
	free(line);
	fclose(f);
	return err;
}

/* ---- the options ---- */

/* What the kernel changes by itself on MS_REMOUNT. */
static const struct {
	const char *name;
	unsigned long flag;
	bool on;
} vfs_flags[] = {
	{"ro", MS_RDONLY, true},	   {"rw", MS_RDONLY, false},
	{"nosuid", MS_NOSUID, true},	   {"suid", MS_NOSUID, false},
	{"nodev", MS_NODEV, true},	   {"dev", MS_NODEV, false},
	{"noexec", MS_NOEXEC, true},	   {"exec", MS_NOEXEC, false},
	{"sync", MS_SYNCHRONOUS, true},	   {"async", MS_SYNCHRONOUS, false},
	{"dirsync", MS_DIRSYNC, true},	   {"lazytime", MS_LAZYTIME, true},
	{"nolazytime", MS_LAZYTIME, false}, {"nosymfollow", MS_NOSYMFOLLOW, true},
	{"symfollow", MS_NOSYMFOLLOW, false}, {"noatime", MS_NOATIME, true},
	{"atime", MS_NOATIME, false},	   {"nodiratime", MS_NODIRATIME, true},
	{"diratime", MS_NODIRATIME, false}, {"relatime", MS_RELATIME, true},
	{"norelatime", MS_RELATIME, false},
};

/* Applies flag option S to *FLAGS; false when S is none. */
static bool vfs_flag(const char *s, unsigned long *flags)
{
	for (size_t i = 0; i < sizeof(vfs_flags) / sizeof(vfs_flags[0]); i++) {
		if (strcmp(s, vfs_flags[i].name) == 0) {
			if (vfs_flags[i].on)
				*flags |= vfs_flags[i].flag;
			else
				*flags &= ~vfs_flags[i].flag;
			return true;
		}
	}
	return false;
}

/* Options of mount(8) and mount.fuse3(8) themselves, and "remount". */
static bool bookkeeping(const char *s)
{
	static const char *const names[] = {"remount", "defaults", "auto", "noauto", "user",
					    "nouser", "users", "owner", "group", "_netdev",
					    "nofail", "loud", "silent"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i]) == 0)
			return true;
	return strncmp(s, "x-", 2) == 0 || strncmp(s, "comment=", 8) == 0;
}

/* The kernel's FUSE options: fixed, accepted when the mount has them. */
static bool fuse_super(const char *s)
{
	static const char *const names[] = {"user_id=", "group_id=", "rootmode=", "max_read=",
					    "blksize=", "fd="};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strncmp(s, names[i], strlen(names[i])) == 0)
			return true;
	return strcmp(s, "default_permissions") == 0 || strcmp(s, "allow_other") == 0;
}

/* True for an option the daemon changes while mounted (fs_ctl.c). */
static bool changeable(const char *s)
{
	return strncmp(s, "lock_timeout=", 13) == 0 || strncmp(s, "log_level=", 10) == 0;
}

/* Sets S in T, replacing the option of the same name. */
static int toks_set(struct toks *t, const char *s)
{
	size_t name = strcspn(s, "=");

	for (size_t i = 0; i < t->n; i++) {
		if (strncmp(t->v[i], s, name + 1) == 0) {
			char *c = strdup(s);

			if (!c)
				return -ENOMEM;
			free(t->v[i]);
			t->v[i] = c;
			return 0;
		}
	}
	return toks_add(t, s, strlen(s));
}

/* Writes the options of CHANGES that differ from DAEMON's to
 * MNT/.treelockfs/options, where the daemon applies them all or none.
 * Returns 0 or -errno. */
static int write_changes(const char *mnt, const struct toks *changes, const struct toks *daemon)
{
	char path[PATH_MAX + 32], *text = NULL;
	size_t len = 0;
	FILE *f;
	int err = 0;

	f = open_memstream(&text, &len);
	if (!f)
		return -ENOMEM;
	for (size_t i = 0; i < changes->n; i++)
		if (!toks_has(daemon, changes->v[i]))
			fprintf(f, "%s\n", changes->v[i]);
	if (fclose(f) != 0) {
		free(text);
		return -ENOMEM;
	}
	if (len > 0) {
		ssize_t n = -1;
		int fd;

		snprintf(path, sizeof(path), "%s/.treelockfs/options", mnt);
		fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd != -1)
			n = write(fd, text, len);
		if (n != (ssize_t)len)
			err = n < 0 ? -errno : -EIO;
		if (fd != -1 && close(fd) == -1 && !err)
			err = -errno;
	}
	free(text);
	return err;
}

/* Says that the daemon refused CHANGES (those not in DAEMON already)
 * in a remount of MNT, with error ERR. */
static void say_refused(const struct toks *changes, const struct toks *daemon, const char *mnt,
			int err)
{
	char *list = NULL;
	size_t len = 0, i;
	FILE *f = open_memstream(&list, &len);

	for (i = 0; f && i < changes->n; i++)
		if (!toks_has(daemon, changes->v[i]))
			fprintf(f, " '%s'", changes->v[i]);
	if (f && fclose(f) == 0)
		say("cannot change%s in a remount of '%s': %s", list, mnt, strerror(err));
	else
		say("cannot change lock_timeout or log_level in a remount of '%s': %s", mnt,
		    strerror(err));
	free(list);
}

int remount_run(int argc, char *argv[])
{
	struct mount_now now = {0};
	struct toks given = {0}, daemon = {0}, changes = {0};
	const char *arg = NULL;
	char mnt[PATH_MAX];
	unsigned long flags = 0, was = 0;
	int err, refused = 0, garbled = 0, ret = 1;
	size_t i;

	if (toks_of_argv(argc, argv, &given, &arg) != 0) {
		say("out of memory");
		goto out;
	}
	if (!arg) {
		say("remount: missing MOUNTPOINT");
		goto out;
	}
	if (!realpath(arg, mnt)) {
		say("cannot remount '%s': %s", arg, strerror(errno));
		goto out;
	}
	err = mount_now_find(mnt, &now);
	if (err == 0 && strcmp(now.fstype, "fuse") != 0 && strncmp(now.fstype, "fuse.", 5) != 0)
		err = -EINVAL;
	if (err == 0)
		err = daemon_options(mnt, &daemon);
	if (err) {
		say("cannot remount '%s': %s", mnt,
		    err == -ENOMEM ? strerror(ENOMEM) : "not a treelockfs mount");
		goto out;
	}
	/* mount(8) hands over every flag the mount is to have (those it has,
	 * merged with the new ones), never the defaults ("exec" is the absence
	 * of "noexec"): start from none, as MS_REMOUNT does */
	for (i = 0; i < now.flags.n; i++)
		vfs_flag(now.flags.v[i], &was);
	for (i = 0; i < given.n; i++) {
		const char *s = given.v[i];

		/* one option is one line of .treelockfs/options: a newline
		 * would make two ("lock_timeout=5\nlog_level=debug") */
		if (escape_has_control(s, strlen(s))) {
			say("cannot change '%s' in a remount of '%s': a control character in "
			    "the option", s, mnt);
			garbled++;
			continue;
		}
		if (changeable(s)) {
			/* the last one counts, as in a mount */
			if (toks_set(&changes, s) != 0) {
				say("out of memory");
				goto out;
			}
			continue;
		}
		if (vfs_flag(s, &flags) || bookkeeping(s) || toks_has(&daemon, s))
			continue;
		if (strcmp(s, "strictatime") == 0) {
			say("cannot honour 'strictatime' in a remount of '%s': reads through the "
			    "mount update atime as BACKING's own mount does", mnt);
			refused++;
			continue;
		}
		if (fuse_super(s) && toks_has(&now.super, s))
			continue;
		if (strncmp(s, "fsname=", 7) == 0 && strcmp(s + 7, now.source) == 0)
			continue;
		if (strncmp(s, "subtype=", 8) == 0 && strncmp(now.fstype, "fuse.", 5) == 0 &&
		    strcmp(s + 8, now.fstype + 5) == 0)
			continue;
		say("cannot change '%s' in a remount of '%s'", s, mnt);
		refused++;
	}
	/* the daemon opens BACKING's files with O_NOATIME by these; without
	 * any atime flag the kernel keeps the mount's */
	if (!(flags & (MS_NOATIME | MS_NODIRATIME | MS_RELATIME | MS_STRICTATIME)))
		flags |= was & (MS_NOATIME | MS_NODIRATIME | MS_RELATIME);
	for (i = 0; i < 2; i++) {
		unsigned long f = i == 0 ? MS_NOATIME : MS_NODIRATIME;

		if ((flags & f) != (was & f)) {
			say("cannot turn %s '%s' in a remount of '%s'", flags & f ? "on" : "off",
			    i == 0 ? "noatime" : "nodiratime", mnt);
			refused++;
		}
	}
	if (refused)
		say("these are fixed while mounted: unmount and mount again; a remount changes "
		    "ro, rw, nosuid, nodev, noexec, sync, dirsync, lazytime, nosymfollow, "
		    "lock_timeout and log_level");
	if (refused || garbled)
		goto out;
	/* the changes go through the options file, which a read-only mount
	 * does not let be written: written before the flags, unless the
	 * mount is read-only until the flags make it writable; the daemon
	 * may still refuse a value, and then nothing changes */
	if (!(was & MS_RDONLY) || (flags & MS_RDONLY)) {
		err = write_changes(mnt, &changes, &daemon);
		if (err == -EROFS)
			say("a read-only mount changes lock_timeout and log_level only in a "
			    "remount that makes it rw");
		if (err)
			goto out_refused;
	}
	if (mount(now.source, mnt, NULL, MS_REMOUNT | flags, NULL) == -1) {
		say("cannot remount '%s': %s", mnt, strerror(errno));
		goto out;
	}
	if ((was & MS_RDONLY) && !(flags & MS_RDONLY)) {
		err = write_changes(mnt, &changes, &daemon);
		if (err) {
			if (mount(now.source, mnt, NULL, MS_REMOUNT | was, NULL) == -1)
				say("cannot make '%s' read-only again: %s", mnt, strerror(errno));
			goto out_refused;
		}
	}
	ret = 0;
	goto out;

out_refused:
	say_refused(&changes, &daemon, mnt, -err);
out:
	mount_now_free(&now);
	toks_free(&given);
	toks_free(&daemon);
	toks_free(&changes);
	return ret;
}
