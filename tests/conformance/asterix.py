"""Conversion of AsterixDB's SQL++ runtime tests into idivm tables and views.

Input: a local copy of the apache/asterixdb repository (a checkout, or a git directory without
work tree, whose runtime-test tree is then extracted once into a temporary directory).  The
runtime tests live in ``asterixdb/asterix-app/src/test/resources/runtimets``: ``sqlpp_queries.xml``
lists the cases by group; ``queries_sqlpp/<group>/<case>/<case>.<n>.<kind>.sqlpp`` are a case's
statements in order (``ddl``, ``update``, ``query``, ...); ``results/<group>/<case>/<case>.<n>.adm``
the expected result of query ``n``.

Output: for every query of every case, a :class:`Query` that is either in scope (the tables to
create, their keys and rows, and the ``CREATE VIEW`` text) or excluded with the reason.  In scope
are query-only cases whose datasets are created by ``CREATE DATASET ... PRIMARY KEY`` and filled
by ``INSERT``/``UPSERT`` statements of literal values; the query must read at least one dataset.
A top-level ``ORDER BY`` is stripped (results are compared as bags); a top-level ``LIMIT`` or
``OFFSET`` makes the result order-dependent and excludes the query.

Nothing of AsterixDB is copied: the cases are read from the mirror at test time.
"""

from __future__ import annotations

import csv
import functools
import datetime as dt
import io
import math
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterator

RUNTIMETS = "asterixdb/asterix-app/src/test/resources/runtimets"

#: the groups the conformance table covers
GROUPS = ("aggregate-sql", "comparison", "dml", "flwor", "global-aggregate", "group-by", "join",
          "leftouterjoin", "list", "misc", "nestrecords", "null-missing", "numeric", "objects",
          "open-closed", "quantifiers", "resolution", "scan", "select-star", "sorting", "subquery",
          "tinysocial", "tpch", "tpch-sql", "tpch-sql-sugar", "union", "unnest")


#: the objects group's cases, which the suite includes from their own file
OBJECTS_XML = "queries_sqlpp/objects/ObjectsQueries.xml"


class Excluded(Exception):
    """A case or query outside the conformance scope; the message is the reason."""


@dataclass
class Dataset:
    name: str
    key: list[str]
    type_name: str
    rows: dict[tuple, dict] = field(default_factory=dict)  # by key, in insertion order
    type_text: str | None = None  # its record type's text, the declared schema of an empty table


@dataclass
class Query:
    group: str
    case: str
    number: str
    view: str = ""                       # the CREATE VIEW text
    datasets: list[Dataset] = field(default_factory=list)
    expected: list[Any] | None = None
    excluded: str | None = None          # the reason, when out of scope

    @property
    def id(self) -> str:
        return f"{self.group}/{self.case}/{self.number}"


# --- the suite ---------------------------------------------------------------------------------

def runtime_tests(mirror: str | Path) -> Path:
    """The ``runtimets`` directory of ``mirror``: in its work tree, or extracted from its git
    directory (``git archive``) into a temporary directory."""
    mirror = Path(mirror)
    tree = mirror / RUNTIMETS
    if tree.is_dir():
        return tree
    if not (mirror / "HEAD").exists() and not (mirror / ".git").exists():
        raise FileNotFoundError(f"{mirror}: neither an asterixdb checkout nor its git directory")
    out = Path(tempfile.mkdtemp(prefix="asterixdb-runtimets-"))
    git_dir = mirror if (mirror / "HEAD").exists() else mirror / ".git"
    git = ["git", f"--git-dir={git_dir}"]
    listing = subprocess.run(git + ["ls-tree", "-r", "-z", f"HEAD:{RUNTIMETS}", "--", "sqlpp_queries.xml",
                                    "queries_sqlpp", "results"], check=True, capture_output=True).stdout
    entries = []
    for line in listing.split(b"\0"):
        if line:
            meta, path = line.split(b"\t", 1)
            entries.append((meta.split()[2], path.decode()))
    # the blobs, through one cat-file process; a blob the mirror lacks (large files) is skipped
    blobs = subprocess.run(git + ["cat-file", "--batch"], input=b"".join(oid + b"\n" for oid, _ in entries),
                           check=True, capture_output=True).stdout
    at = 0
    for oid, path in entries:
        end = blobs.index(b"\n", at)
        header = blobs[at:end].split()
        at = end + 1
        if header[-1] == b"missing":
            continue
        size = int(header[2])
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blobs[at:at + size])
        at += size + 1
    return out


def data_reader(mirror: str | Path):
    """``read(path)``: the bytes of ``asterix-app/<path>`` (``data/...``, the files test cases
    load) in ``mirror``, or None when the mirror lacks it."""
    mirror = Path(mirror)
    app = mirror / "asterixdb" / "asterix-app"
    if app.is_dir():
        return lambda path: (app / path).read_bytes() if (app / path).is_file() else None
    git_dir = mirror if (mirror / "HEAD").exists() else mirror / ".git"

    @functools.lru_cache(maxsize=64)
    def read(path: str) -> bytes | None:
        r = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "blob",
                            f"HEAD:asterixdb/asterix-app/{path}"], capture_output=True)
        return r.stdout if r.returncode == 0 else None

    return read


def cleanup(tree: Path) -> None:
    """Remove a tree :func:`runtime_tests` extracted (not a checkout's)."""
    if tree.name.startswith("asterixdb-runtimets-"):
        shutil.rmtree(tree, ignore_errors=True)


def cases(tree: Path, groups: tuple[str, ...] = GROUPS) -> Iterator[tuple[str, str, str, bool, str]]:
    """(group, file path, compilation unit, expects an error, output directory) of every case of
    ``groups``."""
    # the suite's main file, and the group the suite includes from a file of its own
    text = "".join(f.read_text() for f in (tree / "sqlpp_queries.xml", tree / OBJECTS_XML) if f.is_file())
    text = re.sub(r"<!DOCTYPE[^>]*>|<\?xml[^>]*\?>", "", text)
    root = ET.fromstring(f"<root>{text}</root>")

    def local(tag: str) -> str:
        return tag.rsplit("}", 1)[-1]

    for group in root.iter():
        if local(group.tag) != "test-group" or group.get("name") not in groups:
            continue
        for case in group:
            if local(case.tag) != "test-case":
                continue
            for unit in case:
                if local(unit.tag) != "compilation-unit":
                    continue
                error = any(local(c.tag) == "expected-error" for c in unit)
                out = next((c.text for c in unit if local(c.tag) == "output-dir"), unit.get("name"))
                yield group.get("name"), case.get("FilePath"), unit.get("name"), error, out


def queries(tree: Path, groups: tuple[str, ...] = GROUPS, read_data=None) -> list[Query]:
    """Every query of the cases of ``groups``, converted or excluded (``read_data``: see
    :func:`data_reader`; without it, cases that load files are excluded)."""
    out: list[Query] = []
    seen: set[tuple[str, str]] = set()
    for group, file_path, unit, error, output_dir in cases(tree, groups):
        if (file_path, unit) in seen:
            continue
        seen.add((file_path, unit))
        out.extend(convert_case(tree, group, file_path, unit, error, output_dir, read_data))
    return out


FILE = re.compile(r"^(?P<case>.+)\.(?P<n>\d+)\.(?P<kind>[a-z]+)\.(?P<ext>[a-z]+)$")
RESULT = re.compile(r"^(?P<case>.+)\.(?P<n>\d+)\.(?P<ext>[a-z]+)$")


def convert_case(tree: Path, group: str, file_path: str, unit: str, error: bool,
                 output_dir: str, read_data=None) -> list[Query]:
    directory = tree / "queries_sqlpp" / file_path / unit
    case = file_path.split("/", 1)[1] + "/" + unit if "/" in file_path else unit
    files = sorted((f for f in directory.iterdir() if FILE.match(f.name)),
                   key=lambda f: int(FILE.match(f.name)["n"])) if directory.is_dir() else []
    query_files = [f for f in files if FILE.match(f.name)["kind"] == "query"]
    if not query_files:
        return [Query(group, case, "-", excluded="no query statement")]

    def excluded(reason: str) -> list[Query]:
        return [Query(group, case, FILE.match(f.name)["n"], excluded=reason) for f in query_files]

    if error:
        return excluded("the case expects an error")
    # the k-th result file (in number order, whatever its kind: an EXPLAIN query's is a .plan) is
    # the expected result of the k-th query
    results_dir = tree / "results" / file_path / output_dir
    results = sorted((f for f in results_dir.iterdir() if RESULT.match(f.name)),
                     key=lambda f: int(RESULT.match(f.name)["n"])) if results_dir.is_dir() else []
    state = Conversion(read_data)
    queries: list[Query] = []
    try:
        for f in files:
            m = FILE.match(f.name)
            kind = m["kind"]
            text = f.read_text(errors="replace")
            if kind == "ddl":
                state.ddl(text)
            elif kind == "update":
                if queries:  # an update after a query: the later queries see other data
                    raise Excluded("updates between queries")
                state.update(text)
            elif kind == "query":
                q = Query(group, case, m["n"])
                queries.append(q)
                try:
                    q.view, q.datasets = state.view(text, f"q{m['n']}")
                    if len(results) < len(queries):
                        raise Excluded("no expected result file")
                    ext = RESULT.match(results[len(queries) - 1].name)["ext"]
                    if ext not in ("adm", "json"):
                        raise Excluded(f"the expected result is a .{ext} file")
                    q.expected = parse_values(results[len(queries) - 1].read_text(errors="replace"))
                except Excluded as e:
                    q.excluded = str(e)
                except ValueError as e:
                    q.excluded = f"expected result not parsed: {e}"
            else:
                raise Excluded(f"a {kind} statement file")
    except Excluded as e:
        return excluded(str(e))
    return queries


# --- statements --------------------------------------------------------------------------------

TOKEN = re.compile(r"""
    (?P<ws>\s+|--[^\n]*|//[^\n]*|/\*.*?\*/)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<quoted>`(?:[^`\\]|\\.)*`)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?(?:i8|i16|i32|i64|f|d)?(?![A-Za-z0-9_]))
  | (?P<word>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<punct>\{\{|\}\}|<=|>=|!=|<>|\|\||.)
""", re.X | re.S)


@dataclass(frozen=True)
class Tok:
    kind: str
    text: str
    start: int
    end: int

    @property
    def word(self) -> str:
        return self.text.lower() if self.kind == "word" else ""


def tokens(text: str) -> list[Tok]:
    out = []
    for m in TOKEN.finditer(text):
        if m.lastgroup != "ws":
            out.append(Tok(m.lastgroup, m.group(), m.start(), m.end()))
    return out


def _depth(t: Tok) -> int:
    """How ``t`` changes the bracket depth (``{{`` and ``}}`` are two brackets)."""
    if t.kind != "punct":
        return 0
    return {"(": 1, "[": 1, "{": 1, "{{": 2, ")": -1, "]": -1, "}": -1, "}}": -2}.get(t.text, 0)


def statements(text: str) -> list[tuple[str, list[Tok]]]:
    """The statements of ``text`` (split at ``;`` outside brackets), with their tokens."""
    out, current, depth = [], [], 0
    for t in tokens(text):
        depth += _depth(t)
        if t.text == ";" and t.kind == "punct" and depth <= 0:
            if current:
                out.append((text[current[0].start:current[-1].end], current))
            current = []
            continue
        current.append(t)
    if current:
        out.append((text[current[0].start:current[-1].end], current))
    return out


def ident(t: Tok) -> str:
    if t.kind == "quoted":
        return t.text[1:-1].replace("\\`", "`")
    if t.kind == "word":
        return t.text
    raise Excluded(f"unexpected token {t.text!r}")


#: ``SET`` options that only steer AsterixDB's planner or runtime, not a query's result
PLANNER_OPTIONS = ("compiler.", "import-private-functions", "hash_merge", "noindexonly", "rewrite_",
                   "inline_with", "sql-compat")


class Conversion:
    """The state of a case's statements read so far: dataverses, types, datasets and rows."""

    def __init__(self, read_data=None) -> None:
        self.dataverses: set[str] = {"Default"}
        self.datasets: dict[str, Dataset] = {}
        self.types: dict[str, list[tuple[str, str]]] = {}  # (field, type) of record types
        self.type_texts: dict[str, str] = {}  # their text (``[open|closed] {...}``)
        self.read_data = read_data

    def name_at(self, toks: list[Tok], i: int) -> tuple[str, int]:
        """A possibly dataverse-qualified name at ``toks[i]``: (its last part, next index)."""
        name = ident(toks[i])
        i += 1
        while i + 1 < len(toks) and toks[i].text == "." and toks[i + 1].kind in ("word", "quoted"):
            name = ident(toks[i + 1])
            i += 2
        return name, i

    def ddl(self, text: str) -> None:
        self.text = text
        for _, toks in statements(text):
            words = [t.word for t in toks[:4]]
            if words[:1] == ["use"]:
                self.dataverses.add(ident(toks[1]))
            elif words[:2] in (["drop", "dataverse"], ["drop", "database"], ["create", "database"]) \
                    or words[:2] == ["drop", "dataset"] or words[:2] == ["drop", "type"]:
                continue
            elif words[:2] in (["create", "dataverse"], ["create", "scope"]):
                self.dataverses.add(ident(toks[2]))
            elif words[:2] == ["create", "type"]:
                self.create_type(toks)
            elif words[:2] == ["create", "index"] or words[:3] == ["create", "primary", "index"]:
                continue
            elif words[:2] in (["create", "dataset"], ["create", "collection"]) \
                    or words[:3] == ["create", "internal", "dataset"]:
                self.create_dataset(toks)
            else:
                raise Excluded(f"DDL statement {' '.join(t.text for t in toks[:3])!r}")

    def create_type(self, toks: list[Tok]) -> None:
        """Remember the fields of a record type (their order types delimited text)."""
        name, i = self.name_at(toks, 2)
        start = i + 1 if i < len(toks) and toks[i].word == "as" else i
        while i < len(toks) and toks[i].text != "{":
            i += 1
        if start < len(toks):
            self.type_texts[name] = self.text[toks[start].start:toks[-1].end]
        fields, depth, j = [], 0, i
        while j < len(toks):
            depth += _depth(toks[j])
            if depth == 0:
                break
            if depth == 1 and toks[j].kind in ("word", "quoted", "string") and j + 1 < len(toks) \
                    and toks[j + 1].text == ":":
                field = _string(toks[j].text) if toks[j].kind == "string" else ident(toks[j])
                fields.append((field, toks[j + 2].text.lower() if j + 2 < len(toks) else ""))
            j += 1
        self.types[name] = fields

    def create_dataset(self, toks: list[Tok]) -> None:
        i = 2 if toks[1].word in ("dataset", "collection") else 3
        if toks[i].word == "if":  # IF NOT EXISTS
            i += 3
        name, i = self.name_at(toks, i)
        type_name = ""
        if i < len(toks) and toks[i].text == "(":  # a named type, or an inline one
            depth = 0
            for j in range(i, len(toks)):
                depth += _depth(toks[j])
                if depth == 0:
                    break
            type_name = " ".join(t.text for t in toks[i + 1:j])
            i = j
        j = i + 1
        while j + 1 < len(toks) and not (toks[j].word == "primary" and toks[j + 1].word == "key"):
            j += 1
        if j + 1 >= len(toks):
            raise Excluded("a dataset without a primary key")
        key, j = [], j + 2
        while j < len(toks):
            part, j = self.name_at(toks, j)
            key.append(part)
            if j < len(toks) and toks[j].text == ",":
                j += 1
                continue
            break
        if j < len(toks) and toks[j].word == "autogenerated":
            raise Excluded("a dataset with an autogenerated key")
        if j < len(toks) and toks[j].word not in ("with", "hints"):  # storage options and hints
            raise Excluded(f"dataset option {toks[j].text!r}")
        self.datasets[name] = Dataset(name, key, type_name, type_text=self.type_texts.get(type_name))

    def update(self, text: str) -> None:
        for stmt, toks in statements(text):
            words = [t.word for t in toks[:2]]
            if words[:1] == ["use"]:
                continue
            if words in (["insert", "into"], ["upsert", "into"]):
                name, i = self.name_at(toks, 2)
                if name not in self.datasets:
                    raise Excluded(f"insert into unknown dataset {name!r}")
                if i < len(toks) and toks[i].word == "as":
                    raise Excluded("insert with a variable")
                body = stmt[toks[i].start - toks[0].start:]
                if toks[-1].word == "returning" or any(t.word == "returning" for t in toks[i:]):
                    raise Excluded("insert ... returning")
                try:
                    value = parse_value(body)
                except ValueError as e:
                    raise Excluded(f"insert of a non-literal value ({e})") from None
                rows = value if isinstance(value, list) else [value]
                self.insert(self.datasets[name], rows, upsert=words[0] == "upsert")
            elif words[:1] == ["load"]:
                self.load(stmt, toks)
            else:
                raise Excluded(f"update statement {' '.join(t.text for t in toks[:2])!r}")

    def load(self, stmt: str, toks: list[Tok]) -> None:
        """``LOAD DATASET d USING localfs ((path=...), (format=adm|json|delimited-text), ...)``
        of files in the mirror's ``asterix-app/data``."""
        if self.read_data is None:
            raise Excluded("a dataset loaded from a file")
        name, _ = self.name_at(toks, 2)
        if name not in self.datasets:
            raise Excluded(f"load of unknown dataset {name!r}")
        params = {k.lower(): v for k, v in re.findall(r"[`\"]([\w-]+)[`\"]\s*=\s*[`\"]([^`\"]*)[`\"]", stmt)}
        fmt = params.get("format", "")
        if fmt not in ("adm", "json", "delimited-text") or params.get("header", "false") != "false":
            raise Excluded(f"a load of format {fmt!r}")
        ds = self.datasets[name]
        for path in params.get("path", "").split(","):
            path = path.strip()
            if not path.startswith("asterix_nc1://"):
                raise Excluded(f"a load from {path!r}")
            data = self.read_data(path[len("asterix_nc1://"):])
            if data is None:
                raise Excluded(f"data file {path!r} absent from the mirror")
            text = data.decode("utf-8", errors="replace")
            if fmt == "delimited-text":
                rows = self.delimited(text, ds, params.get("delimiter", ","), params.get("quote", '"'))
            else:
                try:
                    rows = parse_values(text)
                except ValueError as e:
                    raise Excluded(f"loaded data not read ({e})") from None
            self.insert(ds, rows, upsert=False)

    def delimited(self, text: str, ds: Dataset, delimiter: str, quote: str) -> list[dict]:
        fields = self.types.get(ds.type_name)
        if not fields:
            raise Excluded("delimited text for a dataset without a named record type")
        rows = []
        for line in csv.reader(io.StringIO(text), delimiter=delimiter, quotechar=quote or None):
            if not line:
                continue
            row = {}
            for (name, type_), cell in zip(fields, line):
                row[name] = _typed(cell, type_.rstrip("?"))
            rows.append(row)
        return rows

    def insert(self, ds: Dataset, rows: list, upsert: bool) -> None:
        for row in rows:
            if not isinstance(row, dict):
                raise Excluded("insert of a non-object value")
            if any(k not in row or row[k] is None for k in ds.key):
                raise Excluded("insert of a record without its primary key (autogenerated keys)")
            key = tuple(_hashable(row[k]) for k in ds.key)
            if key in ds.rows and not upsert:
                raise Excluded("insert of a duplicate key (an error in AsterixDB)")
            ds.rows[key] = row

    def view(self, text: str, name: str) -> tuple[str, list[Dataset]]:
        """The ``CREATE VIEW`` text of the query in ``text`` and the datasets it reads."""
        body = None
        for stmt, toks in statements(text):
            first = toks[0].word
            if first == "use":
                self.dataverses.add(ident(toks[1]))
            elif first == "set":
                option = ident(toks[1]).lower() if len(toks) > 1 else ""
                if not option.startswith(PLANNER_OPTIONS):
                    raise Excluded(f"a query with option {option!r}")
            elif first in ("insert", "upsert", "delete", "explain", "create", "drop", "load", "update"):
                raise Excluded(f"a {first.upper()} statement in a query file")
            else:
                if body is not None:
                    raise Excluded("several queries in one file")
                body = (stmt, toks)
        if body is None:
            raise Excluded("no query statement")
        stmt, toks = body
        parameters = sorted({t.text for t in toks if t.kind == "word" and t.text.startswith("$")})
        if parameters:
            raise Excluded(f"statement parameters ({', '.join(parameters)}), which a client binds at each execution: "
                           "a view has none")
        used = self.used_datasets(toks)
        if not used:
            raise Excluded("reads no dataset")
        query = self.unqualify(stmt, toks)
        query = strip_order_by(query)
        return f"CREATE VIEW {name} AS\n{query}\n", [self.datasets[n] for n in used]

    def used_datasets(self, toks: list[Tok]) -> list[str]:
        used = []
        for i, t in enumerate(toks):
            if t.kind in ("word", "quoted"):
                n = ident(t)
                if n in self.datasets and n not in used and not (i > 0 and toks[i - 1].text == "."
                                                                 and toks[i - 2].text not in self.dataverses):
                    used.append(n)
        return used

    def unqualify(self, stmt: str, toks: list[Tok]) -> str:
        """``stmt`` without dataverse prefixes of dataset names (``test.ds`` -> ``ds``)."""
        cuts = []
        for i in range(len(toks) - 2):
            if toks[i].kind in ("word", "quoted") and ident(toks[i]) in self.dataverses \
                    and toks[i + 1].text == "." and toks[i + 2].kind in ("word", "quoted") \
                    and ident(toks[i + 2]) in self.datasets and (i == 0 or toks[i - 1].text != "."):
                cuts.append((toks[i].start - toks[0].start, toks[i + 2].start - toks[0].start))
        for a, b in reversed(cuts):
            stmt = stmt[:a] + stmt[b:]
        return stmt


def strip_order_by(query: str) -> str:
    """``query`` without its top-level ORDER BY; LIMIT/OFFSET at the top level exclude it."""
    toks = tokens(query)
    depth, order = 0, None
    for i, t in enumerate(toks):
        depth += _depth(t)
        if depth == 0 and t.word in ("limit", "offset"):
            raise Excluded("a top-level LIMIT/OFFSET (an order-dependent result)")
        elif depth == 0 and t.word == "order" and i + 1 < len(toks) and toks[i + 1].word == "by":
            order = t
    return query[:order.start].rstrip() if order is not None else query


# --- literal values (ADM and SQL++ constructors) ----------------------------------------------

@dataclass(frozen=True)
class Bag:
    """An ADM multiset ``{{ ... }}``."""
    items: tuple


_INTS = {"int8", "int16", "int32", "int64", "tinyint", "smallint", "integer", "int", "bigint"}
_FLOATS = {"float", "double"}


def parse_value(text: str) -> Any:
    """One literal value: JSON, ADM's multisets ``{{...}}`` and typed constructors
    (``int64("1")``, ``date("2020-01-01")``, ...), SQL++ single-quoted strings, ``missing``."""
    p = _Literal(text)
    v = p.value()
    p.end()
    return v


def parse_values(text: str) -> list[Any]:
    """A sequence of literal values (an ``.adm`` result file)."""
    p = _Literal(text)
    out = []
    while not p.at_end():
        out.append(p.value())
    return out


class _Literal:
    def __init__(self, text: str) -> None:
        self.toks = tokens(text)
        self.i = 0

    def at_end(self) -> bool:
        return self.i >= len(self.toks)

    def end(self) -> None:
        if not self.at_end():
            raise ValueError(f"unexpected {self.toks[self.i].text!r}")

    def next(self) -> Tok:
        if self.at_end():
            raise ValueError("unexpected end")
        t = self.toks[self.i]
        self.i += 1
        return t

    def peek(self) -> str:
        return self.toks[self.i].text if not self.at_end() else ""

    def value(self) -> Any:
        t = self.next()
        if t.text == "(":
            v = self.value()
            self.expect(")")
            return v
        if t.text == "{":
            obj = {}
            while True:
                if self.peek() == "}}":  # the close of this object and of an enclosing one
                    t2 = self.toks[self.i]
                    self.toks[self.i:self.i + 1] = [Tok("punct", "}", t2.start, t2.start + 1),
                                                    Tok("punct", "}", t2.start + 1, t2.end)]
                if self.peek() == "}":
                    break
                k = self.next()
                if k.kind == "string":
                    key = _string(k.text)
                elif k.kind in ("word", "quoted"):
                    key = ident(k)
                else:
                    raise ValueError(f"field name {k.text!r}")
                self.expect(":")
                obj[key] = self.value()
                if self.peek() == ",":
                    self.next()
            self.next()
            return {k: v for k, v in obj.items() if v is not MISSING}
        if t.text in ("[", "{{"):
            close = "]" if t.text == "[" else "}}"
            items = []
            while self.peek() != close:
                items.append(self.value())
                if self.peek() == ",":
                    self.next()
            self.next()
            items = [None if x is MISSING else x for x in items]  # stored, a MISSING item is NULL
            return items if close == "]" else Bag(tuple(items))
        if t.kind == "string":
            return _string(t.text)
        if t.text in ("-", "+"):
            n = self.value()
            if not isinstance(n, (int, float, Decimal)):
                raise ValueError("sign before a non-number")
            return -n if t.text == "-" else n
        if t.kind == "number":
            number = re.sub(r"(i8|i16|i32|i64|f|d)$", "", t.text)
            if re.fullmatch(r"\d+", number):
                return int(number)
            return float(number)
        if t.kind == "word":
            w = t.word
            if w in ("true", "false"):
                return w == "true"
            if w == "null":
                return None
            if w == "missing":
                return MISSING
            if w in ("inf", "infinity"):
                return math.inf
            if w == "nan":
                return math.nan
            if self.peek() == "(":
                self.next()
                arg = self.value()
                self.expect(")")
                return _construct(w, arg)
        raise ValueError(f"not a literal: {t.text!r}")

    def expect(self, text: str) -> None:
        t = self.next()
        if t.text != text:
            raise ValueError(f"expected {text!r}, found {t.text!r}")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


def _string(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", _unescape, body)


def _unescape(m: re.Match) -> str:
    e = m.group(1)
    if e.startswith("u") and len(e) == 5:
        return chr(int(e[1:], 16))
    return {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}.get(e, e)


def _construct(name: str, arg: Any) -> Any:
    if isinstance(arg, str) and name in _INTS | _FLOATS:  # a typed literal's text: int8("+48i8"), float("1.5f")
        arg = re.sub(r"(i8|i16|i32|i64|f|d)$", "", arg.strip())
    if name in _INTS:
        return int(arg)
    if name in _FLOATS:
        return float(arg)
    if name == "string":
        return str(arg)
    if name == "boolean":
        return arg if isinstance(arg, bool) else str(arg).lower() == "true"
    if name == "date" and isinstance(arg, str):
        return dt.date.fromisoformat(arg)
    if name == "datetime" and isinstance(arg, str):
        return dt.datetime.fromisoformat(arg.replace("Z", "+00:00"))
    raise ValueError(f"ADM constructor {name}()")


def _typed(cell: str, type_: str) -> Any:
    """A cell of delimited text as a value of the declared primitive type."""
    if cell == "" and type_ != "string":
        return None
    if type_ in _INTS:
        return int(cell)
    if type_ in _FLOATS:
        return float(cell)
    if type_ == "string":
        return cell
    if type_ == "boolean":
        return cell.lower() == "true"
    if type_ == "date":
        return dt.date.fromisoformat(cell)
    if type_ == "datetime":
        return dt.datetime.fromisoformat(cell)
    raise Excluded(f"delimited text of type {type_}")


def _hashable(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, Bag):
        return ("bag",) + tuple(sorted(map(repr, map(_hashable, v.items))))
    return v


# --- comparison --------------------------------------------------------------------------------

def canonical(v: Any) -> Any:
    """A value in the form results are compared in: numbers as floats rounded to 12 significant
    digits (AsterixDB prints doubles in full; integers and decimals are compared by value),
    dates and times as ISO strings, arrays and multisets as bags (sorted), objects as sorted
    (field, value) pairs."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float, Decimal)):
        f = float(v)
        if math.isnan(f) or math.isinf(f):
            return repr(f)
        return float(f"{f:.12g}")
    if isinstance(v, (dt.date, dt.datetime, dt.time)):
        return v.isoformat()
    if isinstance(v, dict):
        return ("{}",) + tuple(sorted(((k, canonical(x)) for k, x in v.items()), key=repr))
    if isinstance(v, Bag):
        v = list(v.items)
    if isinstance(v, (list, tuple)):
        return ("[]",) + tuple(sorted((canonical(x) for x in v), key=repr))
    return repr(v)


def same_bag(expected: list[Any], actual: list[Any]) -> bool:
    return sorted(map(canonical, expected), key=repr) == sorted(map(canonical, actual), key=repr)
