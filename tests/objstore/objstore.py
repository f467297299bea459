"""The object-store tier's pieces: an S3 server on loopback (s3server/),
per-host s3fs mounts of one bucket, a rename storm over two hosts and the
tally of the bucket afterwards.

Nothing here kills or unmounts what it did not start: the server and each
s3fs are children of this process, stopped by pid and mount path.
"""
import collections
import errno
import multiprocessing
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mounts import is_mounted, wait_for  # noqa: E402

BUCKET = "shared"


class S3Server:
    """The in-memory S3 server (s3server/), on a free loopback port."""

    def __init__(self, binary, workdir):
        self.binary, self.workdir = binary, str(workdir)
        self.proc = None
        self.port = None

    def start(self):
        port_file = os.path.join(self.workdir, "s3.port")
        self.logf = open(os.path.join(self.workdir, "s3server.log"), "ab")
        self.proc = subprocess.Popen([self.binary, "-port-file", port_file, "-bucket", BUCKET],
                                     stdout=self.logf, stderr=subprocess.STDOUT,
                                     start_new_session=True)

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("s3server exited with %d" % self.proc.returncode)
            return os.path.exists(port_file)
        wait_for(ready, 15, what="the S3 server's port")
        with open(port_file) as f:
            self.port = int(f.read())
        return self

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=15)
            self.proc = None
            self.logf.close()

    def _get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.read()

    def keys(self):
        """Every object key of the bucket (ListObjectsV2, all pages)."""
        keys, token = [], None
        while True:
            q = {"list-type": "2", "max-keys": "1000"}
            if token:
                q["continuation-token"] = token
            body = self._get("/%s?%s" % (BUCKET, urllib.parse.urlencode(q))).decode()
            keys += [urllib.parse.unquote(k) if "%" in k else k
                     for k in re.findall(r"<Key>([^<]*)</Key>", body)]
            m = re.search(r"<NextContinuationToken>([^<]*)</NextContinuationToken>", body)
            if "<IsTruncated>true</IsTruncated>" not in body or not m:
                return keys
            token = m.group(1)

    def read(self, key):
        return self._get("/%s/%s" % (BUCKET, urllib.parse.quote(key)))


class S3fsMount:
    """One host's s3fs mount of the bucket, with its own stat cache.

    The credentials go in a file of mode 600 (passwd_file=); the server
    does not check them, s3fs only insists that they exist.
    """

    def __init__(self, server, workdir, name, cache_opts=("max_stat_cache_size=0",)):
        self.server = server
        self.mnt = os.path.join(str(workdir), name)
        self.cache = os.path.join(str(workdir), name + ".cache")
        self.pw = os.path.join(str(workdir), name + ".passwd")
        self.log_path = self.mnt + ".log"
        self.cache_opts = list(cache_opts)
        self.proc = None

    def start(self):
        os.makedirs(self.mnt, exist_ok=True)
        os.makedirs(self.cache, exist_ok=True)
        fd = os.open(self.pw, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("test-access-key:test-secret-key\n")
        opts = ["use_path_request_style", "url=" + self.server.url, "passwd_file=" + self.pw,
                "use_cache=" + self.cache, "allow_other", "dbglevel=warn"] + self.cache_opts
        self.logf = open(self.log_path, "ab")
        # -f: the daemon stays our child, stopped by its pid and mount path
        self.proc = subprocess.Popen(["s3fs", BUCKET, self.mnt, "-f", "-o", ",".join(opts)],
                                     stdout=self.logf, stderr=subprocess.STDOUT,
                                     start_new_session=True)

        def mounted():
            if self.proc.poll() is not None:
                raise RuntimeError("s3fs exited with %d:\n%s" % (self.proc.returncode, self.log()))
            return is_mounted(self.mnt)
        wait_for(mounted, 20, what="s3fs to mount " + self.mnt)
        return self

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc is None:
            return
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], check=False,
                           stderr=subprocess.DEVNULL)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)
        self.proc = None
        self.logf.close()
        shutil.rmtree(self.cache, ignore_errors=True)


# ---- the storm ---------------------------------------------------------------------------

MOVING = "clinton"    # host A moves this directory, and then each name it gets, on
STILL = "other"       # a directory nobody moves


def seed_tree(root, n_moving, n_still, tag="t"):
    """Files in ROOT/clinton and ROOT/other, each holding a unique token
    (TAG-N, also its first name). Returns the set of tokens."""
    tokens = set()
    for d, n in ((MOVING, n_moving), (STILL, n_still)):
        os.makedirs(os.path.join(root, d), exist_ok=True)
        for _ in range(n):
            tok = "%s-%05d" % (tag, len(tokens))
            with open(os.path.join(root, d, tok), "w") as f:
                f.write(tok)
            tokens.add(tok)
    return tokens


def _dirs(root):
    return sorted(d for d in os.listdir(root) if not d.startswith("."))


def mover(root, deadline, q, pause=0.2):
    """Host A: moves the directory on and on, /clinton -> /m1 -> /m2 ...
    (each time a new name, so that no move meets an existing target),
    PAUSE seconds apart. Where a move left the directory split in two, it
    takes either part."""
    rnd = random.Random(0)
    done = errs = n = 0
    busy = 0.0
    why = collections.Counter()
    while time.time() < deadline:
        try:
            dirs = [d for d in _dirs(root) if d != STILL]
        except OSError:
            dirs = []
        if not dirs:
            time.sleep(0.01)
            continue
        n += 1
        src, dst = rnd.choice(dirs), "m%d" % n
        t0 = time.monotonic()
        try:
            os.rename(os.path.join(root, src), os.path.join(root, dst))
            done += 1
        except OSError as e:
            errs += 1
            why[errno.errorcode.get(e.errno, str(e.errno))] += 1
        busy += time.monotonic() - t0
        time.sleep(pause)
    q.put(("mover", done, errs, busy, [], dict(why)))


def renamer(root, seed, deadline, q, unlinks):
    """Host B: renames files inside the moving directory (to a new name in
    the same directory), between directories, and removes up to UNLINKS
    files. Every new name is unique, so no rename replaces a file."""
    rnd = random.Random(seed)
    done = errs = n = 0
    busy = 0.0
    removed = []
    why = collections.Counter()
    while time.time() < deadline:
        try:
            dirs = _dirs(root)
            d = rnd.choice(dirs)
            names = os.listdir(os.path.join(root, d))
        except (OSError, IndexError):
            continue
        if not names:
            continue
        name = rnd.choice(names)
        tok = name.split(".")[0]
        n += 1
        r = rnd.random()
        t0 = time.monotonic()
        try:
            if r < 0.05 and len(removed) < unlinks:
                os.unlink(os.path.join(root, d, name))
                removed.append(tok)
            else:
                to = d if r < 0.7 else rnd.choice(dirs)
                os.rename(os.path.join(root, d, name),
                          os.path.join(root, to, "%s.%d-%d" % (tok, seed, n)))
                done += 1
        except OSError as e:
            errs += 1
            why[errno.errorcode.get(e.errno, str(e.errno))] += 1
        busy += time.monotonic() - t0
    q.put(("renamer", done, errs, busy, removed, dict(why)))


def storm(host_a, host_b, duration, workers=2, unlinks=4):
    """Host A's mover and WORKERS renamers on host B for DURATION seconds.
    Returns (results, removed tokens): one (kind, done, errors, busy
    seconds, removed, {errno name: count}) per process."""
    deadline = time.time() + duration
    q = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=mover, args=(host_a, deadline, q))]
    procs += [multiprocessing.Process(target=renamer, args=(host_b, i + 1, deadline, q, unlinks))
              for i in range(workers)]
    for p in procs:
        p.start()
    results = [q.get(timeout=duration + 300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return results, {t for r in results for t in r[4]}


def rename_cost(root, n=20, batches=3):
    """Uncontended renames on one host: N files renamed one after another,
    BATCHES times, then the directory holding them moved. Returns
    ([file renames/s of each batch], [seconds of each directory move])."""
    d = os.path.join(root, "cost")
    os.makedirs(d)
    for i in range(n):
        with open(os.path.join(d, "f%d" % i), "w") as f:
            f.write("cost")
    rates, moves = [], []
    for b in range(batches):
        t0 = time.monotonic()
        for i in range(n):
            os.rename(os.path.join(d, "f%d" % i), os.path.join(d, "f%d" % i) + ".")
        rates.append(n / (time.monotonic() - t0))
        for i in range(n):
            os.rename(os.path.join(d, "f%d" % i) + ".", os.path.join(d, "f%d" % i))
        t0 = time.monotonic()
        os.rename(d, d + "2")
        moves.append(time.monotonic() - t0)
        os.rename(d + "2", d)
    return rates, moves


def tally(server, prefix, tokens, removed):
    """What the bucket holds below PREFIX ("round1/") afterwards, as counts:
    lost (a token not removed that no object holds), duplicated (a token
    more than one object holds, counting the extra copies), resurrected (a
    removed token still held), foreign (an object holding no token) and
    directories (the directories below PREFIX: 2, /other and the moved
    one, unless a move left a directory split in two)."""
    held = collections.defaultdict(list)
    foreign = []
    dirs = set()
    for key in server.keys():
        if not key.startswith(prefix):
            continue
        rel = key[len(prefix):]
        if "/" in rel:
            dirs.add(rel.split("/")[0])
        if key.endswith("/"):
            continue             # a directory object
        body = server.read(key).decode("utf-8", "replace")
        if body in tokens:
            held[body].append(key)
        else:
            foreign.append(key)
    return {
        "lost": len(tokens - removed - set(held)),
        "duplicated": sum(len(ks) - 1 for ks in held.values()),
        "resurrected": len(removed & set(held)),
        "foreign": len(foreign),
        "directories": len(dirs),
        "files": sum(len(ks) for ks in held.values()) + len(foreign),
    }


def have_s3fs():
    return shutil.which("s3fs") is not None
