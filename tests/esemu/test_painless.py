"""The Painless subset: the store's own scripts (read from src/es/es_scripts.h),
the guide's lock scripts, Java semantics where they show in answers, and
refusals of what is not in the subset."""

import os
import re

import pytest

import painless

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def store_scripts():
    with open(os.path.join(TOP, "src", "es", "es_scripts.h")) as f:
        text = f.read()
    return {name: "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', body))
            for name, body in re.findall(r"static const char SCRIPT_(\w+)\[\] =(.*?);\n", text, re.S)}


SCRIPTS = store_scripts()


def run(src, source=None, op="index", **params):
    ctx = {"op": op, "_source": {} if source is None else source}
    painless.compile_script(src).run(ctx, params)
    return ctx


def test_painless__the_store_has_six_scripts_and_all_compile():
    assert sorted(SCRIPTS) == ["ACQ_S", "ACQ_X", "EVICT", "MARK", "RELEASE", "UNMARK"]
    for src in SCRIPTS.values():
        painless.compile_script(src)


def test_painless__shared_acquire_builds_joins_and_is_refused_by_exclusive():
    ctx = run(SCRIPTS["ACQ_S"], op="create", h="A#1", age=5, path="/x")
    assert ctx["op"] == "create"
    assert ctx["_source"] == {"lock_type": "shared", "lock_count": 1, "path": "/x",
                              "holders": {"A#1": 1}, "since": 5}
    ctx = run(SCRIPTS["ACQ_S"], ctx["_source"], h="B#1", age=6)
    assert ctx["_source"]["lock_count"] == 2 and type(ctx["_source"]["lock_count"]) is int
    assert run(SCRIPTS["ACQ_S"], ctx["_source"], h="B#1", age=6)["op"] == "noop"
    with pytest.raises(painless.ScriptRuntimeError) as e:
        run(SCRIPTS["ACQ_S"], {"lock_type": "exclusive"}, h="C#1", age=7)
    assert (e.value.exc_type, e.value.message) == ("illegal_state_exception", "exclusive")


def test_painless__waiter_marks_order_acquires():
    src = run(SCRIPTS["MARK"], op="create", h="B#1", o="B", mode="exclusive", age=4,
              tmo=100)["_source"]
    assert src["waiters"] == {"B#1": {"owner": "B", "mode": "exclusive", "age": 4, "tmo": 100}}
    # an older exclusive waiter keeps a younger shared acquire out ...
    with pytest.raises(painless.ScriptRuntimeError) as e:
        run(SCRIPTS["ACQ_S"], dict(src), h="A#1", age=6)
    assert e.value.message == "waiter"
    # ... unless its owner is known dead
    assert run(SCRIPTS["ACQ_S"], dict(src), h="A#1", age=6, dead=["B"])["_source"]["holders"] == \
        {"A#1": 1}
    # the waiter itself gets in, and its mark goes
    got = run(SCRIPTS["ACQ_X"], dict(src), h="B#1", o="B", age=4, pid=9, since=10)["_source"]
    assert got["lock_type"] == "exclusive" and got["waiters"] == {} and "lock_count" not in got
    assert run(SCRIPTS["UNMARK"], {"lock_type": "shared", "lock_count": 0,
                                   "waiters": {"B#1": {}}}, h="B#1")["op"] == "delete"


def test_painless__release_and_evict():
    src = {"lock_type": "exclusive", "owner": "A", "holder": "A#1", "process_id": "A#1",
           "holders": {"A#1": 1}, "since": 1, "pid": 2}
    assert run(SCRIPTS["RELEASE"], dict(src), h="Z#9")["op"] == "noop"
    assert run(SCRIPTS["RELEASE"], dict(src), h="A#1")["op"] == "delete"
    shared = {"lock_type": "shared", "lock_count": 2, "holders": {"A#1": 1, "B#1": 1},
              "waiters": {"A#2": {"owner": "A"}}}
    ctx = run(SCRIPTS["EVICT"], shared, o="A")
    assert ctx["op"] == "index" and ctx["_source"]["holders"] == {"B#1": 1}
    assert ctx["_source"]["lock_count"] == 1 and ctx["_source"]["waiters"] == {}
    assert run(SCRIPTS["EVICT"], ctx["_source"], o="A")["op"] == "noop"
    assert run(SCRIPTS["EVICT"], dict(src), o="A")["op"] == "delete"


def test_painless__guide_scripts():
    guide_shared = ("if (ctx._source.lock_type == 'exclusive') { throw new "
                    "IllegalStateException('x'); } ctx._source.lock_count++")
    guide_release = "if (--ctx._source.lock_count == 0) { ctx.op = 'delete' }"
    assert run(guide_shared, {"lock_type": "shared", "lock_count": 1})["_source"]["lock_count"] == 2
    assert run(guide_release, {"lock_count": 2})["op"] == "index"
    assert run(guide_release, {"lock_count": 1})["op"] == "delete"


def test_painless__java_values():
    src = run("ctx._source.a = 7 / 2; ctx._source.b = 7.0 / 2; ctx._source.c = 0.0 / 0.0;"
              " ctx._source.d = -1.0 / 0.0; ctx._source.e = 'n' + 1 + null + 1.0 + true;"
              " ctx._source.f = 1 == 1.0; ctx._source.g = (ctx._source.z == null ? 0 : 1) + 1;"
              " ctx._source.h = -7 / 2")["_source"]
    assert src["a"] == 3 and src["b"] == 3.5 and src["c"] != src["c"]
    assert src["d"] == float("-inf") and src["e"] == "n1null1.0true"
    assert src["f"] is True and src["g"] == 1 and src["h"] == -3
    assert painless.fmt_double(1e7) == "1.0E7" and painless.fmt_double(-2.5e-4) == "-2.5E-4"
    assert painless.to_str(1.0) == "1.0"


@pytest.mark.parametrize("src,exc", [
    ("ctx._source.a = 1 / 0", "arithmetic_exception"),
    ("ctx._source.missing.x = 1", "null_pointer_exception"),
    ("ctx._source.a = 'x' < 1", "class_cast_exception"),
    ("ctx._source.a = ctx._source.m.nosuch()", "illegal_argument_exception"),
    ("throw new IllegalArgumentException('boom')", "illegal_argument_exception"),
])
def test_painless__runtime_errors(src, exc):
    with pytest.raises(painless.ScriptRuntimeError) as e:
        run(src, {"m": {}})
    assert e.value.exc_type == exc


def test_painless__runtime_stack_is_the_statement():
    src = SCRIPTS["ACQ_X"]
    script = painless.compile_script(src)
    with pytest.raises(painless.ScriptRuntimeError) as e:
        script.run({"op": "index", "_source": {"lock_type": "exclusive", "holder": "B#1"}},
                   {"h": "A#1", "o": "A", "age": 1})
    # what Elasticsearch 7.10 and OpenSearch 2.19 answer for this refusal
    stack, pos = script.stack(e.value.offset)
    assert stack == ["throw new IllegalStateException('exclusive'); } ", "      ^---- HERE"]
    assert pos == {"offset": 142, "start": 136, "end": 184}


@pytest.mark.parametrize("src,message", [
    ("assert false", "invalid sequence of tokens near ['false']."),
    ("ctx._source.a = ", "unexpected end of script."),
    ("x = 1", "cannot resolve symbol [x]"),
    ("def a = 1; def a = 2", "variable [a] is already defined"),
    ("while (true) { }", "invalid sequence of tokens near ['while']."),
    ("ctx._source.a = new TreeMap()", "cannot resolve symbol [TreeMap]"),
    ("ctx._source.a = 'a\\nb'", "unexpected character ['a\\nb']."),
])
def test_painless__outside_the_subset_is_a_compile_error(src, message):
    with pytest.raises(painless.CompileError) as e:
        painless.compile_script(src)
    assert e.value.message == message


def test_painless__values_json_cannot_hold():
    ctx = run("Map m = new HashMap(); m.put('self', m); ctx._source.m = m")
    with pytest.raises(painless.NotJson, match="self-referencing"):
        painless.to_json(ctx["_source"])
    ctx = run("ctx._source.e = new IllegalArgumentException('x')")
    with pytest.raises(painless.NotJson, match="java.lang.IllegalArgumentException"):
        painless.to_json(ctx["_source"])
