"""Unit tests of the Painless subset (no server needed)."""

import pytest

import painless as p


def run(src, source=None, params=None, op="index"):
    ctx = p.Ctx({"_source": p.from_json(source if source is not None else {}), "op": op,
                 "_now": p.JLong(1234), "_id": "id1", "_index": "idx"}, False)
    ret = p.compile_script(src).run({"ctx": ctx, "params": p.from_json(params or {})})
    return ctx.fields["op"], p.to_json(ctx.fields["_source"]), ret


def compile_error(src):
    with pytest.raises(p.CompileError) as ei:
        p.compile_script(src)
    return ei.value


def runtime_error(src, source=None, params=None):
    with pytest.raises(p.ScriptRuntimeError) as ei:
        run(src, source, params)
    return ei.value


SHARED = ("if (ctx._source.lock_type == 'exclusive') { throw new IllegalStateException('exclusive'); } "
          "ctx._source.lock_count++;")
RELEASE = "if (--ctx._source.lock_count <= 0) { ctx.op = 'delete'; }"
DOCLOCK = ("if (ctx._source.process_id != params.process_id) { throw new IllegalStateException('locked'); } "
           "ctx.op = 'noop';")
HOLDERS = ("def h = ctx._source.holders; if (h == null) { h = new HashMap(); ctx._source.holders = h; } "
           "def c = h.containsKey(params.owner) ? h.get(params.owner) : 0; h.put(params.owner, c + 1); "
           "ctx._source.lock_count = ctx._source.lock_count + 1;")


def test_shared_acquire_increments_and_stays_int():
    op, src, _ = run(SHARED, {"lock_type": "shared", "lock_count": 1})
    assert op == "index" and src["lock_count"] == 2 and type(src["lock_count"]) is int


def test_shared_acquire_refused_on_exclusive():
    e = runtime_error(SHARED, {"lock_type": "exclusive"})
    assert e.exc_type == "illegal_state_exception" and e.message == "exclusive"


def test_release_deletes_at_zero():
    assert run(RELEASE, {"lock_count": 1})[0] == "delete"
    op, src, _ = run(RELEASE, {"lock_count": 3})
    assert op == "index" and src["lock_count"] == 2


def test_guide_release_without_semicolons():
    assert run("if (--ctx._source.lock_count == 0) { ctx.op = 'delete' } ", {"lock_count": 1})[0] == "delete"


def test_doc_lock():
    assert run(DOCLOCK, {"process_id": 123}, {"process_id": 123})[0] == "noop"
    assert runtime_error(DOCLOCK, {"process_id": 1}, {"process_id": 2}).message == "locked"


def test_holders_map():
    op, src, _ = run(HOLDERS, {"lock_count": 1}, {"owner": "a"})
    assert src == {"lock_count": 2, "holders": {"a": 1}}
    op, src, _ = run(HOLDERS, src, {"owner": "a"})
    assert src["holders"] == {"a": 2} and src["lock_count"] == 3


def test_remove_and_iteration():
    src = ("def h = ctx._source.holders; h.remove(params.owner); int n = 0; "
           "for (def k : h.keySet()) { n += h.get(k); } "
           "for (def e : h.entrySet()) { n += e.getValue(); } "
           "for (int i = 0; i < 3; i++) { n++; } "
           "ctx._source.n = n; ctx._source.size = h.size(); ctx._source.empty = h.isEmpty();")
    _, out, _ = run(src, {"holders": {"a": 1, "b": 2}}, {"owner": "a"})
    assert out["holders"] == {"b": 2} and out["n"] == 7 and out["size"] == 1 and out["empty"] is False


def test_java_arithmetic():
    _, s, _ = run("ctx._source.a = 7 / 2; ctx._source.b = 7 / 2.0; ctx._source.c = -7 / 2; "
                  "ctx._source.d = -7 % 3; ctx._source.e = 2147483647 + 1; ctx._source.f = 2147483647L + 1; "
                  "ctx._source.g = Math.max(1, 2L); ctx._source.h = Math.min(1.5, 2)")
    assert s == {"a": 3, "b": 3.5, "c": -3, "d": -1, "e": -2147483648, "f": 2147483648, "g": 2, "h": 1.5}


def test_int_overflow_on_increment_of_json_int():
    _, s, _ = run("ctx._source.n++", {"n": 2147483647})
    assert s["n"] == -2147483648
    _, s, _ = run("ctx._source.n++", {"n": 2147483648})  # a JSON long stays a long
    assert s["n"] == 2147483649


def test_division_by_zero():
    assert runtime_error("ctx._source.a = 1 / 0").exc_type == "arithmetic_exception"


def test_strings():
    _, s, _ = run("ctx._source.s = 'a' + 1 + null + 1.0 + true; ctx._source.t = params.x.startsWith('ab'); "
                  "ctx._source.u = params.x.equals('abc'); ctx._source.v = \"q\\\"\" + 'x\\'y';",
                  params={"x": "abc"})
    assert s == {"s": "a1null1.0true", "t": True, "u": True, "v": 'q"x\'y'}


def test_operators_and_ternary():
    _, s, _ = run("def a = 5; def b = 3; ctx._source.r = [a > b, a >= 5, b < 3, b <= 3, a == 5 && b != 5, "
                  "!(a < b) || false, a > b ? 'x' : 'y']; a += 2; b -= 1; a *= 2; ctx._source.a = a; "
                  "ctx._source.b = b; ctx._source.m = ['k': 1]; ctx._source.l = []; ctx._source.n = null")
    assert s == {"r": [True, True, False, True, True, True, "x"], "a": 14, "b": 2, "m": {"k": 1}, "l": [],
                 "n": None}


def test_numeric_equality_promotes():
    assert run("ctx._source.r = params.a == params.b", params={"a": 1, "b": 1.0})[1]["r"] is True
    assert run("ctx._source.r = params.a == params.b", params={"a": 1, "b": "1"})[1]["r"] is False
    assert run("ctx._source.r = params.a == params.b", params={"a": 1, "b": True})[1]["r"] is False


def test_ctx_metadata_and_now():
    _, s, _ = run("ctx._source.now = ctx._now; ctx._source.id = ctx._id; ctx._source.ix = ctx._index; "
                  "ctx._source.t = System.currentTimeMillis() > 0")
    assert s == {"now": 1234, "id": "id1", "ix": "idx", "t": True}


def test_list_methods_and_index_access():
    _, s, _ = run("def l = new ArrayList(); l.add('a'); l.add('b'); l.remove(0); "
                  "ctx._source.l = l; ctx._source.c = l.contains('b'); ctx._source.x = ctx._source['y']; "
                  "ctx._source['z'] = l.get(0); ctx._source.sz = l.size()", {"y": 5})
    assert s == {"l": ["b"], "c": True, "x": 5, "y": 5, "z": "b", "sz": 1}


def test_while_and_loops_capped():
    _, s, _ = run("int i = 0; while (i < 10) { i++; if (i == 5) { break; } } ctx._source.i = i")
    assert s["i"] == 5
    assert runtime_error("while (ctx._source.x == null) { }").exc_type == "painless_error"


def test_return_allowed():
    assert run("if (ctx._source.a == 1) { ctx.op = 'none'; return; } ctx._source.a = 2", {"a": 1})[0] == "none"


@pytest.mark.parametrize("src", [
    "if (ctx._source.lock_type == 'exclusive') { assert false }; ctx._source.lock_count++",
    "if ( ctx._source.process_id != process_id ) { assert false; } ctx.op = 'noop';",
    "ctx._source.a = 'unterminated",
    "ctx._source.a = 'bad \\n escape'",
    "ctx._source.a = foo(1)",
    "ctx._source.a = new Foo()",
    "ctx._source.a == 1; ctx.op = 'none'",
    "return; ctx.op = 'none'",
    "params = 1",
    "ctx._source.a = 1 +",
    "def x = 1; def x = 2;",
    "ctx._source.a = Math.nope(1)",
    "try { } catch (Exception e) { }",
    "ctx._source.list.removeIf(String::isEmpty)",
    "ctx._source.a = /regex/",
    "break;",
    "ctx._source.a = 99999999999",
])
def test_compile_errors(src):
    compile_error(src)


def test_compile_error_is_syntax_first_for_assert():
    e = compile_error("if (true) { assert false; }")
    assert "invalid sequence of tokens near ['false']" in e.message


def test_unknown_variable_message():
    assert compile_error("ctx._source.a = process_id").message == "cannot resolve symbol [process_id]"


@pytest.mark.parametrize("src,exc", [
    ("ctx._source.missing.field = 1", "null_pointer_exception"),
    ("ctx._source.missing++", "null_pointer_exception"),
    ("ctx._source.a = params.nope.size()", "null_pointer_exception"),
    ("ctx._source.a = 'x' < 1", "class_cast_exception"),
    ("if (ctx._source.s) { ctx.op = 'none' }", "class_cast_exception"),
    ("ctx._source.a = ctx._source.m.nosuch()", "illegal_argument_exception"),
    ("throw new IllegalArgumentException('boom')", "illegal_argument_exception"),
    ("ctx._source.a = [1][3]", "index_out_of_bounds_exception"),
])
def test_runtime_errors(src, exc):
    assert runtime_error(src, {"s": "str", "m": {}}).exc_type == exc


def test_compiled_scripts_are_cached():
    assert p.compile_script(SHARED) is p.compile_script(SHARED)


def test_comments_and_literals():
    _, s, _ = run("// line\n/* block */ ctx._source.a = 0x10 + 010; ctx._source.b = 1.5e1; ctx._source.c = 3L; "
                  "ctx._source.d = (int) 2.7; ctx._source.e = (long) 3; ctx._source.f = 2.0f")
    assert s == {"a": 24, "b": 15.0, "c": 3, "d": 2, "e": 3, "f": 2.0}


def test_instanceof_and_null_safe():
    _, s, _ = run("ctx._source.a = ctx._source.m instanceof Map; ctx._source.b = ctx._source.x?.y; "
                  "ctx._source.c = ctx._source.x ?: 'dflt'", {"m": {}})
    assert s == {"m": {}, "a": True, "b": None, "c": "dflt"}


def test_map_views_are_live_and_fail_fast():
    _, s, _ = run("def ks = ctx._source.h.keySet(); ctx._source.h.put('c', 3); ctx._source.n = ks.size(); "
                  "ks.remove('a'); ctx._source.vals = new ArrayList(ctx._source.h.values())",
                  {"h": {"a": 1, "b": 2}})
    assert s["n"] == 3 and s["h"] == {"b": 2, "c": 3} and s["vals"] == [2, 3]
    e = runtime_error("for (def k : ctx._source.h.keySet()) { ctx._source.h.remove(k); }",
                      {"h": {"a": 1, "b": 2}})
    assert e.exc_type == "concurrent_modification_exception"
    # removing while on the last element ends the loop quietly, as a HashMap iterator does
    _, s, _ = run("for (def k : ctx._source.h.keySet()) { if (k == 'b') { ctx._source.h.remove(k); } }",
                  {"h": {"a": 1, "b": 2}})
    assert s["h"] == {"a": 1}
    # the safe idiom: copy the keys first
    _, s, _ = run("for (def k : new ArrayList(ctx._source.h.keySet())) { if (ctx._source.h[k] < 2) "
                  "{ ctx._source.h.remove(k); } }", {"h": {"a": 1, "b": 2, "c": 0}})
    assert s["h"] == {"b": 2}


def test_syntax_errors_win_over_semantic_errors():
    # Painless parses the whole script before its semantic pass
    e = compile_error("ctx._source.a = process_id; if (true) { assert false; }")
    assert e.message == "invalid sequence of tokens near ['false']."
    e = compile_error("ctx._source.a = nope1; ctx._source.b = nope2;")
    assert e.message == "cannot resolve symbol [nope1]"


@pytest.mark.parametrize("src,msg", [
    ("return; ctx.op = 'none'", "invalid block: unreachable statement"),
    ("if (true) { ctx.op = 'none' }", "extraneous if block"),
    ("if (ctx._source.a == 1) { }", "extraneous if block"),
    ("if (ctx._source.a == 1) { ctx.op = 'none' } else { }", "extraneous else block."),
    ("while (true) { }", "no paths escape from while loop"),
    ("while (false) { ctx.op = 'none' }", "extraneous while loop"),
    ("while (ctx._source.a == 1) { break; }", "extraneous while loop"),
    ("for (def x : ctx._source.l) { }", "extraneous foreach loop"),
    ("for (def x : ctx._source.l) { continue; }", "extraneous continue statement"),
    ("break;", "invalid break statement: not inside loop"),
    ("ctx._source.a + 1", "not a statement: result not used from addition operation [+]"),
    ("ctx._source.a == 1", "not a statement: result not used from equals operation [==]"),
    ("return 1", "Cannot cast from [int] to [void]."),
    ("while (true) { ctx.op = 'none'; } ctx.op = 'x'", "invalid block: unreachable statement"),
])
def test_painless_control_flow_errors(src, msg):
    assert compile_error(src).message == msg


def test_loops_that_escape_are_fine():
    _, s, _ = run("int i = 0; while (true) { i++; if (i > 3) { break; } } ctx._source.i = i; "
                  "for (int j = 0; j < 2; j++) { if (j == 0) { continue; } ctx._source.j = j; }")
    assert s == {"i": 4, "j": 1}


def test_lambdas_and_functional_methods():
    _, s, _ = run("ctx._source.tags.removeIf(t -> t == params.t); "
                  "ctx._source.h.entrySet().removeIf(e -> e.getValue() < params.now); "
                  "ctx._source.c.merge(params.t, 1, (a, b) -> a + b); "
                  "ctx._source.m.computeIfAbsent(params.t, k -> new HashMap()).put('x', 1); "
                  "ctx._source.any = ctx._source.tags.any(x -> x == 'a'); "
                  "ctx._source.doubled = ctx._source.l.collect(x -> x * 2); "
                  "ctx._source.l.sort((a, b) -> b - a); "
                  "ctx._source.h.forEach((k, v) -> { ctx._source.last = k; })",
                  {"tags": ["a", "b"], "h": {"old": 1, "new": 9}, "c": {"b": 1}, "m": {}, "l": [1, 3, 2]},
                  {"t": "b", "now": 5})
    assert s == {"tags": ["a"], "h": {"new": 9}, "c": {"b": 2}, "m": {"b": {"x": 1}}, "l": [3, 2, 1],
                 "any": True, "doubled": [2, 6, 4], "last": "new"}


def test_lambda_parameter_cannot_shadow_a_local():
    assert compile_error("def x = 1; ctx._source.l.removeIf(x -> x == 1)").message == "variable [x] is already defined"


def test_java_hashmap_iteration_order():
    # String.hashCode buckets, not insertion order; LinkedHashMap (source maps) keeps insertion order
    assert p.java_hash("hello") == 99162322
    _, s, _ = run("def h = new HashMap(); h.put('owner-b', 1); h.put('owner-a', 1); h.put('zeta', 1); "
                  "h.put('alpha', 1); ctx._source.h = h; ctx._source.keys = new ArrayList(h.keySet()); "
                  "def t = new TreeMap(); t.put('b', 1); t.put('a', 1); ctx._source.t = new ArrayList(t.keySet())",
                  {"src": {"z": 1, "a": 2}})
    assert s["keys"] == ["zeta", "owner-a", "alpha", "owner-b"] and list(s["h"]) == s["keys"]
    assert s["t"] == ["a", "b"] and list(s["src"]) == ["z", "a"]
