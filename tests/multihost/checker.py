#!/usr/bin/python3
"""Checks a multi-host run from its logs; knows nothing of treelockfs's code.

Inputs (all on one CLOCK_MONOTONIC, in nanoseconds):

* hold logs, one per host, in the format of treelockfs's hold_log=FILE
  (tab-separated; paths escape bytes as \\xHH):
      MONO_NS acquire PID HOLDER FROM TO MODE:KEY...   (MODE S or X)
      MONO_NS release PID HOLDER ERRNO
  and, from mounts with delegations=on, a delegation's life:
      MONO_NS delegate PID HOLDER DIR MODE:KEY...
      MONO_NS recall PID HOLDER WHY     (wanted, idle, lease, own or end)
      MONO_NS return PID HOLDER
  a rename a delegation covers is an acquire and a release line of its
  own, under a holder id of the mount's private store (ticket >= 2**62),
  with the keys it locked in memory: its keys are checked against every
  other hold like any other (rule 1);
* the workload's own record of every rename it made, one JSON object a
  line: {"host", "t0", "t1", "src", "dst", "res"} (res: 0 or an errno);
  src and dst are paths below the mount, "/"-separated, leading "/";
* the nemesis's record, one JSON object a line: {"t", "kind", "host", ...};
  a "kill" names the "pid" it killed: that daemon's holds end there;
* the tree before the run, {name: parent name} ("/" for the root), every
  entry having a name no other entry has, and after it, a list of [name,
  parent name] pairs as found; {name: content} of the files before and
  after;
* what the lock index still holds after the hosts stopped and dead owners
  were reaped: a list of {"id", "source"}.

Rules:

1. No two holds conflicted while both renames took effect: two holds of
   different holders on one key, at least one exclusive, whose logged
   intervals overlap, are a violation when both renames returned 0. When
   one of them did not (a holder whose lease lapsed is fenced and fails),
   nothing was renamed under the stale hold: the overlap is counted, not
   reported. A logged interval lies inside the real one (acquire is
   logged after the grant, release before it), so an overlap of the logs
   is a real overlap. With FENCED_NS given (the time a holder takes
   between its grant and its last check before renaming, rename_delay_ms
   of the daemons), a daemon stopped (a "pause" naming its "pid") more
   than FENCED_NS after its grant and before its release was stopped
   after that check: inside its rename call, the known limit (BUGS in
   treelockfs(1)) that no lease can close, or after it, when its hold
   only looks long in the log. Such an overlap is counted
   ("overlaps_limit"), not reported; one whose daemon was stopped sooner
   is a violation, since fencing is there for it.
2. Every hold ends: a hold with no release is closed by the kill of its
   daemon; one that neither was released nor was killed is a violation.
3. Every rename that returned 0 is in the final tree: the final parent of
   each entry is the target of the last rename of it that returned 0 (or
   of a rename whose outcome is unknown: the daemon was killed under it,
   and that may or may not have renamed). Renames of one entry that
   overlap in time leave the order open: each of them may be the last.
   An entry no rename of which returned 0 or may have happened is where it
   was at the start.
4. Nothing lost or duplicated: the final tree has every entry of the
   initial one, once, and nothing else; every file has its content.
5. Nothing left in the lock index: no lock, waiter mark, intent or owner.
6. A rename that returned 0 was done under a hold: for a host with a hold
   log, a rename that returned 0 matches a hold of that host, within the
   call's time, of the same source and target name, released with 0; one
   released with an error is a violation. One with no hold at all never
   reached the daemon: the host's kernel answered it alone (it takes a
   rename whose source and target name one file for a no-op, as rename(2)
   says, and a stale client cache can show one file at both paths). Such
   no-ops are counted ("renames_unseen") and left out of rule 3.
7. A covered rename (a hold of the private store) lies inside
   delegations of its own daemon: both endpoints strictly below the
   directory of a delegation granted before the hold and returned after
   its release (a recall may come between the rename's routing and its
   acquire line); and every delegation ends (returned, or its daemon
   killed), as rule 2 says of holds.

As a command it reads the files named by its options and prints the report
as JSON; exit status 0 when there is no violation, 1 otherwise.
"""
import argparse
import errno
import json
import re
import sys

# errnos after which a rename may or may not have been done: the daemon
# went away under it, or the call was interrupted
AMBIGUOUS = {errno.ENOTCONN, errno.ECONNABORTED, errno.EINTR, errno.EIO}

_ESC = re.compile(r"\\(?:x([0-9a-fA-F]{2})|\\)")


def unescape(s):
    return _ESC.sub(lambda m: chr(int(m.group(1), 16)) if m.group(1) else "\\", s)


class Hold(object):
    __slots__ = ("host", "pid", "holder", "start", "end", "src", "dst", "items", "res",
                 "how")

    def __init__(self, host, pid, holder, start, src, dst, items):
        self.host, self.pid, self.holder = host, pid, holder
        self.start, self.src, self.dst, self.items = start, src, dst, items
        self.end = None
        self.res = None     # errno, or None: unknown
        self.how = None     # "released", "killed", "open"

    @property
    def ident(self):
        return "%s/%s/%s" % (self.host, self.pid, self.holder)

    def __repr__(self):
        return "<%s %s->%s [%d,%s] res=%s>" % (self.ident, self.src, self.dst, self.start,
                                                self.end, self.res)


# covered renames' holder tickets count from here (the private store)
LOCAL_TICKET = 1 << 62


def is_covered(holder):
    """True when HOLDER is a holder id of a mount's private store: a rename
    a delegation covered."""
    _, _, t = holder.rpartition("#")
    return t.isdigit() and int(t) >= LOCAL_TICKET


class Deleg(object):
    """A delegation of directory DIR, from its grant (START) to its return
    (END); RECALL: when it took no new users any more, and WHY."""
    __slots__ = ("host", "pid", "holder", "dir", "items", "start", "recall", "why", "end",
                 "how")

    def __init__(self, host, pid, holder, start, dir_, items):
        self.host, self.pid, self.holder, self.start = host, pid, holder, start
        self.dir, self.items = dir_, items
        self.recall = self.why = self.end = self.how = None

    @property
    def ident(self):
        return "%s/%s/%s" % (self.host, self.pid, self.holder)

    def covers(self, path):
        return path.startswith(self.dir.rstrip("/") + "/") and path != self.dir

    def touches(self, path):
        """True when a rename of PATH needs what this delegation holds."""
        return path == self.dir or self.covers(path) or self.dir.startswith(path.rstrip("/") + "/")


def parse_holds(host, lines, violations, delegs=None):
    """Holds of one host's hold log (an iterable of lines); its delegations
    are appended to DELEGS (a list) when given."""
    holds, open_, dopen = [], {}, {}
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line:
            continue
        f = line.split("\t")
        try:
            t, ev, pid, holder = int(f[0]), f[1], int(f[2]), f[3]
        except (IndexError, ValueError):
            violations.append({"rule": "log", "host": host,
                               "what": "hold log line %d unreadable: %r" % (n, line)})
            continue
        key = (pid, holder)
        if ev == "acquire":
            items = []
            for it in f[6:]:
                mode, _, k = it.partition(":")
                items.append((mode, unescape(k)))
            h = Hold(host, pid, holder, t, unescape(f[4]), unescape(f[5]), items)
            if key in open_:
                violations.append({"rule": "log", "host": host,
                                   "what": "holder %s/%s acquired twice" % key})
            open_[key] = h
            holds.append(h)
        elif ev == "release":
            h = open_.pop(key, None)
            if h is None:
                violations.append({"rule": "log", "host": host,
                                   "what": "release of %s/%s that was not acquired" % key})
                continue
            h.end, h.res, h.how = t, int(f[4]), "released"
        elif ev == "delegate":
            items = []
            for it in f[5:]:
                mode, _, k = it.partition(":")
                items.append((mode, unescape(k)))
            g = Deleg(host, pid, holder, t, unescape(f[4]), items)
            if key in dopen:
                violations.append({"rule": "log", "host": host,
                                   "what": "delegation %s/%s granted twice" % key})
            dopen[key] = g
            if delegs is not None:
                delegs.append(g)
        elif ev in ("recall", "return"):
            g = dopen.get(key)
            if g is None:
                violations.append({"rule": "log", "host": host,
                                   "what": "%s of delegation %s/%s that was not granted"
                                           % ((ev,) + key)})
                continue
            if ev == "recall":
                g.recall, g.why = t, f[4] if len(f) > 4 else ""
            else:
                del dopen[key]
                g.end, g.how = t, "returned"
                if g.recall is None:
                    g.recall = t
        else:
            violations.append({"rule": "log", "host": host,
                               "what": "hold log line %d: unknown event %r" % (n, ev)})
    return holds


def close_killed(holds, nemesis, end_of_run, violations):
    """Rule 2: a hold left open ends when its daemon was killed."""
    kills = {}
    for ev in nemesis:
        if ev.get("kind") == "kill" and ev.get("phase", "start") == "start" and "pid" in ev:
            kills[(ev["host"], int(ev["pid"]))] = int(ev["t"])
    for h in holds:
        if h.end is not None:
            continue
        t = kills.get((h.host, h.pid))
        if t is not None and t >= h.start:
            h.end, h.how = t, "killed"
        else:
            h.end, h.how = end_of_run, "open"
            violations.append({"rule": "hold-ends", "host": h.host,
                               "what": "hold %s (%s -> %s) was never released and its daemon "
                                       "was not killed" % (h.ident, h.src, h.dst)})


def close_killed_delegs(delegs, nemesis, end_of_run, violations):
    """Rule 7's end: a delegation not returned ends when its daemon was
    killed."""
    kills = {}
    for ev in nemesis:
        if ev.get("kind") == "kill" and ev.get("phase", "start") == "start" and "pid" in ev:
            kills[(ev["host"], int(ev["pid"]))] = int(ev["t"])
    for g in delegs:
        if g.end is not None:
            continue
        t = kills.get((g.host, g.pid))
        if t is not None and t >= g.start:
            g.end, g.how = t, "killed"
        else:
            g.end, g.how = end_of_run, "open"
            violations.append({"rule": "deleg-ends", "host": g.host,
                               "what": "delegation %s of %s was never returned and its "
                                       "daemon was not killed" % (g.ident, g.dir)})
        if g.recall is None:
            g.recall = g.end


def covered_rules(holds, delegs):
    """Rule 7: each covered hold inside delegations of its daemon. Returns
    the violations."""
    out = []
    by_daemon = {}
    for g in delegs:
        by_daemon.setdefault((g.host, g.pid), []).append(g)
    for h in holds:
        if not is_covered(h.holder):
            continue
        # (a recall may come between the rename's routing, which counted it
        # a user, and its acquire line: the return comes after its release)
        gs = [g for g in by_daemon.get((h.host, h.pid), [])
              if g.start <= h.start and (g.end is None or h.end is None or h.end <= g.end)]
        for path in (h.src, h.dst):
            if not any(g.covers(path) for g in gs):
                out.append({"rule": "covered", "host": h.host,
                            "what": "covered rename %s (%s -> %s) at %d: %s is below no "
                                    "delegation its daemon held throughout"
                                    % (h.ident, h.src, h.dst, h.start, path)})
                break
    return out


def recalls_under_way(t, delegs, holds, renames):
    """The recalls under way at T: (delegation, rename) pairs where a rename
    of another host, in its call at T, needs what a delegation held at T
    holds, and had not got its locks before T. Returns a list."""
    out = []
    # (a delegation its daemon's kill ended at T was held at T)
    held = [g for g in delegs if g.start <= t and (g.end is None or t <= g.end)]
    if not held:
        return out
    for r in renames:
        if not (r["t0"] <= t <= r["t1"]):
            continue
        for g in held:
            if g.host == r["host"] or not (g.touches(r["src"]) or g.touches(r["dst"])):
                continue
            got = [h for h in holds if h.host == r["host"] and r["t0"] <= h.start <= r["t1"]
                   and _entry_name(h.src) == _entry_name(r["src"]) and h.start < t]
            if not got:
                out.append((g, r))
    return out


def stopped_after_check(h, pauses, fenced_ns):
    """True when H's daemon was stopped more than FENCED_NS after H's grant
    and before its release (rule 1's known limit)."""
    if fenced_ns is None:
        return False
    return any(host == h.host and pid == h.pid and h.start + fenced_ns < t <= h.end
               for host, pid, t in pauses)


def conflicts(holds, pauses=(), fenced_ns=None):
    """Rule 1. PAUSES: (host, pid, t) of each stop of a daemon. Returns
    (violations, tolerated overlaps, ambiguous overlaps, overlaps at the
    known limit)."""
    by_key = {}
    for h in holds:
        for mode, key in h.items:
            by_key.setdefault(key, []).append((h.start, h.end, mode, h))
    bad, tolerated, ambiguous, limit = [], 0, 0, 0
    for key, ivs in by_key.items():
        ivs.sort(key=lambda x: x[0])
        active = []
        for s, e, mode, h in ivs:
            active = [a for a in active if a[1] > s]
            for s2, e2, mode2, h2 in active:
                if h2 is h or (mode == "S" and mode2 == "S"):
                    continue
                if h.res == 0 and h2.res == 0 and (stopped_after_check(h, pauses, fenced_ns) or
                                                   stopped_after_check(h2, pauses, fenced_ns)):
                    limit += 1
                elif h.res == 0 and h2.res == 0:
                    bad.append({"rule": "overlap", "key": key,
                                "what": "%s %s [%d, %d] and %s %s [%d, %d] overlap by %.3f ms "
                                        "and both renamed"
                                        % (h2.ident, mode2, s2, e2, h.ident, mode, s, e,
                                           (min(e, e2) - s) / 1e6),
                                "holds": [h2.ident, h.ident]})
                elif h.res is None or h2.res is None:
                    ambiguous += 1
                else:
                    tolerated += 1
            active.append((s, e, mode, h))
    return bad, tolerated, ambiguous, limit


def _parent_name(path):
    parts = [p for p in path.split("/") if p]
    return parts[-2] if len(parts) >= 2 else "/"


def _entry_name(path):
    parts = [p for p in path.split("/") if p]
    return parts[-1] if parts else "/"


def final_tree_rules(initial, final_entries, contents, final_contents, renames):
    """Rules 3 and 4. FINAL_ENTRIES: [name, parent] pairs as found."""
    out = []
    final, dups = {}, []
    for name, parent in final_entries:
        if name in final and name not in dups:
            dups.append(name)
        final[name] = parent
    for name in sorted(set(initial) - set(final)):
        out.append({"rule": "lost", "what": "%s is not in the final tree" % name})
    for name in sorted(set(final) - set(initial)):
        out.append({"rule": "unknown", "what": "%s is in the final tree but was never made"
                                               % name})
    for name in dups:
        out.append({"rule": "duplicate", "what": "%s is in the final tree more than once" % name})
    for name, text in sorted(contents.items()):
        if name in final_contents and final_contents[name] != text:
            out.append({"rule": "content", "what": "%s holds %r, not %r"
                                                  % (name, final_contents[name], text)})
    by_entry = {}
    for r in renames:
        res = r["res"]
        if res != 0 and res not in AMBIGUOUS:
            continue
        by_entry.setdefault(_entry_name(r["src"]), []).append(r)
    for name in sorted(initial):
        if name not in final or name in dups:
            continue
        rs = by_entry.get(name, [])
        ok = [r for r in rs if r["res"] == 0]
        # the renames that may have been the last one to take effect
        cands = [r for r in rs if not any(r["t1"] < o["t0"] for o in ok)]
        allowed = {_parent_name(r["dst"]) for r in cands}
        if not ok:
            allowed.add(initial[name])
        if final[name] not in allowed:
            last = max(ok, key=lambda r: r["t1"]) if ok else None
            out.append({"rule": "rename-kept",
                        "what": "%s is in %s; the renames that may have been its last put it in "
                                "%s (last that returned 0: %s)"
                                % (name, final[name], sorted(allowed),
                                   "%s %s -> %s" % (last["host"], last["src"], last["dst"])
                                   if last else "none")})
    return out


def leftover_rules(docs):
    out = []
    for d in docs:
        did = d.get("id", "")
        kind = ("intent" if did.startswith("intent:") else
                "owner" if did.startswith("owner:") else "lock or mark")
        out.append({"rule": "leftover", "what": "%s document %s left in the index: %s"
                                                % (kind, did, json.dumps(d.get("source"))[:200])})
    return out


def match_renames(holds, renames, hosts_logged):
    """Rule 6. Returns (violations, renames that reached a daemon or may
    have, renames that returned 0 without reaching one)."""
    by_host = {}
    for h in holds:
        by_host.setdefault(h.host, []).append(h)
    out, seen, unseen = [], [], []
    for r in renames:
        if r["res"] != 0 or r["host"] not in hosts_logged:
            seen.append(r)
            continue
        m = [h for h in by_host.get(r["host"], [])
             if r["t0"] <= h.start and h.end is not None and h.end <= r["t1"]
             and _entry_name(h.src) == _entry_name(r["src"])
             and _entry_name(h.dst) == _entry_name(r["dst"])]
        if not m:
            unseen.append(r)
            continue
        seen.append(r)
        if not any(h.res == 0 for h in m):
            out.append({"rule": "result", "what": "%s %s -> %s returned 0 but its hold %s ended "
                                                  "with %s" % (r["host"], r["src"], r["dst"],
                                                               m[-1].ident, m[-1].res)})
    return out, seen, unseen


def check(hold_logs, renames, nemesis, initial, final, contents, final_contents, leftovers,
          end_of_run=None, fenced_ns=None):
    """HOLD_LOGS: {host: iterable of lines}. FENCED_NS: see rule 1 (None:
    every overlap of two renames that returned 0 is a violation). Returns
    the report (a dict); report["violations"] is empty when the run is
    correct."""
    violations = []
    holds, delegs = [], []
    for host in sorted(hold_logs):
        holds.extend(parse_holds(host, hold_logs[host], violations, delegs))
    if end_of_run is None:
        end_of_run = max([h.start for h in holds] + [g.start for g in delegs] +
                         [r["t1"] for r in renames] + [0]) + 1
    close_killed(holds, nemesis, end_of_run, violations)
    close_killed_delegs(delegs, nemesis, end_of_run, violations)
    violations.extend(covered_rules(holds, delegs))
    pauses = [(ev.get("host"), int(ev["pid"]), int(ev["t"])) for ev in nemesis
              if ev.get("kind") == "pause" and ev.get("phase", "start") == "start" and "pid" in ev]
    bad, tolerated, ambiguous, limit = conflicts(holds, pauses, fenced_ns)
    violations.extend(bad)
    bad, seen, unseen = match_renames(holds, renames, set(hold_logs))
    violations.extend(bad)
    violations.extend(final_tree_rules(initial, final, contents, final_contents, seen))
    violations.extend(leftover_rules(leftovers))
    # faults that struck while a recall was under way, by kind
    recall_faults = {}
    for ev in nemesis:
        if ev.get("phase", "start") != "start" or "kind" not in ev:
            continue
        if recalls_under_way(int(ev["t"]), delegs, holds, renames):
            recall_faults[ev["kind"]] = recall_faults.get(ev["kind"], 0) + 1
    whys = {}
    for g in delegs:
        if g.why:
            whys[g.why] = whys.get(g.why, 0) + 1
    results = {}
    for r in renames:
        k = "ok" if r["res"] == 0 else errno.errorcode.get(r["res"], str(r["res"]))
        results[k] = results.get(k, 0) + 1
    return {
        "holds": len(holds),
        "holds_killed": sum(1 for h in holds if h.how == "killed"),
        "holds_fenced": sum(1 for h in holds if h.res == errno.ENOLCK),
        "renames": len(renames),
        "results": results,
        "renames_unseen": len(unseen),
        "unseen": [{"host": r["host"], "src": r["src"], "dst": r["dst"]} for r in unseen[:20]],
        "overlaps_tolerated": tolerated,
        "overlaps_ambiguous": ambiguous,
        "overlaps_limit": limit,
        "holds_covered": sum(1 for h in holds if is_covered(h.holder)),
        "delegations_granted": len(delegs),
        "delegations_recalled": whys.get("wanted", 0),
        "delegations_ended": whys,
        "faults_in_recall": recall_faults,
        "violations": violations,
    }


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--holds", nargs="+", required=True, metavar="HOST=FILE")
    ap.add_argument("--workload", nargs="+", required=True, metavar="FILE")
    ap.add_argument("--nemesis", required=True)
    ap.add_argument("--trees", required=True,
                    help="JSON {initial, final, contents, final_contents, leftovers}")
    a = ap.parse_args(argv)
    logs = {}
    for hf in a.holds:
        host, _, path = hf.partition("=")
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            logs[host] = f.read().splitlines()
    renames = [r for w in a.workload for r in read_jsonl(w)]
    with open(a.trees) as f:
        t = json.load(f)
    rep = check(logs, renames, read_jsonl(a.nemesis), t["initial"], t["final"], t["contents"],
                t["final_contents"], t["leftovers"])
    json.dump(rep, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 1 if rep["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
