"""The Painless subset of the es lock store's update scripts.

A real tokenizer, parser and tree-walking evaluator, but only of what the
store's six scripts (src/es/es_scripts.h), the guide's lock scripts and the
differential test's probes are written in:

* statements: declarations (``def``, ``boolean``, ``int``, ``long``,
  ``double``, ``String``, ``Map``, ``List``, ``HashMap``, ``ArrayList``,
  ``Object``), ``if``/``else``, ``for (def x : coll)``, ``throw``,
  ``return;``, expression statements (the last one of a block may omit its
  ``;``);
* expressions: ``= += -= *= /=``, prefix/postfix ``++ --``, ``?:``,
  ``|| && == != < <= > >= + - * / %``, unary ``! -``, field access on maps
  (``s.holders``), ``a[k]``, method calls, ``new``, list literals, literals;
* Java behaviour where it shows in answers: integer division truncates and
  ``/ by zero`` throws, double division gives NaN/Infinity, ``+`` with a
  String concatenates Java's ``toString``, ``==`` is ``equals`` with numeric
  promotion, null receivers throw NullPointerException, thrown exceptions
  carry their message;
* maps (``containsKey get put remove keySet values size isEmpty``), lists
  (``add contains get size isEmpty remove``), strings (``startsWith
  endsWith contains compareTo equals length isEmpty``).

Anything else is a compile error (``invalid sequence of tokens near [...]``,
``cannot resolve symbol [x]``) or, for methods, a runtime ``dynamic method
[...] not found``: refused, never guessed.  Runtime errors carry the offset
of the failing node; script_stack cuts the statement around it, as
PainlessScriptEngine does.
"""

import decimal
import math
import re
import threading

EXCEPTIONS = {
    "IllegalStateException": "illegal_state_exception",
    "IllegalArgumentException": "illegal_argument_exception",
    "UnsupportedOperationException": "unsupported_operation_exception",
    "RuntimeException": "runtime_exception",
}
TYPES = {"def", "var", "boolean", "int", "long", "double", "String", "Map", "List", "HashMap",
         "ArrayList", "Object"}
KEYWORDS = {"if", "else", "for", "new", "throw", "return", "true", "false", "null", "while", "do",
            "try", "catch", "break", "continue", "in", "instanceof"}


class CompileError(Exception):
    def __init__(self, message, offset):
        Exception.__init__(self, message)
        self.message, self.offset = message, offset
        self.exc_type = "illegal_argument_exception"


class ScriptRuntimeError(Exception):
    """A Java exception escaping the script."""

    def __init__(self, exc_type, message, offset=None):
        Exception.__init__(self, message)
        self.exc_type, self.message, self.offset = exc_type, message, offset


class NotJson(Exception):
    """A value XContent cannot write was left in _source."""


class JavaException(object):
    def __init__(self, cls, message):
        self.cls, self.message = cls, message


# ---- values --------------------------------------------------------------------------------


def java_class(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "java.lang.Boolean"
    if isinstance(v, int):
        return "java.lang.Integer" if -(1 << 31) <= v < (1 << 31) else "java.lang.Long"
    if isinstance(v, float):
        return "java.lang.Double"
    if isinstance(v, str):
        return "java.lang.String"
    if isinstance(v, dict):
        return "java.util.HashMap"
    if isinstance(v, list):
        return "java.util.ArrayList"
    return "java.lang." + v.cls


def fmt_double(v):
    """Java's Double.toString."""
    if v != v:
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0 or 1e-3 <= abs(v) < 1e7:
        return repr(v)
    sign, digits, exp = decimal.Decimal(repr(v)).as_tuple()
    e = len(digits) + exp - 1
    digits = "".join(map(str, digits)).rstrip("0") or "0"
    return "%s%s.%sE%d" % ("-" if sign else "", digits[0], digits[1:] or "0", e)


def to_str(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, float):
        return fmt_double(v)
    if isinstance(v, dict):
        return "{" + ", ".join("%s=%s" % (to_str(k), to_str(x)) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(to_str(x) for x in v) + "]"
    if isinstance(v, JavaException):
        return "java.lang.%s: %s" % (v.cls, v.message) if v.message is not None else "java.lang." + v.cls
    return str(v)


def to_json(v, seen=None):
    """A script value back as JSON, as XContent writes it: a map or list
    that contains itself and exception objects are refused (NotJson)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (dict, list)):
        seen = seen or set()
        if id(v) in seen:
            raise NotJson("Iterable object is self-referencing itself")
        seen.add(id(v))
        try:
            if isinstance(v, dict):
                return {to_str(k): to_json(x, seen) for k, x in v.items()}
            return [to_json(x, seen) for x in v]
        finally:
            seen.discard(id(v))
    raise NotJson("cannot write xcontent for unknown value of type class " + java_class(v))


def rt(exc_type, message, pos=None):
    return ScriptRuntimeError(exc_type, message, pos)


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def jequals(a, b):
    """Painless' == on def values: equals(), numbers compared by value."""
    if is_num(a) or is_num(b):
        return is_num(a) and is_num(b) and a == b
    return type(a) is type(b) and a == b


def arith(op, a, b, pos):
    if op == "+" and (isinstance(a, str) or isinstance(b, str)):
        return to_str(a) + to_str(b)
    if not (is_num(a) and is_num(b)):
        if a is None or b is None:
            raise rt("null_pointer_exception", None, pos)
        raise rt("class_cast_exception", "Cannot apply [%s] operation to types [%s] and [%s]."
                 % (op, java_class(a), java_class(b)), pos)
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
        if op in "/%" and b == 0:
            if op == "%" or a == 0 or a != a:
                return float("nan")
            return math.copysign(float("inf"), a) * math.copysign(1.0, b)
        return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if op == "/" else 0,
                "%": math.fmod(a, b) if op == "%" else 0}[op]
    if op in "/%" and b == 0:
        raise rt("arithmetic_exception", "/ by zero", pos)
    if op == "/":
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b > 0) else -q
    if op == "%":
        return int(math.fmod(a, b))
    return a + b if op == "+" else a - b if op == "-" else a * b


def compare(op, a, b, pos):
    if not (is_num(a) and is_num(b)):
        if a is None or b is None:
            raise rt("null_pointer_exception", None, pos)
        raise rt("class_cast_exception", "Cannot apply [%s] operation to types [%s] and [%s]."
                 % (op, java_class(a), java_class(b)), pos)
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def truth(v, pos):
    if not isinstance(v, bool):
        raise rt("class_cast_exception", "Cannot cast %s to java.lang.Boolean" % java_class(v), pos)
    return v


def call_method(o, name, args, pos):
    n = len(args)
    if o is None:
        raise rt("null_pointer_exception",
                 "cannot access method/field [%s] from a null def reference" % name, pos)
    if isinstance(o, dict):
        if name == "containsKey" and n == 1:
            return args[0] in o
        if name == "get" and n == 1:
            return o.get(args[0])
        if name == "put" and n == 2:
            old = o.get(args[0])
            o[args[0]] = args[1]
            return old
        if name == "remove" and n == 1:
            return o.pop(args[0], None)
        if name in ("keySet", "values") and n == 0:
            return list(o.keys() if name == "keySet" else o.values())
        if name == "size" and n == 0:
            return len(o)
        if name == "isEmpty" and n == 0:
            return not o
    elif isinstance(o, list):
        if name == "add" and n == 1:
            o.append(args[0])
            return True
        if name == "contains" and n == 1:
            return any(jequals(x, args[0]) for x in o)
        if name == "get" and n == 1 and is_num(args[0]):
            i = int(args[0])
            if not 0 <= i < len(o):
                raise rt("index_out_of_bounds_exception",
                         "Index %d out of bounds for length %d" % (i, len(o)), pos)
            return o[i]
        if name == "size" and n == 0:
            return len(o)
        if name == "isEmpty" and n == 0:
            return not o
        if name == "remove" and n == 1:
            for i, x in enumerate(o):
                if jequals(x, args[0]):
                    del o[i]
                    return True
            return False
    elif isinstance(o, str):
        if name in ("startsWith", "endsWith", "contains", "compareTo", "equals") and n == 1:
            a = args[0]
            if name == "equals":
                return isinstance(a, str) and a == o
            if not isinstance(a, str):
                if a is None:
                    raise rt("null_pointer_exception", None, pos)
                raise rt("class_cast_exception", "Cannot cast %s to java.lang.String"
                         % java_class(a), pos)
            if name == "compareTo":
                ua, ub = o.encode("utf-16-be"), a.encode("utf-16-be")
                for i in range(0, min(len(ua), len(ub)), 2):
                    ca, cb = ua[i] << 8 | ua[i + 1], ub[i] << 8 | ub[i + 1]
                    if ca != cb:
                        return ca - cb
                return (len(ua) - len(ub)) // 2
            return {"startsWith": o.startswith, "endsWith": o.endswith,
                    "contains": o.__contains__}[name](a)
        if name == "length" and n == 0:
            return len(o.encode("utf-16-le")) // 2
        if name == "isEmpty" and n == 0:
            return not o
    elif isinstance(o, JavaException) and name == "getMessage" and n == 0:
        return o.message
    raise rt("illegal_argument_exception",
             "dynamic method [%s, %s/%d] not found" % (java_class(o), name, n), pos)


# ---- tokens --------------------------------------------------------------------------------

TOKEN_RE = re.compile(r"""
  (?P<ws>\s+|//[^\n]*|/\*.*?\*/)
| (?P<num>\d+\.\d+(?:[eE][-+]?\d+)?[dD]?|\d+[lLdD]?)
| (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
| (?P<id>[A-Za-z_][A-Za-z_0-9]*)
| (?P<op>\+\+|--|\+=|-=|\*=|/=|==|!=|<=|>=|&&|\|\||[-+*/%!<>=?:.,;(){}\[\]])
""", re.X | re.S)


def tokenize(src):
    out, i = [], 0
    while i < len(src):
        m = TOKEN_RE.match(src, i)
        if m is None:
            raise CompileError("unexpected character [%s]." % src[i], i)
        kind = m.lastgroup
        if kind != "ws":
            text = m.group()
            if kind == "str":
                body = text[1:-1]
                if re.search(r"\\[^\\'\"]", body):
                    raise CompileError("unexpected character [%s]." % text, i)
                text = re.sub(r"\\(.)", r"\1", body)
            elif kind == "id" and text in KEYWORDS:
                kind = "kw"
            out.append((kind, text, i))
        i = m.end()
    out.append(("eof", "<EOF>", len(src)))
    return out


# ---- parser: nodes are tuples (kind, pos, ...) -----------------------------------------------


class Parser(object):
    def __init__(self, src):
        self.toks = tokenize(src)
        self.i = 0
        self.scopes = [{"ctx", "params"}]
        self.stmt_starts = []
        self.symbol_error = None  # reported after the syntax (Painless parses first)

    @property
    def t(self):
        return self.toks[self.i]

    def error(self):
        kind, text, pos = self.t
        if kind == "eof":
            return CompileError("unexpected end of script.", pos)
        return CompileError("invalid sequence of tokens near ['%s']." % text, pos)

    def at(self, *texts):
        return self.t[0] in ("op", "kw", "id") and self.t[1] in texts

    def accept(self, text):
        if self.at(text):
            self.i += 1
            return True
        return False

    def expect(self, text):
        if not self.accept(text):
            raise self.error()

    def declare(self, name, pos):
        if any(name in s for s in self.scopes):
            self.symbol(CompileError("variable [%s] is already defined" % name, pos))
        self.scopes[-1].add(name)

    def symbol(self, err):
        if self.symbol_error is None:
            self.symbol_error = err

    def script(self):
        stmts = []
        while self.t[0] != "eof":
            stmts.append(self.statement(last_ok=True))
        return ("block", 0, stmts)

    def body(self):
        if self.at("{"):
            pos = self.t[2]
            self.i += 1
            self.scopes.append(set())
            stmts = []
            while not self.at("}"):
                if self.t[0] == "eof":
                    raise self.error()
                stmts.append(self.statement(last_ok=True))
            self.i += 1
            self.scopes.pop()
            return ("block", pos, stmts)
        self.scopes.append(set())
        s = self.statement()
        self.scopes.pop()
        return s

    def end_statement(self, last_ok):
        if self.accept(";"):
            return
        if last_ok and (self.at("}") or self.t[0] == "eof"):
            return
        raise self.error()

    def statement(self, last_ok=False):
        kind, text, pos = self.t
        self.stmt_starts.append(pos)
        if kind == "kw" and text == "if":
            self.i += 1
            self.expect("(")
            cond = self.expression()
            self.expect(")")
            then = self.body()
            other = self.body() if self.accept("else") else None
            return ("if", pos, cond, then, other)
        if kind == "kw" and text == "for":
            self.i += 1
            self.expect("(")
            if not (self.t[0] == "id" and self.t[1] in TYPES):
                raise self.error()
            self.i += 1
            if self.t[0] != "id":
                raise self.error()
            name, npos = self.t[1], self.t[2]
            self.i += 1
            self.expect(":")
            coll = self.expression()
            self.expect(")")
            self.scopes.append(set())
            self.declare(name, npos)
            body = self.body()
            self.scopes.pop()
            return ("foreach", pos, name, coll, body)
        if kind == "kw" and text == "throw":
            self.i += 1
            e = self.expression()
            self.end_statement(last_ok)
            return ("throw", pos, e)
        if kind == "kw" and text == "return":
            self.i += 1
            self.end_statement(last_ok)
            return ("return", pos)
        if kind == "id" and text in TYPES and self.toks[self.i + 1][0] == "id":
            self.i += 1
            decls = []
            while True:
                if self.t[0] != "id":
                    raise self.error()
                name, npos = self.t[1], self.t[2]
                self.i += 1
                init = self.expression() if self.accept("=") else None
                self.declare(name, npos)
                decls.append((name, init))
                if not self.accept(","):
                    break
            self.end_statement(last_ok)
            return ("decl", pos, decls)
        if kind == "kw" and text not in ("new", "true", "false", "null") or \
                kind == "op" and text not in ("(", "[", "!", "-", "++", "--"):
            raise self.error()
        e = self.expression()
        self.end_statement(last_ok)
        return ("expr", pos, e)

    # expressions, lowest precedence first
    def expression(self):
        left = self.ternary()
        if self.at("=", "+=", "-=", "*=", "/="):
            op, pos = self.t[1], self.t[2]
            if left[0] not in ("var", "field", "index"):
                raise self.error()
            self.i += 1
            return ("assign", pos, left, op[:-1], self.expression())
        return left

    def ternary(self):
        c = self.binary(0)
        if self.at("?"):
            pos = self.t[2]
            self.i += 1
            a = self.expression()
            self.expect(":")
            return ("cond", pos, c, a, self.expression())
        return c

    LEVELS = [("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%")]

    def binary(self, level):
        if level == len(self.LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.t[0] == "op" and self.t[1] in self.LEVELS[level]:
            op, pos = self.t[1], self.t[2]
            self.i += 1
            left = ("bin", pos, op, left, self.binary(level + 1))
        return left

    def unary(self):
        kind, text, pos = self.t
        if kind == "op" and text in ("!", "-"):
            self.i += 1
            return ("unary", pos, text, self.unary())
        if kind == "op" and text in ("++", "--"):
            self.i += 1
            target = self.unary()
            if target[0] not in ("var", "field", "index"):
                raise self.error()
            return ("incdec", pos, target, 1 if text == "++" else -1, True)
        return self.postfix()

    def postfix(self):
        e = self.primary()
        while True:
            kind, text, pos = self.t
            if self.accept("."):
                if self.t[0] not in ("id", "kw"):
                    raise self.error()
                name = self.t[1]
                self.i += 1
                if self.at("("):
                    e = ("call", pos, e, name, self.arguments())
                else:
                    e = ("field", pos, e, name)
            elif self.accept("["):
                k = self.expression()
                self.expect("]")
                e = ("index", pos, e, k)
            elif kind == "op" and text in ("++", "--") and e[0] in ("var", "field", "index"):
                self.i += 1
                e = ("incdec", pos, e, 1 if text == "++" else -1, False)
            else:
                return e

    def arguments(self):
        self.expect("(")
        args = []
        if not self.accept(")"):
            args.append(self.expression())
            while self.accept(","):
                args.append(self.expression())
            self.expect(")")
        return args

    def primary(self):
        kind, text, pos = self.t
        self.i += 1
        if kind == "num":
            if text[-1] in "dD" or "." in text:
                return ("lit", pos, float(text.rstrip("dD")))
            v = int(text.rstrip("lL"))
            if text[-1] not in "lL" and v >= 1 << 31:
                raise CompileError("Invalid int constant [%s]." % text, pos)
            return ("lit", pos, v)
        if kind == "str":
            return ("lit", pos, text)
        if kind == "kw" and text in ("true", "false", "null"):
            return ("lit", pos, {"true": True, "false": False, "null": None}[text])
        if kind == "id":
            if not any(text in s for s in self.scopes):
                self.symbol(CompileError("cannot resolve symbol [%s]" % text, pos))
            return ("var", pos, text)
        if kind == "op" and text == "(":
            e = self.expression()
            self.expect(")")
            return e
        if kind == "op" and text == "[":
            items = []
            if not self.accept("]"):
                items.append(self.expression())
                while self.accept(","):
                    items.append(self.expression())
                self.expect("]")
            return ("list", pos, items)
        if kind == "kw" and text == "new":
            if self.t[0] != "id":
                raise self.error()
            cls, cpos = self.t[1], self.t[2]
            self.i += 1
            if cls not in ("HashMap", "ArrayList") and cls not in EXCEPTIONS:
                self.symbol(CompileError("cannot resolve symbol [%s]" % cls, cpos))
            return ("new", pos, cls, self.arguments())
        self.i -= 1
        raise self.error()


# ---- evaluation ----------------------------------------------------------------------------


class Return(Exception):
    pass


class Script(object):
    def __init__(self, source):
        p = Parser(source)
        self.source = source
        self.tree = p.script()
        if p.symbol_error is not None:
            raise p.symbol_error
        self.stmt_starts = sorted(set(p.stmt_starts))

    def run(self, ctx, params):
        """Runs the script on CTX (a dict: op, _source, ...) with PARAMS."""
        env = [{"ctx": ctx, "params": params}]
        try:
            self.stmt(self.tree, env)
        except Return:
            pass
        except RecursionError:
            raise rt("stack_overflow_error", None, 0)

    def stack(self, offset):
        """(script_stack, position) of a runtime error at OFFSET: the
        statement around it."""
        if offset is None:
            return ["<<< unknown portion of script >>>"], None
        start = max([s for s in self.stmt_starts if s <= offset] or [0])
        end = min([s for s in self.stmt_starts if s > start] or [len(self.source)])
        return ([self.source[start:end], " " * (offset - start) + "^---- HERE"],
                {"offset": offset, "start": start, "end": end})

    # statements
    def stmt(self, n, env):
        kind = n[0]
        if kind == "block":
            env.append({})
            try:
                for s in n[2]:
                    self.stmt(s, env)
            finally:
                env.pop()
        elif kind == "expr":
            self.ev(n[2], env)
        elif kind == "decl":
            for name, init in n[2]:
                env[-1][name] = None if init is None else self.ev(init, env)
        elif kind == "if":
            if truth(self.ev(n[2], env), n[2][1]):
                self.stmt(n[3], env)
            elif n[4] is not None:
                self.stmt(n[4], env)
        elif kind == "foreach":
            coll = self.ev(n[3], env)
            if coll is None:
                raise rt("null_pointer_exception", None, n[3][1])
            if isinstance(coll, dict) or not isinstance(coll, list):
                raise rt("class_cast_exception", "Cannot cast %s to java.lang.Iterable"
                         % java_class(coll), n[3][1])
            for x in list(coll):
                env.append({n[2]: x})
                try:
                    self.stmt(n[4], env)
                finally:
                    env.pop()
        elif kind == "throw":
            e = self.ev(n[2], env)
            if not isinstance(e, JavaException):
                if e is None:
                    raise rt("null_pointer_exception", None, n[2][1])
                raise rt("class_cast_exception", "Cannot cast %s to java.lang.Throwable"
                         % java_class(e), n[2][1])
            raise rt(EXCEPTIONS[e.cls], e.message, n[2][1])
        elif kind == "return":
            raise Return()

    # expressions
    def lookup(self, env, name):
        for scope in reversed(env):
            if name in scope:
                return scope
        raise rt("illegal_state_exception", "unbound variable [%s]" % name)

    def ev(self, n, env):
        kind, pos = n[0], n[1]
        if kind == "lit":
            return n[2]
        if kind == "var":
            return self.lookup(env, n[2])[n[2]]
        if kind == "field":
            return self.get(self.ev(n[2], env), n[3], pos)
        if kind == "index":
            return self.get(self.ev(n[2], env), self.ev(n[3], env), pos)
        if kind == "call":
            o = self.ev(n[2], env)
            return call_method(o, n[3], [self.ev(a, env) for a in n[4]], pos)
        if kind == "new":
            args = [self.ev(a, env) for a in n[3]]
            if n[2] in EXCEPTIONS and len(args) <= 1:
                return JavaException(n[2], to_str(args[0]) if args and args[0] is not None else None)
            if n[2] == "HashMap" and not args:
                return {}
            if n[2] == "ArrayList" and not args:
                return []
            if n[2] == "ArrayList" and len(args) == 1 and isinstance(args[0], list):
                return list(args[0])
            raise rt("illegal_argument_exception", "constructor [%s/%d] not found"
                     % (n[2], len(args)), pos)
        if kind == "list":
            return [self.ev(x, env) for x in n[2]]
        if kind == "bin":
            op = n[2]
            if op in ("&&", "||"):
                a = truth(self.ev(n[3], env), n[3][1])
                if a == (op == "||"):
                    return a
                return truth(self.ev(n[4], env), n[4][1])
            a, b = self.ev(n[3], env), self.ev(n[4], env)
            if op == "==":
                return jequals(a, b)
            if op == "!=":
                return not jequals(a, b)
            if op in ("<", "<=", ">", ">="):
                return compare(op, a, b, pos)
            return arith(op, a, b, pos)
        if kind == "unary":
            v = self.ev(n[3], env)
            if n[2] == "!":
                return not truth(v, pos)
            if not is_num(v):
                raise rt("class_cast_exception", "Cannot apply [-] operation to type [%s]."
                         % java_class(v), pos)
            return -v
        if kind == "cond":
            return self.ev(n[3] if truth(self.ev(n[2], env), pos) else n[4], env)
        if kind == "assign":
            target, op = n[2], n[3]
            v = self.ev(n[4], env)
            if op:
                v = arith(op, self.ev(target, env), v, pos)
            self.store(target, v, env)
            return v
        if kind == "incdec":
            target = n[2]
            old = self.ev(target, env)
            # numbers only ("-" refuses strings, which "+" would concatenate)
            new = arith("+" if is_num(old) else "-", old, n[3], pos)
            self.store(target, new, env)
            return new if n[4] else old
        raise rt("illegal_state_exception", "unknown node [%s]" % kind, pos)

    def get(self, o, key, pos):
        if o is None:
            raise rt("null_pointer_exception",
                     "cannot access method/field [%s] from a null def reference" % to_str(key), pos)
        if isinstance(o, dict):
            return o.get(key)
        if isinstance(o, list) and is_num(key):
            return call_method(o, "get", [key], pos)
        raise rt("illegal_argument_exception", "dynamic getter [%s, %s] not found"
                 % (java_class(o), to_str(key)), pos)

    def store(self, target, v, env):
        if target[0] == "var":
            self.lookup(env, target[2])[target[2]] = v
            return
        o = self.ev(target[2], env)
        key = target[3] if target[0] == "field" else self.ev(target[3], env)
        if o is None:
            raise rt("null_pointer_exception",
                     "cannot access method/field [%s] from a null def reference" % to_str(key),
                     target[1])
        if isinstance(o, dict):
            o[key] = v
        elif isinstance(o, list) and is_num(key) and 0 <= int(key) < len(o):
            o[int(key)] = v
        else:
            raise rt("illegal_argument_exception", "dynamic setter [%s, %s] not found"
                     % (java_class(o), to_str(key)), target[1])


_cache = {}
_cache_lock = threading.Lock()


def compile_script(source):
    """The parsed script of SOURCE (cached); CompileError when it is not
    in the subset or not Painless."""
    s = _cache.get(source)
    if s is None:
        try:
            s = Script(source)
        except RecursionError:
            raise CompileError("too many nested expressions", 0)
        with _cache_lock:
            if len(_cache) > 1000:
                _cache.clear()
            _cache[source] = s
    return s


def compile_error_stack(source, err):
    """(script_stack, position) of a compile error: 25 characters either
    side of its offset, cut ends marked with "... "."""
    offset = err.offset
    start, end = max(0, offset - 25), min(len(source), offset + 25)
    snippet, pad = source[start:end], offset - start
    if start > 0:
        snippet, pad = "... " + snippet, pad + 4
    if end < len(source):
        snippet += " ..."
    return [snippet, " " * pad + "^---- HERE"], {"offset": offset, "start": start, "end": end}
