"""Metrics in Prometheus's text format: .treelockfs/metrics, metrics_file=
(node_exporter's textfile convention) and `treelockctl metrics`, checked
by Prometheus's own tools where they are installed (Debian packages
prometheus and prometheus-node-exporter)."""
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import urllib.parse
import urllib.request

import pytest

from conftest import BIN, CTL, SRCDIR, makedirs, read, wait_for, write
from es_helpers import es_mounts  # noqa: F401
from test_hardening import run_refused

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
NODE_EXPORTER = shutil.which("prometheus-node-exporter")
RULES = os.path.join(SRCDIR, "contrib", "treelockfs-alerts.rules.yml")

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')


def parse(text):
    """{(name, frozenset of label pairs): value} of an exposition; every
    sample line must parse."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def value(samples, name, **labels):
    """The one sample NAME whose labels include LABELS."""
    found = [v for (n, ls), v in samples.items()
             if n == name and set(labels.items()) <= set(ls)]
    assert len(found) == 1, "%s %r: %d samples" % (name, labels, len(found))
    return found[0]


def renames(m, n):
    makedirs(m, "d")
    for i in range(n):
        write(m, "d/f%d" % i)
        os.rename(m.path("d", "f%d" % i), m.path("d", "g%d" % i))


def enoent_rename(m):
    """A rename the daemon answers ENOENT: the kernel still knows the name,
    the backing lost it."""
    write(m, "gone")
    os.stat(m.path("gone"))
    os.unlink(m.bpath("gone"))
    with pytest.raises(FileNotFoundError):
        os.rename(m.path("gone"), m.path("gone2"))


def contended_rename(m, tries=5):
    """Two renames in two directories under lock_strategy=global (the
    kernel lets them into the daemon together, unlike two renames in one
    directory): the second waits for the first, which holds the global
    lock for rename_delay_ms. The second starts once the first holds (seen
    in the locks file), so it waits whatever the timing; both succeed.
    Where a busy machine let the first one end before its lock was seen,
    the second is not sent and both go again in new directories. Returns
    the renames that returned 0 (2, and 1 more per attempt made again)."""
    done = 0
    for i in range(tries):
        ca, cb = "ca%d" % i, "cb%d" % i
        for d in (ca, cb):
            makedirs(m, d)
            write(m, d + "/x")
        t = threading.Thread(target=os.rename, args=(m.path(ca, "x"), m.path(ca, "y")))
        t.start()
        try:
            seen = wait_for(lambda: m.locks() or not t.is_alive(),
                            what="the first rename's lock or its end") and t.is_alive()
            if seen:
                os.rename(m.path(cb, "x"), m.path(cb, "y"))
        finally:
            t.join()
        assert os.path.exists(m.bpath(ca, "y"))
        done += 1
        if seen:
            assert os.path.exists(m.bpath(cb, "y"))
            return done + 1
    raise AssertionError("the first rename's lock was never seen held in %d tries" % tries)


# ---- the exposition ----------------------------------------------------------------------


def test_metrics__counts_what_was_done(mount_factory):
    m = mount_factory(opts=["rename_delay_ms=400", "lock_strategy=global"])
    renames(m, 3)
    enoent_rename(m)
    ok = 3 + contended_rename(m)
    s = parse(m.ctl("metrics"))
    lab = {"mountpoint": m.mnt}
    assert value(s, "treelockfs_renames_total", result="ok", **lab) == ok
    assert value(s, "treelockfs_renames_total", result="ENOENT", **lab) == 1
    assert value(s, "treelockfs_lock_waits_total", **lab) == 1
    assert value(s, "treelockfs_lock_wait_seconds_count", **lab) == 1
    # the wait lasted until the first rename's 400 ms hold ended, at most
    assert 0 < value(s, "treelockfs_lock_wait_seconds_sum", **lab) < 30
    assert value(s, "treelockfs_rename_duration_seconds_count", **lab) == ok + 1
    assert value(s, "treelockfs_rename_duration_seconds_bucket", le="+Inf", **lab) == ok + 1
    assert value(s, "treelockfs_locks_held", **lab) == 0
    assert value(s, "treelockfs_lock_waiters", **lab) == 0
    assert value(s, "treelockfs_store_requests_total", **lab) == 0
    assert value(s, "treelockfs_info", store="mem", strategy="global", **lab) == 1
    # buckets are cumulative
    buckets = sorted((float(dict(ls)["le"]), v) for (n, ls), v in s.items()
                     if n == "treelockfs_rename_duration_seconds_bucket")
    counts = [v for _, v in buckets]
    assert counts == sorted(counts) and counts[-1] == ok + 1


def test_metrics__gauges_show_a_hold_and_a_waiter(mount_factory):
    m = mount_factory(opts=["rename_delay_ms=1500", "lock_strategy=global"])
    for d in ("a", "b"):
        makedirs(m, d)
        write(m, d + "/x")
    t1 = threading.Thread(target=os.rename, args=(m.path("a", "x"), m.path("a", "y")))
    t1.start()
    t2 = None
    try:
        wait_for(lambda: m.locks(), what="the first rename's lock")
        t2 = threading.Thread(target=os.rename, args=(m.path("b", "x"), m.path("b", "y")))
        t2.start()

        def seen():
            s = parse(m.ctl("metrics"))
            return (value(s, "treelockfs_locks_held") == 1 and
                    value(s, "treelockfs_lock_waiters") == 1)
        wait_for(seen, what="one hold and one waiter in the metrics")
    finally:
        t1.join()
        if t2:
            t2.join()
    s = parse(m.ctl("metrics"))
    assert value(s, "treelockfs_locks_held") == 0
    assert value(s, "treelockfs_lock_waiters") == 0


@pytest.mark.skipif(not PROMTOOL, reason="no promtool (Debian package prometheus)")
def test_metrics__promtool_accepts_them(mount_factory):
    m = mount_factory(opts=["rename_delay_ms=100", "lock_strategy=global"])
    renames(m, 2)
    contended_rename(m)
    text = m.ctl("metrics")
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # no lint remarks either (names, units, help)
    assert r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr


def test_metrics__labels_escaped(tmp_path, mount_factory):
    mnt = tmp_path / 'we"ird\\mnt'
    mnt.mkdir()
    m = mount_factory(name='we"ird\\mnt')
    s = parse(m.ctl("metrics"))
    assert value(s, "treelockfs_info", mountpoint=str(mnt).replace("\\", "\\\\")
                 .replace('"', '\\"')) == 1


def test_metrics__treelockctl_prints_them(mnt):
    renames(mnt, 1)
    r = subprocess.run([CTL, "metrics", mnt.mnt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert value(parse(r.stdout), "treelockfs_renames_total", result="ok") == 1


@pytest.mark.nofuse
def test_metrics__treelockctl_refuses_what_is_not_a_mount(tmp_path):
    r = subprocess.run([CTL, "metrics", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "cannot read the metrics of" in r.stderr and "not a treelockfs mount" in r.stderr
    r = subprocess.run([CTL, "metrics"], capture_output=True, text=True)
    assert r.returncode == 1 and "metrics MOUNTPOINT" in r.stderr


FAKE = '# TYPE treelockfs_renames_total counter\ntreelockfs_renames_total{result="ok"} 99\n'


def plant(d):
    """A .treelockfs/metrics in directory D that no mount serves."""
    os.makedirs(os.path.join(d, ".treelockfs"), exist_ok=True)
    with open(os.path.join(d, ".treelockfs", "metrics"), "w") as f:
        f.write(FAKE)


def ctl_refuses(d, why):
    r = subprocess.run([CTL, "metrics", str(d)], capture_output=True, text=True)
    assert r.returncode == 1, r
    assert r.stdout == ""
    assert "cannot read the metrics of '%s': not a treelockfs mount (%s)" % (d, why) \
        in r.stderr, r.stderr


@pytest.mark.nofuse
def test_metrics__treelockctl_refuses_a_planted_file(tmp_path):
    d = tmp_path / "fake"
    plant(d)
    ctl_refuses(d, "nothing is mounted there")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount")
@pytest.mark.nofuse
def test_metrics__treelockctl_refuses_another_filesystem_s_mount(tmp_path):
    d = tmp_path / "tmpfs"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], check=True)
    try:
        plant(d)
        ctl_refuses(d, "the mount there is of type 'tmpfs'")
    finally:
        subprocess.run(["umount", str(d)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to bind mount")
def test_metrics__treelockctl_refuses_a_directory_of_a_mount(tmp_path, mnt):
    # below the root, ".treelockfs" is a file of BACKING's like any other
    plant(mnt.bpath("sub"))
    assert read(mnt, "sub/.treelockfs/metrics") == FAKE
    ctl_refuses(mnt.path("sub"), "nothing is mounted there")
    bind = tmp_path / "bind"
    bind.mkdir()
    subprocess.run(["mount", "--bind", mnt.path("sub"), str(bind)], check=True)
    try:
        ctl_refuses(bind, "a bind mount of a directory below the root of one")
    finally:
        subprocess.run(["umount", str(bind)], check=False)
    # the mount's root itself still answers with the mount's own numbers
    r = subprocess.run([CTL, "metrics", mnt.mnt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert value(parse(r.stdout), "treelockfs_renames_total", result="ok") == 0


# ---- metrics_file ------------------------------------------------------------------------


def test_metrics__file_written_every_interval_and_removed_at_unmount(tmp_path, mount_factory):
    d = tmp_path / "textfile"
    d.mkdir()
    f = d / "tl.prom"
    m = mount_factory(opts=["metrics_file=%s" % f, "metrics_interval=1"])
    wait_for(f.exists, what="the first metrics file")
    assert oct(f.stat().st_mode & 0o777) == "0o644"
    renames(m, 2)

    def counted():
        try:
            s = parse(f.read_text())
        except (OSError, AssertionError):
            return False
        return value(s, "treelockfs_renames_total", result="ok") == 2
    wait_for(counted, what="the renames in the metrics file")
    # nothing but the file itself is left in the directory (no temporaries)
    assert sorted(os.listdir(d)) == ["tl.prom"]
    m.stop()
    assert not f.exists()


def test_metrics__file_replaces_a_planted_symlink_not_its_target(tmp_path, mount_factory):
    d = tmp_path / "textfile"
    d.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(victim, d / "tl.prom")
    mount_factory(opts=["metrics_file=%s" % (d / "tl.prom"), "metrics_interval=1"])
    wait_for(lambda: not os.path.islink(d / "tl.prom"), what="the file replacing the link")
    assert victim.read_text() == "keep"


def test_metrics__file_stays_in_its_directory_when_a_parent_becomes_a_symlink(
        tmp_path, mount_factory):
    """The directory of metrics_file is the one found at the start: a
    directory on its path swapped afterwards for a symbolic link to
    another directory, which holds a 0600 file of the same name, redirects
    neither the writes nor the removal at unmount."""
    chain = tmp_path / "chain"
    (chain / "textfile").mkdir(parents=True)
    other = tmp_path / "roots"
    (other / "textfile").mkdir(parents=True)
    sentinel = other / "textfile" / "tl.prom"
    sentinel.write_text("root's own\n")
    sentinel.chmod(0o600)
    before = os.stat(sentinel)
    m = mount_factory(opts=["metrics_file=%s" % (chain / "textfile" / "tl.prom"),
                            "metrics_interval=1"])
    wait_for((chain / "textfile" / "tl.prom").exists, what="the first metrics file")
    held = os.open(chain / "textfile", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rename(chain, tmp_path / "chain.orig")
        os.symlink(other, chain)
        versions = set()

        def rewritten():
            # each write is a new file renamed over the last one
            try:
                st = os.stat("tl.prom", dir_fd=held)
            except FileNotFoundError:
                return False
            versions.add((st.st_ino, st.st_mtime_ns, st.st_ctime_ns))
            return len(versions) >= 3
        wait_for(rewritten, what="two more writes of the metrics file in the directory it had "
                 "(the one swapped away)")
        m.stop()
        # removed from that directory too, and no temporaries left
        assert os.listdir(held) == []
    finally:
        os.close(held)
    after = os.stat(sentinel)
    assert sentinel.read_text() == "root's own\n"
    assert (after.st_ino, after.st_mode, after.st_mtime_ns) == \
        (before.st_ino, before.st_mode, before.st_mtime_ns)
    assert os.listdir(other / "textfile") == ["tl.prom"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")
def test_metrics__file_refused_where_others_control_the_directory(dirs, tmp_path):
    """A symbolic link on the way, a file's directory of another user or a
    directory that others may write to (not sticky) is refused at the
    start, naming it."""
    b, m = dirs
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    (tmp_path / "theirs").mkdir()
    os.chown(tmp_path / "theirs", 65534, 65534)
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    cases = [
        ("link", "'%s' is a symbolic link" % (tmp_path / "link")),
        ("theirs", "'%s' is owned by uid 65534" % (tmp_path / "theirs")),
        ("open", "'%s' is writable by others (mode 0777) and not sticky" % (tmp_path / "open")),
    ]
    for d, msg in cases:
        f = tmp_path / d / "tl.prom"
        r = run_refused([b, m, "-f", "-o", "metrics_file=%s" % f], m)
        assert r.returncode == 1, r.stderr
        assert "cannot use metrics_file '%s': %s" % (f, msg) in r.stderr, r.stderr
        assert not os.path.exists(f)


@pytest.mark.nofuse
@pytest.mark.parametrize("opt,msg", [
    ("metrics_file=/nonexistent-dir/x.prom", "cannot use metrics_file '/nonexistent-dir/x.prom'"),
    ("metrics_file=/tmp/", "invalid metrics_file '/tmp/'"),
    ("metrics_interval=0", "invalid metrics_interval '0'"),
    ("metrics_interval=soon", "invalid metrics_interval 'soon'"),
])
def test_metrics__bad_options_refused(tmp_path, opt, msg):
    (tmp_path / "b").mkdir()
    (tmp_path / "m").mkdir()
    r = subprocess.run([BIN, str(tmp_path / "b"), str(tmp_path / "m"), "-f", "-o", opt],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert msg in r.stderr, r.stderr


def test_metrics__relative_file_is_the_callers(tmp_path, mount_factory):
    (tmp_path / "rel").mkdir()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        mount_factory(opts=["metrics_file=rel/tl.prom", "metrics_interval=1"])
    finally:
        os.chdir(cwd)
    wait_for((tmp_path / "rel" / "tl.prom").exists, what="the metrics file")


# ---- the es store ------------------------------------------------------------------------


def test_metrics__es_store_requests_and_lease(backend, es_mounts):
    (a,) = es_mounts(backend, "A", lease_ttl=60)
    before = parse(a.ctl("metrics"))
    renames(a, 2)

    def answered():
        # a release handed to the sender thread may still be on its way:
        # wait until the four requests were sent and answered
        s = parse(a.ctl("metrics"))
        sent = value(s, "treelockfs_store_requests_total") - \
            value(before, "treelockfs_store_requests_total")
        return sent >= 4 and value(s, "treelockfs_store_request_duration_seconds_count") == \
            value(s, "treelockfs_store_requests_total") and s
    s = wait_for(answered, 60, what="the renames' four requests answered")
    assert value(s, "treelockfs_info", store="es") == 1
    sent = value(s, "treelockfs_store_requests_total") - \
        value(before, "treelockfs_store_requests_total")
    assert sent >= 4  # two per uncontended rename at least
    assert value(s, "treelockfs_store_request_duration_seconds_count") == \
        value(s, "treelockfs_store_requests_total")
    assert value(s, "treelockfs_store_sent_bytes_total") > 0
    assert value(s, "treelockfs_store_received_bytes_total") > 0
    assert value(s, "treelockfs_lease_fresh") == 1
    assert 0 <= value(s, "treelockfs_lease_age_seconds") < 60
    assert value(s, "treelockfs_renames_total", result="ok") == 2


# ---- with Prometheus itself --------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read().decode())


@pytest.mark.skipif(not (PROMETHEUS and NODE_EXPORTER),
                    reason="no prometheus or prometheus-node-exporter (Debian packages)")
def test_metrics__scraped_through_node_exporter_by_prometheus(tmp_path, mount_factory):
    d = tmp_path / "textfile"
    d.mkdir()
    m = mount_factory(opts=["metrics_file=%s" % (d / "treelockfs.prom"), "metrics_interval=1",
                            "rename_delay_ms=300", "lock_strategy=global"])
    ne_port, prom_port = free_port(), free_port()
    ne = subprocess.Popen([NODE_EXPORTER, "--web.listen-address=127.0.0.1:%d" % ne_port,
                           "--collector.disable-defaults", "--collector.textfile",
                           "--collector.textfile.directory=%s" % d],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1s\n"
                   "scrape_configs:\n  - job_name: node\n"
                   "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % ne_port)
    prom = subprocess.Popen([PROMETHEUS, "--config.file=%s" % cfg,
                             "--storage.tsdb.path=%s" % (tmp_path / "tsdb"),
                             "--web.listen-address=127.0.0.1:%d" % prom_port],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        renames(m, 5)
        ok = 5 + contended_rename(m)
        enoent_rename(m)

        def query(expr):
            url = "http://127.0.0.1:%d/api/v1/query?%s" % (
                prom_port, urllib.parse.urlencode({"query": expr}))
            try:
                res = http_json(url)
            except OSError:
                return None
            if res.get("status") != "success" or not res["data"]["result"]:
                return None
            return float(res["data"]["result"][0]["value"][1])

        lab = 'mountpoint="%s"' % m.mnt
        want = {
            'treelockfs_renames_total{%s,result="ok"}' % lab: ok,
            'treelockfs_renames_total{%s,result="ENOENT"}' % lab: 1,
            'treelockfs_lock_waits_total{%s}' % lab: 1,
            'treelockfs_lock_wait_seconds_count{%s}' % lab: 1,
            'treelockfs_rename_duration_seconds_count{%s}' % lab: ok + 1,
        }
        got = {}

        def all_there():
            for expr, v in want.items():
                got[expr] = query(expr)
            return got == want
        try:
            wait_for(all_there, timeout=90, what="Prometheus to hold the counts")
        except AssertionError:
            raise AssertionError("Prometheus answered %r, expected %r" % (got, want))
        # a histogram quantile over the scraped buckets answers
        q = query('histogram_quantile(0.99, treelockfs_lock_wait_seconds_bucket{%s})' % lab)
        assert q is not None and 0 < q <= 30
        print("\nPrometheus read back: %s; lock wait p99 <= %.3f s" %
              (", ".join("%s=%g" % (k.split("{")[0], v) for k, v in got.items()), q))
    finally:
        for p in (prom, ne):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.mark.nofuse
@pytest.mark.skipif(not PROMTOOL, reason="no promtool (Debian package prometheus)")
def test_metrics__alerting_rules_check():
    r = subprocess.run([PROMTOOL, "check", "rules", RULES], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


@pytest.mark.nofuse
def test_metrics__man_page_lists_every_metric():
    """Every metric name metrics.c writes is in treelockfs(1)."""
    with open(os.path.join(SRCDIR, "src", "base", "metrics.c"), encoding="utf-8") as f:
        names = set(re.findall(r'"(treelockfs_[a-z_]+)"', f.read()))
    with open(os.path.join(SRCDIR, "man", "treelockfs.1"), encoding="utf-8") as f:
        man = f.read().replace("\\-", "-")
    assert len(names) > 20
    missing = sorted(n for n in names if n not in man)
    assert not missing, "not in man/treelockfs.1: %s" % missing
