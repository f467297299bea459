#!/usr/bin/python3
"""tests/layout/check.py - the layers' stated maps, held against the objects

src/ is one directory per layer (base, config, lock, es, fs), and the two
programs (src/treelockfs.c, src/treelockctl.c) sit on top. Each layer says
in the opening comment of one of its headers (each program in its own
opening comment) what it is made of and what it uses, in lines of a fixed
form that read as prose:

 * Files in src/fs/:                    the map: every .c and .h of the
 *                                      directory, one line each (or one
 *   fs_ops.c   the FUSE operations     line for a pair: name.[ch]) with
 *   fs_keys.[ch]  lock keys ...        its purpose; a line indented
 *                                      deeper continues the purpose
 * Depends on: base, config, lock.      the layers it calls or includes
 *                                      ("nothing" for none)
 * Exception: lockstore.c uses es (why).
 *                                      a use against the layering,
 *                                      allowed from the files named only
 * Called from outside src/fs/, by treelockfs.c only:
 *
 *   tlfs_ops, tlfs_prepare(), ...      exactly the layer's names that
 *                                      code outside it calls, and who
 * Who calls whom among them (...):
 *
 *   es_lease   -> es_kept, es_retry    exactly the calls between the
 *                 es_client            layer's files (a file not on the
 *   (a note, to the blank line)        left calls none of them); "no
 *                                      circle" in the heading: checked

The calls come from the built objects: `nm` over the .o files of the build
tree maps every defined symbol to its source file and layer, and every
undefined one to the file that defines it. Includes ("#include
\"lock/lockplan.h\"") count as uses too: a macro or a struct leaves no
symbol. Each check is one TAP test point; a failure names the file, the
symbol and the header line to fix. The last point, opening lines and
comments that name files src/ does not have, only lists them (TODO) while
STALE_NAMES_TODO says so. DOCS must name every layer's directory and only
src/ paths that exist.

Usage: check.py [BUILDDIR]  (default: the current directory when it holds
the objects, as under make check; the sources: TREELOCKFS_SRCDIR, else the
tree this script is in). NM names another nm (e.g. gcc-nm for -flto).
Standard library only.
"""

import os
import re
import subprocess
import sys

# Documents whose src/ paths must exist, and which must name every layer.
DOCS = ["README.md"]
# Comments in src/ that name files src/ no longer has, and opening lines
# that name another file, fail; a text here reports them as TODO instead
# (listed, not failed), for the time a split or a rename is under way.
STALE_NAMES_TODO = None

HEADING_FILES = re.compile(r"^Files in src/(\w+)/:$")
HEADING_CALLED = re.compile(r"^Called from outside src/(\w+)/, by (.+) only:$")
HEADING_CHART = re.compile(r"^Who calls whom among them\b.*:$")
DEPENDS = re.compile(r"^Depends on: (.+)\.$")
EXCEPTION = re.compile(r"^Exception: (.+?) uses? (\w+)\b")
ENTRY = re.compile(r"^( +)([\w.]+\.(?:c|h|\[ch\]))( {2,}|$)(.*)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"(\w+)/([\w.]+)"', re.M)
SRC_PATH = re.compile(r"\bsrc/[\w./-]*\w/?")


def names(text):
    """'a, b and c' -> ['a', 'b', 'c']"""
    return [n for n in re.split(r",\s*|\s+and\s+|\s+", text.strip()) if n]


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def point(self, what, problems, todo=None):
        """One test point; a TODO one is listed but does not fail."""
        self.n += 1
        if not problems:
            print(f"ok {self.n} - {what}")
        elif todo:
            print(f"not ok {self.n} - {what} # TODO {todo}")
        else:
            self.failed += 1
            print(f"not ok {self.n} - {what}")
        for p in problems:
            for line in p.splitlines():
                print(f"# {line}")
        sys.stdout.flush()

    def end(self):
        print(f"1..{self.n}")
        return 1 if self.failed else 0


class Contract:
    """What one header (or program) states of its layer."""

    def __init__(self, path):
        self.path = path          # relative to the source tree
        self.map = None           # {file name: purpose}, or None: no map
        self.map_dir = None
        self.map_problems = []
        self.problems = []        # lines of the contract's form gone wrong
        self.depends = None       # [layer], or None: no "Depends on:" line
        self.exceptions = []      # [(files, layer, line)]
        self.called = None        # (layer, [user files], {name})
        self.chart = None         # {caller stem: {callee stem}}
        self.chart_acyclic = False


def opening_comment(text):
    """The lines of a file's opening comment, without ' * '."""
    m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    if not m:
        return []
    out = []
    for line in m.group(1).split("\n"):
        line = re.sub(r"^\s*\* ?", "", line, count=1) if line.lstrip().startswith("*") else line
        out.append(line.rstrip())
    return out


def indented_block(lines, i):
    """Lines from I on, after one optional blank line, up to a blank line."""
    if i < len(lines) and not lines[i].strip():
        i += 1
    block = []
    while i < len(lines) and lines[i].strip():
        block.append(lines[i])
        i += 1
    return block


def parse_contract(path, text):
    c = Contract(path)
    lines = opening_comment(text)
    for i, line in enumerate(lines):
        m = HEADING_FILES.match(line)
        if m:
            c.map_dir, c.map = m.group(1), {}
            indent, last = None, None
            for entry in indented_block(lines, i + 1):
                e = ENTRY.match(entry)
                if e and (indent is None or len(e.group(1)) == indent):
                    indent = len(e.group(1))
                    name, purpose = e.group(2), e.group(4).strip()
                    pair = name.endswith(".[ch]")
                    last = [name[:-5] + ".c", name[:-5] + ".h"] if pair else [name]
                    for n in last:
                        if n in c.map:
                            c.map_problems.append(f"{path}: the map names {n} twice")
                        c.map[n] = purpose
                elif last and indent is not None and len(entry) - len(entry.lstrip()) > indent:
                    for n in last:
                        c.map[n] = (c.map[n] + " " + entry.strip()).strip()
                else:
                    c.map_problems.append(
                        f"{path}: under 'Files in src/{c.map_dir}/:', a line that is no "
                        f"'  NAME  purpose' entry: {entry.strip()!r}")
            continue
        m = DEPENDS.match(line)
        if m:
            if c.depends is not None:
                c.problems.append(f"{path}: a second 'Depends on:' line: {line!r}")
            ls = names(re.sub(r"\(.*?\)", "", m.group(1)))
            c.depends = [] if ls == ["nothing"] else ls
            continue
        if line.startswith("Depends on"):
            c.problems.append(f"{path}: {line!r} is not 'Depends on: LAYER, LAYER.' "
                              f"on one line")
            continue
        m = EXCEPTION.match(line)
        if m:
            c.exceptions.append((names(m.group(1)), m.group(2), line))
            continue
        if line.startswith("Exception"):
            c.problems.append(f"{path}: {line!r} is not 'Exception: FILE[, FILE] uses "
                              f"LAYER (why).' (the reason may go on)")
            continue
        m = HEADING_CALLED.match(line)
        if m:
            used = set()
            for entry in indented_block(lines, i + 1):
                used.update(re.findall(r"\w+", entry.replace("()", "")))
            c.called = (m.group(1), names(m.group(2)), used)
            continue
        m = HEADING_CHART.match(line)
        if m:
            c.chart, c.chart_acyclic = {}, "no circle" in line
            caller = None
            for entry in indented_block(lines, i + 1):
                if "->" in entry:
                    left, right = entry.split("->", 1)
                    caller = left.strip()
                    c.chart.setdefault(caller, set())
                elif entry.strip().startswith("("):
                    caller = None  # a note, to the end of the block
                    continue
                else:
                    right = entry
                if caller is None:
                    continue
                c.chart[caller].update(n for n in re.findall(r"[\w.]+", right) if n != "nothing")
    return c


def stem(name):
    return name[:-2] if name.endswith((".c", ".h")) else name


class Tree:
    """The source tree's layers and files, and the edges found in the
    objects of the build tree and in the includes."""

    def __init__(self, srcdir, builddir):
        self.srcdir, self.builddir = srcdir, builddir
        src = os.path.join(srcdir, "src")
        self.dirs = sorted(d for d in os.listdir(src)
                           if not d.startswith(".") and os.path.isdir(os.path.join(src, d)))
        self.programs = sorted(f for f in os.listdir(src) if f.endswith(".c"))
        self.files = {}           # layer -> [file name]
        for d in self.dirs:
            self.files[d] = sorted(f for f in os.listdir(os.path.join(src, d))
                                   if f.endswith((".c", ".h")))
        for p in self.programs:
            self.files[p] = [p]

    def rel(self, layer, name):
        return f"src/{name}" if layer in self.programs else f"src/{layer}/{name}"

    def layer_of(self, rel):
        return rel.split("/")[1]

    def sources(self):
        for layer, fs in self.files.items():
            for f in fs:
                yield self.rel(layer, f)

    def read(self, rel):
        with open(os.path.join(self.srcdir, rel), encoding="utf-8", errors="replace") as f:
            return f.read()

    def scan_includes(self):
        """[(from rel, to rel, the line)] for includes of another layer's files."""
        self.includes = []
        for rel in self.sources():
            for m in INCLUDE.finditer(self.read(rel)):
                d, h = m.group(1), m.group(2)
                if d in self.files and h in self.files[d]:
                    self.includes.append((rel, f"src/{d}/{h}", m.group(0).strip()))

    def scan_objects(self, nm):
        """Runs nm over the objects; returns the problems (missing objects)."""
        problems = []
        objs = {}
        top = os.path.join(self.builddir, "src")
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for f in filenames:
                if not f.endswith(".o"):
                    continue
                # a per-target object (prog-name.o) is the same source built
                # again, e.g. with the sanitizers: take the plain one
                base = f.rsplit("-", 1)[-1]
                d = os.path.relpath(dirpath, self.builddir)
                rel = os.path.join(d, base[:-2] + ".c").replace(os.sep, "/")
                prefixed = base != f
                if rel not in objs or (objs[rel][1] and not prefixed):
                    objs[rel] = (os.path.join(dirpath, f), prefixed)
        self.defs, self.refs = {}, {}
        for rel in self.sources():
            if not rel.endswith(".c"):
                continue
            if rel not in objs:
                problems.append(f"{rel}: no object in {top} (build first: make)")
                continue
            obj = objs[rel][0]
            if os.path.getmtime(obj) < os.path.getmtime(os.path.join(self.srcdir, rel)):
                problems.append(f"{rel}: its object {obj} is older than the source (make)")
            res = subprocess.run([nm, "-P", obj], capture_output=True, text=True)
            if res.returncode == 0 and re.search(r"^__gnu_lto_slim ", res.stdout, re.M):
                # -flto without fat objects: the compiler's nm reads them
                try:
                    res = subprocess.run(["gcc-nm", "-P", obj], capture_output=True, text=True)
                except FileNotFoundError:
                    pass
            if res.returncode != 0:
                problems.append(f"{rel}: {nm} -P {obj} failed: {res.stderr.strip()}")
                continue
            refs = set()
            for line in res.stdout.splitlines():
                parts = line.split()
                if len(parts) < 2:
                    continue
                sym, kind = parts[0], parts[1]
                if kind in ("U", "w", "v"):
                    refs.add(sym)
                elif kind in ("T", "D", "B", "R", "G", "S", "C", "V", "W", "i", "u"):
                    self.defs.setdefault(sym, []).append(rel)
                if sym == "__gnu_lto_slim":
                    problems.append(f"{rel}: an -flto object, whose symbols gcc-nm could "
                                    f"not read either: name another nm in NM")
            self.refs[rel] = refs
        # file -> file calls: {(from, to): {symbol}}
        self.calls = {}
        for rel, refs in self.refs.items():
            for sym in refs:
                for to in self.defs.get(sym, []):
                    if to != rel:
                        self.calls.setdefault((rel, to), set()).add(sym)
        return problems

    def uses(self):
        """Every edge from one layer to another: (layer, to layer, from rel,
        text saying what it uses)."""
        out = []
        for (a, b), syms in sorted(self.calls.items()):
            la, lb = self.layer_of(a), self.layer_of(b)
            if la != lb:
                for s in sorted(syms):
                    out.append((la, lb, a, f"{a} uses {s} ({b})"))
        for a, b, line in self.includes:
            la, lb = self.layer_of(a), self.layer_of(b)
            if la != lb:
                out.append((la, lb, a, f"{a} has {line}"))
        return out


def find_contracts(tree, problems):
    """{layer: Contract}; a directory's from the one header with its map,
    a program's from its own opening comment."""
    contracts = {}
    for d in tree.dirs:
        found = []
        for f in tree.files[d]:
            if f.endswith(".h"):
                rel = tree.rel(d, f)
                c = parse_contract(rel, tree.read(rel))
                if c.map is not None:
                    found.append(c)
        if not found:
            problems.append(f"src/{d}/: no header has the layer's map: write one in a "
                            f"header's opening comment, under ' * Files in src/{d}/:'")
            continue
        if len(found) > 1:
            problems.append(f"src/{d}/: two maps ({', '.join(c.path for c in found)}): "
                            f"keep one")
        contracts[d] = found[0]
    for p in tree.programs:
        contracts[p] = parse_contract(tree.rel(p, p), tree.read(tree.rel(p, p)))
    return contracts


def check_map(tree, layer, c):
    problems = list(c.map_problems)
    if c.map_dir != layer:
        problems.append(f"{c.path}: its map says src/{c.map_dir}/, in src/{layer}/")
    for f in tree.files[layer]:
        if f not in c.map:
            problems.append(f"{tree.rel(layer, f)} is not in the map of {c.path}: add a line "
                            f"'  {f}  <its purpose>' under 'Files in src/{layer}/:'")
        elif not c.map[f]:
            problems.append(f"{c.path}: the map gives {f} no purpose")
    for f in sorted(c.map):
        if f not in tree.files[layer]:
            problems.append(f"{c.path}: its map names {f}, which src/{layer}/ does not have: "
                            f"remove or rename that line")
    return problems


def exception_for(c, to, rel):
    name = rel.rsplit("/", 1)[-1]
    return [e for e in c.exceptions if e[1] == to and name in e[0]]


def check_calls(tree, layer, c, uses):
    problems = list(c.problems)
    if c.depends is None:
        return problems + [f"{c.path}: no ' * Depends on: LAYER, ...' line "
                           f"(' * Depends on: nothing.' for none) in its opening comment"]
    for la, lb, rel, what in uses:
        if la != layer or lb in c.depends or exception_for(c, lb, rel):
            continue
        others = [e for e in c.exceptions if e[1] == lb]
        if others:
            problems.append(f"{what}, but {c.path} allows {lb} only from "
                            f"{', '.join(sorted({f for e in others for f in e[0]}))}: "
                            f"add {rel.rsplit('/', 1)[-1]} to its 'Exception:' line")
        else:
            problems.append(f"{what}, but {c.path} says 'Depends on: "
                            f"{', '.join(c.depends) or 'nothing'}.': add {lb} there "
                            f"(or an 'Exception: {rel.rsplit('/', 1)[-1]} uses {lb} (why).' "
                            f"line, against the layering)")
    for _, lb, line in c.exceptions:
        if lb not in tree.files:
            problems.append(f"{c.path}: '{line}' names no layer ({lb})")
    return problems


def check_stale(tree, layer, c, uses):
    problems = []
    for lb in c.depends or []:
        if lb not in tree.files:
            problems.append(f"{c.path}: 'Depends on:' names {lb}, which is no layer "
                            f"(layers: {', '.join(tree.files)})")
        elif not any(la == layer and b == lb for la, b, _, _ in uses):
            problems.append(f"{c.path}: 'Depends on:' names {lb}, but no file of "
                            f"{layer} calls or includes anything of {lb} now: remove it")
        elif lb in (e[1] for e in c.exceptions):
            problems.append(f"{c.path}: {lb} is both under 'Depends on:' and an 'Exception:'")
    for files, lb, line in c.exceptions:
        for f in files:
            if f not in tree.files.get(layer, []):
                problems.append(f"{c.path}: '{line}' names {f}, which {layer} does not have")
            elif not any(la == layer and b == lb and rel.endswith("/" + f)
                         for la, b, rel, _ in uses):
                problems.append(f"{c.path}: '{line}': {f} no longer calls or includes "
                                f"anything of {lb}: take it out")
    return problems


def check_order(tree, contracts):
    """The 'Depends on:' lines make an order (no circle); every
    'Exception:' runs against it (else it belongs under 'Depends on:')."""
    problems = []
    deps = {l: [d for d in (c.depends or []) if d in tree.files] for l, c in contracts.items()}

    def reaches(a, b, seen=None):
        seen = seen or set()
        if a == b:
            return True
        seen.add(a)
        return any(reaches(n, b, seen) for n in deps.get(a, []) if n not in seen)

    for a in sorted(deps):
        for b in deps[a]:
            if reaches(b, a):
                problems.append(f"a circle: {contracts[a].path} depends on {b}, and {b} "
                                f"(through 'Depends on:' lines) on {a}: state one of the "
                                f"two uses as an 'Exception:' of the files that make it")
    for a, c in sorted(contracts.items()):
        for files, b, line in c.exceptions:
            if b in deps and not reaches(b, a):
                problems.append(f"{c.path}: '{line}' runs along the layering "
                                f"({b} does not depend on {a}): list {b} under "
                                f"'Depends on:' instead")
    return problems


def check_called(tree, layer, c):
    where, users, stated = c.called
    problems = []
    if where != layer:
        problems.append(f"{c.path}: 'Called from outside src/{where}/' in src/{layer}/")
    found = {}
    for (a, b), syms in tree.calls.items():
        if tree.layer_of(b) == layer and tree.layer_of(a) != layer:
            found.setdefault(a, set()).update(syms)
    for a in sorted(found):
        if a.rsplit("/", 1)[-1] not in users:
            problems.append(f"{a} calls {', '.join(sorted(found[a]))} of src/{layer}/, but "
                            f"{c.path} says only {', '.join(users)} does: add it after 'by'")
    for u in users:
        if not any(a.rsplit("/", 1)[-1] == u for a in found):
            problems.append(f"{c.path}: {u} calls nothing of src/{layer}/ now")
    used = set().union(*found.values()) if found else set()
    for s in sorted(used - stated):
        who = ", ".join(sorted(a for a in found if s in found[a]))
        problems.append(f"{who} calls {s}() of src/{layer}/, which {c.path} does not list "
                        f"under 'Called from outside src/{layer}/': add it")
    for s in sorted(stated - used):
        if called_in_source(tree, users, s):
            continue  # a static inline in this build (e.g. without FUSE passthrough)
        problems.append(f"{c.path} lists {s} under 'Called from outside src/{layer}/', "
                        f"which nothing outside calls: remove it")
    return problems


def called_in_source(tree, users, name):
    """Whether one of the files USERS (names in src/) calls NAME in its
    text: a name the header makes a static inline in some builds leaves no
    symbol there, but is still called."""
    call = re.compile(r"\b%s\s*\(" % re.escape(name))
    for root, _, files in os.walk(os.path.join(tree.srcdir, "src")):
        for f in files:
            if f in users:
                with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                    if call.search(fh.read()):
                        return True
    return False


def check_chart(tree, layer, c):
    problems = []
    found = {}
    for (a, b), syms in tree.calls.items():
        if tree.layer_of(a) == layer and tree.layer_of(b) == layer:
            found.setdefault(stem(a.rsplit("/", 1)[-1]), {})[stem(b.rsplit("/", 1)[-1])] = syms
    stems = {stem(f) for f in tree.files[layer] if f.endswith(".c")}
    for caller in sorted(set(c.chart) | set(found)):
        stated, have = c.chart.get(caller, set()), found.get(caller, {})
        if caller not in stems:
            problems.append(f"{c.path}: its chart names {caller}, which is no .c of src/{layer}/")
            continue
        for callee in sorted(set(have) - stated):
            problems.append(f"src/{layer}/{caller}.c calls "
                            f"{', '.join(sorted(have[callee]))} ({callee}.c), but {c.path}'s "
                            f"chart does not say {caller} -> {callee}: add it")
        for callee in sorted(stated - set(have)):
            problems.append(f"{c.path}: its chart says {caller} -> {callee}, but "
                            f"src/{layer}/{caller}.c calls nothing of {callee}: remove it")
    if c.chart_acyclic:
        graph = {a: set(b) for a, b in found.items()}
        state = {}

        def visit(n, path):
            state[n] = 1
            for m in sorted(graph.get(n, ())):
                if state.get(m) == 1:
                    cyc = path[path.index(m):] + [m] if m in path else [n, m]
                    problems.append(f"{c.path} says 'no circle', but: {' -> '.join(cyc)}")
                elif m not in state:
                    visit(m, path + [m])
            state[n] = 2

        for n in sorted(graph):
            if n not in state:
                visit(n, [n])
    return problems


def check_docs(tree):
    problems = []
    progs = {"src/" + stem(p) for p in tree.programs}
    for doc in DOCS:
        path = os.path.join(tree.srcdir, doc)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        seen = set()
        for n, line in enumerate(text.split("\n"), 1):
            for m in SRC_PATH.finditer(line):
                p = m.group(0).rstrip("/.")
                if p in progs or os.path.exists(os.path.join(tree.srcdir, p)):
                    seen.add(p)
                else:
                    problems.append(f"{doc}:{n}: names {m.group(0)}, which does not exist")
        for d in tree.dirs:
            if f"src/{d}" not in seen:
                problems.append(f"{doc}: never names src/{d}/ (its Layout should)")
    return problems


def check_names(tree):
    """Every file opens with its own name ("/* NAME - what it is for"), and
    no comment names a file of ours that src/ does not have: a bare NAME.c
    or NAME.h (one no #include <...> names), or LAYER/NAME.h."""
    problems = []
    ours = {f for fs in tree.files.values() for f in fs}
    texts = {rel: tree.read(rel) for rel in tree.sources()}
    system = {os.path.basename(m) for t in texts.values()
              for m in re.findall(r"#\s*include\s*<([^>]+)>", t)}
    for rel, text in sorted(texts.items()):
        name = rel.rsplit("/", 1)[-1]
        m = re.match(r"/\* (\S+) - ", text)
        if not m or m.group(1) != name:
            first = text.split("\n", 1)[0]
            problems.append(f"{rel}:1: opens with {first!r}, not '/* {name} - ...'")
        for cm in re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S):
            for m in re.finditer(r"(?<![\w/.-])(?:(\w+)/)?([A-Za-z_]\w*\.[ch])\b", cm.group(0)):
                d, n = m.group(1), m.group(2)
                if d is None and n not in ours and n not in system:
                    pass
                elif d in tree.dirs and n not in tree.files[d]:
                    pass
                else:
                    continue
                line = text.count("\n", 0, cm.start() + m.start()) + 1
                problems.append(f"{rel}:{line}: names {m.group(0)}, which src/ does not have")
    return problems


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    srcdir = os.environ.get("TREELOCKFS_SRCDIR") or os.path.dirname(os.path.dirname(here))
    if len(argv) > 1:
        builddir = argv[1]
    elif os.path.isfile("Makefile") and os.path.isdir("src"):
        builddir = "."
    else:
        builddir = srcdir
    nm = os.environ.get("NM") or "nm"
    tap = Tap()
    tree = Tree(srcdir, builddir)
    tree.scan_includes()
    try:
        obj_problems = tree.scan_objects(nm)
    except FileNotFoundError:
        print(f"1..0 # SKIP no {nm} (binutils)")
        return 77
    tap.point(f"every source file of src/ has its object in {os.path.abspath(builddir)}",
              obj_problems)
    contract_problems = []
    contracts = find_contracts(tree, contract_problems)
    tap.point("every directory of src/ has one header with its map", contract_problems)
    uses = tree.uses()
    for layer in tree.dirs + tree.programs:
        c = contracts.get(layer)
        if c is None:
            continue
        if layer in tree.dirs:
            tap.point(f"{c.path}: the map lists exactly the files of src/{layer}/",
                      check_map(tree, layer, c))
        tap.point(f"{c.path}: {layer} calls and includes only the layers it depends on",
                  check_calls(tree, layer, c, uses))
        tap.point(f"{c.path}: every dependency it states is still there",
                  check_stale(tree, layer, c, uses))
        if c.called is not None:
            tap.point(f"{c.path}: what outside src/{layer}/ calls of it, and who",
                      check_called(tree, layer, c))
        if c.chart is not None:
            tap.point(f"{c.path}: who calls whom among the files of src/{layer}/",
                      check_chart(tree, layer, c))
    tap.point("the layers' dependencies make no circle; each exception runs against them",
              check_order(tree, contracts))
    tap.point(f"{', '.join(DOCS)}: every src/ path named exists, every layer is named",
              check_docs(tree))
    tap.point("every file of src/ opens with its own name; comments name files that exist",
              check_names(tree), STALE_NAMES_TODO)
    return tap.end()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
