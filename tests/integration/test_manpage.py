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


def rendered(name):
    """Man page NAME as groff renders it for a terminal, without fonts,
    on lines long enough that no paragraph wraps or hyphenates."""
    path = os.path.join(SRCDIR, "man", name)
    assert os.path.exists(path), "man/%s is missing" % name
    try:
        res = subprocess.run(["groff", "-man", "-Tutf8", "-P-cbou", "-rLL=4000n", "-rHY=0", path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    except FileNotFoundError:
        pytest.skip("groff is not installed")
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout.decode("utf-8")


def tagged_options(text):
    """The long options named in the tags of TEXT's tagged paragraphs. A
    tag is a line whose body follows indented further: on the next line,
    after the further tags of the same paragraph (lines that start with
    "-" as it does), or, for a tag shorter than the indentation, on the same
    line."""
    lines = [line for line in text.splitlines() if line.strip()]

    def indent(line):
        return len(line) - len(line.lstrip(" "))

    def option_tag(line, ind):
        return line[ind:].startswith("-")

    found = set()
    for i, line in enumerate(lines):
        ind = indent(line)
        short = re.match(r" *(-\S{1,5}) +\S", line)
        if short and len(short.group(0)) - 1 == ind + 7:
            found.update(re.findall(LONG, short.group(1)))
            continue
        j = i + 1
        while option_tag(line, ind) and j < len(lines) and indent(lines[j]) == ind and \
                option_tag(lines[j], ind):
            j += 1
        if j < len(lines) and indent(lines[j]) > ind:
            found.update(re.findall(LONG, line))
    return found


@pytest.mark.parametrize("binary,page", [(BIN, "treelockfs.1"), (CTL, "treelockctl.1")],
                         ids=["treelockfs", "treelockctl"])
def test_manpage__every_help_option_heads_a_tagged_paragraph(binary, page):
    helptext = help_text(binary)
    untagged = sorted(set(long_options(helptext)) - tagged_options(rendered(page)))
    assert untagged == [], "options of --help without a tagged paragraph: %s" % untagged


def control_files():
    """The names of the files of a mount's .treelockfs directory."""
    with open(os.path.join(SRCDIR, "src", "fs", "fs_ctl.c"), encoding="utf-8") as f:
        names = set(re.findall(r'\[CTL_[A-Z]+\] = \{"(\w+)"', f.read()))
    assert len(names) >= 5, names
    return names


@pytest.mark.parametrize("page", ["treelockfs.1", "treelockctl.1"])
def test_manpage__control_files_render_as_their_names(page):
    text = rendered(page)
    # no font change or other escape left in the text as a control character
    assert not re.findall(r".{0,30}[\x00-\x09\x0b-\x1f\x7f].{0,30}", text)
    named = re.findall(r"/\.treelockfs/([^\s,.;:)'\"]+)", text)
    assert named
    assert sorted(set(named) - control_files() - {"NAME"}) == []
    if page == "treelockfs.1":
        # where the chain of directories a mount is served from is shown
        shown = re.findall(r".{0,30}/\.treelockfs/backing.{0,30}", text)
        assert any(re.search(r" in MOUNTPOINT/\.treelockfs/backing, which ", s) for s in shown), \
            shown
