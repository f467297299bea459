"""The man pages document every option that --help prints, in both spellings.

For each program, every "--name" in the treelockfs/treelockctl part of
`--help` (libfuse's own options, printed after "libfuse options:", are
left out) must appear in the man page as "--name"; those of a help section
that promises "-o name=value" (and the treelockfs "Mount options", except
--help and --version) must appear as "-o name" too. Command flags of
treelockctl ("--force") have no -o spelling. A short option of the help ("-f",
"-d", "-s", "-h", "-V") must appear as well. The man page's troff
escapes (\\-, \\fB...) are removed before comparing.
"""
import os
import re
import subprocess

import pytest

from conftest import BIN, CTL, SRCDIR

pytestmark = pytest.mark.nofuse

NOT_O = {"help", "version"}


def help_text(binary):
    """The program's own part of --help; a program that is not built, whose
    --help fails or prints no options fails the test."""
    assert os.access(binary, os.X_OK), "%s is not built" % binary
    res = subprocess.run([binary, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=30)
    out = res.stdout.decode("utf-8", "replace")
    assert res.returncode == 0, "%s --help exited %d:\n%s" % (binary, res.returncode, out)
    assert "--" in out, "%s --help printed no options:\n%s" % (binary, out)
    return out.split("libfuse options:")[0]


def man_text(name, raw=False):
    """Man page NAME (troff removed unless RAW); missing or empty fails."""
    path = os.path.join(SRCDIR, "man", name)
    assert os.path.exists(path) and os.path.getsize(path) > 0, "man/%s is missing or empty" % name
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if raw:
        return text
    text = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", text)  # font changes
    text = text.replace("\\-", "-").replace("\\(em", "-").replace("\\&", "")
    # ".BR --a , -o a" and friends put spaces where the text has none
    text = re.sub(r"^\.[A-Z]{1,2} ", "", text, flags=re.M)
    return text


LONG = r"(?<![\w-])--([a-z][a-z0-9_-]*[a-z0-9])"


def long_options(helptext):
    return sorted(set(re.findall(LONG, helptext)))


def o_options(helptext):
    """The long options of the sections that exist as -o too."""
    found, o_ok = set(), False
    for line in helptext.splitlines():
        if line and not line[0].isspace():  # a section header
            o_ok = "-o name" in line or line.startswith("Mount options")
            continue
        if o_ok:
            found.update(re.findall(LONG, line))
    return sorted(found - NOT_O)


def short_options(helptext):
    return sorted(set(re.findall(r"(?<![\w-])-([a-zA-Z])\b", helptext)))


def missing_in(man, helptext):
    missing = []
    for name in long_options(helptext):
        if not re.search(r"(?<![\w-])--%s\b" % re.escape(name), man):
            missing.append("--" + name)
    for name in o_options(helptext):
        if not re.search(r"-o\s+\"?%s\b" % re.escape(name), man):
            missing.append("-o " + name)
    for letter in short_options(helptext):
        if not re.search(r"(?<![\w-])-%s\b" % letter, man):
            missing.append("-" + letter)
    return missing


def test_manpage__treelockfs_documents_every_help_option():
    helptext = help_text(BIN)
    assert len(o_options(helptext)) >= 20, helptext
    assert missing_in(man_text("treelockfs.1"), helptext) == []


def test_manpage__treelockctl_documents_every_help_option():
    helptext = help_text(CTL)
    assert missing_in(man_text("treelockctl.1"), helptext) == []


def test_manpage__treelockfs_has_the_sections():
    man = man_text("treelockfs.1", raw=True)
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "LOCKING", "ERRORS", "FILES",
                    "EXAMPLES", "BUGS", "SEE ALSO"):
        assert re.search(r"^\.SH \"?%s\"?$" % section, man, flags=re.M), section
    # every errno the daemon returns on its own is explained
    for errno_name in ("EBUSY", "ENOLCK", "ENAMETOOLONG", "EINVAL", "EPERM", "EEXIST", "EACCES"):
        assert errno_name in man, errno_name
    assert "fuse.treelockfs" in man and "/etc/fstab" in man


def test_manpage__treelockfs_renders_without_warnings():
    path = os.path.join(SRCDIR, "man", "treelockfs.1")
    assert os.path.exists(path), "man/treelockfs.1 is missing"
    try:
        res = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    except FileNotFoundError:
        pytest.skip("groff is not installed")
    assert res.returncode == 0 and res.stderr == b"", res.stderr.decode()
