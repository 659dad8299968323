"""Views of scalars and of collections (``SELECT VALUE x.price``, ``SELECT VALUE COUNT(*)``,
``SELECT VALUE u.tags``): stored as one hidden column, maintained by every strategy that
applies, read back as the values themselves.

DuckDB is the oracle: each view is paired with DuckDB SQL for the same query over the test's
own copy of the rows; after ``define`` and after a batch of inserts, updates and deletes
(applied to the copy by the test itself) the view's values must equal DuckDB's as a bag, and
``verify`` (the stored view against its recomputation) must pass.  The readers (``rows``,
``read``, ``show --format jsonl|table``, ``explain``, ``view describe``) are checked on the
same views.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pytest

from idivm import cli
from idivm.algebra.builder import VALUE_COLUMN, VALUE_NAME
from idivm.errors import UnsupportedError
from idivm.provenance.ids import HIDDEN
from test_relational_views import norm

duckdb = pytest.importorskip("duckdb")

SCHEMAS = {
    "parts": pa.schema([("pid", pa.int64()), ("price", pa.float64()), ("kind", pa.string())]),
    "links": pa.schema([("did", pa.int64()), ("pid", pa.int64())]),
    "users": pa.schema([("uid", pa.int64()), ("name", pa.string()), ("years", pa.list_(pa.int64()))]),
}
KEYS = {"parts": ("pid",), "links": ("did", "pid"), "users": ("uid",)}

ROWS = {
    "parts": [{"pid": i, "price": None if i == 4 else float(i * 7 % 50), "kind": "abc"[i % 3]}
              for i in range(1, 13)],
    "links": [{"did": d, "pid": p} for d in range(1, 6) for p in range(1, 13) if (d * p) % 4 == 1],
    "users": [{"uid": 1, "name": "Ann", "years": [2019, 2020]}, {"uid": 2, "name": "Bo", "years": []},
              {"uid": 3, "name": "Cy", "years": [2020, 2021, 2022]}, {"uid": 4, "name": "Dee", "years": None},
              {"uid": 5, "name": "Eve", "years": [2018]}],
}

#: one batch of every kind of change: inserts, updates of projected and filtered columns (a
#: price set to NULL), deletes, a delete then reinsert, edits of a nested list
BATCH = {
    "parts": [{"pid": 13, "price": 33.0, "kind": "a"}, {"pid": 2, "price": 41.0, "kind": "b"},
              {"pid": 5, "price": None, "kind": "c"}, {"__delete": {"pid": 7}},
              {"__delete": {"pid": 9}}, {"pid": 9, "price": 1.5, "kind": "a"}, {"pid": 3, "price": 3.0, "kind": "c"}],
    "links": [{"did": 6, "pid": 13}, {"did": 1, "pid": 13}, {"__delete": {"did": 1, "pid": 1}}],
    "users": [{"uid": 6, "name": "Fay", "years": [2022, 2022]}, {"uid": 1, "name": "Ann", "years": [2020]},
              {"__delete": {"uid": 5}}, {"uid": 4, "name": "Dee", "years": [2017]}],
}


@dataclass(frozen=True)
class ScalarView:
    """A view of values, defined once per strategy of ``strategies`` (and with --runslow of
    ``slow_strategies``) as ``<name>_<strategy>``; ``duckdb``: the same query in DuckDB's SQL."""

    name: str
    query: str  # SQL++ after CREATE VIEW name AS
    duckdb: str  # one column
    strategies: tuple[str, ...]
    slow_strategies: tuple[str, ...] = ()
    #: a global aggregate: a view without IDs, which every strategy recomputes
    single_row: bool = False

    def text(self, strategy: str) -> str:
        return f"CREATE VIEW {self.name}_{strategy} AS {self.query}"


#: (DISTINCT VALUE, the unnest to scalars and UNION ALL of scalars run with --runslow only;
#: tests/test_differential.py maintains views of the first two kinds by default)
VIEWS = [
    ScalarView("prices", "SELECT VALUE p.price FROM parts p WHERE p.price > 10 OR p.price IS NULL",
               "SELECT price FROM parts WHERE price > 10 OR price IS NULL", ("id",), ("tuple", "recompute", "auto")),
    ScalarView("doubled", "SELECT VALUE p.price * 2 + l.did FROM links l JOIN parts p ON p.pid = l.pid",
               "SELECT p.price * 2 + l.did FROM links l JOIN parts p ON p.pid = l.pid", ("tuple",), ("id",)),
    ScalarView("part_count", "SELECT VALUE COUNT(*) FROM parts p WHERE p.kind <> 'c'",
               "SELECT count(*) FROM parts WHERE kind <> 'c'", ("auto",), ("id", "recompute"), single_row=True),
    ScalarView("kind_totals", "SELECT VALUE SUM(p.price) FROM links l JOIN parts p ON p.pid = l.pid GROUP BY p.kind",
               "SELECT sum(p.price) FROM links l JOIN parts p ON p.pid = l.pid GROUP BY p.kind",
               ("maps",), ("id", "tuple")),
    ScalarView("kinds", "SELECT DISTINCT VALUE p.kind FROM parts p WHERE p.price < 40",
               "SELECT DISTINCT kind FROM parts WHERE price < 40", (), ("id",)),
    ScalarView("ids_and_dids", "SELECT VALUE p.pid FROM parts p WHERE p.price < 20 UNION ALL "
               "SELECT VALUE l.did FROM links l",
               "SELECT pid FROM parts WHERE price < 20 UNION ALL SELECT did FROM links", (), ("id", "recompute")),
    # a view of collections: each user's years (a nested array column), and their elements
    ScalarView("year_lists", "SELECT VALUE u.years FROM users u WHERE u.name <> 'Bo'",
               "SELECT years FROM users WHERE name <> 'Bo'", ("id",), ("tuple",)),
    ScalarView("years", "SELECT VALUE y FROM users u, u.years AS y",
               "SELECT unnest(years) FROM users", (), ("id", "auto")),
]


def cases(slow: bool):
    for v in VIEWS:
        for s in v.strategies:
            yield v, s
        for s in v.slow_strategies:
            if slow:
                yield v, s


class Oracle:
    def __init__(self):
        self.data = {t: {tuple(r[k] for k in KEYS[t]): copy.deepcopy(r) for r in rows} for t, rows in ROWS.items()}

    def apply(self, table: str, lines: list[dict]) -> None:
        for line in lines:
            if "__delete" in line:
                self.data[table].pop(tuple(line["__delete"][k] for k in KEYS[table]), None)
            else:
                self.data[table][tuple(line[k] for k in KEYS[table])] = copy.deepcopy(line)

    def values(self, sql: str) -> Counter:
        con = duckdb.connect()
        try:
            for name, rows in self.data.items():
                con.register(f"{name}_arrow", pa.Table.from_pylist(list(rows.values()), schema=SCHEMAS[name]))
                con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
            cur = con.execute(sql)
            assert len(cur.description) == 1
            return bag(r[0] for r in cur.fetchall())
        finally:
            con.close()


def value_key(v):
    """A value as a hashable, order-free key (a list is a bag: sorted), numbers rounded."""
    if isinstance(v, (list, tuple)):
        return ("bag", tuple(sorted((value_key(x) for x in v), key=repr)))
    return norm(v)


def bag(values) -> Counter:
    return Counter(value_key(v) for v in values)


@pytest.fixture(scope="module")
def defined(spark, tmp_path_factory, request):
    """A warehouse with the tables and every view of :data:`VIEWS` (its default strategies; with
    --runslow every strategy), the oracle's copy of the data, and the names defined."""
    from idivm.warehouse import Warehouse

    slow = request.config.getoption("--runslow")
    wh = Warehouse(tmp_path_factory.mktemp("scalar") / "wh", spark=spark)
    for name, rows in ROWS.items():
        wh.create_table(name, list(KEYS[name]), pa.Table.from_pylist(rows, schema=SCHEMAS[name]))
    names = {}
    for view, strategy in cases(slow):
        info = wh.define(view.text(strategy), strategy=strategy)
        names[info.name] = (view, strategy)
    return wh, Oracle(), names


def check(wh, oracle: Oracle, names: dict, context: str) -> None:
    problems = []
    for name, (view, strategy) in names.items():
        actual, expected = bag(wh.rows(name)), oracle.values(view.duckdb)
        if actual != expected:
            problems.append(f"{context}: {name} differs from DuckDB: missing {dict(expected - actual)}, "
                            f"unexpected {dict(actual - expected)}")
    assert not problems, "\n".join(problems)


def test_scalar_views_match_duckdb_and_their_recomputation_through_changes(defined, tmp_path):
    wh, oracle, names = defined
    check(wh, oracle, names, "after define")
    for table, lines in BATCH.items():
        path = tmp_path / f"{table}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        wh.ingest(table, path, format="rows")
        oracle.apply(table, lines)
    problems = []
    for name, (view, strategy) in names.items():
        (result,) = wh.maintain(name)
        if result.version is None:
            problems.append(f"{name}: committed nothing")
        # the views without IDs (a global aggregate) are recomputed by every strategy
        if strategy in ("id", "tuple", "maps") and not view.single_row and result.strategy != strategy:
            problems.append(f"{name}: maintained by {result.strategy} ({result.note}), not {strategy}")
        verification = wh.verify(name)
        if not verification.ok:
            problems.append(verification.summary())
    assert not problems, "\n".join(problems)
    check(wh, oracle, names, "after the batch")


def test_readers_give_the_values(defined):
    wh, oracle, names = defined
    assert wh.rows("part_count_auto") == [sum(1 for r in oracle.data["parts"].values() if r["kind"] != "c")]
    df = wh.read("prices_id")
    assert df.columns == [VALUE_NAME]
    assert bag(r[VALUE_NAME] for r in df.collect()) == bag(wh.rows("prices_id"))
    assert all(isinstance(v, list) or v is None for v in wh.rows("year_lists_id"))
    assert len(wh.rows("doubled_tuple", limit=2)) == 2
    # the view's one column is hidden, as its IDs are
    assert VALUE_COLUMN.startswith(HIDDEN)
    assert wh.view_info("prices_id").schema.names == (VALUE_COLUMN,)


def test_show_explain_and_describe_a_view_of_scalars(defined, capsys, spark):
    wh, _, _ = defined
    partitions = spark.conf.get("spark.sql.shuffle.partitions")

    def run(*args):
        try:
            code = cli.main(["--warehouse", str(wh.path), *args])
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", partitions)
        out, err = capsys.readouterr()
        assert (code, err) == (0, ""), err
        return out

    lines = run("show", "prices_id", "--format", "jsonl").splitlines()
    assert bag(json.loads(line) for line in lines) == bag(wh.rows("prices_id"))
    assert all(not line.startswith("{") for line in lines)
    lines = run("show", "year_lists_id", "--format", "jsonl").splitlines()
    assert bag(json.loads(line) for line in lines) == bag(wh.rows("year_lists_id"))
    table = run("show", "part_count_auto").splitlines()
    assert table[0].split() == [VALUE_NAME]
    assert table[1].strip() == str(wh.rows("part_count_auto")[0])
    assert table[-1] == "(1 row)"
    explained = run("explain", "prices_id")
    assert explained.splitlines()[0] == f"view prices_id: {{{{double}}}} (values, stored in column {VALUE_COLUMN})"
    assert json.loads(run("explain", "year_lists_id", "--format", "json"))["values"] == {"bag": "int"}
    described = run("view", "describe", "year_lists_id")
    assert f"  {VALUE_NAME}: {{{{int}}}} (a view of values, stored in column {VALUE_COLUMN})" in described


def test_a_view_of_values_of_unknown_type_is_refused(make_warehouse):
    wh = make_warehouse()
    wh.create_table("parts", "pid", [{"pid": 1, "price": 2.0}])
    with pytest.raises(UnsupportedError, match=r"1:\d+: .*cannot be inferred"):
        wh.define("CREATE VIEW v AS SELECT VALUE NULL FROM parts p")
    assert wh.views() == []

