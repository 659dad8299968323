"""AsterixDB's SQL++ runtime tests, converted (:mod:`tests.conformance.asterix`) and run as views.

``pytest tests/conformance --asterixdb DIR`` (DIR: a local copy of apache/asterixdb) runs every
query of the groups in :data:`~tests.conformance.asterix.GROUPS` (``--asterixdb-groups`` for
fewer) and prints a pass table per group; without DIR the cases are skipped.

Each query in scope becomes a warehouse of its own: a base table per dataset it reads, filled
with the case's inserted rows (an empty dataset: created with its record type as the declared
schema), and the query as a view (``auto`` strategy).  It passes when

1. the view, as defined, equals AsterixDB's expected result (a bag of values: the query's
   top-level ORDER BY is stripped; numbers compare by value to 12 significant digits), and
2. maintained through changes it still does: half of each table's rows are deleted (one
   ingested batch, ``maintain``, ``verify`` against recomputation) and inserted again (a second
   batch, ``maintain``), after which the view must equal the expected result again.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from .asterix import GROUPS, Bag, cleanup, data_reader, queries, runtime_tests, same_bag


def pytest_generate_tests(metafunc):
    if "query" not in metafunc.fixturenames:
        return
    mirror = metafunc.config.getoption("--asterixdb")
    if not mirror:
        metafunc.parametrize("query", [None], ids=["no-asterixdb-mirror"])
        return
    groups = metafunc.config.getoption("--asterixdb-groups")
    groups = tuple(g.strip() for g in groups.split(",")) if groups else GROUPS
    tree = runtime_tests(mirror)
    try:
        found = queries(tree, groups, data_reader(mirror))
    finally:
        cleanup(tree)
    metafunc.parametrize("query", found, ids=[q.id for q in found])


def plain(v):
    """A literal as a row value of ``create_table`` (multisets as lists)."""
    if isinstance(v, Bag):
        return [plain(x) for x in v.items]
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


def _json(v):
    if isinstance(v, (dt.date, dt.datetime, dt.time)):
        return v.isoformat()
    raise TypeError(type(v).__name__)


@pytest.fixture
def released(spark):
    """After each query: Spark's cached data and Delta's cached table snapshots released, so
    that a run of hundreds of warehouses in one session does not fill the driver's heap."""
    yield
    spark.catalog.clearCache()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def test_query(query, make_warehouse, record_outcome, tmp_path, released):
    if query is None:
        pytest.skip("no asterixdb mirror: pytest tests/conformance --asterixdb DIR")
    if query.excluded:
        record_outcome(query, "excluded", query.excluded)
        pytest.skip(query.excluded)
    wh = make_warehouse("conformance")
    stage = "create table"
    try:
        tables = {ds.name: (ds, [plain(r) for r in ds.rows.values()]) for ds in query.datasets}
        for ds, rows in tables.values():
            if rows or ds.type_text is None:
                wh.create_table(ds.name, ds.key, rows)
            else:  # an empty dataset: a table of its declared record type
                wh.create_table(ds.name, ds.key, None, schema=ds.type_text)
        stage = "define"
        name = wh.define(query.view).name
        stage = "result"
        actual = wh.rows(name)
        if not same_bag(query.expected, actual):
            record_outcome(query, "fail", "result differs")
            pytest.fail(f"result differs\nexpected: {query.expected}\nactual:   {actual}")
        for round_, make in (("delete", lambda ds, r: {"__delete": {k: r[k] for k in ds.key}}),
                             ("insert", lambda ds, r: r)):
            stage = f"ingest ({round_})"
            for ds, rows in tables.values():
                half = rows[: (len(rows) + 1) // 2]
                if half:
                    batch = tmp_path / f"{ds.name}-{round_}.jsonl"
                    batch.write_text("".join(json.dumps(make(ds, r), default=_json) + "\n" for r in half))
                    wh.ingest(ds.name, batch, format="rows", strict=True)
            stage = f"maintain ({round_})"
            wh.maintain(name)
            stage = f"verify ({round_})"
            check = wh.verify(name)
            if not check.ok:
                record_outcome(query, "fail", f"maintained view differs from recomputation ({round_})")
                pytest.fail(check.summary())
        stage = "result after maintenance"
        actual = wh.rows(name)
        if not same_bag(query.expected, actual):
            record_outcome(query, "fail", "result after maintenance differs")
            pytest.fail(f"result after maintenance differs\nexpected: {query.expected}\nactual:   {actual}")
    except pytest.fail.Exception:
        raise
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0][:200]
        record_outcome(query, "fail", f"{stage}: {type(e).__name__}: {first}")
        raise
    record_outcome(query, "pass")
