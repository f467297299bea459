"""What the Python test tiers share: the programs under test, mount points
and their teardown, waiting for a condition, and the file helpers of the
tests that compare a mount with a native directory. A conftest re-exports
what its tests use."""
import errno
import os
import signal
import subprocess
import time

SRCDIR = os.environ.get("TREELOCKFS_SRCDIR") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
_PROGRAM_ENV = {"treelockfs": "TREELOCKFS_BIN", "treelockctl": "TREELOCKCTL_BIN"}


def program(name):
    """The path of the program NAME ("treelockfs" or "treelockctl") that the
    tests run: the one $TREELOCKFS_BIN or $TREELOCKCTL_BIN names (make check
    sets them to the build tree's), else src/NAME of the source tree."""
    return os.environ.get(_PROGRAM_ENV[name]) or os.path.join(SRCDIR, "src", name)


def unbuilt(*paths):
    """Why one of the programs PATHS cannot run (missing, not a file, not
    executable), or None. That is a broken build, not a missing
    environment: the tests that need the program fail, never skip."""
    for p in paths:
        if not os.path.isfile(p):
            return "%s is missing: build it (make) or set TREELOCKFS_BIN and TREELOCKCTL_BIN" % p
        if not os.access(p, os.X_OK):
            return "%s is not executable" % p
    return None


def require_built(*paths):
    """Fails the calling test (pytest) when one of PATHS cannot run; for a
    session fixture of each tier that runs the programs."""
    why = unbuilt(*paths)
    if why:
        import pytest
        pytest.fail("broken build: " + why, pytrace=False)


def is_mounted(path):
    """True when PATH (resolved) is a mount point of this mount namespace."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            if line.split()[4].encode().decode("unicode_escape") == path:
                return True
    return False


def mounted_elsewhere(path):
    """True when a mount at PATH (resolved) is in another mount namespace:
    one made (e.g. by unshare, by another suite running beside this one)
    while PATH was mounted holds a copy of the mount, and the kernel ends
    a FUSE connection only with its last copy, so an unmount here does not
    end the daemon."""
    path = os.path.realpath(path)
    ours = os.readlink("/proc/self/ns/mnt")
    seen = {ours}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            ns = os.readlink("/proc/%s/ns/mnt" % pid)
            if ns in seen:
                continue
            seen.add(ns)
            with open("/proc/%s/mountinfo" % pid, encoding="utf-8",
                      errors="surrogateescape") as f:
                if any(line.split()[4].encode().decode("unicode_escape") == path for line in f):
                    return True
        except (OSError, IndexError):
            continue
    return False


def mount_id(path):
    """The id of the mount at PATH in our namespace (mountinfo's first
    field), or None."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4 and fields[4] == path:
                return fields[0]
    return None


def holders_of(path, mnt_id):
    """Why an unmounted FUSE daemon may still run: the pids (with their
    command) whose mount namespace, other than ours, still has PATH
    mounted, and those with a descriptor open on the mount whose id was
    MNT_ID (a lazy unmount leaves those working). For a failed stop's
    message."""
    path = os.path.realpath(path)
    ours = os.readlink("/proc/self/ns/mnt")
    out = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            why = []
            if os.readlink("/proc/%s/ns/mnt" % pid) != ours:
                with open("/proc/%s/mountinfo" % pid, encoding="utf-8",
                          errors="surrogateescape") as f:
                    if any(line.split()[4] == path for line in f):
                        why.append("its mount namespace has it")
            for fd in os.listdir("/proc/%s/fdinfo" % pid) if mnt_id else ():
                try:
                    with open("/proc/%s/fdinfo/%s" % (pid, fd)) as f:
                        if "mnt_id:\t%s\n" % mnt_id in f.read():
                            why.append("fd " + fd)
                except OSError:
                    continue
            if why:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
                out.append("pid %s (%s): %s" % (pid, cmd.strip(), ", ".join(why[:4])))
        except OSError:
            continue
    return out


def threads_of(pid):
    """Each thread of PID: its name and where it sleeps (wchan), one line
    each: for the message of a daemon that would not stop."""
    out = []
    for tid in sorted(os.listdir("/proc/%d/task" % pid), key=int):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                comm = f.read().strip()
            with open("/proc/%d/task/%s/wchan" % (pid, tid)) as f:
                wchan = f.read().strip()
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                state = f.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        out.append("%s %s %s %s" % (tid, comm, state, wchan))
    return out


def mounts_below(path):
    """The mount points of this mount namespace strictly below PATH."""
    path = os.path.realpath(path).rstrip("/") + "/"
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        points = [line.split()[4].encode().decode("unicode_escape") for line in f]
    return [p for p in points if p.startswith(path)]


def wait_for(pred, timeout=30, step=0.02, what="condition"):
    """Calls PRED until it returns a true value, which is returned; raises
    AssertionError naming WHAT after TIMEOUT seconds. For a condition a test
    does not control the time of (a busy machine only makes it later), so
    the timeout is generous."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(step)


def detach(path):
    """Unmounts PATH, a FUSE mount of ours, lazily when busy (fusermount3
    -u -z); nothing when PATH is not a mount point."""
    if is_mounted(path):
        subprocess.run(["fusermount3", "-u", "-z", path], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_process(proc, timeout=60):
    """Ends PROC, a child of ours: SIGTERM, then SIGKILL after TIMEOUT
    seconds; waits for it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stop_mounts(mounts):
    """The teardown of a fixture that started MOUNTS (objects with .proc and
    .stop(check=True)): stops them newest first, each daemon must exit 0;
    fails the test (pytest) with every daemon that did not."""
    errors = []
    for m in reversed(mounts):
        if m.proc is not None:
            try:
                m.stop(check=True)
            except AssertionError as e:
                errors.append(str(e))
    if errors:
        import pytest
        pytest.fail("\n".join(errors))


# ---- what the tests that compare a mount with a native directory share ----


def errno_of(fn):
    """The errno of the OSError FN() raised, 0 when it raised none."""
    try:
        fn()
    except OSError as e:
        return e.errno
    return 0


def outcome(fn, stat_form=None):
    """What FN() did, in a form that compares equal between a mount and a
    native directory: ("err", "ENOENT") for an OSError, STAT_FORM(result)
    for an os.stat_result when STAT_FORM is given, else ("ok", result)."""
    try:
        res = fn()
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, e.errno))
    if stat_form is not None and isinstance(res, os.stat_result):
        return stat_form(res)
    return ("ok", res)


def run_steps(root, steps, stat_form=None):
    """[(name, outcome of FUNC(ROOT))] for each (name, func) of STEPS."""
    return [(name, outcome(lambda f=f: f(root), stat_form)) for name, f in steps]


def write_file(path, data=b"", flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode=0o644):
    """open(2) PATH with FLAGS and MODE, write(2) DATA once; returns what
    write returned."""
    fd = os.open(path, flags, mode)
    try:
        return os.write(fd, data)
    finally:
        os.close(fd)


def read_file(path):
    """The bytes of PATH."""
    with open(path, "rb") as f:
        return f.read()


def daemons_of(mnt):
    """PIDs of treelockfs processes whose argv names MNT (the ones we started)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"treelockfs" and mnt.encode() in argv:
            pids.append(int(name))
    return pids


def alive(pid):
    """True while PID runs (not a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return not f.read().rsplit(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return False


def wait_gone(pids, timeout=15):
    """True once every process of PIDS has exited (within TIMEOUT s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [p for p in pids if alive(p)]
        if not pids:
            return True
        time.sleep(0.05)
    return False


def integration_conftest():
    """The integration tier's conftest module, for its Mount class, loaded
    under a name of its own (every tier's file is "conftest" too)."""
    import importlib.util
    path = os.path.join(SRCDIR, "tests", "integration", "conftest.py")
    spec = importlib.util.spec_from_file_location("integration_conftest", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
