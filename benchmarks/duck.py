"""DuckDB recomputing the benchmark views: the non-incremental baseline of the suite.

Input: the Parquet files a dataset generator wrote (``OUT/data/<table>.parquet``) and, batch by
batch, the same changes idivm ingests.  The tables are built in one in-memory DuckDB database
from those files, and every batch is applied to them by DuckDB itself (devices: the price
updates' ``rows`` file; Yelp-like: the batch's Debezium events, the last event of a key
winning), not copied from idivm's tables, so that a result equal to idivm's also checks
idivm's ingest.  What is timed is the recomputation only: ``CREATE OR REPLACE TABLE v AS
<query>`` on one connection with ``threads`` (default 2) threads.

The queries: for the relational devices views, the idivm view text itself with its SQL++
string literals in SQL's quotes (:func:`relational_sql`; the same derivation as
``tests/test_datasets.py::test_devices_views_on_sample_with_duckdb``); for the nested Yelp-like
views, hand-written SQL building the same bags as lists of structs (:data:`YELP_SQL`).

A :class:`Checksum` is a few aggregates (row count, sums) computed on the DuckDB table and, with
the Spark SQL twin of each expression, on idivm's stored view: :func:`compare` says whether
they agree.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: threads of the DuckDB connection unless told otherwise: the 2 cores of our machines
DEFAULT_THREADS = 2

METHOD = ("DuckDB: CREATE OR REPLACE TABLE v AS <the view's query> over the same base data with "
          "the same batches applied; recomputation only, median over the timed runs, one in-memory "
          "connection with threads={threads}")

CREATE_VIEW = re.compile(r"\A\s*CREATE\s+VIEW\s+\w+\s+AS\b", re.IGNORECASE)
COMMENT = re.compile(r"--[^\n]*")
STRING = re.compile(r'"([^"\'\\]*)"')


def relational_sql(text: str) -> str:
    """The query of a relational ``CREATE VIEW v AS ...`` SQL++ text as SQL: comments dropped,
    ``"phone"`` written ``'phone'``.  Only for texts whose SQL++ reads as SQL once its string
    literals are quoted so (``SELECT`` lists of columns, ``NATURAL JOIN``, ``WHERE``, ``GROUP
    BY``); a text with a single quote or an escaped double quote is refused."""
    body = COMMENT.sub("", text)
    match = CREATE_VIEW.search(body)
    if match is None:
        raise ValueError("not a CREATE VIEW ... AS text")
    body = body[match.end():]
    if "'" in body or "\\" in body:
        raise ValueError("a view text with single quotes or backslashes is not translated")
    return " ".join(STRING.sub(r"'\1'", body).split())


#: the Yelp-like views of ``benchmarks/yelp.py`` as DuckDB SQL.  ``reviews.*, users.*`` of the
#: SQL++ text is one struct of the review's and the author's fields (``user_id`` once); the
#: correlated subquery is ``ARRAY(SELECT ...)``, an empty list for a business without reviews,
#: like the empty bag of SQL++; ``GROUP AS g`` is a list of structs {businesses, reviews, users}
#: whose review and author are NULL when the outer join found none.
YELP_SQL: dict[str, str] = {
    "sf_reviews": """
SELECT b.business_id, ARRAY(
    SELECT {'review_id': r.review_id, 'user_id': r.user_id, 'business_id': r.business_id,
            'stars': r.stars, 'date': r.date, 'text': r.text, 'user_name': u.user_name,
            'fans': u.fans, 'friends': u.friends, 'elite': u.elite}
    FROM reviews r JOIN users u ON r.user_id = u.user_id
    WHERE r.business_id = b.business_id) AS full_reviews
FROM businesses b
WHERE b.city = 'San Francisco'
""",
    "sf_reviews_grouped": """
SELECT b.business_id,
       list({'businesses': b,
             'reviews': CASE WHEN r.review_id IS NULL THEN NULL ELSE r END,
             'users': CASE WHEN r.review_id IS NULL THEN NULL ELSE u END}) AS members,
       coalesce(list({'review_id': r.review_id, 'stars': r.stars, 'user_name': u.user_name,
                      'elite': u.elite}) FILTER (WHERE r.review_id IS NOT NULL), []) AS full_reviews,
       count(r.review_id) AS n_reviews
FROM businesses b LEFT JOIN (reviews r JOIN users u ON r.user_id = u.user_id)
     ON b.business_id = r.business_id
WHERE b.city = 'San Francisco'
GROUP BY b.business_id
""",
}


@dataclass(frozen=True, slots=True)
class Checksum:
    """Aggregates over a view compared between DuckDB and idivm: label -> (DuckDB SQL, Spark SQL)."""

    aggregates: tuple[tuple[str, str, str], ...]

    def duckdb(self, con: Any, table: str) -> dict[str, Any]:
        (row,) = con.execute(f"SELECT {', '.join(d for _, d, _ in self.aggregates)} FROM {table}").fetchall()
        return {label: value for (label, _, _), value in zip(self.aggregates, row)}

    def spark(self, df: Any) -> dict[str, Any]:
        row = df.selectExpr(*(s for _, _, s in self.aggregates)).collect()[0]
        return {label: row[i] for i, (label, _, _) in enumerate(self.aggregates)}


def column_checksum(columns: Iterable[tuple[str, str]]) -> Checksum:
    """Row count and the sum of every numeric column (``columns``: name, DuckDB type)."""
    aggregates = [("rows", "count(*)", "count(*)")]
    for name, kind in columns:
        if re.match(r"(BIG|SMALL|TINY|HUGE)?INT|INTEGER|DOUBLE|FLOAT|REAL|DECIMAL", kind.upper()):
            aggregates.append((f"sum({name})", f"sum({name})", f"sum(`{name}`)"))
    return Checksum(tuple(aggregates))


#: what the nested views are checked on: rows, the reviews in their bags and the stars of those
YELP_CHECKSUMS: dict[str, Checksum] = {
    "sf_reviews": Checksum((
        ("rows", "count(*)", "count(*)"),
        ("reviews", "sum(len(full_reviews))", "sum(size(full_reviews))"),
        ("stars", "sum(list_sum(list_transform(full_reviews, lambda x: x.stars)))",
         "sum(aggregate(full_reviews, 0L, (acc, x) -> acc + x.stars))"),
    )),
    "sf_reviews_grouped": Checksum((
        ("rows", "count(*)", "count(*)"),
        ("members", "sum(len(members))", "sum(size(members))"),
        ("reviews", "sum(len(full_reviews))", "sum(size(full_reviews))"),
        ("n_reviews", "sum(n_reviews)", "sum(n_reviews)"),
        ("stars", "sum(list_sum(list_transform(full_reviews, lambda x: x.stars)))",
         "sum(aggregate(full_reviews, 0L, (acc, x) -> acc + x.stars))"),
    )),
}


def compare(expected: Mapping[str, Any], actual: Mapping[str, Any], rel_tol: float = 1e-9) -> list[str]:
    """The aggregates on which ``actual`` differs from ``expected``, as ``label: a != b`` lines
    (floats within ``rel_tol``; a missing sum on both sides, e.g. of an empty view, agrees)."""
    out = []
    for label, want in expected.items():
        got = actual.get(label)
        if want is None or got is None:
            same = (want in (None, 0)) and (got in (None, 0))
        elif isinstance(want, float) or isinstance(got, float):
            same = math.isclose(float(want), float(got), rel_tol=rel_tol, abs_tol=1e-6)
        else:
            same = int(want) == int(got)
        if not same:
            out.append(f"{label}: DuckDB {want!r} != idivm {got!r}")
    return out


def same_rows(got: Sequence[tuple], want: Sequence[tuple], rel_tol: float = 1e-9) -> bool:
    """Whether the rows ``got`` (idivm's ``rows``) and ``want`` (DuckDB's) are the same bag:
    floats within ``rel_tol`` (or 1e-6 apart), dates as the ISO text ``rows`` gives."""
    import datetime

    def value(v: Any) -> Any:
        return v.isoformat() if isinstance(v, datetime.date) else v

    def close(a: Any, b: Any) -> bool:
        if a is None or b is None:
            return a is b
        if isinstance(a, float) or isinstance(b, float):
            return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-6)
        return a == b

    def key(r: tuple) -> tuple:
        return tuple((v is None, round(v, 4) if isinstance(v, float) else v) for v in r)

    got = sorted((tuple(map(value, r)) for r in got), key=key)
    want = sorted((tuple(map(value, r)) for r in want), key=key)
    return len(got) == len(want) and all(len(g) == len(w) and all(close(a, b) for a, b in zip(g, w))
                                         for g, w in zip(got, want))


class DuckRecompute:
    """One in-memory DuckDB database holding a dataset's tables, kept at the same state as
    idivm's base tables by applying the same batches."""

    def __init__(self, threads: int = DEFAULT_THREADS):
        import duckdb

        self.threads = threads
        self.con = duckdb.connect(config={"threads": threads})

    def close(self) -> None:
        self.con.close()

    def load(self, data: Path, tables: Iterable[str]) -> dict[str, float]:
        """``CREATE TABLE t AS SELECT * FROM read_parquet('data/t.parquet')`` for every table;
        seconds per table."""
        seconds = {}
        for table in tables:
            started = time.perf_counter()
            self.con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet(?)",
                             [str(data / f"{table}.parquet")])
            seconds[table] = time.perf_counter() - started
        return seconds

    def apply_price_updates(self, path: Path) -> int:
        """The devices batch: every ``{"pid", "price"}`` of the ``rows`` file at ``path`` sets that
        part's price; the rows updated."""
        row = self.con.execute(
            "UPDATE parts SET price = u.price FROM read_json(?, format='newline_delimited', "
            "columns={'pid': 'BIGINT', 'price': 'DOUBLE'}) AS u WHERE parts.pid = u.pid",
            [str(path)]).fetchall()
        return int(row[0][0]) if row else 0

    def apply_events(self, table: str, key: Sequence[str], schema: Any, events: Sequence[Mapping[str, Any]]) -> int:
        """A table's Debezium events (``{"op", "before", "after"}``), in order: the rows of every key
        they touch are deleted, then the last state of each key that is not deleted is inserted.
        ``schema`` is the table's Arrow schema.  Returns the number of keys touched."""
        import pyarrow as pa

        last: dict[tuple, Mapping[str, Any] | None] = {}
        for event in events:
            row = event["after"] if event["op"] != "d" else event["before"]
            last[tuple(row[k] for k in key)] = None if event["op"] == "d" else event["after"]
        if not last:
            return 0
        keys = pa.table({k: [t[i] for t in last] for i, k in enumerate(key)},
                        schema=pa.schema([schema.field(k) for k in key]))
        rows = pa.Table.from_pylist([r for r in last.values() if r is not None], schema=schema)
        self.con.register("touched_keys", keys)
        self.con.register("new_rows", rows)
        try:
            match = " AND ".join(f"{table}.{k} = touched_keys.{k}" for k in key)
            self.con.execute(f"DELETE FROM {table} WHERE EXISTS (SELECT 1 FROM touched_keys WHERE {match})")
            self.con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM new_rows")
        finally:
            self.con.unregister("touched_keys")
            self.con.unregister("new_rows")
        return len(last)

    def recompute(self, table: str, sql: str) -> float:
        """``CREATE OR REPLACE TABLE table AS sql``, timed (seconds)."""
        started = time.perf_counter()
        self.con.execute(f"CREATE OR REPLACE TABLE {table} AS {sql}")
        return time.perf_counter() - started

    def columns(self, table: str) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self.con.execute(f"DESCRIBE {table}").fetchall()]

    def version(self) -> str:
        import duckdb

        return duckdb.__version__
