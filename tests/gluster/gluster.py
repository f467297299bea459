#!/usr/bin/python3
"""The GlusterFS tier's pieces: a glusterd of the test's own, a distributed
volume of several bricks on this machine, FUSE clients of it as hosts, a
storm of directory and file renames from two hosts, and the audit of the
volume (through a fresh client) and of every brick.

Where glusterd runs. The system's glusterd keeps its state in
/var/lib/glusterd, its runtime files in /run/gluster and its logs in
/var/log/glusterfs, and the gluster CLI and the brick processes write
there too whatever glusterd's options say (the CLI makes
/var/lib/glusterd/geo-replication/, a brick its socket in /run/gluster).
So glusterd starts in namespaces of its own (unshare):

* a private mount namespace (no mount made later, here or there, crosses
  between the two), where the three system directories are bind mounts of
  directories under the test's tmp dir: nothing of the run lands in them.
  The copies of FUSE mounts it starts with are let go at once (a copy kept
  there would keep another suite's FUSE daemon from ending at its
  unmount). The gluster CLI runs in that mount namespace too (nsenter
  --mount).
* a network namespace with only its loopback up: glusterd and its bricks
  listen on 24007 and 49152 and up there, free whatever runs on this
  machine (a system glusterd, another run of this tier), and the FUSE
  clients are started in it (nsenter --net only, so that their mounts are
  made in this mount namespace, where the tests and treelockfs see them).

Brick host. glusterd refuses "localhost" and "127.0.0.1" as a brick's host
(the CLI compares the strings). 127.0.0.2 is a loopback address too (the
namespace's lo holds 127.0.0.0/8), which glusterd accepts as local and
binds to: no name to resolve, nothing added to /etc/hosts.

Nothing here kills or unmounts what it did not start: glusterd is a child
of this process (glusterd -N), the bricks its children, stopped with their
volume (gluster volume stop) and, if one outlives that, by the pid glusterd
wrote in the run directory of ours; the FUSE clients are children stopped
by pid and mount path.

Run as a script (as root, in a built tree) it gives the figures of
BENCHMARKS.md: the damage table (storms bare and through treelockfs, each
on a new volume; --settle S also times how long each host's own GlusterFS
mount keeps failing entries afterwards) and the cost of one rename:

    tests/gluster/gluster.py table [--runs 3] [--seconds 60] [--modes bare,bare-nocache,treelockfs]
        [--settle 30] [--treelockfs-opts O,O...] [--volume-set KEY=VALUE,...] [--report FILE]
    tests/gluster/gluster.py cost [--nocache] [--n 100] [--batches 5]
"""
import argparse
import collections
import errno
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from mounts import detach, is_mounted, wait_for  # noqa: E402

BRICK_HOST = "127.0.0.2"
# the system directories that glusterd, its CLI and its bricks write to
# whatever they are told: bind mounts of ours in glusterd's mount namespace
SYSTEM_DIRS = ("/var/lib/glusterd", "/var/log/glusterfs", "/run/gluster")

# What "caches off" is: the FUSE client's kernel caches (entries, attributes,
# the absence of a name) and the client's own caching translators.
CLIENT_NOCACHE = ["--attribute-timeout=0", "--entry-timeout=0", "--negative-timeout=0"]
VOLUME_NOCACHE = {
    "performance.stat-prefetch": "off",      # md-cache
    "performance.readdir-ahead": "off",
    "performance.quick-read": "off",
    "performance.io-cache": "off",
    "performance.open-behind": "off",
    "performance.nl-cache": "off",
}


def sh(cmd, check=True, timeout=120):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s%s" % (" ".join(cmd), r.returncode, r.stdout.strip(),
                                                   r.stderr.strip()))
    return r


def missing():
    """Why GlusterFS cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root (glusterd, its bricks and the FUSE clients need root)"
    for prog, pkg in (("glusterd", "glusterfs-server"), ("gluster", "glusterfs-server"),
                      ("glusterfs", "glusterfs-client"), ("unshare", "util-linux"),
                      ("nsenter", "util-linux"), ("ip", "iproute2"),
                      ("fusermount3", "fuse3")):
        if not shutil.which(prog):
            return "no %s (Debian package %s)" % (prog, pkg)
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    for d in SYSTEM_DIRS:
        if not os.path.isdir(d):
            return "no %s (the glusterfs-server package makes it)" % d
    r = subprocess.run(["unshare", "--net", "--mount", "--propagation", "private", "--", "true"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "unshare --net --mount does not work here: %s" % r.stderr.strip()
    return None


# What runs in glusterd's new namespaces before glusterd itself (the same
# pid: it execs): the loopback up; the copies of FUSE mounts that the new
# mount namespace got from this one let go (a copy kept there would keep
# another suite's FUSE daemon from ending at its unmount); the system
# directories bound to ours.
# argv: VOLFILE LOGFILE PIDFILE [OURS SYSTEM]...
_PRELUDE = r"""
import os, subprocess, sys
vol, log, pid = sys.argv[1:4]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
with open("/proc/self/mountinfo") as f:
    fuse = [l.split()[4] for l in f if l.split(" - ")[1].startswith("fuse")]
for m in reversed(fuse):
    m = m.encode().decode("unicode_escape")
    subprocess.run(["umount", "-l", m], stderr=subprocess.DEVNULL)
pairs = sys.argv[4:]
for ours, system in zip(pairs[0::2], pairs[1::2]):
    subprocess.run(["mount", "--bind", ours, system], check=True)
os.execvp("glusterd", ["glusterd", "-N", "-f", vol, "-l", log, "-p", pid])
"""


class Glusterd:
    """One glusterd in namespaces of its own (see the module's docstring),
    all its files under WORKDIR."""

    def __init__(self, workdir):
        self.workdir = os.path.abspath(str(workdir))
        self.proc = None
        self.volumes = []
        self.sock = os.path.join(self.workdir, "run", "glusterd.socket")

    def _dir(self, name):
        d = os.path.join(self.workdir, name)
        os.makedirs(d, exist_ok=True)
        return d

    def start(self, timeout=60):
        wd, run, log = self._dir("state"), self._dir("run"), self._dir("log")
        vol = os.path.join(self.workdir, "glusterd.vol")
        with open(vol, "w") as f:
            f.write("volume management\n"
                    "    type mgmt/glusterd\n"
                    "    option working-directory %s\n"
                    "    option run-directory %s\n"
                    "    option logging-directory %s\n"
                    "    option glusterd-sockfile %s\n"
                    "    option transport-type socket\n"
                    "    option transport.address-family inet\n"
                    "    option transport.socket.bind-address %s\n"
                    "    option ping-timeout 0\n"
                    "    option event-threads 1\n"
                    "end-volume\n" % (wd, run, log, self.sock, BRICK_HOST))
        args = [vol, os.path.join(log, "glusterd.log"), os.path.join(run, "glusterd.pid")]
        for d in SYSTEM_DIRS:
            args += [self._dir("sys" + d.replace("/", "-")), d]
        self.logf = open(os.path.join(self.workdir, "glusterd.out"), "ab")
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--mount", "--propagation", "private", "--",
             sys.executable, "-c", _PRELUDE] + args,
            stdin=subprocess.DEVNULL, stdout=self.logf, stderr=subprocess.STDOUT,
            start_new_session=True)

        def up():
            if self.proc.poll() is not None:
                raise RuntimeError("glusterd exited with %d:\n%s" % (self.proc.returncode,
                                                                    self.log()))
            return os.path.exists(self.sock) and \
                self.cli("volume", "list", check=False).returncode == 0
        wait_for(up, timeout, step=0.2, what="glusterd to answer")
        return self

    def log(self):
        out = []
        for p in (os.path.join(self.workdir, "glusterd.out"),
                  os.path.join(self.workdir, "log", "glusterd.log")):
            try:
                with open(p, "rb") as f:
                    out.append(f.read()[-3000:].decode("utf-8", "replace"))
            except OSError:
                pass
        return "\n".join(out)

    def ns(self, mount=False):
        """The nsenter prefix of a command run beside glusterd: in its
        network namespace, and with MOUNT in its mount namespace too."""
        cmd = ["nsenter", "--net=/proc/%d/ns/net" % self.proc.pid]
        if mount:
            cmd.append("--mount=/proc/%d/ns/mnt" % self.proc.pid)
        return cmd + ["--"]

    def cli(self, *args, check=True, timeout=120):
        return sh(self.ns(mount=True) + [
            "gluster", "--mode=script", "--glusterd-sock=" + self.sock,
            "--log-file=" + os.path.join(self.workdir, "log", "cli.log")] + list(args),
            check=check, timeout=timeout)

    def volume(self, name, nbricks=4, options=None):
        """A started distributed volume NAME of NBRICKS bricks under our
        workdir, with OPTIONS ({key: value}) set."""
        v = Volume(self, name, nbricks, options or {})
        self.volumes.append(v)
        return v.start()

    def stop(self):
        for v in reversed(self.volumes):
            v.stop()
        self.volumes = []
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self.proc = None
        self.logf.close()


class Volume:
    """A distributed volume of NBRICKS bricks, all on BRICK_HOST."""

    def __init__(self, gd, name, nbricks, options):
        self.gd, self.name, self.options = gd, name, dict(options)
        self.bricks = [os.path.join(gd.workdir, "bricks", name, "b%d" % i)
                       for i in range(nbricks)]
        self.started = False

    def start(self):
        for b in self.bricks:
            os.makedirs(b)
        # force: the bricks are on the root file system
        self.gd.cli("volume", "create", self.name, *["%s:%s" % (BRICK_HOST, b)
                                                     for b in self.bricks], "force")
        self.started = True        # stop() deletes it from here on
        for k, v in self.options.items():
            self.gd.cli("volume", "set", self.name, k, v)
        self.gd.cli("volume", "start", self.name)

        def online():
            out = self.gd.cli("volume", "status", self.name, "detail", check=False).stdout
            return out.count("Online               : Y") == len(self.bricks)
        wait_for(online, 60, step=0.2, what="the bricks of %s to be online" % self.name)
        return self

    def brick_pids(self):
        """{brick: pid} from the pid files glusterd wrote in our run dir,
        for bricks alive and running that brick."""
        pids = {}
        d = os.path.join(self.gd.workdir, "run", "vols", self.name)
        for b in self.bricks:
            f = os.path.join(d, "%s%s.pid" % (BRICK_HOST, b.replace("/", "-")))
            try:
                with open(f) as fh:
                    pid = int(fh.read().strip())
                with open("/proc/%d/cmdline" % pid, "rb") as fh:
                    if ("--brick-name\0%s\0" % b).encode() in fh.read():
                        pids[b] = pid
            except (OSError, ValueError):
                pass
        return pids

    def stop(self):
        if not self.started:
            return
        self.started = False
        pids = self.brick_pids()
        if self.gd.proc is not None and self.gd.proc.poll() is None:
            self.gd.cli("volume", "stop", self.name, "force", check=False)
            self.gd.cli("volume", "delete", self.name, check=False)
        for b, pid in pids.items():
            try:
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    os.kill(pid, 0)
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Client:
    """One host's FUSE client of a volume (glusterfs -N: a child of ours),
    run in glusterd's network namespace; OPTS are glusterfs options such
    as CLIENT_NOCACHE."""

    def __init__(self, gd, volume, mnt, opts=()):
        self.gd, self.volume, self.mnt, self.opts = gd, volume, str(mnt), list(opts)
        self.log_path = self.mnt + ".log"
        self.proc = None

    def start(self, timeout=30):
        os.makedirs(self.mnt, exist_ok=True)
        self.logf = open(self.mnt + ".out", "ab")
        self.proc = subprocess.Popen(
            self.gd.ns() + ["glusterfs", "-N", "--volfile-server=" + BRICK_HOST,
                            "--volfile-id=" + self.volume.name, "-l", self.log_path]
            + self.opts + [self.mnt],
            stdin=subprocess.DEVNULL, stdout=self.logf, stderr=subprocess.STDOUT,
            start_new_session=True)

        def mounted():
            if self.proc.poll() is not None:
                raise RuntimeError("glusterfs exited with %d:\n%s" % (self.proc.returncode,
                                                                     self.log()))
            return is_mounted(self.mnt)
        wait_for(mounted, timeout, step=0.05, what="glusterfs to mount " + self.mnt)
        # the client has connected to every brick when the root is readable
        wait_for(lambda: _listable(self.mnt), timeout, step=0.1,
                 what="the volume's root through " + self.mnt)
        return self

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        if self.proc is None:
            return
        detach(self.mnt)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)
        self.proc = None
        self.logf.close()


def _listable(path):
    try:
        os.listdir(path)
        return True
    except OSError:
        return False


# ---- the storm ------------------------------------------------------------------------

TOPS, SUBS = 4, 4


def seed(root, files_per_dir, tag):
    """TOPS top-level directories t0.. with SUBS subdirectories each, and
    FILES_PER_DIR files in each subdirectory, each holding a unique token
    (TAG-N, also in its first name). Returns the set of tokens."""
    tokens = set()
    for t in range(TOPS):
        for s in range(SUBS):
            d = os.path.join(root, "t%d" % t, "s%d" % s)
            os.makedirs(d)
            for _ in range(files_per_dir):
                tok = "%s-%05d" % (tag, len(tokens))
                with open(os.path.join(d, "f" + tok), "w") as f:
                    f.write(tok)
                tokens.add(tok)
    return tokens


def walk_dirs(root, max_depth=8):
    """Every directory below ROOT as (relative path, depth), what this host
    sees now; errors on the way (another host moved a directory) skip it."""
    out, todo = [], [("", 0)]
    while todo:
        rel, depth = todo.pop()
        if depth >= max_depth:
            continue
        try:
            with os.scandir(os.path.join(root, rel)) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            r = os.path.join(rel, e.name)
                            out.append((r, depth + 1))
                            todo.append((r, depth + 1))
                    except OSError:
                        pass
        except OSError:
            pass
    return out


def _count(why, e):
    why[errno.errorcode.get(e.errno, str(e.errno))] += 1


def flipper(root, host, seed_, stop, ctr, q, pause):
    """Renames top-level directories back and forth: X <-> X_."""
    rnd = random.Random(seed_)
    done = errs = 0
    why = collections.Counter()
    while not stop.is_set():
        try:
            tops = [e for e in os.listdir(root) if not e.startswith(".")]
        except OSError as e:
            _count(why, e)
            time.sleep(0.05)
            continue
        if not tops:
            time.sleep(0.05)
            continue
        x = rnd.choice(tops)
        y = x[:-1] if x.endswith("_") else x + "_"
        try:
            os.rename(os.path.join(root, x), os.path.join(root, y))
            done += 1
            ctr.value = done
        except OSError as e:
            errs += 1
            _count(why, e)
        time.sleep(pause)
    q.put(("flipper", host, done, errs, dict(why)))


def nester(root, host, seed_, stop, ctr, q, pause):
    """Moves directories into one another and back out to the top: a
    directory (any depth) to a new name in another directory of depth 3 or
    less, or in the root."""
    rnd = random.Random(seed_)
    done = errs = n = 0
    why = collections.Counter()
    dirs, stale = [], True
    while not stop.is_set():
        if stale or n % 4 == 0:
            dirs, stale = walk_dirs(root), False
        if len(dirs) < 2:
            time.sleep(0.05)
            continue
        r = rnd.random()
        tops = [d for d, depth in dirs if depth == 1]
        if r < 0.5 and len(tops) >= 2:
            # one top-level directory into another: the other host may be
            # moving that one into this one
            src, dst = rnd.sample(tops, 2)
        else:
            src = rnd.choice([d for d, depth in dirs if depth > 1] or [dirs[0][0]])
            if r < 0.8:
                dst = ""
            else:
                cands = [d for d, depth in dirs if depth <= 3 and d != src]
                dst = rnd.choice(cands) if cands else ""
        n += 1
        try:
            os.rename(os.path.join(root, src),
                      os.path.join(root, dst, "n%s%d" % (host, n)))
            done += 1
            ctr.value = done
        except OSError as e:
            errs += 1
            _count(why, e)
            stale = True
        time.sleep(pause)
    q.put(("nester", host, done, errs, dict(why)))


def file_renamer(root, host, seed_, stop, ctr, q, pause):
    """Renames files inside their directory (mostly) or into another one,
    each time to a new name."""
    rnd = random.Random(seed_)
    done = errs = n = 0
    why = collections.Counter()
    dirs = []
    while not stop.is_set():
        if n % 8 == 0 or not dirs:
            dirs = [d for d, _ in walk_dirs(root)]
            if not dirs:
                time.sleep(0.05)
                continue
        n += 1
        d = rnd.choice(dirs)
        try:
            names = [x for x in os.listdir(os.path.join(root, d)) if x.startswith("f")]
        except OSError as e:
            errs += 1
            _count(why, e)
            continue
        if not names:
            continue
        name = rnd.choice(names)
        to = d if rnd.random() < 0.8 else rnd.choice(dirs)
        try:
            os.rename(os.path.join(root, d, name),
                      os.path.join(root, to, "%s.%s%d" % (name.split(".")[0], host, n)))
            done += 1
            ctr.value = done
        except OSError as e:
            errs += 1
            _count(why, e)
        time.sleep(pause)
    q.put(("files", host, done, errs, dict(why)))


# each worker's pause between two renames, in seconds
PAUSES = {"flipper": 0.1, "nester": 0.0, "files": 0.02}


def storm(roots, duration, during=None, min_done=0, max_extra=180):
    """On each host (ROOTS: {host letter: its mount}) a flipper, a nester
    and a file renamer for DURATION seconds, and then, while some kind of
    rename has not succeeded MIN_DONE times (over both hosts), on for up to
    MAX_EXTRA seconds more: a busy machine makes the storm longer, not
    emptier. DURING, if given, is called (in this process) while they run;
    the storm ends only after it returns. Returns their results: (kind,
    host, done, errors, {errno name: count})."""
    stop = multiprocessing.Event()
    q = multiprocessing.Queue()
    procs, ctrs = [], collections.defaultdict(list)
    for i, (host, root) in enumerate(sorted(roots.items())):
        for j, (fn, kind) in enumerate(((flipper, "flipper"), (nester, "nester"),
                                        (file_renamer, "files"))):
            ctr = multiprocessing.Value("l", 0, lock=False)
            ctrs[kind].append(ctr)
            procs.append(multiprocessing.Process(
                target=fn, args=(root, host, 100 * i + j, stop, ctr, q, PAUSES[kind])))
    end = time.monotonic() + duration
    for p in procs:
        p.start()
    try:
        if during:
            during()
        while time.monotonic() < end:
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))
        end += max_extra
        while time.monotonic() < end and any(sum(c.value for c in cs) < min_done
                                             for cs in ctrs.values()):
            time.sleep(0.1)
        stop.set()
        # a rename stuck on a dead mount or a paused store only ends late
        results = [q.get(timeout=300) for _ in procs]
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join()
    return results


# ---- the audit ------------------------------------------------------------------------

def client_view(root, tokens, max_depth=64, read=True):
    """What a client sees below ROOT: every file read (without READ only
    looked up), each token counted.
    Returns {unreachable, duplicated, foreign, dirs_twice, errors,
    files, dirs}: tokens no path holds, extra paths of a token, files
    holding no token, directories (by inode: GlusterFS's are the gfid's)
    met at two paths, and the entries that failed (by errno)."""
    held = collections.Counter()
    foreign = 0
    seen_dirs = {}
    dirs_twice = 0
    errors = collections.Counter()
    failed = []
    todo = [("", 0)]
    nfiles = 0
    while todo:
        rel, depth = todo.pop()
        if depth > max_depth:
            errors["DEPTH"] += 1
            continue
        try:
            entries = os.listdir(os.path.join(root, rel))
        except OSError as e:
            _count(errors, e)
            continue
        for name in entries:
            p = os.path.join(root, rel, name)
            try:
                st = os.lstat(p)
            except OSError as e:
                _count(errors, e)
                failed.append((os.path.join(rel, name), errno.errorcode.get(e.errno)))
                continue
            if os.path.isdir(p) and not os.path.islink(p):
                if st.st_ino in seen_dirs:
                    dirs_twice += 1
                    continue
                seen_dirs[st.st_ino] = p
                todo.append((os.path.join(rel, name), depth + 1))
                continue
            nfiles += 1
            if not read:
                continue
            try:
                with open(p) as f:
                    body = f.read()
            except OSError as e:
                _count(errors, e)
                continue
            if body in tokens:
                held[body] += 1
            else:
                foreign += 1
    return {"unreachable": len(tokens - set(held)),
            "duplicated": sum(c - 1 for c in held.values()),
            "foreign": foreign, "dirs_twice": dirs_twice, "errors": dict(errors),
            "failed": failed[:5], "files": nfiles, "dirs": len(seen_dirs)}


def _xattr(path, name):
    try:
        return os.getxattr(path, name, follow_symlinks=False)
    except OSError:
        return None


def _layout(raw):
    """(start, stop) of a trusted.glusterfs.dht value (four big-endian
    32-bit words: commit hash, type, start, stop), or None."""
    if raw is None or len(raw) != 16:
        return None
    return int.from_bytes(raw[8:12], "big"), int.from_bytes(raw[12:16], "big")


def layout_ok(ranges):
    """Whether RANGES ((start, stop) each) cover 0..2^32-1 once: sorted, each
    starts right after the one before, the first at 0, the last at the
    top. A missing layout (None) is a hole."""
    if any(r is None for r in ranges):
        return False
    rs = sorted(ranges)
    if rs[0][0] != 0 or rs[-1][1] != 0xffffffff:
        return False
    for (a0, a1), (b0, b1) in zip(rs, rs[1:]):
        if b0 != a1 + 1:
            return False
    return all(a <= b for a, b in rs)


def brick_view(bricks, tokens):
    """The audit of the bricks themselves: directories by trusted.gfid (at
    two paths; on some bricks only; inside their own subtree, i.e. on a
    cycle of the parent relation that the bricks together give), layouts
    (trusted.glusterfs.dht of a directory on every brick covering the hash
    range once), data files by token (each exactly once; DHT's link files,
    mode ---------T with trusted.glusterfs.dht.linkto, are pointers, not
    data). Returns counts, and examples of each kind of damage."""
    gfid_paths = collections.defaultdict(set)
    presence = collections.defaultdict(set)
    layouts = collections.defaultdict(dict)
    parent = collections.defaultdict(set)      # gfid -> {parent gfid}
    held = collections.defaultdict(list)
    foreign = []
    links = 0
    for bi, brick in enumerate(bricks):
        root_gfid = _xattr(brick, "trusted.gfid")
        todo = [("", root_gfid)]
        presence[""].add(bi)
        layouts[""][bi] = _layout(_xattr(brick, "trusted.glusterfs.dht"))
        while todo:
            rel, pgfid = todo.pop()
            try:
                entries = list(os.scandir(os.path.join(brick, rel)))
            except OSError:
                continue
            for e in entries:
                if rel == "" and e.name == ".glusterfs":
                    continue
                r = os.path.join(rel, e.name)
                if e.is_dir(follow_symlinks=False):
                    g = _xattr(e.path, "trusted.gfid")
                    gfid_paths[g].add(r)
                    presence[r].add(bi)
                    layouts[r][bi] = _layout(_xattr(e.path, "trusted.glusterfs.dht"))
                    parent[g].add(pgfid)
                    todo.append((r, g))
                elif e.is_file(follow_symlinks=False):
                    if _xattr(e.path, "trusted.glusterfs.dht.linkto") is not None:
                        links += 1
                        continue
                    try:
                        with open(e.path) as f:
                            body = f.read()
                    except OSError:
                        continue
                    if body in tokens:
                        held[body].append((bi, r))
                    else:
                        foreign.append((bi, r))
    two_paths = {g: sorted(p) for g, p in gfid_paths.items() if len(p) > 1}
    partial = {p: sorted(b) for p, b in presence.items() if len(b) < len(bricks)}
    bad_layout = [p for p, ls in layouts.items()
                  if p not in partial and not layout_ok(list(ls.values()))]
    cycles = _on_cycles(parent)
    dup = {t: v for t, v in held.items() if len(v) > 1}
    lost = tokens - set(held)
    return {
        "dirs": len(presence), "files": sum(len(v) for v in held.values()) + len(foreign),
        "gfid_two_paths": len(two_paths), "partial_dirs": len(partial),
        "bad_layouts": len(bad_layout), "cycles": len(cycles),
        "files_lost": len(lost), "files_twice": sum(len(v) - 1 for v in dup.values()),
        "foreign": len(foreign), "link_files": links,
        "examples": {
            "gfid_two_paths": list(two_paths.values())[:3],
            "partial_dirs": list(partial.items())[:3],
            "bad_layouts": bad_layout[:3],
            "files_twice": list(dup.values())[:3],
        },
    }


def _on_cycles(parent):
    """The gfids on a cycle of the union parent relation (child -> every
    parent some brick gives it): a directory moved inside its own subtree
    on some bricks and not on others."""
    on = set()
    state = {}

    def visit(g, stack):
        state[g] = 1
        stack.append(g)
        for p in parent.get(g, ()):
            if state.get(p) == 1:
                on.update(stack[stack.index(p):])
            elif p not in state:
                visit(p, stack)
        stack.pop()
        state[g] = 2
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for g in list(parent):
        if g not in state:
            visit(g, [])
    return on


DAMAGE_KEYS = ("gfid_two_paths", "partial_dirs", "bad_layouts", "cycles", "files_lost",
               "files_twice", "foreign")
CLIENT_DAMAGE_KEYS = ("unreachable", "duplicated", "foreign", "dirs_twice")


def damage(audit):
    """The damage an audit found: {kind: count} of the kinds not zero."""
    out = {}
    for k in DAMAGE_KEYS:
        if audit["bricks"][k]:
            out["bricks." + k] = audit["bricks"][k]
    for k in CLIENT_DAMAGE_KEYS:
        if audit["client"][k]:
            out["client." + k] = audit["client"][k]
    return out


def audit(gd, volume, workdir, tokens, label):
    """The volume through a fresh client (default options, a cold cache)
    and every brick."""
    fresh = Client(gd, volume, os.path.join(str(workdir), "audit-" + label)).start()
    try:
        c = client_view(fresh.mnt, tokens)
    finally:
        fresh.stop()
    return {"client": c, "bricks": brick_view(volume.bricks, tokens)}


def summary(results):
    """(renames done, failed, {errno: count}) over a storm's results, and
    the same per kind."""
    kinds = collections.defaultdict(lambda: [0, 0])
    why = collections.Counter()
    for kind, _host, done, errs, w in results:
        kinds[kind][0] += done
        kinds[kind][1] += errs
        why.update(w)
    return dict(kinds), dict(why)


# ---- one run: a volume, two hosts, a storm, the audit ---------------------------------

MODES = {
    # name: (through treelockfs, the FUSE client's kernel caches off
    # (CLIENT_NOCACHE), the volume's caching translators off (VOLUME_NOCACHE))
    "bare": (False, False, False),
    "bare-nocache": (False, True, True),
    "treelockfs": (True, True, True),
    "treelockfs-cache": (True, False, False),
    "treelockfs-kernel-nocache": (True, True, False),
}
TREELOCKFS_OPTS = ["lock_scope=namespace", "lease_ttl=5", "lock_timeout=30",
                   "entry_timeout=0", "attr_timeout=0", "negative_timeout=0"]


def wait_seen(root, rels, timeout=30):
    """Host ROOT sees every path of RELS (another host made them)."""
    wait_for(lambda: all(os.path.isdir(os.path.join(root, r)) for r in rels), timeout,
             step=0.1, what="%s to see the seeded tree" % root)


def own_view_errors(roots, tokens, examples=None):
    """What each host's own mount (its client, its caches) shows right
    after the storm: {host: {errno name: count}} of entries that fail;
    EXAMPLES, a dict, gets {host: [(path, errno name)]} of a few."""
    out = {}
    for h, r in sorted(roots.items()):
        v = client_view(r, tokens, read=False)
        out[h] = v["errors"]
        if examples is not None and v["failed"]:
            examples[h] = v["failed"]
    return out


def one_run(gd, workdir, name, mode, seconds, files=25, nbricks=4, make_tl=None,
            during=None, settle=0, volume_opts=None, min_done=0):
    """A run of MODE (MODES) on a new volume NAME: two hosts' clients,
    the tree seeded through host A, treelockfs on each host where the mode
    says (MAKE_TL(backing, owner) -> a started mount with .mnt and .stop()),
    a storm of SECONDS, then the audit. DURING(tl mounts) runs while the
    storm does. With SETTLE > 0, each host's own GlusterFS mount is walked
    again every 2 s for up to SETTLE seconds until no entry fails (the
    time it took is reported). Returns a dict of the figures."""
    use_tl, client_nocache, volume_nocache = MODES[mode]
    work = os.path.join(str(workdir), name)
    os.makedirs(work)
    phases = {}
    t = time.monotonic()
    vol = gd.volume(name, nbricks, dict(VOLUME_NOCACHE if volume_nocache else {},
                                        **(volume_opts or {})))
    clients, tls = [], []
    try:
        for h in "AB":
            clients.append(Client(gd, vol, os.path.join(work, "gl" + h),
                                  CLIENT_NOCACHE if client_nocache else ()).start())
        phases["volume"], t = time.monotonic() - t, time.monotonic()
        tokens = seed(clients[0].mnt, files, name)
        wait_seen(clients[1].mnt, ["t%d/s%d" % (t, s) for t in range(TOPS) for s in range(SUBS)])
        if use_tl:
            for h, c in zip("AB", clients):
                tls.append(make_tl(c.mnt, "host" + h))
            roots = {h: m.mnt for h, m in zip("AB", tls)}
        else:
            roots = {h: c.mnt for h, c in zip("AB", clients)}
        phases["seed"], t = time.monotonic() - t, time.monotonic()
        results = storm(roots, seconds, during=(lambda: during(tls)) if during else None,
                        min_done=min_done)
        phases["storm"], t = time.monotonic() - t, time.monotonic()
        kinds, why = summary(results)
        own_failed = {}
        own = own_view_errors({h: c.mnt for h, c in zip("AB", clients)}, tokens, own_failed)
        settled = None
        if settle and any(own.values()):
            t1 = time.monotonic()
            while time.monotonic() - t1 < settle:
                time.sleep(2)
                if not any(own_view_errors({h: c.mnt for h, c in zip("AB", clients)},
                                           tokens).values()):
                    settled = time.monotonic() - t1
                    break
            else:
                settled = float("inf")
        for m in reversed(tls):
            m.stop()
        tls = []
        for c in clients:
            c.stop()
        clients = []
        phases["after"], t = time.monotonic() - t, time.monotonic()
        a = audit(gd, vol, work, tokens, "fresh")
        phases["audit"], t = time.monotonic() - t, time.monotonic()
    finally:
        for m in reversed(tls):
            m.stop()
        for c in clients:
            c.stop()
        vol.stop()
    phases["stop"] = time.monotonic() - t
    return {"name": name, "mode": mode, "seconds": seconds, "phases": phases,
            "files": len(tokens), "renames": kinds, "errors": why, "own_errors": own,
            "own_failed": own_failed, "settled": settled, "audit": a, "damage": damage(a)}


def describe(r):
    """One run's figures, one line."""
    k = r["renames"]
    done = ", ".join("%s %d (%d failed)" % (n, v[0], v[1]) for n, v in sorted(k.items()))
    own = {h: e for h, e in r["own_errors"].items() if e}
    line = ("%s, %s, %.0f s storm: %s; errors %s; damage %s; own mounts right after: %s"
            % (r["mode"], r["name"], r["seconds"], done, r["errors"] or "none",
               r["damage"] or "none", own or "clean"))
    if r.get("settled") is not None:
        line += "; clean again after %.0f s" % r["settled"]
    return line


# ---- by hand: the damage table, the cost of a rename ----------------------------------

def _integration_mount():
    """The integration tier's Mount class (its conftest, loaded by path)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "integration_conftest", os.path.join(os.path.dirname(HERE), "integration", "conftest.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Mount


def rename_cost(root, n):
    """One process renaming N files one after another in one directory
    (each to a new name, then back: 2N renames). Returns microseconds per
    rename."""
    d = os.path.join(root, "cost")
    os.makedirs(d)
    for i in range(n):
        with open(os.path.join(d, "f%d" % i), "w") as f:
            f.write("x")
    t0 = time.perf_counter()
    for i in range(n):
        os.rename(os.path.join(d, "f%d" % i), os.path.join(d, "g%d" % i))
    for i in range(n):
        os.rename(os.path.join(d, "g%d" % i), os.path.join(d, "f%d" % i))
    us = 1e6 * (time.perf_counter() - t0) / (2 * n)
    shutil.rmtree(d)
    return us


def _table(a, gd, work, store, Mount):
    opts = [o for o in a.treelockfs_opts.split(",") if o]

    def make_tl(backing, owner):
        mnt = backing.rstrip("/") + "-tl"
        os.makedirs(mnt, exist_ok=True)
        return Mount(backing, mnt, opts=["lock_store=es", "es_url=" + store.url,
                                         "owner=" + owner] + opts).start(timeout=30)
    rows = collections.OrderedDict()
    report = open(a.report, "a") if a.report else None
    n = 0
    for _ in range(a.runs):
        for mode in a.modes.split(","):
            n += 1
            store.reset()
            r = one_run(gd, work, "v%d" % n, mode, a.seconds, files=a.files, nbricks=a.bricks,
                        make_tl=make_tl, settle=a.settle,
                        volume_opts=dict(kv.split("=", 1) for kv in a.volume_set.split(",")
                                         if kv))
            print(describe(r), flush=True)
            if r["own_failed"]:
                print("    own mounts' failing entries: %r" % r["own_failed"], flush=True)
            if report:
                report.write(json.dumps(r, default=str) + "\n")
                report.flush()
            rows.setdefault(mode, []).append(r)
    print("\n| | runs | damaged | unreachable files (fresh client) | directory gfids at two "
          "paths | directories on some bricks only | files under two names | errors seen "
          "through the mounts |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
    for mode, rs in rows.items():
        def rng(key, part="bricks"):
            v = [r["audit"][part][key] for r in rs]
            return "%d-%d" % (min(v), max(v)) if min(v) != max(v) else "%d" % v[0]
        errs = collections.Counter()
        for r in rs:
            errs.update(r["errors"])
        print("| %s | %d | %d | %s | %s | %s | %s | %s |" % (
            mode, len(rs), sum(bool(r["damage"]) for r in rs), rng("unreachable", "client"),
            rng("gfid_two_paths"), rng("partial_dirs"), rng("files_twice"),
            ", ".join("%s %d" % kv for kv in errs.most_common())))


def _cost(a, gd, work, store, Mount):
    vol = gd.volume("cost", a.bricks, VOLUME_NOCACHE if a.nocache else {})
    c = Client(gd, vol, os.path.join(work, "cost-gl"),
               CLIENT_NOCACHE if a.nocache else ()).start()
    try:
        rows = [("GlusterFS client alone", c.mnt, None)]
        for label, o in (("treelockfs, lock_store=mem", ["lock_store=mem"]),
                         ("treelockfs, lock_store=es (the emulator)",
                          ["lock_store=es", "es_url=" + store.url, "owner=hostA"])):
            rows.append((label, None, o + [x for x in a.treelockfs_opts.split(",") if x]))
        print("| one process renaming in one directory (%s, %d bricks) | us per rename "
              "(median of %d batches of %d) |\n| --- | --- |"
              % ("client caches off" if a.nocache else "default client caches", a.bricks,
                 a.batches, 2 * a.n))
        for label, root, opts in rows:
            m = None
            if opts is not None:
                mnt = os.path.join(work, "cost-tl")
                os.makedirs(mnt, exist_ok=True)
                m = Mount(c.mnt, mnt, opts=opts).start(timeout=30)
                root = m.mnt
            try:
                us = sorted(rename_cost(root, a.n) for _ in range(a.batches))
            finally:
                if m:
                    m.stop()
            print("| %s | %.0f (%.0f-%.0f) |" % (label, us[len(us) // 2], us[0], us[-1]),
                  flush=True)
    finally:
        c.stop()
        vol.stop()


def _main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table", help="storms bare and through treelockfs; the damage table")
    t.add_argument("--runs", type=int, default=3)
    t.add_argument("--seconds", type=float, default=60)
    t.add_argument("--modes", default="bare,bare-nocache,treelockfs",
                   help="a comma list of " + ", ".join(MODES))
    t.add_argument("--files", type=int, default=25, help="files per subdirectory (16 of them)")
    t.add_argument("--settle", type=float, default=0,
                   help="walk each host's own GlusterFS mount again for up to this many "
                   "seconds until no entry fails")
    t.add_argument("--report", help="also append each run as a JSON line to this file")
    t.add_argument("--volume-set", default="", help="more volume options, KEY=VALUE,...")
    c = sub.add_parser("cost", help="one process renaming in one directory: bare, "
                       "through treelockfs (mem, es)")
    c.add_argument("--n", type=int, default=100, help="files (2N renames a batch)")
    c.add_argument("--batches", type=int, default=5)
    c.add_argument("--nocache", action="store_true", help="the client's caches off")
    for p in (t, c):
        p.add_argument("--bricks", type=int, default=4)
        p.add_argument("--treelockfs-opts", default=",".join(TREELOCKFS_OPTS))
        p.add_argument("--workdir", help="where the volume, its bricks and the mounts go "
                       "(default: a new directory in $TMPDIR)")
    a = ap.parse_args()
    why = missing()
    if why:
        print("skipped: " + why)
        return 77
    import tempfile
    import backends
    Mount = _integration_mount()
    work = a.workdir or tempfile.mkdtemp(prefix="tlfs-gluster-")
    gd = Glusterd(os.path.join(work, "glusterd"))
    store = None
    try:
        gd.start()
        os.makedirs(os.path.join(work, "es"), exist_ok=True)
        store = backends.make("emulator-es8", os.path.join(work, "es"))
        store.start()
        (_table if a.cmd == "table" else _cost)(a, gd, work, store, Mount)
    finally:
        if store:
            store.stop()
        gd.stop()
    if not a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
