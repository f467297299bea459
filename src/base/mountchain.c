/* mountchain.c - which directories a mount is served from, see mountchain.h */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/mountchain.h"

/* statfs(2)'s f_type of every FUSE mount */
#define MOUNTCHAIN_FUSE_MAGIC 0x65735546

/* The control file of a treelockfs mount that shows its chain. */
#define MOUNTCHAIN_FILE ".treelockfs/backing"

struct dirid {
	dev_t dev;
	ino_t ino;
};

/* Parses up to MAX lines of CHAIN from line FIRST on into IDS. Returns how
 * many; a line that is not "MAJOR:MINOR INODE" ends the chain. */
static size_t chain_parse(const char *chain, unsigned first, struct dirid *ids, size_t max)
{
	unsigned maj, min, line = 0;
	unsigned long long ino;
	size_t n = 0;
	const char *p;

	for (p = chain; p && *p && n < max; line++) {
		if (sscanf(p, "%u:%u %llu", &maj, &min, &ino) != 3)
			break;
		if (line >= first) {
			ids[n].dev = makedev(maj, min);
			ids[n].ino = (ino_t)ino;
			n++;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return n;
}

int mountchain_of_mount(int rootfd, char **out)
{
	struct dirid ids[MOUNTCHAIN_MAX];
	char buf[MOUNTCHAIN_MAX * 48], *text;
	struct statfs sfs;
	size_t n, i, len = 0;
	ssize_t got;
	int fd;

	if (fstatfs(rootfd, &sfs) != 0)
		return -errno;
	if (sfs.f_type != MOUNTCHAIN_FUSE_MAGIC)
		return -ENOENT;
	fd = openat(rootfd, MOUNTCHAIN_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd == -1)
		return -errno;
	got = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (got < 0)
		return -errno;
	buf[got] = '\0';
	n = chain_parse(buf, 0, ids, MOUNTCHAIN_MAX);
	if (n == 0)
		return -ENOENT;
	text = malloc(n * 48 + 1);
	if (!text)
		return -ENOMEM;
	text[0] = '\0';
	for (i = 0; i < n; i++)
		len += (size_t)sprintf(text + len, "%u:%u %" PRIuMAX "\n", major(ids[i].dev),
				       minor(ids[i].dev), (uintmax_t)ids[i].ino);
	*out = text;
	return 0;
}

/* The root of the mount directory DIRFD lies on: the last directory up
 * the ".." chain on the same device. Returns an O_PATH fd or -1. */
static int mount_root_of(int dirfd)
{
	struct stat cur, up;
	int fd, upfd, i;

	fd = openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd == -1 || fstat(fd, &cur) != 0)
		goto out_fail;
	for (i = 0; i < 4096; i++) {
		upfd = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (upfd == -1)
			goto out_fail;
		if (fstat(upfd, &up) != 0 || up.st_dev != cur.st_dev ||
		    (up.st_ino == cur.st_ino)) {
			close(upfd);
			return fd;
		}
		close(fd);
		fd = upfd;
		cur = up;
	}
out_fail:
	if (fd != -1)
		close(fd);
	return -1;
}

int mountchain_of_dir(int dirfd, char **out)
{
	char *below = NULL, *text;
	struct statfs sfs;
	struct stat st;
	int root;

	if (fstat(dirfd, &st) != 0)
		return -errno;
	if (fstatfs(dirfd, &sfs) == 0 && sfs.f_type == MOUNTCHAIN_FUSE_MAGIC) {
		root = mount_root_of(dirfd);
		if (root != -1) {
			if (mountchain_of_mount(root, &below) != 0)
				below = NULL;
			close(root);
		}
	}
	if (asprintf(&text, "%u:%u %" PRIuMAX "\n%s", major(st.st_dev), minor(st.st_dev),
		     (uintmax_t)st.st_ino, below ? below : "") < 0) {
		free(below);
		return -ENOMEM;
	}
	free(below);
	/* at most MOUNTCHAIN_MAX lines */
	{
		char *p = text;
		int lines = 0;

		while (p && *p && lines < MOUNTCHAIN_MAX) {
			p = strchr(p, '\n');
			if (p)
				p++;
			lines++;
		}
		if (p)
			*p = '\0';
	}
	*out = text;
	return 0;
}

bool mountchain_has_dev(const char *chain, dev_t dev)
{
	struct dirid ids[MOUNTCHAIN_MAX];
	size_t n = chain_parse(chain, 0, ids, MOUNTCHAIN_MAX), i;

	for (i = 0; i < n; i++)
		if (ids[i].dev == dev)
			return true;
	return false;
}

/* Whether directory PATH lies strictly below one of IDS[0..N): walks up
 * the ".." of PATH comparing device and inode numbers. */
static bool path_below_ids(const char *path, const struct dirid *ids, size_t n)
{
	struct stat cur, up;
	bool below = false;
	int fd, upfd, steps;
	size_t i;

	if (n == 0)
		return false;
	fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	for (steps = 0; fd != -1 && steps < 4096 && fstat(fd, &cur) == 0; steps++) {
		upfd = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		close(fd);
		fd = upfd;
		if (fd == -1 || fstat(fd, &up) != 0 ||
		    (up.st_dev == cur.st_dev && up.st_ino == cur.st_ino))
			break; /* the root */
		for (i = 0; i < n && !below; i++)
			below = up.st_dev == ids[i].dev && up.st_ino == ids[i].ino;
		if (below)
			break;
	}
	if (fd != -1)
		close(fd);
	return below;
}

bool mountchain_below(const char *chain, unsigned first, const char *path)
{
	struct dirid ids[MOUNTCHAIN_MAX];
	size_t n = chain_parse(chain, first, ids, MOUNTCHAIN_MAX);

	return path_below_ids(path, ids, n);
}

bool mountchain_path_below_dir(const char *path, const struct stat *dir)
{
	struct dirid id = {.dev = dir->st_dev, .ino = dir->st_ino};

	return path_below_ids(path, &id, 1);
}

/* Whether FIELD (a mount point as mountinfo escapes it: \ooo for space,
 * tab, newline and backslash) names PATH. */
static bool mountinfo_path_is(const char *field, size_t len, const char *path)
{
	size_t i = 0;

	while (i < len) {
		char c = field[i];

		if (c == '\\' && i + 3 < len) {
			c = (char)(((field[i + 1] - '0') << 6) | ((field[i + 2] - '0') << 3) |
				   (field[i + 3] - '0'));
			i += 4;
		} else {
			i++;
		}
		if (*path++ != c)
			return false;
	}
	return *path == '\0';
}

int mountchain_mount_find(const char *mountpoint, struct mountchain_mount *out)
{
	char *line = NULL;
	size_t cap = 0;
	bool found = false;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		unsigned maj, min;
		int root_start = 0, root_end = 0, mp_start = 0, mp_end = 0;
		const char *dash;
		char fstype[64];

		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE ... */
		if (sscanf(line, "%*u %*u %u:%u %n%*s%n %n%*s%n", &maj, &min, &root_start,
			   &root_end, &mp_start, &mp_end) < 2 ||
		    mp_end <= mp_start || root_end <= root_start)
			continue;
		if (!mountinfo_path_is(line + mp_start, (size_t)(mp_end - mp_start), mountpoint))
			continue;
		/* the fields before " - " escape their spaces: the first one
		 * after MOUNTPOINT is the separator */
		dash = strstr(line + mp_end, " - ");
		if (!dash || sscanf(dash + 3, "%63s", fstype) != 1)
			continue;
		out->dev = makedev(maj, min);
		strcpy(out->fstype, fstype);
		out->whole = root_end - root_start == 1 && line[root_start] == '/';
		found = true; /* and on: a later line is a mount on top */
	}
	free(line);
	fclose(f);
	return found ? 0 : -ENOENT;
}

int mountchain_mount_dev(const char *mountpoint, dev_t *out)
{
	struct mountchain_mount m;
	int err = mountchain_mount_find(mountpoint, &m);

	if (err)
		return err;
	*out = m.dev;
	return 0;
}

/* Undoes mountinfo's octal escapes (\040 for a space) of S in place. */
char *mountchain_unescape(char *s)
{
	char *r = s, *w = s;

	while (*r) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') << 6 | (r[2] - '0') << 3 | (r[3] - '0'));
			r += 4;
		} else {
			*w++ = *r++;
		}
	}
	*w = '\0';
	return s;
}
