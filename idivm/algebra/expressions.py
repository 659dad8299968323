"""Terms: the scalar expressions that plan operators evaluate per binding tuple.

Thesis §2.10.2: each operator is specified with terms evaluated in the
environment of the operator.  Terms here are constants, variables, field and
index navigation, calls of scalar functions (arithmetic, comparison, boolean
logic, string functions, ...), CASE, and value constructors.  They never
contain subqueries or aggregates: the builder lifts those into operators
(ApplyPlan, GroupBy, FunctionCall), so a term is always a pure function of
one binding tuple.

``SCALAR_FUNCTIONS`` is the single registry of scalar functions: the builder
checks names and arity against it and infers result types with it, the
printer prints with it, and the Spark compiler keys its translations on the
same names (and fails loudly on a name it does not know).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator

from idivm import types as T
from idivm.tree import TreeNode


@dataclass(frozen=True, slots=True)
class Term(TreeNode):
    """A scalar term of the algebra."""

    def variables(self) -> frozenset[str]:
        """Names of the variables this term reads."""
        return frozenset(t.name for t in self.walk() if isinstance(t, Var))

    def __str__(self) -> str:
        return format_term(self)


@dataclass(frozen=True, slots=True)
class Const(Term):
    """A literal.  ``value`` is None for NULL (MISSING folds to NULL)."""

    value: Any
    type: T.Type = T.ANY


@dataclass(frozen=True, slots=True)
class Var(Term):
    name: str


@dataclass(frozen=True, slots=True)
class TableRef(Term):
    """A table of the environment Γ (only as the source of ScanCollection): a base table by
    its name, or, in the plans of a Δ-script, an i-diff or a state of one
    (:class:`idivm.script.DiffRef`, :class:`idivm.script.StateRef`, printed in their notation)."""

    name: Hashable


@dataclass(frozen=True, slots=True)
class Field(Term):
    """Tuple navigation ``base.name``."""

    base: Term
    name: str


@dataclass(frozen=True, slots=True)
class Index(Term):
    """Array navigation ``base[index]`` (0-based, as in SQL++)."""

    base: Term
    index: Term


@dataclass(frozen=True, slots=True)
class Call(Term):
    """A scalar function of ``SCALAR_FUNCTIONS``."""

    function: str
    args: tuple[Term, ...]

    def __post_init__(self):
        spec = SCALAR_FUNCTIONS.get(self.function)
        if spec is None:
            raise ValueError(f"unknown scalar function {self.function!r}")
        if not spec.accepts(len(self.args)):
            raise ValueError(f"{self.function} takes {spec.arity_text()} arguments, got {len(self.args)}")


@dataclass(frozen=True, slots=True)
class Case(Term):
    """Searched CASE: the first ``when`` that is true gives the result."""

    whens: tuple[tuple[Term, Term], ...]
    otherwise: Term | None = None


@dataclass(frozen=True, slots=True)
class TupleExpr(Term):
    fields: tuple[tuple[str, Term], ...]


@dataclass(frozen=True, slots=True)
class BagExpr(Term):
    items: tuple[Term, ...]


@dataclass(frozen=True, slots=True)
class ArrayExpr(Term):
    items: tuple[Term, ...]


TRUE = Const(True, T.BOOL)
FALSE = Const(False, T.BOOL)
NULL = Const(None, T.NULL)
#: the hidden field of a tuple (a stored view's hidden column) that lists the names of its
#: fields that are MISSING: readers leave those fields out (``Warehouse.rows``)
ABSENT = T.ABSENT_FIELD


# ----------------------------------------------------------------------------- function registry


def _numeric(args: list[T.Type]) -> T.Type:
    kinds = {a.kind for a in args if isinstance(a, T.ScalarType)}
    if "double" in kinds:
        return T.DOUBLE
    if "decimal" in kinds:
        return T.ScalarType("decimal", 38, 18)
    if kinds <= {"int", "null"} and kinds:
        return T.INT
    return T.ANY


def _common(args: list[T.Type]) -> T.Type:
    out: T.Type = T.NULL
    for a in args:
        out = T.common_type(out, a)
    return out


def _first(args: list[T.Type]) -> T.Type:
    for a in args:
        if a != T.NULL:
            return a
    return T.NULL


def _anything(args: list[T.Type]) -> str | None:
    return None


def _each(accepts: Callable[[T.Type], bool], what: str, first: int = 0, last: int | None = None
          ) -> Callable[[list[T.Type]], str | None]:
    """A check that arguments ``first`` to ``last`` (default: all) are ``what`` (or NULL, or of
    a type the definition cannot know)."""
    def check(args: list[T.Type]) -> str | None:
        for i, a in enumerate(args[first:last], first + 1):
            if a not in (T.NULL, T.ANY) and not accepts(a):
                return f"argument {i} is {a}, not {what}" if len(args) > 1 else f"its argument is {a}, not {what}"
        return None
    return check


def _all_of(*checks: Callable[[list[T.Type]], str | None]) -> Callable[[list[T.Type]], str | None]:
    return lambda args: next((m for c in checks if (m := c(args)) is not None), None)


def _comparable(args: list[T.Type]) -> str | None:
    for a in args[1:]:
        if not T.comparable(args[0], a):
            return f"it compares {T.brief(args[0])} with {T.brief(a)}"
    return None


def _unifiable(args: list[T.Type]) -> str | None:
    ty: T.Type = T.NULL
    for a in args:
        u = T.unify(ty, a)
        if u is None:
            return f"its arguments mix {T.brief(ty)} and {T.brief(a)}"
        ty = u
    return None


def _member(args: list[T.Type]) -> str | None:
    bag, value = args
    return _comparable([bag.element, value]) if isinstance(bag, T.CollectionType) else None


_numbers = _each(T.is_numeric, "a number")
_booleans = _each(lambda a: a == T.BOOL, "a boolean")
_strings = _each(lambda a: a == T.STRING, "a string")


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    name: str
    min_args: int
    max_args: int | None  # None: variadic
    result: Callable[[list[T.Type]], T.Type]
    symbol: str | None = None  # infix/prefix operator used when printing
    #: why arguments of these types are refused (their mixture, a string where a number is
    #: needed, ...), or None: the builder's type check
    check: Callable[[list[T.Type]], str | None] = _anything

    def accepts(self, n: int) -> bool:
        return n >= self.min_args and (self.max_args is None or n <= self.max_args)

    def arity_text(self) -> str:
        if self.max_args == self.min_args:
            return str(self.min_args)
        if self.max_args is None:
            return f"at least {self.min_args}"
        return f"{self.min_args} to {self.max_args}"


def _const(t: T.Type) -> Callable[[list[T.Type]], T.Type]:
    return lambda _args: t


def _specs() -> dict[str, FunctionSpec]:
    specs = [
        FunctionSpec("add", 2, 2, _numeric, "+", _numbers),
        FunctionSpec("sub", 2, 2, _numeric, "-", _numbers),
        FunctionSpec("mul", 2, 2, _numeric, "*", _numbers),
        FunctionSpec("div", 2, 2, lambda a: T.DOUBLE if _numeric(a) == T.INT else _numeric(a), "/",
                     _numbers),
        FunctionSpec("mod", 2, 2, _numeric, "%", _numbers),
        FunctionSpec("neg", 1, 1, _numeric, "-", _numbers),
        FunctionSpec("concat", 2, None, _const(T.STRING), "||"),
        FunctionSpec("eq", 2, 2, _const(T.BOOL), "=", _comparable),
        FunctionSpec("ne", 2, 2, _const(T.BOOL), "!=", _comparable),
        # null-safe equality (maintenance plans match IDs, which may be NULL, with it)
        FunctionSpec("same", 2, 2, _const(T.BOOL), "IS NOT DISTINCT FROM"),
        # = of two collections as AsterixDB compares arrays: FALSE when their lengths or a pair of
        # their items at one position differ, else NULL when an item is NULL, else TRUE
        FunctionSpec("array_eq", 2, 4, _const(T.BOOL)),  # (a, b[, item types of a and b])
        # whether a position is out of an array (arr[pos] is MISSING there)
        FunctionSpec("index_beyond", 2, 2, _const(T.BOOL)),
        # (array, name, item type): the last item of the array (its tuple) that has field name
        # (OBJECT_CONCAT of an array); and whether some item is not a tuple
        FunctionSpec("last_with", 3, 3,
                     lambda a: (T.record_of(a[0].element) if isinstance(a[0], T.CollectionType) else None) or T.ANY),
        FunctionSpec("some_not_tuples", 2, 2, _const(T.BOOL)),
        # (condition, item, ...): the array of the items whose condition holds (OBJECT_PAIRS)
        FunctionSpec("kept_items", 2, None, lambda a: T.CollectionType(a[1], ordered=True)),
        # <, <=, >, >= of collections, which AsterixDB does not order: NULL (MISSING of MISSING)
        FunctionSpec("unordered", 2, 2, _const(T.BOOL)),
        FunctionSpec("lt", 2, 2, _const(T.BOOL), "<", _comparable),
        FunctionSpec("le", 2, 2, _const(T.BOOL), "<=", _comparable),
        FunctionSpec("gt", 2, 2, _const(T.BOOL), ">", _comparable),
        FunctionSpec("ge", 2, 2, _const(T.BOOL), ">=", _comparable),
        FunctionSpec("and", 2, None, _const(T.BOOL), "AND", _booleans),
        FunctionSpec("or", 2, None, _const(T.BOOL), "OR", _booleans),
        FunctionSpec("not", 1, 1, _const(T.BOOL), "NOT", _booleans),
        FunctionSpec("is_null", 1, 1, _const(T.BOOL)),
        # MISSING (NULL with the MISSING predicate TRUE); the fields of a tuple that are MISSING
        # (arguments: condition, name, condition, name, ...: the names whose condition holds);
        # whether a tuple's ABSENT list names a field (FALSE when it has none)
        FunctionSpec("missing", 0, 0, _const(T.NULL)),
        FunctionSpec("absent_fields", 2, None, _const(T.CollectionType(T.STRING, ordered=True))),
        FunctionSpec("absent_in", 2, 2, _const(T.BOOL)),
        FunctionSpec("like", 2, 2, _const(T.BOOL), "LIKE", _strings),
        FunctionSpec("in", 2, None, _const(T.BOOL), check=_comparable),
        FunctionSpec("coalesce", 1, None, _common, check=_unifiable),
        FunctionSpec("lower", 1, 1, _const(T.STRING), check=_strings),
        FunctionSpec("upper", 1, 1, _const(T.STRING), check=_strings),
        FunctionSpec("trim", 1, 1, _const(T.STRING), check=_strings),
        FunctionSpec("length", 1, 1, _const(T.INT)),
        FunctionSpec("substr", 2, 3, _const(T.STRING),
                     check=_all_of(_each(lambda a: a == T.STRING, "a string", 0, 1), _each(T.is_numeric, "a number", 1))),
        FunctionSpec("abs", 1, 1, _first, check=_numbers),
        FunctionSpec("round", 1, 2, _first, check=_numbers),
        FunctionSpec("floor", 1, 1, _first, check=_numbers),
        FunctionSpec("ceil", 1, 1, _first, check=_numbers),
        FunctionSpec("to_string", 1, 1, _const(T.STRING)),
        # AsterixDB's type constructors and TO_* conversions: NULL when the value does not
        # convert; every integer width is stored as a 64-bit integer
        FunctionSpec("to_int8", 1, 1, _const(T.INT)),
        FunctionSpec("to_int16", 1, 1, _const(T.INT)),
        FunctionSpec("to_int32", 1, 1, _const(T.INT)),
        FunctionSpec("to_bigint", 1, 1, _const(T.INT)),
        FunctionSpec("to_double", 1, 1, _const(T.DOUBLE)),
        FunctionSpec("to_boolean", 1, 1, _const(T.BOOL)),
        FunctionSpec("to_date", 1, 1, _const(T.ScalarType("date"))),
        FunctionSpec("null_if", 2, 2, _first),
        # strings (positions are 0-based, as in SQL++)
        FunctionSpec("ltrim", 1, 1, _const(T.STRING)),
        FunctionSpec("rtrim", 1, 1, _const(T.STRING)),
        FunctionSpec("string_contains", 2, 2, _const(T.BOOL)),
        FunctionSpec("starts_with", 2, 2, _const(T.BOOL)),
        FunctionSpec("ends_with", 2, 2, _const(T.BOOL)),
        FunctionSpec("position", 2, 2, _const(T.INT)),
        FunctionSpec("replace", 3, 3, _const(T.STRING)),
        FunctionSpec("reverse", 1, 1, _const(T.STRING)),
        FunctionSpec("repeat", 2, 2, _const(T.STRING)),
        FunctionSpec("initcap", 1, 1, _const(T.STRING)),
        FunctionSpec("regexp_contains", 2, 2, _const(T.BOOL)),
        FunctionSpec("regexp_like", 2, 2, _const(T.BOOL)),
        # numbers
        FunctionSpec("sqrt", 1, 1, _const(T.DOUBLE)),
        FunctionSpec("exp", 1, 1, _const(T.DOUBLE)),
        FunctionSpec("ln", 1, 1, _const(T.DOUBLE)),
        FunctionSpec("log10", 1, 1, _const(T.DOUBLE)),
        FunctionSpec("power", 2, 2, _const(T.DOUBLE)),
        FunctionSpec("from_base", 2, 2, _const(T.INT),
                     check=_all_of(_each(lambda a: a == T.STRING, "a string", 0, 1),
                                   _each(lambda a: a == T.INT, "an integer", 1))),
        FunctionSpec("sign", 1, 1, _const(T.INT)),
        # dates (a string in ISO form is read as a date)
        FunctionSpec("get_year", 1, 1, _const(T.INT)),
        FunctionSpec("get_month", 1, 1, _const(T.INT)),
        FunctionSpec("get_day", 1, 1, _const(T.INT)),
        # collections
        FunctionSpec("range", 2, 2, _const(T.CollectionType(T.INT, ordered=True))),
        FunctionSpec("collection_length", 1, 1, _const(T.INT)),
        # the elements of an array from a 0-based position to one before another (default: its
        # end), negative ones counted from its end; NULL when they are out of it or not in order
        FunctionSpec("array_slice", 2, 3, _first),
        # collection predicates used by lifted subqueries
        FunctionSpec("exists", 1, 1, _const(T.BOOL)),
        FunctionSpec("contains", 2, 2, _const(T.BOOL), check=_member),
        # the single element of a one-element bag (scalar use of a subquery); NULL if empty
        FunctionSpec("singleton", 1, 1,
                     lambda a: a[0].element if isinstance(a[0], T.CollectionType) else T.ANY),
    ]
    return {s.name: s for s in specs}


SCALAR_FUNCTIONS: dict[str, FunctionSpec] = _specs()

#: SQL++'s MISSING: a value that is not there.  It is NULL wherever values are computed and
#: stored; what tells it apart is the builder's MISSING predicate of each term
#: (:meth:`idivm.algebra.term_builder.TermBuilder.missing`), and, in a tuple, the hidden field
#: :data:`ABSENT` listing the fields that are MISSING
MISSING = Call("missing", ())

# SQL++ surface names of scalar functions callable by name (upper-case) -> registry name (the
# functions of MISSING and NULL, COALESCE, IF_MISSING, NULL_IF, ..., are the term builder's:
# idivm.algebra.term_builder._UNKNOWN_FUNCTIONS)
FUNCTION_ALIASES = {
    "LOWER": "lower", "UPPER": "upper",
    "TRIM": "trim", "LTRIM": "ltrim", "RTRIM": "rtrim", "LENGTH": "length", "CHAR_LENGTH": "length",
    "STRING_LENGTH": "length", "SUBSTR": "substr", "SUBSTRING": "substr", "CONTAINS": "string_contains",
    "STARTS_WITH": "starts_with", "ENDS_WITH": "ends_with", "POSITION": "position", "REPLACE": "replace",
    "REVERSE": "reverse", "REPEAT": "repeat", "INITCAP": "initcap",
    "REGEXP_CONTAINS": "regexp_contains", "REGEXP_LIKE": "regexp_like",
    "ABS": "abs", "ROUND": "round", "FLOOR": "floor", "CEIL": "ceil",
    "CEILING": "ceil", "SQRT": "sqrt", "EXP": "exp", "LN": "ln", "LOG": "log10", "POWER": "power",
    "SIGN": "sign", "FROM_BASE": "from_base",
    "TO_STRING": "to_string", "TO_STR": "to_string", "TOSTRING": "to_string", "STRING": "to_string",
    "CONCAT": "concat",
    "INT8": "to_int8", "TINYINT": "to_int8", "INT16": "to_int16", "SMALLINT": "to_int16",
    "INT32": "to_int32", "INTEGER": "to_int32", "INT": "to_int32",
    "INT64": "to_bigint", "BIGINT": "to_bigint", "TO_BIGINT": "to_bigint", "TOBIGINT": "to_bigint",
    "DOUBLE": "to_double", "FLOAT": "to_double", "TO_DOUBLE": "to_double", "TODOUBLE": "to_double",
    "BOOLEAN": "to_boolean", "TO_BOOLEAN": "to_boolean", "TO_BOOL": "to_boolean",
    "DATE": "to_date",
    "GET_YEAR": "get_year", "GET_MONTH": "get_month", "GET_DAY": "get_day",
    "RANGE": "range", "LEN": "collection_length", "ARRAY_LENGTH": "collection_length",
    "ARRAY_SLICE": "array_slice",
}


# ----------------------------------------------------------------------------- printing


def _quote(s: str) -> str:
    return '"' + s.replace('"', '\\"') + '"'


def format_term(t: Term) -> str:
    """Render a term in SQL++-like surface syntax (used by explain and errors)."""
    match t:
        case Const(value=None):
            return "null"
        case Const(value=bool() as b):
            return "true" if b else "false"
        case Const(value=str() as s):
            return _quote(s)
        case Const(value=v):
            return repr(v)
        case Var(name=n):
            return n
        case TableRef(name=n):
            return f"table {n}"
        case Field(base=b, name=n):
            return f"{format_term(b)}.{n}"
        case Index(base=b, index=i):
            return f"{format_term(b)}[{format_term(i)}]"
        case Call(function=f, args=args):
            spec = SCALAR_FUNCTIONS[f]
            if f == "neg":
                return f"-{_paren(args[0])}"
            if f == "not":
                return f"NOT {_paren(args[0])}"
            if f == "in":
                return f"{_paren(args[0])} IN ({', '.join(format_term(a) for a in args[1:])})"
            if f == "is_null":
                return f"{_paren(args[0])} IS NULL"
            if f == "missing":
                return "MISSING"
            if spec.symbol:
                return f" {spec.symbol} ".join(_paren(a) for a in args)
            return f"{f}({', '.join(format_term(a) for a in args)})"
        case Case(whens=whens, otherwise=o):
            parts = ["CASE"] + [f"WHEN {format_term(c)} THEN {format_term(r)}" for c, r in whens]
            if o is not None:
                parts.append(f"ELSE {format_term(o)}")
            return " ".join(parts + ["END"])
        case TupleExpr(fields=fs):
            return "{" + ", ".join(f"{_quote(n)}: {format_term(v)}" for n, v in fs) + "}"
        case BagExpr(items=items):
            return "{{" + ", ".join(format_term(i) for i in items) + "}}"
        case ArrayExpr(items=items):
            return "[" + ", ".join(format_term(i) for i in items) + "]"
    raise TypeError(f"not a term: {t!r}")


def _paren(t: Term) -> str:
    s = format_term(t)
    if isinstance(t, Call) and SCALAR_FUNCTIONS[t.function].symbol and t.function not in ("neg",):
        return f"({s})"
    return s


def conjuncts(t: Term) -> list[Term]:
    """Split a condition on AND."""
    if isinstance(t, Call) and t.function == "and":
        out: list[Term] = []
        for a in t.args:
            out.extend(conjuncts(a))
        return out
    if t == TRUE:
        return []
    return [t]


def conjunction(parts: list[Term]) -> Term:
    parts = [p for p in parts if p != TRUE]
    if not parts:
        return TRUE
    if len(parts) == 1:
        return parts[0]
    return Call("and", tuple(parts))


def split_path(t: Term) -> tuple[Term, tuple[str, ...]]:
    """``t`` as the term it navigates from and the field names read below it
    (``u.address.city`` -> ``(u, ("address", "city"))``; a term without fields -> ``(t, ())``)."""
    names: list[str] = []
    while isinstance(t, Field):
        names.append(t.name)
        t = t.base
    return t, tuple(reversed(names))


def field_paths(t: Term, variables: frozenset[str] | set[str]) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(variable, field path) of each maximal field access in ``t`` over one of ``variables``;
    the path is empty where the variable itself (its whole value) is used."""
    base, names = split_path(t)
    if isinstance(base, Var) and base.name in variables:
        yield base.name, names
        return
    for c in base.children():
        yield from field_paths(c, variables)


Term._root = Term
