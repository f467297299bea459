"""A small Painless interpreter for the Elasticsearch emulator.

This is a real tokenizer, parser and tree-walking evaluator for the subset of
Painless (Elasticsearch's scripting language) that update scripts use.  It is
not a Groovy or JavaScript evaluator: anything outside the subset is refused
with a compile error, exactly as Elasticsearch refuses a script it cannot
compile, and never silently ignored.

Fidelity choices
----------------
* Values use Java semantics.  A Python ``int`` is a Java ``Integer`` (32-bit,
  wraps on overflow), :class:`JLong` is a ``Long`` (64-bit), ``float`` is a
  ``Double``, ``str`` a ``String``, ``dict`` a ``HashMap``, ``list`` an
  ``ArrayList`` and ``None`` is ``null``.  JSON numbers from ``_source`` or
  ``params`` that fit in 32 bits are Integers, others Longs, as Jackson does.
  So ``ctx._source.lock_count++`` on a JSON int stays an int, and integer
  division truncates toward zero.
* ``==``/``!=`` on ``def`` values are ``equals()`` with numeric promotion, as
  in Painless; ``<``/``>`` on non-numbers throw ``ClassCastException``.
* Compile errors (unknown symbols, Groovy's ``assert``, statements that are
  not statements, unreachable code, string escapes other than ``\\\\`` and the
  quote) raise :class:`CompileError`; runtime failures raise
  :class:`ScriptRuntimeError` carrying the Java exception type name
  (``null_pointer_exception``, ``illegal_state_exception``, ...).  The server
  turns both into Elasticsearch's ``script_exception`` error bodies.
* The whole script is parsed first (syntax errors win), then a semantic
  pass reports unknown symbols and Painless' control-flow errors
  ("invalid block: unreachable statement", "extraneous if block", ...).
  The update context is ``void``: expression statements must have an effect
  and ``return`` takes no value.
* Lambdas are supported as arguments of the functional collection methods
  (``removeIf``, ``forEach``, ``merge``, ``computeIfAbsent``, ...).
* Map views (``keySet()``, ``values()``, ``entrySet()``) are live and
  iteration is fail-fast (``ConcurrentModificationException``).
* Loops are capped at 1,000,000 iterations like Painless' loop counter.
* Compiled scripts are cached per source string.
"""

import math
import threading
import time

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
MAX_LOOP = 1000000


class JLong(int):
    """A Java long (a plain Python int is a Java int)."""

    def __repr__(self):
        return "JLong(%d)" % int(self)


def wrap_int(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def wrap_long(v):
    v &= 0xFFFFFFFFFFFFFFFF
    return JLong(v - (1 << 64) if v & (1 << 63) else v)


def from_json(v, map_cls=dict):
    """Convert a decoded JSON value into script values (int vs long).
    ``_source`` maps are LinkedHashMaps (insertion order, a plain dict);
    script ``params`` are parsed into HashMaps (pass ``JHashMap``)."""
    if isinstance(v, bool) or v is None or isinstance(v, (str, float)):
        return v
    if isinstance(v, int):
        return v if INT_MIN <= v <= INT_MAX else JLong(v)
    if isinstance(v, dict):
        m = map_cls()
        for k, x in v.items():
            m[k] = from_json(x, map_cls)
        return m
    if isinstance(v, list):
        return [from_json(x, map_cls) for x in v]
    return v


def java_hash(k):
    """Object.hashCode() of the boxed Java value."""
    if k is None:
        return 0
    if isinstance(k, bool):
        return 1231 if k else 1237
    if isinstance(k, str):
        h = 0
        data = k.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
        return h
    if isinstance(k, JLong):
        v = int(k) & 0xFFFFFFFFFFFFFFFF
        return (v ^ (v >> 32)) & 0xFFFFFFFF
    if isinstance(k, int):
        return k & 0xFFFFFFFF
    if isinstance(k, float):
        import struct
        bits = struct.unpack(">q", struct.pack(">d", k))[0] & 0xFFFFFFFFFFFFFFFF
        return (bits ^ (bits >> 32)) & 0xFFFFFFFF
    return hash(k) & 0xFFFFFFFF


def _table_size_for(n):
    cap = 1
    while cap < n:
        cap <<= 1
    return cap


class JHashMap(dict):
    """java.util.HashMap: iterates by hash bucket (``hash ^ hash >>> 16`` over
    a power-of-two table that doubles past a 0.75 load factor), insertion
    order within a bucket."""

    def __init__(self, *args):
        dict.__init__(self, *args)
        n = dict.__len__(self)
        self.cap = _table_size_for(int(n / 0.75 + 1.0)) if n else 16
        self._grow()

    def _grow(self):
        while dict.__len__(self) > self.cap * 0.75:
            self.cap *= 2

    def __setitem__(self, k, v):
        new = not dict.__contains__(self, k)
        dict.__setitem__(self, k, v)
        if new:
            self._grow()

    def setdefault(self, k, v=None):
        if not dict.__contains__(self, k):
            self[k] = v
        return dict.__getitem__(self, k)

    def update(self, other=(), **kw):
        items = other.items() if isinstance(other, dict) else other
        for k, v in items:
            self[k] = v
        for k, v in kw.items():
            self[k] = v

    def _order(self):
        keys = list(dict.keys(self))
        mask = self.cap - 1
        pos = {}
        for i, k in enumerate(keys):
            pos[k] = i

        def bucket(k):
            h = java_hash(k)
            return ((h ^ (h >> 16)) & mask, pos[k])
        return sorted(keys, key=bucket)

    def keys(self):
        return self._order()

    def __iter__(self):
        return iter(self._order())

    def items(self):
        return [(k, dict.__getitem__(self, k)) for k in self._order()]

    def values(self):
        return [dict.__getitem__(self, k) for k in self._order()]

    def copy(self):
        return JHashMap(self)


class JTreeMap(dict):
    """java.util.TreeMap: iterates in the keys' natural order."""

    def _order(self):
        import functools
        return sorted(dict.keys(self), key=functools.cmp_to_key(compare_natural))

    def keys(self):
        return self._order()

    def __iter__(self):
        return iter(self._order())

    def items(self):
        return [(k, dict.__getitem__(self, k)) for k in self._order()]

    def values(self):
        return [dict.__getitem__(self, k) for k in self._order()]


class NotJson(Exception):
    """A script left a value in _source that XContent cannot write: the
    engine refuses the request (400 illegal_argument_exception)."""


def to_json(v, _seen=None):
    """Convert script values back into JSON values, as XContent writes
    them: NaN and infinities stay doubles; a map or list that contains
    itself, an exception or any other object is refused (NotJson)."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return v
    if isinstance(v, (dict, list, tuple, KeySet)):
        _seen = _seen or set()
        if id(v) in _seen:
            raise NotJson("Iterable object is self-referencing itself")
        _seen.add(id(v))
        try:
            if isinstance(v, dict):
                return {str(k) if not isinstance(k, str) else k: to_json(x, _seen)
                        for k, x in v.items()}
            return [to_json(x, _seen) for x in v]
        finally:
            _seen.discard(id(v))
    if isinstance(v, Entry):
        return {to_str(v.key): to_json(v.value, _seen)}
    cls = "java.lang." + v.cls if isinstance(v, JavaException) else java_class(v)
    raise NotJson("cannot write xcontent for unknown value of type class " + cls)


# --------------------------------------------------------------------------
# errors


class CompileError(Exception):
    def __init__(self, message, offset, exc_type="illegal_argument_exception"):
        Exception.__init__(self, message)
        self.message = message
        self.offset = offset
        self.exc_type = exc_type


class ScriptRuntimeError(Exception):
    """A Java exception escaping the script."""

    def __init__(self, exc_type, message, offset=None):
        Exception.__init__(self, message)
        self.exc_type = exc_type
        self.message = message
        self.offset = offset


class JavaException(object):
    """An exception object created by ``new XxxException(msg)`` in a script."""

    def __init__(self, cls, message):
        self.cls = cls
        self.message = message

    @property
    def type_name(self):
        return EXCEPTION_CLASSES[self.cls]


EXCEPTION_CLASSES = {
    "IllegalStateException": "illegal_state_exception",
    "IllegalArgumentException": "illegal_argument_exception",
    "UnsupportedOperationException": "unsupported_operation_exception",
    "RuntimeException": "runtime_exception",
    "Exception": "exception",
    "ArithmeticException": "arithmetic_exception",
    "NullPointerException": "null_pointer_exception",
    "IndexOutOfBoundsException": "index_out_of_bounds_exception",
    "ClassCastException": "class_cast_exception",
    "NumberFormatException": "number_format_exception",
}

JAVA_CLASS_NAMES = {
    "IllegalStateException": "java.lang.IllegalStateException",
    "IllegalArgumentException": "java.lang.IllegalArgumentException",
}


def rt(exc_type, message):
    return ScriptRuntimeError(exc_type, message)


def npe(message=None):
    return ScriptRuntimeError("null_pointer_exception", message)


# --------------------------------------------------------------------------
# Java-like helpers


def java_class(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "java.lang.Boolean"
    if isinstance(v, JLong):
        return "java.lang.Long"
    if isinstance(v, int):
        return "java.lang.Integer"
    if isinstance(v, float):
        return "java.lang.Double"
    if isinstance(v, str):
        return "java.lang.String"
    if isinstance(v, JHashMap):
        return "java.util.HashMap"
    if isinstance(v, JTreeMap):
        return "java.util.TreeMap"
    if isinstance(v, dict):
        return "java.util.LinkedHashMap"
    if isinstance(v, list):
        return "java.util.ArrayList"
    if isinstance(v, KeySet):
        return KeySet.NAMES[v.kind]
    if isinstance(v, Entry):
        return "java.util.HashMap$Node"
    if isinstance(v, JavaException):
        return "java.lang." + v.cls
    if isinstance(v, Ctx):
        return "java.util.HashMap"
    return "java.lang.Object"


def fmt_double(v):
    """Java's Double.toString: plain notation in [1e-3, 1e7), else
    d.dddE[-]n, with the shortest digits that round-trip."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0.0" if math.copysign(1.0, v) < 0 else "0.0"
    import decimal
    sign = "-" if v < 0 else ""
    a = abs(v)
    d = decimal.Decimal(repr(a))
    if 1e-3 <= a < 1e7:
        text = format(d, "f")
        if "." not in text:
            text += ".0"
        return sign + text
    tup = d.as_tuple()
    digits = "".join(str(x) for x in tup.digits)
    exp10 = len(digits) + tup.exponent - 1
    digits = digits.rstrip("0") or "0"
    return "%s%s.%sE%d" % (sign, digits[0], digits[1:] or "0", exp10)


def to_str(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return fmt_double(v)
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        return "{" + ", ".join("%s=%s" % (to_str(k), to_str(x)) for k, x in v.items()) + "}"
    if isinstance(v, (list, KeySet)):
        return "[" + ", ".join(to_str(x) for x in v) + "]"
    if isinstance(v, Entry):
        return "%s=%s" % (to_str(v.key), to_str(v.value))
    if isinstance(v, JavaException):
        return "java.lang.%s: %s" % (v.cls, v.message) if v.message is not None else "java.lang." + v.cls
    if isinstance(v, Ctx):
        return to_str(v.as_map())
    return str(v)


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def num_kind(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return "d"
    if isinstance(a, JLong) or isinstance(b, JLong):
        return "l"
    return "i"


def arith(op, a, b):
    if op == "+" and (isinstance(a, str) or isinstance(b, str)):
        return to_str(a) + to_str(b)
    if a is None or b is None:
        raise npe()
    if not (is_num(a) and is_num(b)):
        if op in ("&", "|", "^") and isinstance(a, bool) and isinstance(b, bool):
            return {"&": a and b, "|": a or b, "^": a != b}[op]
        raise rt("class_cast_exception",
                 "Cannot apply [%s] operation to types [%s] and [%s]." % (op, java_class(a), java_class(b)))
    k = num_kind(a, b)
    if k == "d":
        a, b = float(a), float(b)
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            if b == 0:
                if a == 0 or math.isnan(a):
                    return float("nan")
                return math.copysign(float("inf"), a) * math.copysign(1.0, b)
            return a / b
        if op == "%":
            if b == 0:
                return float("nan")
            return math.fmod(a, b)
        raise rt("class_cast_exception",
                 "Cannot apply [%s] operation to types [java.lang.Double] and [java.lang.Double]." % op)
    wrap = wrap_long if k == "l" else wrap_int
    a, b = int(a), int(b)
    if op == "+":
        return wrap(a + b)
    if op == "-":
        return wrap(a - b)
    if op == "*":
        return wrap(a * b)
    if op in ("/", "%"):
        if b == 0:
            raise rt("arithmetic_exception", "/ by zero")
        q = abs(a) // abs(b)
        if (a < 0) != (b < 0):
            q = -q
        if op == "/":
            return wrap(q)
        return wrap(a - q * b)
    if op == "&":
        return wrap(a & b)
    if op == "|":
        return wrap(a | b)
    if op == "^":
        return wrap(a ^ b)
    bits = 63 if k == "l" else 31
    if op == "<<":
        return wrap(a << (b & bits))
    if op == ">>":
        return wrap(a >> (b & bits))
    if op == ">>>":
        mask = (1 << (bits + 1)) - 1
        return wrap((a & mask) >> (b & bits))
    raise rt("illegal_argument_exception", "bad operator " + op)


def jequals(a, b):
    if a is None or b is None:
        return a is b
    if is_num(a) and is_num(b):
        return float(a) == float(b) if num_kind(a, b) == "d" else int(a) == int(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(k in b and jequals(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(jequals(x, y) for x, y in zip(a, b))
    return a is b


def compare(op, a, b):
    if a is None or b is None:
        raise npe()
    if not (is_num(a) and is_num(b)):
        raise rt("class_cast_exception",
                 "Cannot apply [%s] operation to types [%s] and [%s]." % (op, java_class(a), java_class(b)))
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    return a >= b


def truth(v, what="condition"):
    if isinstance(v, bool):
        return v
    if v is None:
        raise npe()
    raise rt("class_cast_exception", "Cannot cast %s to java.lang.Boolean" % java_class(v))


def cast_to(tname, v):
    """Assignment conversion to a declared type."""
    if tname in ("def", "Object", "var"):
        return v
    if tname in ("int", "long", "short", "byte", "double", "float", "boolean", "char"):
        if v is None:
            raise npe()
    if tname in ("int", "Integer", "short", "byte", "Short", "Byte"):
        if v is None:
            return None
        if isinstance(v, int) and not isinstance(v, (bool, JLong)):
            return v
    elif tname in ("long", "Long"):
        if v is None:
            return None
        if isinstance(v, int) and not isinstance(v, bool):
            return JLong(v)
    elif tname in ("double", "float", "Double", "Float"):
        if v is None:
            return None
        if is_num(v):
            return float(v)
    elif tname in ("boolean", "Boolean"):
        if v is None or isinstance(v, bool):
            return v
    elif tname == "String":
        if v is None or isinstance(v, str):
            return v
    elif tname in ("Map", "HashMap", "LinkedHashMap", "TreeMap"):
        if v is None or isinstance(v, dict):
            return v
    elif tname in ("List", "ArrayList", "LinkedList", "Collection"):
        if v is None or isinstance(v, list):
            return v
    elif tname == "Number":
        if v is None or is_num(v):
            return v
    else:
        return v
    raise rt("class_cast_exception", "Cannot cast %s to %s" % (java_class(v), tname))


class KeySet(object):
    """A live view of a map (``keySet()``, ``values()`` or ``entrySet()``)."""

    NAMES = {"keys": "java.util.HashMap$KeySet", "values": "java.util.HashMap$Values",
             "entries": "java.util.HashMap$EntrySet"}

    def __init__(self, m, kind="keys"):
        self.m = m
        self.kind = kind

    def items(self):
        if self.kind == "keys":
            return list(self.m.keys())
        if self.kind == "values":
            return list(self.m.values())
        return [Entry(self.m, k) for k in list(self.m.keys())]

    @property
    def keys(self):
        return self.items()

    def __iter__(self):
        return iter(self.items())

    def __len__(self):
        return len(self.m)


class Entry(object):
    def __init__(self, m, key):
        self.m = m
        self.key = key

    @property
    def value(self):
        return self.m.get(self.key)


class Ctx(object):
    """The update context ``ctx``.

    Elasticsearch 7 (and OpenSearch) hand the script a plain HashMap: any key
    may be written, only ``op`` and ``_source`` are read back.  Elasticsearch
    8 uses a CtxMap: metadata keys (``_index``, ``_id``, ``_version``,
    ``_routing``, ``_type``, ``_now``) are read-only ("_id cannot be
    updated"), ``op`` must be a String or null, other keys are accepted and
    ignored."""

    METADATA = ("_index", "_id", "_version", "_routing", "_type", "_now", "op")

    def __init__(self, fields, strict_metadata):
        self.fields = fields
        self.strict = strict_metadata

    def get(self, name):
        return self.fields.get(name)

    def put(self, name, value):
        if self.strict and name in self.METADATA and name in self.fields:
            if name != "op":
                raise rt("illegal_argument_exception", "%s cannot be updated" % name)
            if value is not None and not isinstance(value, str):
                raise rt("illegal_argument_exception",
                         "op [%s] is wrong type, expected assignable to [java.lang.String], not [%s]"
                         % (to_str(value), java_class(value)))
        old = self.fields.get(name)
        self.fields[name] = value
        return old

    def as_map(self):
        return dict(self.fields)


# --------------------------------------------------------------------------
# tokenizer

KEYWORDS = {"if", "else", "while", "do", "for", "in", "continue", "break", "return", "new", "try",
            "catch", "throw", "this", "instanceof", "true", "false", "null"}
PRIM_TYPES = {"def", "int", "long", "double", "float", "boolean", "short", "byte", "char", "var"}
REF_TYPES = {"String", "Map", "HashMap", "LinkedHashMap", "TreeMap", "List", "ArrayList", "LinkedList",
             "Object", "Integer", "Long", "Double", "Float", "Boolean", "Number", "Collection",
             "Set", "HashSet", "Short", "Byte"}
OPERATORS = [">>>=", "<<=", ">>=", ">>>", "===", "!==", "...", "?.", "?:", "->", "::",
             "++", "--", "==", "!=", "<=", ">=", "&&", "||", "+=", "-=", "*=", "/=", "%=",
             "&=", "|=", "^=", "<<", ">>", "=~", "==~",
             "{", "}", "[", "]", "(", ")", ";", ",", ".", "?", ":", "+", "-", "*", "/", "%",
             "!", "~", "<", ">", "=", "&", "|", "^"]
OPERATORS.sort(key=len, reverse=True)


class Tok(object):
    __slots__ = ("kind", "val", "pos", "end")

    def __init__(self, kind, val, pos, end):
        self.kind, self.val, self.pos, self.end = kind, val, pos, end

    def __repr__(self):
        return "Tok(%s,%r,%d)" % (self.kind, self.val, self.pos)


def tokenize(src):
    toks = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in " \t\r\n\f":
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            if j < 0:
                raise CompileError("unexpected character [/].", i)
            i = j + 2
            continue
        if c.isalpha() or c == "_" or c == "$":
            j = i
            while j < n and (src[j].isalnum() or src[j] in "_$"):
                j += 1
            word = src[i:j]
            toks.append(Tok("kw" if word in KEYWORDS else "id", word, i, j))
            i = j
            continue
        if c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit()):
            j = i
            if src.startswith(("0x", "0X"), i):
                j = i + 2
                while j < n and (src[j] in "0123456789abcdefABCDEF"):
                    j += 1
                text = src[i:j]
                suffix = ""
                if j < n and src[j] in "lL":
                    suffix = "l"
                    j += 1
                try:
                    v = int(text, 16)
                except ValueError:
                    raise CompileError("Invalid int constant [%s]." % text, i)
                toks.append(Tok("num", (v, suffix or "i", True), i, j))
                i = j
                continue
            is_float = False
            while j < n and src[j].isdigit():
                j += 1
            if j < n and src[j] == "." and j + 1 < n and src[j + 1].isdigit():
                is_float = True
                j += 1
                while j < n and src[j].isdigit():
                    j += 1
            if j < n and src[j] in "eE":
                k = j + 1
                if k < n and src[k] in "+-":
                    k += 1
                if k < n and src[k].isdigit():
                    is_float = True
                    j = k
                    while j < n and src[j].isdigit():
                        j += 1
            text = src[i:j]
            kind = "d" if is_float else "i"
            if j < n and src[j] in "lLfFdD":
                s = src[j].lower()
                if s == "l" and is_float:
                    raise CompileError("invalid sequence of tokens near [%s]." % src[j], j)
                kind = s
                j += 1
            if j < n and (src[j].isalpha() or src[j] == "_"):
                raise CompileError("invalid sequence of tokens near ['%s']." % src[j], j)
            toks.append(Tok("num", (text, kind, False), i, j))
            i = j
            continue
        if c in "'\"":
            j = i + 1
            out = []
            while True:
                if j >= n:
                    raise CompileError("unexpected character [%s]." % c, i)
                d = src[j]
                if d == "\\":
                    if j + 1 < n and src[j + 1] in ("\\", c):
                        out.append(src[j + 1])
                        j += 2
                        continue
                    raise CompileError("unexpected character [%s]." % src[i:j + 2], i)
                if d == c:
                    break
                out.append(d)
                j += 1
            toks.append(Tok("str", "".join(out), i, j + 1))
            i = j + 1
            continue
        for op in OPERATORS:
            if src.startswith(op, i):
                toks.append(Tok("op", op, i, i + len(op)))
                i += len(op)
                break
        else:
            raise CompileError("unexpected character [%s]." % c, i)
    toks.append(Tok("eof", "<EOF>", n, n))
    return toks


# --------------------------------------------------------------------------
# AST nodes (each evaluates itself)


class Break(Exception):
    pass


class Continue(Exception):
    pass


class Return(Exception):
    def __init__(self, value):
        Exception.__init__(self)
        self.value = value


class Node(object):
    pos = 0
    has_effect = False

    def ev(self, env):
        raise NotImplementedError


class Lit(Node):
    def __init__(self, v, pos):
        self.v, self.pos = v, pos

    def ev(self, env):
        return self.v


class ListInit(Node):
    def __init__(self, items, pos):
        self.items, self.pos = items, pos

    def ev(self, env):
        return [x.ev(env) for x in self.items]


class MapInit(Node):
    def __init__(self, pairs, pos):
        self.pairs, self.pos = pairs, pos

    def ev(self, env):
        m = JHashMap()  # Painless map initializers build a HashMap
        for k, v in self.pairs:
            m[k.ev(env)] = v.ev(env)
        return m


class Var(Node):
    def __init__(self, name, pos):
        self.name, self.pos = name, pos

    def ev(self, env):
        return env.vars[self.name]

    def assign(self, env, v):
        t = env.types.get(self.name)
        env.vars[self.name] = cast_to(t, v) if t else v


def get_field(obj, name):
    if obj is None:
        raise npe()
    if isinstance(obj, Ctx):
        return obj.get(name)
    if isinstance(obj, dict):
        return obj.get(name)
    if isinstance(obj, list):
        if name == "length":
            pass
        try:
            idx = int(name)
        except ValueError:
            idx = None
        if idx is not None:
            return list_get(obj, idx)
    if isinstance(obj, Entry):
        if name == "key":
            return obj.key
        if name == "value":
            return obj.value
    raise rt("illegal_argument_exception", "dynamic getter [%s, %s] not found" % (java_class(obj), name))


def set_field(obj, name, v):
    if obj is None:
        raise npe()
    if isinstance(obj, Ctx):
        obj.put(name, v)
        return
    if isinstance(obj, dict):
        obj[name] = v
        return
    raise rt("illegal_argument_exception", "dynamic setter [%s, %s] not found" % (java_class(obj), name))


def list_get(lst, idx):
    if idx < 0:
        idx += len(lst)  # Painless allows negative list indexes
    if not 0 <= idx < len(lst):
        raise rt("index_out_of_bounds_exception",
                 "Index %d out of bounds for length %d" % (idx, len(lst)))
    return lst[idx]


class Field(Node):
    def __init__(self, obj, name, pos, nullsafe=False):
        self.obj, self.name, self.pos, self.nullsafe = obj, name, pos, nullsafe

    def ev(self, env):
        o = self.obj.ev(env)
        if o is None and self.nullsafe:
            return None
        try:
            return get_field(o, self.name)
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise

    def assign(self, env, v):
        o = self.obj.ev(env)
        if o is None and self.nullsafe:
            return
        try:
            set_field(o, self.name, v)
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise


def index_get(o, k):
    if o is None:
        raise npe()
    if isinstance(o, (dict, Ctx)):
        return o.get(k) if isinstance(o, dict) else o.get(k)
    if isinstance(o, list):
        if not isinstance(k, int) or isinstance(k, bool):
            raise rt("class_cast_exception", "Cannot cast %s to java.lang.Integer" % java_class(k))
        return list_get(o, int(k))
    raise rt("illegal_argument_exception",
             "Attempting to address a non-array type [%s] as an array." % java_class(o))


def index_set(o, k, v):
    if o is None:
        raise npe()
    if isinstance(o, Ctx):
        o.put(k, v)
    elif isinstance(o, dict):
        o[k] = v
    elif isinstance(o, list):
        if not isinstance(k, int) or isinstance(k, bool):
            raise rt("class_cast_exception", "Cannot cast %s to java.lang.Integer" % java_class(k))
        k = int(k)
        if k < 0:
            k += len(o)
        if not 0 <= k < len(o):
            raise rt("index_out_of_bounds_exception", "Index %d out of bounds for length %d" % (k, len(o)))
        o[k] = v
    else:
        raise rt("illegal_argument_exception",
                 "Attempting to address a non-array type [%s] as an array." % java_class(o))


class Index(Node):
    def __init__(self, obj, key, pos):
        self.obj, self.key, self.pos = obj, key, pos

    def ev(self, env):
        o = self.obj.ev(env)
        k = self.key.ev(env)
        try:
            return index_get(o, k)
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise

    def assign(self, env, v):
        o = self.obj.ev(env)
        k = self.key.ev(env)
        try:
            index_set(o, k, v)
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise


class Assign(Node):
    has_effect = True

    def __init__(self, target, op, value, pos):
        self.target, self.op, self.value, self.pos = target, op, value, pos

    def ev(self, env):
        try:
            if self.op == "=":
                v = self.value.ev(env)
            else:
                cur = self.target.ev(env)
                rhs = self.value.ev(env)
                if self.op == "+=" and cur is None and isinstance(rhs, str):
                    v = "null" + rhs
                else:
                    v = arith(self.op[:-1], cur, rhs)
            self.target.assign(env, v)
            return v
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise


class IncDec(Node):
    has_effect = True

    def __init__(self, target, op, prefix, pos):
        self.target, self.op, self.prefix, self.pos = target, op, prefix, pos

    def ev(self, env):
        try:
            cur = self.target.ev(env)
            if not is_num(cur):
                if cur is None:
                    raise npe()
                raise rt("class_cast_exception",
                         "Cannot apply [%s] operation to type [%s]." % (self.op, java_class(cur)))
            new = arith("+" if self.op == "++" else "-", cur, 1)
            self.target.assign(env, new)
            return new if self.prefix else cur
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise


class Unary(Node):
    def __init__(self, op, operand, pos):
        self.op, self.operand, self.pos = op, operand, pos

    def ev(self, env):
        v = self.operand.ev(env)
        try:
            if self.op == "!":
                return not truth(v)
            if v is None:
                raise npe()
            if not is_num(v):
                raise rt("class_cast_exception",
                         "Cannot apply [%s] operation to type [%s]." % (self.op, java_class(v)))
            if self.op == "-":
                if isinstance(v, float):
                    return -v
                return arith("-", JLong(0) if isinstance(v, JLong) else 0, v)
            if self.op == "+":
                return v
            if self.op == "~":
                if isinstance(v, float):
                    raise rt("class_cast_exception", "Cannot apply [~] operation to type [java.lang.Double].")
                return arith("^", v, JLong(-1) if isinstance(v, JLong) else -1)
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise


class Binary(Node):
    def __init__(self, op, left, right, pos):
        self.op, self.left, self.right, self.pos = op, left, right, pos

    def ev(self, env):
        op = self.op
        try:
            if op == "&&":
                return truth(self.left.ev(env)) and truth(self.right.ev(env))
            if op == "||":
                return truth(self.left.ev(env)) or truth(self.right.ev(env))
            a = self.left.ev(env)
            b = self.right.ev(env)
            if op == "==":
                return jequals(a, b)
            if op == "!=":
                return not jequals(a, b)
            if op == "===":
                return a is b or (is_num(a) and is_num(b) and jequals(a, b)) or (
                    isinstance(a, (str, bool)) and type(a) is type(b) and a == b)
            if op == "!==":
                return not (a is b or (is_num(a) and is_num(b) and jequals(a, b)) or (
                    isinstance(a, (str, bool)) and type(a) is type(b) and a == b))
            if op in ("<", "<=", ">", ">="):
                return compare(op, a, b)
            return arith(op, a, b)
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise


class Cond(Node):
    def __init__(self, c, a, b, pos):
        self.c, self.a, self.b, self.pos = c, a, b, pos

    def ev(self, env):
        try:
            t = truth(self.c.ev(env))
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise
        return self.a.ev(env) if t else self.b.ev(env)


class Elvis(Node):
    def __init__(self, a, b, pos):
        self.a, self.b, self.pos = a, b, pos

    def ev(self, env):
        v = self.a.ev(env)
        return self.b.ev(env) if v is None else v


class InstanceOf(Node):
    def __init__(self, expr, tname, pos):
        self.expr, self.tname, self.pos = expr, tname, pos

    def ev(self, env):
        v = self.expr.ev(env)
        t = self.tname
        if v is None:
            return False
        if t in ("def", "Object"):
            return True
        if t in ("String", "CharSequence"):
            return isinstance(v, str)
        if t in ("Map", "HashMap"):
            return isinstance(v, dict)
        if t in ("List", "ArrayList", "Collection"):
            return isinstance(v, list)
        if t in ("Integer", "int"):
            return isinstance(v, int) and not isinstance(v, (bool, JLong))
        if t in ("Long", "long"):
            return isinstance(v, JLong)
        if t in ("Double", "double"):
            return isinstance(v, float)
        if t == "Number":
            return is_num(v)
        if t in ("Boolean", "boolean"):
            return isinstance(v, bool)
        if t in EXCEPTION_CLASSES:
            return isinstance(v, JavaException) and (v.cls == t or t in ("Exception", "RuntimeException"))
        return False


class CastExpr(Node):
    def __init__(self, tname, expr, pos):
        self.tname, self.expr, self.pos = tname, expr, pos

    def ev(self, env):
        v = self.expr.ev(env)
        t = self.tname
        try:
            if t in ("int", "long", "short", "byte") and is_num(v):
                iv = int(v) if not isinstance(v, float) else int(math.trunc(v)) if not math.isnan(v) else 0
                return wrap_long(iv) if t == "long" else wrap_int(iv)
            if t in ("double", "float") and is_num(v):
                return float(v)
            return cast_to(t, v)
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise


class New(Node):
    has_effect = True

    def __init__(self, cls, args, pos):
        self.cls, self.args, self.pos = cls, args, pos

    def ev(self, env):
        args = [a.ev(env) for a in self.args]
        c = self.cls
        if c in ("HashMap", "LinkedHashMap", "TreeMap"):
            cls = {"HashMap": JHashMap, "LinkedHashMap": dict, "TreeMap": JTreeMap}[c]
            if args:
                if not isinstance(args[0], dict):
                    raise ScriptRuntimeError("class_cast_exception",
                                             "Cannot cast %s to java.util.Map" % java_class(args[0]), self.pos)
                return cls(list(args[0].items()))
            return cls()
        if c in ("ArrayList", "LinkedList", "HashSet"):
            if args and isinstance(args[0], (list, KeySet)):
                return list(args[0])
            return []
        if c in EXCEPTION_CLASSES:
            msg = args[0] if args else None
            if msg is not None and not isinstance(msg, str):
                raise ScriptRuntimeError("class_cast_exception",
                                         "Cannot cast %s to java.lang.String" % java_class(msg), self.pos)
            return JavaException(c, msg)
        raise ScriptRuntimeError("illegal_argument_exception", "cannot construct " + c, self.pos)


class StaticField(Node):
    VALUES = {
        ("Integer", "MAX_VALUE"): INT_MAX, ("Integer", "MIN_VALUE"): INT_MIN,
        ("Long", "MAX_VALUE"): JLong(LONG_MAX), ("Long", "MIN_VALUE"): JLong(LONG_MIN),
        ("Math", "PI"): math.pi, ("Math", "E"): math.e,
    }

    def __init__(self, cls, name, pos):
        self.cls, self.name, self.pos = cls, name, pos
        self.v = self.VALUES[(cls, name)]

    def ev(self, env):
        return self.v


def _num_arg(v, pos):
    if v is None:
        raise ScriptRuntimeError("null_pointer_exception", None, pos)
    if not is_num(v):
        raise ScriptRuntimeError("class_cast_exception", "Cannot cast %s to java.lang.Number" % java_class(v), pos)
    return v


def _parse_int(s, kind):
    if s is None:
        raise rt("number_format_exception", "Cannot parse null string: null")
    if not isinstance(s, str):
        raise rt("class_cast_exception", "Cannot cast %s to java.lang.String" % java_class(s))
    try:
        if not s or s.strip() != s or "_" in s:
            raise ValueError
        v = int(s, 10)
    except ValueError:
        raise rt("number_format_exception", 'For input string: "%s"' % s)
    lo, hi = (INT_MIN, INT_MAX) if kind == "i" else (LONG_MIN, LONG_MAX)
    if not lo <= v <= hi:
        raise rt("number_format_exception", 'For input string: "%s"' % s)
    return v if kind == "i" else JLong(v)


def _math_minmax(fn, a, b):
    k = num_kind(a, b)
    r = fn(a, b)
    if k == "d":
        return float(r)
    if k == "l":
        return JLong(r)
    return int(r)


STATIC_METHODS = {
    ("System", "currentTimeMillis", 0): lambda: JLong(int(time.time() * 1000)),
    ("System", "nanoTime", 0): lambda: JLong(time.monotonic_ns()),
    ("Math", "max", 2): lambda a, b: _math_minmax(max, a, b),
    ("Math", "min", 2): lambda a, b: _math_minmax(min, a, b),
    ("Math", "abs", 1): lambda a: type(a)(abs(a)) if not isinstance(a, JLong) else JLong(abs(a)),
    ("Math", "floor", 1): lambda a: float(math.floor(a)),
    ("Math", "ceil", 1): lambda a: float(math.ceil(a)),
    ("Math", "round", 1): lambda a: JLong(math.floor(a + 0.5)),
    ("Math", "sqrt", 1): lambda a: math.sqrt(a) if a >= 0 else float("nan"),
    ("Math", "pow", 2): lambda a, b: float(math.pow(a, b)),
    ("Integer", "parseInt", 1): lambda s: _parse_int(s, "i"),
    ("Long", "parseLong", 1): lambda s: _parse_int(s, "l"),
    ("Integer", "valueOf", 1): lambda s: _parse_int(s, "i") if isinstance(s, str) else cast_to("int", s),
    ("Long", "valueOf", 1): lambda s: _parse_int(s, "l") if isinstance(s, str) else cast_to("long", s),
    ("String", "valueOf", 1): to_str,
    ("Objects", "equals", 2): jequals,
    ("Objects", "isNull", 1): lambda a: a is None,
    ("Objects", "nonNull", 1): lambda a: a is not None,
}
NUMERIC_STATIC = {("Math", "max", 2), ("Math", "min", 2), ("Math", "abs", 1), ("Math", "floor", 1),
                  ("Math", "ceil", 1), ("Math", "round", 1), ("Math", "sqrt", 1), ("Math", "pow", 2)}


class StaticCall(Node):
    has_effect = True

    def __init__(self, cls, name, args, pos):
        self.cls, self.name, self.args, self.pos = cls, name, args, pos
        self.key = (cls, name, len(args))
        self.fn = STATIC_METHODS[self.key]

    def ev(self, env):
        args = [a.ev(env) for a in self.args]
        if self.key in NUMERIC_STATIC:
            args = [_num_arg(a, self.pos) for a in args]
        try:
            return self.fn(*args)
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise


def call_method(o, name, args):
    n = len(args)
    if o is None:
        raise npe()
    if any(isinstance(a, Closure) for a in args):
        handled, result = functional_method(o.fields if isinstance(o, Ctx) else o, name, args)
        if handled:
            return result
    if name == "equals" and n == 1:
        return jequals(o, args[0])
    if name == "toString" and n == 0:
        return to_str(o)
    if name == "hashCode" and n == 0:
        return wrap_int(hash(to_str(o)))
    if isinstance(o, Ctx):
        if name == "put" and n == 2:
            return o.put(args[0], args[1])
        o = o.fields
    if isinstance(o, dict):
        if name == "containsKey" and n == 1:
            return args[0] in o if _hashable(args[0]) else False
        if name == "containsValue" and n == 1:
            return any(jequals(v, args[0]) for v in o.values())
        if name == "get" and n == 1:
            return o.get(args[0]) if _hashable(args[0]) else None
        if name == "getOrDefault" and n == 2:
            return o.get(args[0], args[1]) if _hashable(args[0]) else args[1]
        if name == "put" and n == 2:
            _check_key(args[0])
            old = o.get(args[0])
            o[args[0]] = args[1]
            return old
        if name == "putIfAbsent" and n == 2:
            _check_key(args[0])
            old = o.get(args[0])
            if old is None:
                o[args[0]] = args[1]
            return old
        if name == "putAll" and n == 1:
            if not isinstance(args[0], dict):
                raise npe() if args[0] is None else rt("class_cast_exception", "Cannot cast %s to java.util.Map" % java_class(args[0]))
            o.update(args[0])
            return None
        if name == "remove" and n == 1:
            return o.pop(args[0], None) if _hashable(args[0]) else None
        if name == "size" and n == 0:
            return len(o)
        if name == "isEmpty" and n == 0:
            return not o
        if name == "keySet" and n == 0:
            return KeySet(o, "keys")
        if name == "values" and n == 0:
            return KeySet(o, "values")
        if name == "entrySet" and n == 0:
            return KeySet(o, "entries")
        if name == "clear" and n == 0:
            o.clear()
            return None
    elif isinstance(o, (list, KeySet)):
        seq = o.items() if isinstance(o, KeySet) else o
        if isinstance(o, KeySet) and o.kind == "keys" and name == "remove" and n == 1:
            if _hashable(args[0]) and args[0] in o.m:
                del o.m[args[0]]
                return True
            return False
        if name == "size" and n == 0:
            return len(seq)
        if name == "isEmpty" and n == 0:
            return not seq
        if name == "contains" and n == 1:
            return any(jequals(x, args[0]) for x in seq)
        if isinstance(o, list):
            if name == "add" and n == 1:
                o.append(args[0])
                return True
            if name == "add" and n == 2:
                idx = args[0]
                if not 0 <= idx <= len(o):
                    raise rt("index_out_of_bounds_exception", "Index: %d, Size: %d" % (idx, len(o)))
                o.insert(idx, args[1])
                return None
            if name == "addAll" and n == 1:
                if args[0] is None:
                    raise npe()
                o.extend(list(args[0]))
                return True
            if name == "get" and n == 1:
                return list_get(o, args[0]) if args[0] >= 0 else _oob(args[0], o)
            if name == "set" and n == 2:
                old = list_get(o, args[0]) if args[0] >= 0 else _oob(args[0], o)
                o[args[0]] = args[1]
                return old
            if name == "remove" and n == 1:
                a = args[0]
                if isinstance(a, int) and not isinstance(a, (bool, JLong)):
                    if not 0 <= a < len(o):
                        _oob(a, o)
                    return o.pop(a)
                for i, x in enumerate(o):
                    if jequals(x, a):
                        del o[i]
                        return True
                return False
            if name == "indexOf" and n == 1:
                for i, x in enumerate(o):
                    if jequals(x, args[0]):
                        return i
                return -1
            if name == "clear" and n == 0:
                del o[:]
                return None
    elif isinstance(o, str):
        a = args[0] if args else None
        if name in ("startsWith", "endsWith", "contains", "equalsIgnoreCase", "indexOf",
                    "lastIndexOf", "compareTo") and n == 1:
            if a is None:
                if name == "equalsIgnoreCase":
                    return False
                raise npe()
            if not isinstance(a, str):
                raise rt("class_cast_exception", "Cannot cast %s to java.lang.String" % java_class(a))
            if name == "startsWith":
                return o.startswith(a)
            if name == "endsWith":
                return o.endswith(a)
            if name == "contains":
                return a in o
            if name == "equalsIgnoreCase":
                return o.lower() == a.lower()
            if name == "indexOf":
                return o.find(a)
            if name == "lastIndexOf":
                return o.rfind(a)
            if name == "compareTo":
                for x, y in zip(o, a):
                    if x != y:
                        return ord(x) - ord(y)
                return len(o) - len(a)
        if name == "length" and n == 0:
            return len(o.encode("utf-16-le")) // 2
        if name == "isEmpty" and n == 0:
            return not o
        if name == "toLowerCase" and n == 0:
            return o.lower()
        if name == "toUpperCase" and n == 0:
            return o.upper()
        if name == "trim" and n == 0:
            return o.strip(" \t\r\n\x00\x0b\x0c")
        if name == "substring" and n in (1, 2):
            b = args[0]
            e = args[1] if n == 2 else len(o)
            if not (0 <= b <= e <= len(o)):
                raise rt("string_index_out_of_bounds_exception",
                         "begin %d, end %d, length %d" % (b, e, len(o)))
            return o[b:e]
        if name == "replace" and n == 2:
            return o.replace(to_str(args[0]), to_str(args[1]))
    elif is_num(o):
        if name == "intValue" and n == 0:
            return wrap_int(int(o))
        if name == "longValue" and n == 0:
            return wrap_long(int(o))
        if name == "doubleValue" and n == 0:
            return float(o)
        if name == "compareTo" and n == 1:
            if args[0] is None:
                raise npe()
            return (o > args[0]) - (o < args[0])
    elif isinstance(o, bool):
        if name == "booleanValue" and n == 0:
            return o
    elif isinstance(o, Entry):
        if name == "getKey" and n == 0:
            return o.key
        if name == "getValue" and n == 0:
            return o.value
        if name == "setValue" and n == 1:
            old = o.value
            o.m[o.key] = args[0]
            return old
    elif isinstance(o, JavaException):
        if name in ("getMessage", "getLocalizedMessage") and n == 0:
            return o.message
    raise rt("illegal_argument_exception",
             "dynamic method [%s, %s/%d] not found" % (java_class(o), name, n))


def _oob(i, o):
    raise rt("index_out_of_bounds_exception", "Index %d out of bounds for length %d" % (i, len(o)))


def _hashable(k):
    return k is None or isinstance(k, (str, int, float, bool))


def _check_key(k):
    if not _hashable(k):
        raise rt("illegal_argument_exception", "unsupported map key of type [%s]" % java_class(k))


class Closure(object):
    def __init__(self, names, body, block, env, pos):
        self.names, self.body, self.block, self.env, self.pos = names, body, block, env, pos

    def __call__(self, *args):
        if len(args) != len(self.names):
            raise rt("illegal_argument_exception", "lambda takes %d arguments, got %d" % (len(self.names), len(args)))
        env = self.env
        saved = [(n, env.vars.get(n, _MISSING)) for n in self.names]
        for n, a in zip(self.names, args):
            env.vars[n] = a
        try:
            if not self.block:
                return self.body.ev(env)
            try:
                self.body.ev(env)
            except Return as r:
                return r.value
            return None
        finally:
            for n, old in saved:
                if old is _MISSING:
                    env.vars.pop(n, None)
                else:
                    env.vars[n] = old


_MISSING = object()


class Lambda(Node):
    has_effect = True

    def __init__(self, names, body, block, pos):
        self.names, self.body, self.block, self.pos = names, body, block, pos

    def ev(self, env):
        return Closure(self.names, self.body, self.block, env, self.pos)


def _fn(f, n):
    if not isinstance(f, Closure):
        if f is None:
            raise npe()
        raise rt("class_cast_exception", "Cannot cast %s to a functional interface" % java_class(f))
    if len(f.names) != n:
        raise rt("illegal_argument_exception",
                 "Incorrect number of parameters for [lambda] in [function] expected [%d] but found [%d]"
                 % (n, len(f.names)))
    return f


def functional_method(o, name, args):
    """Methods taking lambdas (Java's and Painless' augmentations)."""
    n = len(args)
    if isinstance(o, dict):
        if name == "forEach" and n == 1:
            f = _fn(args[0], 2)
            for k in list(o.keys()):
                f(k, o.get(k))
            return True, None
        if name == "computeIfAbsent" and n == 2:
            f = _fn(args[1], 1)
            _check_key(args[0])
            if o.get(args[0]) is None:
                v = f(args[0])
                if v is not None:
                    o[args[0]] = v
                return True, v
            return True, o[args[0]]
        if name == "computeIfPresent" and n == 2:
            f = _fn(args[1], 2)
            if o.get(args[0]) is not None:
                v = f(args[0], o[args[0]])
                if v is None:
                    del o[args[0]]
                else:
                    o[args[0]] = v
                return True, v
            return True, None
        if name == "compute" and n == 2:
            f = _fn(args[1], 2)
            _check_key(args[0])
            v = f(args[0], o.get(args[0]))
            if v is None:
                o.pop(args[0], None)
            else:
                o[args[0]] = v
            return True, v
        if name == "merge" and n == 3:
            f = _fn(args[2], 2)
            _check_key(args[0])
            if args[1] is None:
                raise npe()
            old = o.get(args[0])
            v = args[1] if old is None else f(old, args[1])
            if v is None:
                o.pop(args[0], None)
            else:
                o[args[0]] = v
            return True, v
        if name == "replaceAll" and n == 1:
            f = _fn(args[0], 2)
            for k in list(o.keys()):
                o[k] = f(k, o[k])
            return True, None
        if name in ("each", "any", "every", "find", "findAll", "count") and n == 1:
            f = _fn(args[0], 2)
            if name == "each":
                for k in list(o.keys()):
                    f(k, o.get(k))
                return True, o
            if name == "any":
                return True, any(truth(f(k, v)) for k, v in list(o.items()))
            if name == "every":
                return True, all(truth(f(k, v)) for k, v in list(o.items()))
            if name == "count":
                return True, sum(1 for k, v in list(o.items()) if truth(f(k, v)))
            if name == "find":
                for k in list(o.keys()):
                    if truth(f(k, o[k])):
                        return True, Entry(o, k)
                return True, None
            return True, {k: v for k, v in list(o.items()) if truth(f(k, v))}
    if isinstance(o, (list, KeySet)):
        items = o.items() if isinstance(o, KeySet) else list(o)
        if name == "removeIf" and n == 1:
            f = _fn(args[0], 1)
            doomed = [x for x in items if truth(f(x))]
            if isinstance(o, KeySet):
                for x in doomed:
                    key = x.key if isinstance(x, Entry) else x
                    if o.kind == "values":
                        for k in [k for k, v in o.m.items() if v is x]:
                            o.m.pop(k, None)
                    else:
                        o.m.pop(key, None)
            else:
                o[:] = [x for x in o if not any(x is d for d in doomed)]
            return True, bool(doomed)
        if name in ("forEach", "each") and n == 1:
            f = _fn(args[0], 1)
            for x in items:
                f(x)
            return True, None if name == "forEach" else o
        if name in ("any", "every", "find", "findAll", "collect", "findResult") and n == 1:
            f = _fn(args[0], 1)
            if name == "any":
                return True, any(truth(f(x)) for x in items)
            if name == "every":
                return True, all(truth(f(x)) for x in items)
            if name == "find":
                for x in items:
                    if truth(f(x)):
                        return True, x
                return True, None
            if name == "findAll":
                return True, [x for x in items if truth(f(x))]
            if name == "collect":
                return True, [f(x) for x in items]
            for x in items:
                r = f(x)
                if r is not None:
                    return True, r
            return True, None
        if name == "replaceAll" and n == 1 and isinstance(o, list):
            f = _fn(args[0], 1)
            o[:] = [f(x) for x in o]
            return True, None
        if name == "sort" and n == 1 and isinstance(o, list):
            import functools
            if args[0] is None:
                o.sort(key=functools.cmp_to_key(lambda a, b: compare_natural(a, b)))
            else:
                f = _fn(args[0], 2)
                o.sort(key=functools.cmp_to_key(lambda a, b: int(f(a, b))))
            return True, None
    return False, None


def compare_natural(a, b):
    if a is None or b is None:
        raise npe()
    if is_num(a) and is_num(b):
        return (a > b) - (a < b)
    if isinstance(a, str) and isinstance(b, str):
        return (a > b) - (a < b)
    raise rt("class_cast_exception", "Cannot compare %s with %s" % (java_class(a), java_class(b)))


class Call(Node):
    has_effect = True

    def __init__(self, obj, name, args, pos, nullsafe=False):
        self.obj, self.name, self.args, self.pos, self.nullsafe = obj, name, args, pos, nullsafe

    def ev(self, env):
        o = self.obj.ev(env)
        if o is None and self.nullsafe:
            return None
        args = [a.ev(env) for a in self.args]
        try:
            return call_method(o, self.name, args)
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.pos
            raise


# statements

class Block(Node):
    def __init__(self, stmts, pos):
        self.stmts, self.pos = stmts, pos

    def ev(self, env):
        for s in self.stmts:
            s.ev(env)


class ExprStmt(Node):
    def __init__(self, expr, pos):
        self.expr, self.pos = expr, pos

    def ev(self, env):
        env.last = self.expr.ev(env)


class Decl(Node):
    def __init__(self, tname, decls, pos):
        self.tname, self.decls, self.pos = tname, decls, pos

    def ev(self, env):
        for name, init, p in self.decls:
            if init is None:
                v = {"int": 0, "long": JLong(0), "short": 0, "byte": 0, "double": 0.0, "float": 0.0,
                     "boolean": False}.get(self.tname)
            else:
                v = init.ev(env)
                try:
                    v = cast_to(self.tname, v)
                except ScriptRuntimeError as e:
                    e.offset = p
                    raise
            env.vars[name] = v
            env.types[name] = self.tname if self.tname not in ("def", "var") else None


class If(Node):
    def __init__(self, cond, then, other, pos):
        self.cond, self.then, self.other, self.pos = cond, then, other, pos

    def ev(self, env):
        try:
            c = truth(self.cond.ev(env))
        except ScriptRuntimeError as e:
            if e.offset is None:
                e.offset = self.cond.pos
            raise
        if c:
            self.then.ev(env)
        elif self.other is not None:
            self.other.ev(env)


def _loop_guard(env, pos):
    env.loops += 1
    if env.loops > MAX_LOOP:
        raise ScriptRuntimeError("painless_error",
                                 "The maximum number of statements that can be executed in a loop has been reached.", pos)


class While(Node):
    def __init__(self, cond, body, pos, do=False):
        self.cond, self.body, self.pos, self.do = cond, body, pos, do

    def ev(self, env):
        first = self.do
        while first or truth(self.cond.ev(env)):
            first = False
            _loop_guard(env, self.pos)
            try:
                if self.body is not None:
                    self.body.ev(env)
            except Break:
                break
            except Continue:
                continue


class For(Node):
    def __init__(self, init, cond, update, body, pos):
        self.init, self.cond, self.update, self.body, self.pos = init, cond, update, body, pos

    def ev(self, env):
        if self.init is not None:
            self.init.ev(env)
        while self.cond is None or truth(self.cond.ev(env)):
            _loop_guard(env, self.pos)
            try:
                if self.body is not None:
                    self.body.ev(env)
            except Break:
                break
            except Continue:
                pass
            for u in self.update:
                u.ev(env)


class ForEach(Node):
    def __init__(self, tname, name, coll, body, pos):
        self.tname, self.name, self.coll, self.body, self.pos = tname, name, coll, body, pos

    def ev(self, env):
        c = self.coll.ev(env)
        if c is None:
            raise ScriptRuntimeError("null_pointer_exception", None, self.coll.pos)
        if isinstance(c, dict):
            raise ScriptRuntimeError("illegal_argument_exception",
                                     "Cannot iterate over [%s]" % java_class(c), self.coll.pos)
        if not isinstance(c, (list, KeySet)):
            raise ScriptRuntimeError("illegal_argument_exception",
                                     "Cannot iterate over [%s]" % java_class(c), self.coll.pos)
        # Java fail-fast iterators: a structural change of the collection while
        # iterating throws ConcurrentModificationException on the next next()
        if isinstance(c, KeySet):
            backing = c.m
            snapshot = c.items()
            shape = lambda: list(backing.keys())
        else:
            backing = c
            snapshot = list(c)
            shape = lambda: len(backing)
        before = shape()
        cursor = 0
        while True:
            if isinstance(c, KeySet):
                if cursor >= len(snapshot):
                    break
            elif cursor >= len(backing):  # ArrayList.hasNext(): cursor != size
                break
            if shape() != before:
                raise ScriptRuntimeError("concurrent_modification_exception", None, self.pos)
            item = snapshot[cursor] if isinstance(c, KeySet) else backing[cursor]
            cursor += 1
            _loop_guard(env, self.pos)
            env.vars[self.name] = cast_to(self.tname, item)
            env.types[self.name] = None if self.tname in ("def", "var") else self.tname
            try:
                self.body.ev(env)
            except Break:
                break
            except Continue:
                continue


class ReturnStmt(Node):
    def __init__(self, expr, pos):
        self.expr, self.pos = expr, pos

    def ev(self, env):
        raise Return(None if self.expr is None else self.expr.ev(env))


class Throw(Node):
    def __init__(self, expr, pos):
        self.expr, self.pos = expr, pos

    def ev(self, env):
        v = self.expr.ev(env)
        if v is None:
            raise ScriptRuntimeError("null_pointer_exception", None, self.pos)
        if not isinstance(v, JavaException):
            raise ScriptRuntimeError("class_cast_exception",
                                     "Cannot cast %s to java.lang.Throwable" % java_class(v), self.pos)
        # a Java exception's stack is taken where it was made: the 'new'
        where = self.expr.pos if isinstance(self.expr, New) else self.pos
        raise ScriptRuntimeError(v.type_name, v.message, where)


class BreakStmt(Node):
    def __init__(self, pos):
        self.pos = pos

    def ev(self, env):
        raise Break()


class ContinueStmt(Node):
    def __init__(self, pos):
        self.pos = pos

    def ev(self, env):
        raise Continue()


# --------------------------------------------------------------------------
# parser

BINARY_PREC = [
    ("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!=", "===", "!=="),
    ("<", "<=", ">", ">=", "instanceof"), ("<<", ">>", ">>>"), ("+", "-"), ("*", "/", "%"),
]
ASSIGN_OPS = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", ">>>="}
STATIC_CLASSES = {"Math", "System", "Integer", "Long", "String", "Objects", "Double", "Boolean"}
CONSTRUCTIBLE = {"HashMap", "LinkedHashMap", "TreeMap", "ArrayList", "LinkedList", "HashSet"} | set(EXCEPTION_CLASSES)
ALL_TYPES = PRIM_TYPES | REF_TYPES | set(EXCEPTION_CLASSES)


OPERATION_NAMES = {
    "*": "multiplication", "/": "division", "%": "remainder", "+": "addition", "-": "subtraction",
    "<<": "left shift", ">>": "right shift", ">>>": "unsigned shift", "~": "bitwise not", "&": "bitwise and",
    "^": "bitwise xor", "|": "bitwise or", "!": "boolean not", "&&": "boolean and", "||": "boolean or",
    "<": "less than", "<=": "less than or equals", ">": "greater than", ">=": "greater than or equals",
    "==": "equals", "===": "reference equals", "!=": "not equals", "!==": "reference not equals",
}


def describe(node):
    """How Painless names an expression in "not a statement" errors."""
    if isinstance(node, (Binary, Unary)):
        return "%s operation [%s]" % (OPERATION_NAMES.get(node.op, node.op), node.op)
    if isinstance(node, Cond):
        return "conditional operation [?:]"
    if isinstance(node, Elvis):
        return "elvis operation [?:]"
    if isinstance(node, CastExpr):
        return "explicit cast with target type [%s]" % node.tname
    if isinstance(node, MapInit):
        return "map initializer"
    if isinstance(node, ListInit):
        return "list initializer"
    if isinstance(node, InstanceOf):
        return "instanceof with target type [%s]" % node.tname
    if isinstance(node, Lit):
        v = node.v
        if v is None:
            return "null constant"
        if isinstance(v, bool):
            return "boolean constant [%s]" % ("true" if v else "false")
        if isinstance(v, str):
            return "string constant [%s]" % v
        return "numeric constant [%s]" % to_str(v)
    if isinstance(node, Var):
        return "variable [%s]" % node.name
    if isinstance(node, (Field, StaticField)):
        return "dot operator [%s]" % node.name
    if isinstance(node, Index):
        return "brace operator [[]]"
    return "expression"


def static_type(node):
    if isinstance(node, Lit):
        v = node.v
        if isinstance(v, bool):
            return "boolean"
        if isinstance(v, JLong):
            return "long"
        if isinstance(v, int):
            return "int"
        if isinstance(v, float):
            return "double"
        if isinstance(v, str):
            return "java.lang.String"
        return "null"
    if isinstance(node, Binary) and node.op in ("==", "!=", "===", "!==", "<", "<=", ">", ">=", "&&", "||"):
        return "boolean"
    if isinstance(node, (InstanceOf,)) or (isinstance(node, Unary) and node.op == "!"):
        return "boolean"
    return "def"


class Parser(object):
    def __init__(self, src, globals_):
        self.src = src
        self.toks = tokenize(src)
        self.i = 0
        self.scopes = [set(globals_)]
        self.loop_depth = 0
        self.lambda_depth = 0
        self.stmt_starts = []
        self.sem_errs = []

    def sem(self, err, at=None):
        """Record a semantic error: Painless parses the whole script first
        (syntax errors win), then its semantic pass reports the first error it
        meets; ``at`` is where that pass would meet it (default: its offset)."""
        self.sem_errs.append((err.offset if at is None else at, len(self.sem_errs), err))

    # token helpers
    @property
    def t(self):
        return self.toks[self.i]

    def peek(self, k=1):
        j = min(self.i + k, len(self.toks) - 1)
        return self.toks[j]

    def at(self, val, kind=None):
        t = self.t
        return t.val == val and t.kind in ((kind,) if kind else ("op", "kw"))

    def accept(self, val):
        if self.at(val):
            self.i += 1
            return True
        return False

    def error(self, tok=None, msg=None):
        tok = tok or self.t
        if msg is None:
            if tok.kind == "eof":
                msg = "unexpected end of script."
            else:
                msg = "invalid sequence of tokens near ['%s']." % self.src[tok.pos:tok.end]
        return CompileError(msg, tok.pos)

    def expect(self, val):
        if not self.accept(val):
            raise self.error()

    # scopes
    def declare(self, name, tok):
        for s in self.scopes:
            if name in s:
                self.sem(CompileError("variable [%s] is already defined" % name, tok.pos))
        self.scopes[-1].add(name)

    def defined(self, name):
        return any(name in s for s in self.scopes)

    # grammar
    def parse(self):
        stmts = []
        while self.t.kind != "eof":
            stmts.append(self.statement(top=True))
        tree = Block(stmts, 0)
        tree.end = len(self.src)
        self.cf_block(tree, False, False)
        if self.sem_errs:
            raise min(self.sem_errs, key=lambda e: (e[0], e[1]))[2]
        return tree

    # control flow, as Painless' semantic pass checks it (void update context)
    NO_FLAGS = {"method": False, "loop": False, "all": False, "cont": False, "brk": False}

    def cf_body(self, node, in_loop, last_loop):
        if node is None or (isinstance(node, Block) and not node.stmts):
            return None
        if not isinstance(node, Block):
            blk = Block([node], node.pos)
            blk.end = getattr(node, "end", node.pos)
            node = blk
        return self.cf_block(node, in_loop, last_loop)

    def cf_block(self, node, in_loop, last_loop):
        flags = dict(self.NO_FLAGS)
        stmts = node.stmts
        for k, st in enumerate(stmts):
            is_last = k == len(stmts) - 1
            f = self.cf_stmt(st, in_loop, last_loop and is_last)
            if is_last:
                flags["method"], flags["loop"], flags["all"] = f["method"], f["loop"], f["all"]
            elif f["all"]:
                self.sem(CompileError("invalid block: unreachable statement", node.pos), at=stmts[k + 1].pos)
            flags["cont"] |= f["cont"]
            flags["brk"] |= f["brk"]
        return flags

    def cf_loop(self, kind, node, cond, body, continuous_if_none=False):
        flags = dict(self.NO_FLAGS)
        continuous = cond is None and continuous_if_none
        empty = body is None or (isinstance(body, Block) and not body.stmts)
        if isinstance(cond, Lit) and isinstance(cond.v, bool):
            if not cond.v:
                self.sem(CompileError("extraneous %s loop" % kind, node.pos), at=cond.pos)
            continuous = cond.v
            if cond.v and empty and kind in ("while", "for"):
                self.sem(CompileError("no paths escape from %s loop" % kind, node.pos), at=cond.pos)
        bf = self.cf_body(body, True, True)
        if bf is not None:
            if bf["loop"] and not bf["cont"]:
                self.sem(CompileError("extraneous %s loop" % kind, node.pos), at=getattr(body, "end", node.pos))
            if continuous and not bf["brk"]:
                flags["method"] = flags["all"] = True
        return flags

    def cf_stmt(self, st, in_loop, last_loop):
        flags = dict(self.NO_FLAGS)
        if isinstance(st, Block):
            return self.cf_block(st, in_loop, last_loop)
        if isinstance(st, (ReturnStmt, Throw)):
            flags["method"] = flags["loop"] = flags["all"] = True
        elif isinstance(st, BreakStmt):
            if not in_loop:
                self.sem(CompileError("invalid break statement: not inside loop", st.pos))
            flags["all"] = flags["loop"] = flags["brk"] = True
        elif isinstance(st, ContinueStmt):
            if not in_loop:
                self.sem(CompileError("invalid continue statement: not inside loop", st.pos))
            elif last_loop:
                self.sem(CompileError("extraneous continue statement", st.pos))
            flags["all"] = flags["cont"] = True
        elif isinstance(st, If):
            empty_then = st.then is None or (isinstance(st.then, Block) and not st.then.stmts)
            if (isinstance(st.cond, Lit) and isinstance(st.cond.v, bool)) or empty_then:
                self.sem(CompileError("extraneous if block", st.pos), at=st.cond.pos)
            tf = self.cf_body(st.then, in_loop, last_loop) or dict(self.NO_FLAGS)
            if st.other is None:
                flags["cont"], flags["brk"] = tf["cont"], tf["brk"]
            else:
                ef = self.cf_body(st.other, in_loop, last_loop)
                if ef is None:
                    self.sem(CompileError("extraneous else block.", st.pos), at=getattr(st.then, "end", st.pos))
                    ef = dict(self.NO_FLAGS)
                for k in ("method", "loop", "all"):
                    flags[k] = tf[k] and ef[k]
                for k in ("cont", "brk"):
                    flags[k] = tf[k] or ef[k]
        elif isinstance(st, While):
            if st.do:
                flags = self.cf_loop("do-while", st, None, st.body)
                if isinstance(st.cond, Lit) and isinstance(st.cond.v, bool):
                    if not st.cond.v:
                        self.sem(CompileError("extraneous do-while loop", st.pos), at=st.cond.pos)
                    else:
                        bf = self.cf_body(st.body, True, True) or dict(self.NO_FLAGS)
                        if not bf["brk"]:
                            flags["method"] = flags["all"] = True
            else:
                flags = self.cf_loop("while", st, st.cond, st.body)
        elif isinstance(st, For):
            flags = self.cf_loop("for", st, st.cond, st.body, continuous_if_none=True)
        elif isinstance(st, ForEach):
            if st.body is None or (isinstance(st.body, Block) and not st.body.stmts):
                self.sem(CompileError("extraneous foreach loop", st.pos), at=st.coll.pos)
            bf = self.cf_body(st.body, True, True)
            if bf is not None and bf["loop"] and not bf["cont"]:
                self.sem(CompileError("extraneous foreach loop", st.pos), at=getattr(st.body, "end", st.pos))
        return flags

    def block(self):
        start = self.t
        self.expect("{")
        self.scopes.append(set())
        stmts = []
        while not self.at("}"):
            if self.t.kind == "eof":
                raise self.error()
            stmts.append(self.statement(in_block=True))
        self.expect("}")
        self.scopes.pop()
        b = Block(stmts, start.pos)
        b.end = self.toks[self.i - 1].end
        return b

    def trailer(self):
        """A loop/if body: a block or a single statement."""
        if self.at("{"):
            return self.block()
        self.scopes.append(set())
        s = self.statement(in_block=False, single=True)
        self.scopes.pop()
        return s

    def end_statement(self, in_block=False, top=False):
        if self.accept(";"):
            return
        if self.t.kind == "eof" and top:
            return
        if in_block and self.at("}"):
            return
        raise self.error()

    def statement(self, top=False, in_block=False, single=False):
        node = self._statement(top, in_block, single)
        node.end = self.toks[self.i - 1].end
        return node

    def _statement(self, top=False, in_block=False, single=False):
        tok = self.t
        self.stmt_starts.append(tok.pos)
        if tok.kind == "kw":
            v = tok.val
            if v == "if":
                self.i += 1
                self.expect("(")
                cond = self.expression()
                self.expect(")")
                then = self.trailer()
                other = None
                if self.accept("else"):
                    other = self.trailer()
                return If(cond, then, other, tok.pos)
            if v == "while":
                self.i += 1
                self.expect("(")
                cond = self.expression()
                self.expect(")")
                self.loop_depth += 1
                if self.accept(";"):
                    body = None
                else:
                    body = self.trailer()
                self.loop_depth -= 1
                return While(cond, body, tok.pos)
            if v == "do":
                self.i += 1
                self.loop_depth += 1
                body = self.block()
                self.loop_depth -= 1
                self.expect("while")
                self.expect("(")
                cond = self.expression()
                self.expect(")")
                self.end_statement(in_block, top)
                return While(cond, body, tok.pos, do=True)
            if v == "for":
                return self.for_statement(tok)
            if v in ("break", "continue"):
                self.i += 1
                self.end_statement(in_block, top)
                return BreakStmt(tok.pos) if v == "break" else ContinueStmt(tok.pos)
            if v == "return":
                self.i += 1
                expr = None
                if not (self.at(";") or self.t.kind == "eof" or self.at("}")):
                    expr = self.expression()
                    if self.lambda_depth == 0:
                        # update scripts are void: a returned value cannot be cast to void
                        self.sem(CompileError("Cannot cast from [%s] to [void]." % static_type(expr), expr.pos,
                                              "class_cast_exception"), at=getattr(expr, "pos", tok.pos))
                self.end_statement(in_block, top)
                return ReturnStmt(expr, tok.pos)
            if v == "throw":
                self.i += 1
                expr = self.expression()
                self.end_statement(in_block, top)
                return Throw(expr, tok.pos)
            if v == "try":
                raise CompileError("try/catch is not supported by this emulator", tok.pos)
        if tok.kind == "op" and tok.val in ("{", ";"):
            raise self.error()  # neither bare blocks nor empty statements are Painless statements
        if self.is_declaration():
            d = self.declaration()
            self.end_statement(in_block, top)
            return d
        expr = self.expression()
        if not expr.has_effect and self.lambda_depth == 0:
            # the update context is void: even the last expression is not returned
            self.sem(CompileError("not a statement: result not used from %s" % describe(expr), expr.pos),
                     at=tok.pos)
        self.end_statement(in_block, top)
        return ExprStmt(expr, tok.pos)

    def is_declaration(self):
        t = self.t
        if t.kind != "id" or t.val not in ALL_TYPES:
            return False
        j = self.i + 1
        # generic arguments are not supported, arrays neither
        nxt = self.toks[j]
        return nxt.kind == "id"

    def declaration(self):
        ttok = self.t
        tname = ttok.val
        self.i += 1
        decls = []
        while True:
            ntok = self.t
            if ntok.kind != "id":
                raise self.error()
            self.i += 1
            init = None
            if self.accept("="):
                init = self.expression()
            self.declare(ntok.val, ntok)
            decls.append((ntok.val, init, ntok.pos))
            if not self.accept(","):
                break
        return Decl(tname, decls, ttok.pos)

    def for_statement(self, tok):
        self.i += 1
        self.expect("(")
        self.scopes.append(set())
        # for-each
        if self.t.kind == "id" and self.t.val in ALL_TYPES and self.peek().kind == "id" and \
                (self.peek(2).val == ":" or self.peek(2).val == "in"):
            tname = self.t.val
            ntok = self.peek()
            self.i += 3
            coll = self.expression()
            self.expect(")")
            self.declare(ntok.val, ntok)
            self.loop_depth += 1
            body = self.trailer()
            self.loop_depth -= 1
            self.scopes.pop()
            return ForEach(tname, ntok.val, coll, body, tok.pos)
        if self.t.kind == "id" and self.peek().val == "in" and self.peek().kind == "kw":
            ntok = self.t
            self.i += 2
            coll = self.expression()
            self.expect(")")
            self.declare(ntok.val, ntok)
            self.loop_depth += 1
            body = self.trailer()
            self.loop_depth -= 1
            self.scopes.pop()
            return ForEach("def", ntok.val, coll, body, tok.pos)
        init = None
        if not self.at(";"):
            if self.is_declaration():
                init = self.declaration()
            else:
                init = ExprStmt(self.expression(), self.t.pos)
        self.expect(";")
        cond = None if self.at(";") else self.expression()
        self.expect(";")
        update = []
        if not self.at(")"):
            while True:
                update.append(self.expression())
                if not self.accept(","):
                    break
        self.expect(")")
        self.loop_depth += 1
        if self.accept(";"):
            body = None
        else:
            body = self.trailer()
        self.loop_depth -= 1
        self.scopes.pop()
        return For(init, cond, update, body, tok.pos)

    # expressions
    def expression(self):
        return self.assignment()

    def assignment(self):
        left = self.conditional()
        t = self.t
        if t.kind == "op" and t.val in ASSIGN_OPS:
            if not isinstance(left, (Var, Field, Index)):
                self.sem(CompileError("invalid assignment: cannot assign a value to %s" % self._describe(left),
                                      t.pos))
                left = Var("_invalid_", t.pos)
            self._check_writable(left)
            self.i += 1
            right = self.assignment()
            return Assign(left, t.val, right, t.pos)
        return left

    def _describe(self, node):
        return "this expression"

    def _check_writable(self, node):
        if isinstance(node, Var) and node.name in ("params", "ctx"):
            self.sem(CompileError("invalid assignment: cannot assign a value to read-only variable [%s]"
                                  % node.name, node.pos))

    def conditional(self):
        c = self.binary(0)
        if self.at("?"):
            q = self.t
            self.i += 1
            a = self.assignment()
            self.expect(":")
            b = self.assignment()
            return Cond(c, a, b, q.pos)
        if self.at("?:"):
            q = self.t
            self.i += 1
            b = self.assignment()
            return Elvis(c, b, q.pos)
        return c

    def binary(self, level):
        if level == len(BINARY_PREC):
            return self.unary()
        left = self.binary(level + 1)
        ops = BINARY_PREC[level]
        while self.t.val in ops and self.t.kind in ("op", "kw"):
            t = self.t
            self.i += 1
            if t.val == "instanceof":
                tt = self.t
                if tt.kind != "id":
                    raise self.error()
                if tt.val not in ALL_TYPES:
                    self.sem(CompileError("cannot resolve type [%s]" % tt.val, tt.pos))
                self.i += 1
                left = InstanceOf(left, tt.val, t.pos)
                continue
            right = self.binary(level + 1)
            left = Binary(t.val, left, right, t.pos)
        return left

    def unary(self):
        t = self.t
        if t.kind == "op" and t.val in ("++", "--"):
            self.i += 1
            target = self.unary()
            if not isinstance(target, (Var, Field, Index)):
                self.sem(CompileError("invalid assignment: cannot assign a value to this expression", t.pos))
                target = Var("_invalid_", t.pos)
            self._check_writable(target)
            return IncDec(target, t.val, True, t.pos)
        if t.kind == "op" and t.val in ("!", "-", "+", "~"):
            self.i += 1
            operand = self.unary()
            if t.val == "-" and isinstance(operand, Lit) and is_num(operand.v) and not isinstance(operand.v, bool):
                pass
            return Unary(t.val, operand, t.pos)
        # cast: (type) expr
        if t.kind == "op" and t.val == "(" and self.peek().kind == "id" and self.peek().val in ALL_TYPES \
                and self.peek(2).val == ")" and self.peek(2).kind == "op":
            tname = self.peek().val
            self.i += 3
            return CastExpr(tname, self.unary(), t.pos)
        return self.postfix()

    def postfix(self):
        e = self.primary()
        while True:
            t = self.t
            if t.kind != "op":
                break
            if t.val in (".", "?."):
                self.i += 1
                nt = self.t
                if nt.kind not in ("id", "num") and not (nt.kind == "kw"):
                    raise self.error()
                if nt.kind == "num":
                    name = self.src[nt.pos:nt.end]
                else:
                    name = nt.val
                self.i += 1
                if self.at("("):
                    args = self.arguments()
                    e = Call(e, name, args, nt.pos, t.val == "?.")
                else:
                    e = Field(e, name, nt.pos, t.val == "?.")
                continue
            if t.val == "[":
                self.i += 1
                k = self.expression()
                self.expect("]")
                e = Index(e, k, t.pos)
                continue
            if t.val == "::":
                raise CompileError("method references are not supported by this emulator", t.pos)
            if t.val in ("++", "--"):
                if not isinstance(e, (Var, Field, Index)):
                    self.sem(CompileError("invalid assignment: cannot assign a value to this expression", t.pos))
                    e = Var("_invalid_", t.pos)
                self._check_writable(e)
                self.i += 1
                e = IncDec(e, t.val, False, t.pos)
                continue
            break
        return e

    def arguments(self):
        self.expect("(")
        args = []
        if not self.at(")"):
            while True:
                lam = self.lambda_params()
                if lam is not None:
                    args.append(self.lambda_body(*lam))
                else:
                    args.append(self.expression())
                if not self.accept(","):
                    break
        self.expect(")")
        return args

    def lambda_params(self):
        """``x ->``, ``(x, y) ->``, ``(def x, int y) ->`` or ``() ->``; None if not a lambda."""
        t = self.t
        if t.kind == "id" and self.peek().kind == "op" and self.peek().val == "->":
            self.i += 2
            return [t.val], [t], t.pos
        if not (t.kind == "op" and t.val == "("):
            return None
        j = self.i + 1
        names, toks = [], []
        while True:
            tok = self.toks[j]
            if tok.kind == "op" and tok.val == ")" and not names:
                j += 1
                break
            if tok.kind != "id":
                return None
            nxt = self.toks[j + 1]
            if nxt.kind == "id" and tok.val in ALL_TYPES:
                tok = nxt
                j += 1
            names.append(tok.val)
            toks.append(tok)
            j += 1
            sep = self.toks[j]
            if sep.kind == "op" and sep.val == ",":
                j += 1
                continue
            if sep.kind == "op" and sep.val == ")":
                j += 1
                break
            return None
        arrow = self.toks[j]
        if not (arrow.kind == "op" and arrow.val == "->"):
            return None
        self.i = j + 1
        return names, toks, t.pos

    def lambda_body(self, names, toks, pos):
        self.scopes.append(set())
        for n, tok in zip(names, toks):
            self.declare(n, tok)
        self.lambda_depth += 1
        saved_loop = self.loop_depth
        self.loop_depth = 0
        if self.at("{"):
            body = self.block()
            block = True
        else:
            body = self.expression()
            block = False
        self.loop_depth = saved_loop
        self.lambda_depth -= 1
        self.scopes.pop()
        return Lambda(names, body, block, pos)

    def number(self, t):
        text, kind, is_hex = t.val
        if is_hex:
            v = text
            if kind == "l":
                if v > (1 << 64) - 1:
                    self.sem(CompileError("Invalid long constant [%s]." % self.src[t.pos:t.end], t.pos))
                    return JLong(0)
                return wrap_long(v)
            if v > 0xFFFFFFFF:
                self.sem(CompileError("Invalid int constant [%s]." % self.src[t.pos:t.end], t.pos))
                return 0
            return wrap_int(v)
        if kind in ("d", "f"):
            return float(text)
        if len(text) > 1 and text[0] == "0":  # Java/Painless octal literal
            try:
                v = int(text, 8)
            except ValueError:
                raise CompileError("invalid sequence of tokens near ['%s']." % text, t.pos)
        else:
            v = int(text, 10)
        if kind == "l":
            if v > LONG_MAX:
                self.sem(CompileError("Invalid long constant [%s]." % text, t.pos))
                return JLong(0)
            return JLong(v)
        if v > INT_MAX:
            self.sem(CompileError("Invalid int constant [%s]." % text, t.pos))
            return 0
        return v

    def primary(self):
        t = self.t
        if t.kind == "num":
            self.i += 1
            return Lit(self.number(t), t.pos)
        if t.kind == "str":
            self.i += 1
            return Lit(t.val, t.pos)
        if t.kind == "kw":
            if t.val in ("true", "false"):
                self.i += 1
                return Lit(t.val == "true", t.pos)
            if t.val == "null":
                self.i += 1
                return Lit(None, t.pos)
            if t.val == "new":
                self.i += 1
                ct = self.t
                if ct.kind != "id":
                    raise self.error()
                self.i += 1
                if self.at("["):
                    raise CompileError("arrays are not supported by this emulator", self.t.pos)
                if self.at("<"):
                    raise CompileError("invalid sequence of tokens near ['<'].", self.t.pos)
                args = self.arguments()
                if ct.val not in CONSTRUCTIBLE:
                    if ct.val in ALL_TYPES or ct.val in STATIC_CLASSES:
                        self.sem(CompileError("constructor [%s, <init>/%d] not found" % (ct.val, len(args)), ct.pos))
                    else:
                        self.sem(CompileError("cannot resolve type [%s]" % ct.val, ct.pos))
                    return Lit(None, t.pos)
                if ct.val in EXCEPTION_CLASSES and len(args) > 1:
                    self.sem(CompileError("constructor [java.lang.%s, <init>/%d] not found" % (ct.val, len(args)),
                                          ct.pos))
                if ct.val in ("HashMap", "LinkedHashMap", "TreeMap", "ArrayList", "LinkedList", "HashSet") \
                        and len(args) > 1:
                    self.sem(CompileError("constructor [java.util.%s, <init>/%d] not found" % (ct.val, len(args)),
                                          ct.pos))
                return New(ct.val, args, t.pos)
            raise self.error()
        if t.kind == "op":
            if t.val == "(":
                self.i += 1
                e = self.expression()
                self.expect(")")
                return e
            if t.val == "[":
                return self.collection_init()
            raise self.error()
        if t.kind == "id":
            name = t.val
            self.i += 1
            if self.defined(name):
                if self.at("("):
                    self.sem(CompileError("Unknown call [%s] with [%d] arguments." % (name, len(self.arguments())),
                                          t.pos))
                    return Lit(None, t.pos)
                return Var(name, t.pos)
            if name in STATIC_CLASSES:
                if not self.at("."):
                    self.sem(CompileError("cannot resolve symbol [%s]" % name, t.pos))
                    return Lit(None, t.pos)
                self.i += 1
                mt = self.t
                if mt.kind != "id":
                    raise self.error()
                self.i += 1
                if self.at("("):
                    args = self.arguments()
                    if (name, mt.val, len(args)) not in STATIC_METHODS:
                        self.sem(CompileError("unknown static method [%s] with [%d] arguments on type [%s]"
                                              % (mt.val, len(args), name), mt.pos))
                        return Lit(None, t.pos)
                    return StaticCall(name, mt.val, args, mt.pos)
                if (name, mt.val) not in StaticField.VALUES:
                    self.sem(CompileError("unknown static field [%s] on type [%s]" % (mt.val, name), mt.pos))
                    return Lit(None, t.pos)
                return StaticField(name, mt.val, mt.pos)
            if self.at("("):
                self.sem(CompileError("Unknown call [%s] with [%d] arguments." % (name, len(self.arguments())),
                                      t.pos))
                return Lit(None, t.pos)
            self.sem(CompileError("cannot resolve symbol [%s]" % name, t.pos))
            return Var(name, t.pos)
        raise self.error()

    def collection_init(self):
        t = self.t
        self.i += 1
        if self.accept(":"):
            self.expect("]")
            return MapInit([], t.pos)
        if self.accept("]"):
            return ListInit([], t.pos)
        first = self.expression()
        if self.accept(":"):
            pairs = [(first, self.expression())]
            while self.accept(","):
                k = self.expression()
                self.expect(":")
                pairs.append((k, self.expression()))
            self.expect("]")
            return MapInit(pairs, t.pos)
        items = [first]
        while self.accept(","):
            items.append(self.expression())
        self.expect("]")
        return ListInit(items, t.pos)


# --------------------------------------------------------------------------
# compiled scripts


class Env(object):
    __slots__ = ("vars", "types", "last", "loops")

    def __init__(self, vars_):
        self.vars = vars_
        self.types = {}
        self.last = None
        self.loops = 0


class Script(object):
    def __init__(self, source, tree, stmt_starts):
        self.source = source
        self.tree = tree
        self.stmt_starts = sorted(set(stmt_starts))

    def run(self, variables):
        env = Env(dict(variables))
        try:
            self.tree.ev(env)
        except Return as r:
            return r.value
        except RecursionError:
            raise ScriptRuntimeError("stack_overflow_error", None, 0)
        return env.last

    def snippet(self, offset):
        """(stack lines, position) in the style of PainlessScriptEngine."""
        return script_stack(self.source, offset, self.stmt_starts)


def script_stack(source, offset, starts):
    if offset is None:
        return ["<<< unknown portion of script >>>"], None
    start = 0
    for s in starts:
        if s <= offset:
            start = s
        else:
            break
    end = len(source)
    for s in starts:
        if s > start:
            end = s
            break
    snippet = source[start:end]
    return [snippet, " " * (offset - start) + "^---- HERE"], {"offset": offset, "start": start, "end": end}


_cache = {}
_cache_lock = threading.Lock()
UPDATE_GLOBALS = ("params", "ctx")


def compile_script(source, globals_=UPDATE_GLOBALS):
    key = (source, tuple(globals_))
    s = _cache.get(key)
    if s is not None:
        return s
    p = Parser(source, globals_)
    try:
        tree = p.parse()
    except RecursionError:
        raise CompileError("too many nested expressions", 0)
    s = Script(source, tree, p.stmt_starts)
    with _cache_lock:
        if len(_cache) > 1000:
            _cache.clear()
        _cache[key] = s
    return s


def compile_error_stack(source, err):
    """Stack/position for a compile error, as PainlessScriptEngine builds it:
    25 characters either side of the offending offset, with ``... ``
    marking cut ends."""
    offset = err.offset
    if offset is None:
        return ["<<< unknown portion of script >>>"], None
    start = max(0, offset - 25)
    end = min(len(source), offset + 25)
    snippet = source[start:end]
    pad = offset - start
    if start > 0:
        snippet = "... " + snippet
        pad += 4
    if end < len(source):
        snippet = snippet + " ..."
    return [snippet, " " * pad + "^---- HERE"], {"offset": offset, "start": start, "end": end}
