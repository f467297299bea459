"""Set-ID bits and file capabilities (security.capability) after a write,
a truncate and an O_TRUNC open through the mount, exactly as natively:
by an ordinary user, by root, and by a root process without CAP_FSETID;
on the daemon path (passthrough=off, and files with set-ID bits at their
open) and through the kernel (passthrough=on).

Natively a write or truncate clears the set-user-ID bit, and the
set-group-ID bit where group execute is set, unless the writer has
CAP_FSETID; it removes security.capability whoever writes. With
FUSE_CAP_HANDLE_KILLPRIV_V2 the kernel leaves all of that to the daemon
and to the backing filesystem below it.
"""
import ctypes
import os
import stat
import struct

import pytest

from conftest import open_tree, run_as, write_file
from test_backing import passthrough_works  # noqa: F401 - a fixture of the cases below
from test_multiuser import GROUP, OTHER_USER, SUPP, USER

# depends on the libfuse (run again on the system's by run-tests.sh): set-ID
# bits cleared by the daemon or the kernel: FUSE_CAP_HANDLE_KILLPRIV_V2 and
# passthrough, both by the libfuse
pytestmark = [pytest.mark.libfuse,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (users, capabilities)")]

CAP_FSETID = 4
# VFS_CAP_REVISION_2 with the effective flag, permitting cap_net_bind_service
CAPS = struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0)
XATTR_CAPS = "security.capability"


def drop_fsetid():
    """Drops CAP_FSETID from this process's effective and permitted sets
    (it stays root)."""
    libc = ctypes.CDLL(None, use_errno=True)
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    if libc.syscall(125, hdr, data) != 0:  # capget
        raise OSError(ctypes.get_errno(), "capget")
    data[0] &= ~(1 << CAP_FSETID)  # effective
    data[1] &= ~(1 << CAP_FSETID)  # permitted
    if libc.syscall(126, hdr, data) != 0:  # capset
        raise OSError(ctypes.get_errno(), "capset")


def as_who(who, func):
    if who == "user":
        return run_as(USER, GROUP, func, groups=[GROUP, SUPP])
    if who == "root":
        return run_as(0, 0, func)
    return run_as(0, 0, lambda: (drop_fsetid(), func())[1])


def _write(p):
    fd = os.open(p, os.O_WRONLY)
    try:
        os.write(fd, b"w")
    finally:
        os.close(fd)


def _ftruncate(p):
    fd = os.open(p, os.O_RDWR)
    try:
        os.ftruncate(fd, 1)
    finally:
        os.close(fd)


def _setid_after_open(p):
    """Opens P for writing, then gives it its set-ID bits, then writes
    through the open (root only: a user may not chmod another's file)."""
    fd = os.open(p, os.O_WRONLY)
    try:
        os.chmod(p, 0o6777)
        os.write(fd, b"w")
    finally:
        os.close(fd)


def _chown(p):
    """A change of group (a user may not: EPERM, as natively)."""
    try:
        os.chown(p, -1, GROUP)
    except PermissionError:
        pass


ACTIONS = {
    "write": _write,
    "chown": _chown,
    "truncate": lambda p: os.truncate(p, 1),
    "ftruncate": _ftruncate,
    "open O_TRUNC": lambda p: os.close(os.open(p, os.O_WRONLY | os.O_TRUNC)),
}


def prepare(p, kind):
    """A file of OTHER_USER that anyone may write: with both set-ID bits
    (group execute on), or with a file capability and no set-ID bit."""
    write_file(p, b"other user's")
    os.chown(p, OTHER_USER, SUPP)
    if kind == "setid":
        os.chmod(p, 0o6777)
    else:
        os.chmod(p, 0o666)
        os.setxattr(p, XATTR_CAPS, CAPS)


def outcome(p):
    try:
        caps = os.getxattr(p, XATTR_CAPS) == CAPS
    except OSError:
        caps = False
    return oct(stat.S_IMODE(os.stat(p).st_mode)), caps


def run_cases(root, whos, cases, prep=prepare):
    """{(who, kind, action): (mode, has caps)} for each case run in ROOT
    on a file PREP(path, kind) made."""
    res = {}
    for who in whos:
        for kind, name, func in cases:
            p = os.path.join(root, "pub", "%s-%s-%s" % (who, kind, name.replace(" ", "_")))
            prep(p, kind)
            as_who(who, lambda: func(p))
            res[(who, kind, name)] = outcome(p)
    return res


@pytest.fixture
def caps_native(tmp_path):
    """A native directory where security.capability can be set (else a
    skip saying why)."""
    open_tree(tmp_path)
    native = tmp_path / "native"
    (native / "pub").mkdir(parents=True)
    os.chmod(native, 0o755)
    os.chmod(native / "pub", 0o777)
    probe = native / "probe"
    probe.write_bytes(b"")
    try:
        os.setxattr(probe, XATTR_CAPS, CAPS)
    except OSError as e:
        pytest.skip("this filesystem keeps no file capabilities: %s" % e)
    probe.unlink()
    return str(native)


def _compare(native, m, whos, cases):
    os.mkdir(m.path("pub"))
    os.chmod(m.path("pub"), 0o777)
    want = run_cases(native, whos, cases)
    got = run_cases(m.mnt, whos, cases)
    for case in want:
        assert got[case] == want[case], "%s: native %s, mount %s" % (case, want[case],
                                                                    got[case])
    return want


CASES = [(kind, name, func) for kind in ("setid", "caps") for name, func in ACTIONS.items()]


def test_setid__shared_mount_daemon_path_matches_native(caps_native, mount_factory):
    m = mount_factory(opts=["allow_other", "passthrough=off"])
    os.chmod(m.mnt, 0o755)
    want = _compare(caps_native, m, ("user", "root", "root-nofsetid"), CASES)
    # sanity: the comparison saw each outcome
    assert want[("user", "setid", "write")][0] == "0o777"
    assert want[("root", "setid", "write")][0] == "0o6777"
    assert want[("root-nofsetid", "setid", "truncate")][0] == "0o777"
    assert want[("root", "caps", "write")][1] is False


def test_setid__shared_mount_passthrough_matches_native(caps_native, passthrough_works,  # noqa: F811
                                                        mount_factory):
    m = mount_factory(opts=["allow_other", "passthrough=on"])
    os.chmod(m.mnt, 0o755)
    _compare(caps_native, m, ("user", "root", "root-nofsetid"), CASES)
    # the user's writes to the files with capabilities went through the kernel
    assert m.stats()["passthrough_opens"] >= 3  # write, ftruncate, O_TRUNC open


def test_setid__own_mount_passthrough_matches_native(caps_native, passthrough_works,  # noqa: F811
                                                     mount_factory):
    """A mount that serves root only: root's opens go through the kernel."""
    m = mount_factory(opts=["passthrough=on"])
    _compare(caps_native, m, ("root", "root-nofsetid"), CASES)
    assert m.stats()["passthrough_opens"] >= 3  # write, ftruncate, O_TRUNC open


def test_setid__setid_after_open_cleared_through_kernel(caps_native,
                                                        passthrough_works,  # noqa: F811
                                                        mount_factory):
    """A file that gets its set-ID bits while open through the kernel: a
    root process without CAP_FSETID that writes through that open clears
    them, as natively. (Root with CAP_FSETID clears them too, where
    natively it keeps them: the kernel writes with one registration's
    credentials, which never carry CAP_FSETID.)"""
    m = mount_factory(opts=["passthrough=on"])
    os.mkdir(m.path("pub"))
    cases = [("plain", "setid after open", _setid_after_open)]
    whos = ("root-nofsetid", "root")

    def plain(p, kind):
        write_file(p, b"x")
        os.chmod(p, 0o666)

    want = run_cases(caps_native, whos, cases, plain)
    got = run_cases(m.mnt, whos, cases, plain)
    case = ("root-nofsetid", "plain", "setid after open")
    assert want[case][0] == "0o777"
    assert got[case] == want[case]
    case = ("root", "plain", "setid after open")
    assert want[case][0] == "0o6777"
    assert got[case][0] == "0o777"
    assert m.stats()["passthrough_opens"] >= 2
