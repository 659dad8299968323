"""Key-restricted reads of base-table states (:mod:`idivm.algebra.restrict`).

The candidates are checked on the thesis' view V (§2.9): the business that enters the view is
recomputed with its subquery (§2.13), whose scan of ``reviews@post`` may read only that
business's reviews (the correlation conjunct, with the values of the outer tuples), and whose
scan of ``users@post`` only their authors (the join conjunct, with the values of the restricted
reviews).  Operators that do not pass a rejected row's absence up unchanged (the preserved side
of a left join, γ) stop a restriction.  End to end, a restricted run reads the named keys only
(the filter reaches the Parquet reader) and gives the rows written by hand.
"""

from __future__ import annotations

import re

from test_nested_maintain import R, SF, THESIS_V, TINY, _events, _maintained, by_review, tiny_warehouse
from test_nested_rules import V, from_, script_of

from idivm.algebra import operators as O
from idivm.algebra.expressions import Call, Const, Field, TableRef, TupleExpr, Var
from idivm.algebra import restrict


def scan(table: str, var: str, input_: O.Operator | None = None) -> O.ScanCollection:
    return O.ScanCollection(input_ or O.Ground(), TableRef(table), var)


def eq(a: str, fa: str, b: str, fb: str) -> Call:
    return Call("eq", (Field(Var(a), fa), Field(Var(b), fb)))


def restricted(plan: O.Operator) -> set[tuple[str, str, str]]:
    """(table scanned, column, the source's tables) of every candidate."""
    return {(str(c.scan.source.name), c.column, ",".join(sorted(str(s.source.name) for s in restrict.table_scans(c.source))))
            for c in restrict.candidates(plan)}


def test_the_subquery_of_an_entering_business_reads_its_reviews_and_their_authors_only():
    (s,) = [s for s in from_(script_of(V), "Δ(businesses)") if s.kind == "replace"]
    found = restricted(s.rows)
    assert ("reviews@post", "business_id", "Δpost(businesses)") in found  # the outer tuples' values
    assert ("users@post", "user_id", "reviews@post") in found  # the (restricted) reviews' values
    correlated = next(c for c in restrict.candidates(s.rows) if str(c.scan.source.name) == "reviews@post"
                      and c.column == "business_id")
    assert isinstance(correlated.source, O.Select)  # the SF businesses, the input of the ApplyPlan
    assert correlated.value == Field(Var("businesses"), "business_id")


def test_the_elements_of_a_nested_replace_read_the_users_and_businesses_of_the_changed_reviews_only():
    (s,) = [s for s in from_(script_of(V), "Δ(reviews)") if s.kind == "nested_replace"]
    found = restricted(s.rows)
    assert ("users@post", "user_id", "Δpost(reviews)") in found
    assert ("businesses@post", "business_id", "Δpost(reviews)") in found  # the join side binding reviews


def test_a_preserved_side_of_a_left_join_is_not_restricted_by_its_own_condition():
    plan = O.ReturnBag(O.LeftJoin(scan("t@post", "t"), scan("Δ(s)", "s"), eq("t", "a", "s", "b")), Var("t"))
    assert restricted(plan) == {("Δ(s)", "b", "t@post")}  # only the side whose unmatched rows vanish
    filtered = O.ReturnBag(O.Select(O.LeftJoin(scan("t@post", "t"), scan("Δ(s)", "s"), Const(True)),
                                    eq("t", "a", "s", "b")), Var("t"))
    assert ("t@post", "a", "Δ(s)") in restricted(filtered)  # a σ above drops them: restricted



def test_the_padded_side_of_a_left_join_is_restricted_by_a_conjunct_above_that_rejects_its_padding(spark, tmp_path):
    """σ or ⋉ above ``l ⟕ r`` on a column of r: a row of r the restriction drops would leave its
    left tuple padded with NULLs, which the conjunct rejects like the pair it replaces, so r
    may be read restricted.  Not with ``<=>`` and a NULL value, which matches the padding: then
    r is read whole, and the padded rows of the left tuples without a match come out right."""
    import pyarrow as pa

    from idivm.exec.compiler import PlanCompiler
    from idivm.storage import delta

    same = lambda a, fa, b, fb: Call("same", (Field(Var(a), fa), Field(Var(b), fb)))  # noqa: E731
    plan = O.ReturnBag(O.SemiJoin(O.LeftJoin(scan("l@post", "l"), scan("r@post", "r"), eq("l", "a", "r", "a")),
                                  scan("Δ(k)", "k"), same("r", "id", "k", "id")),
                       TupleExpr((("a", Field(Var("l"), "a")), ("id", Field(Var("r"), "id")))))
    (c,) = [c for c in restrict.candidates(plan) if c.scan.source.name == "r@post" and c.column == "id"]
    assert (c.padded, c.null_safe) == (True, True)

    delta.create_table(tmp_path / "l", pa.table({"a": [f"k{i}" for i in range(1, 6)]}))
    delta.create_table(tmp_path / "r", pa.table({"id": ["r1", "r2", "r3"], "a": ["k1", "k1", "k2"]}))

    def run(keys: list) -> tuple[list, list[str]]:
        tables = {"l@post": delta.read_spark(spark, tmp_path / "l"), "r@post": delta.read_spark(spark, tmp_path / "r"),
                  "Δ(k)": spark.createDataFrame(pa.table({"id": pa.array(keys, pa.string())}))}
        heard: list[str] = []
        compiler = PlanCompiler(spark, tables.__getitem__, restrict=lambda name: "@" in name, progress=heard.append)
        rows = sorted((r["a"], r["id"]) for r in compiler.evaluate(plan).collect())
        return rows, heard

    assert run(["r1"]) == ([("k1", "r1")], ["r@post: read where id is one of 1 value(s)"])
    # the left tuples without a match, k3 to k5 (k1 and k2 have theirs, which r restricted would drop)
    assert run([None]) == ([("k3", None), ("k4", None), ("k5", None)], [])


def test_an_aggregate_between_the_conjunct_and_the_scan_stops_the_restriction():
    grouped = O.GroupBy(scan("t@post", "t"), (("t", Var("t")),))  # γ over t: the group rebinds t
    plan = O.ReturnBag(O.InnerJoin(grouped, scan("Δ(s)", "s"), eq("t", "a", "s", "b")), Var("t"))
    assert ("t@post", "a", "Δ(s)") not in restricted(plan)


def test_a_scan_shared_by_two_branches_is_not_restricted():
    shared = scan("t@post", "t")
    plan = O.ReturnBag(O.UnionAll(O.Select(O.InnerJoin(shared, scan("Δ(s)", "s")), eq("t", "a", "s", "b")),
                                  O.InnerJoin(shared, scan("Δ(s)", "s"))), Var("t"))
    assert id(shared) not in restrict.scanned_once(plan)


def test_a_business_entering_the_view_reads_only_its_reviews_and_their_authors(make_warehouse, tmp_path):
    """b4 (Madison, one review r6 by u1) moves to San Francisco: its row is computed from
    the reviews of b4 and the user u1 only, and equals the row written by hand."""
    wh = tiny_warehouse(make_warehouse, "restricted")
    wh.define(THESIS_V, strategy="id")
    b4 = next(row for row in TINY["businesses"] if row["business_id"] == "b4")
    _events(tmp_path, wh, "businesses", (b4, {**b4, "city": SF}))
    heard: list[str] = []
    (result,) = wh.maintain("v", progress=heard.append)
    assert "reviews@post: read where business_id is one of 1 value(s)" in heard, heard
    assert "users@post: read where user_id is one of 1 value(s)" in heard, heard
    assert (result.inserted, result.updated, result.deleted) == (1, 0, 0), result.summary()
    r6 = next(row for row in TINY[R] if row["review_id"] == "r6")
    assert by_review(wh.rows("v"))[("b4", "r6")] == {**r6, "user_name": "Sebastien", "fans": 10,
                                                      "elite": [2012, 2013]}
    assert wh.verify("v").ok
    # and again with a review of b3 and a business that stays out: exact, checked by verify
    _events(tmp_path, wh, R, (None, {"review_id": "r7", "user_id": "u2", "business_id": "b3", "stars": 4}))
    _maintained(wh, "v")


def test_the_restriction_reaches_the_parquet_reader(spark, tmp_path):
    """The filter of a restricted scan is pushed down to the Parquet scan (so its row groups
    and pages are skipped by their statistics), not evaluated after a full read."""
    import pyarrow as pa

    from idivm.exec.compiler import PlanCompiler
    from idivm.storage import delta

    delta.create_table(tmp_path / "t", pa.table({"a": [f"k{i}" for i in range(100)], "x": list(range(100))}))
    tables = {"t@post": delta.read_spark(spark, tmp_path / "t"),
              "Δ(s)": spark.createDataFrame(pa.table({"b": ["k3", "k7"]}))}
    heard: list[str] = []
    compiler = PlanCompiler(spark, tables.__getitem__, restrict=lambda name: "@" in name, progress=heard.append)
    plan = O.ReturnBag(O.InnerJoin(scan("Δ(s)", "s"), scan("t@post", "t"), eq("t", "a", "s", "b")),
                       Field(Var("t"), "x"))
    df = compiler.evaluate(plan)
    assert sorted(r["value"] for r in df.collect()) == [3, 7]
    assert heard == ["t@post: read where a is one of 2 value(s)"]
    assert len(compiler.cached) == 0  # no other restriction reads it
    executed = df._jdf.queryExecution().executedPlan().toString()
    assert re.search(r"PushedFilters: \[[^\]]*In\(a, \[k3,k7\]\)", executed), executed


def test_a_restricted_read_that_restricts_another_scan_is_read_once(spark, tmp_path):
    """t@post, restricted by the keys of Δ(s), gives the keys that restrict u@post: its
    restricted rows are kept in memory, read by the values query of u and by the result."""
    import pyarrow as pa

    from idivm.exec.compiler import PlanCompiler
    from idivm.storage import delta

    delta.create_table(tmp_path / "t", pa.table({"a": [f"k{i}" for i in range(100)], "x": list(range(100))}))
    delta.create_table(tmp_path / "u", pa.table({"x": list(range(100)), "y": [f"y{i}" for i in range(100)]}))
    tables = {"t@post": delta.read_spark(spark, tmp_path / "t"), "u@post": delta.read_spark(spark, tmp_path / "u"),
              "Δ(s)": spark.createDataFrame(pa.table({"b": ["k3", "k7", "k8"]}))}
    heard: list[str] = []
    compiler = PlanCompiler(spark, tables.__getitem__, restrict=lambda name: "@" in name, progress=heard.append)
    plan = O.ReturnBag(O.InnerJoin(O.InnerJoin(scan("Δ(s)", "s"), scan("t@post", "t"), eq("t", "a", "s", "b")),
                                   scan("u@post", "u"), eq("u", "x", "t", "x")), Field(Var("u"), "y"))
    df = compiler.evaluate(plan)
    assert sorted(r["value"] for r in df.collect()) == ["y3", "y7", "y8"]
    assert heard == ["t@post: read where a is one of 3 value(s)", "u@post: read where x is one of 3 value(s)"]
    (kept,) = compiler.cached
    assert kept.is_cached and sorted(r["x"] for r in kept.collect()) == [3, 7, 8]
    compiler.cached.release()


def test_the_values_of_a_restriction_are_computed_once_per_source_and_restrictions(spark, tmp_path):
    """Two statements of a run that restrict the same scan by an equal source read under the
    same restrictions compute the values once; the same source read under another
    restriction (u's keys come from t, restricted by other keys of Δ) computes them again."""
    import pyarrow as pa

    from idivm.exec.compiler import PlanCompiler
    from idivm.storage import delta

    delta.create_table(tmp_path / "t", pa.table({"a": [f"k{i}" for i in range(100)], "x": list(range(100))}))
    delta.create_table(tmp_path / "u", pa.table({"x": list(range(100)), "y": [f"y{i}" for i in range(100)]}))
    tables = {"t@post": delta.read_spark(spark, tmp_path / "t"), "u@post": delta.read_spark(spark, tmp_path / "u"),
              "Δ(s)": spark.createDataFrame(pa.table({"b": ["k3", "k7"]})),
              "Δ(r)": spark.createDataFrame(pa.table({"b": ["k5"]}))}
    compiler = PlanCompiler(spark, tables.__getitem__, restrict=lambda name: "@" in name)
    computed: list[str] = []
    values = compiler._restriction_values
    compiler._restriction_values = lambda c: computed.append(c.scan.source.name) or values(c)

    def plan(delta_: str) -> O.ReturnBag:  # new scan objects every time, as copies of a subplan are
        return O.ReturnBag(O.InnerJoin(O.InnerJoin(scan(delta_, "s"), scan("t@post", "t"), eq("t", "a", "s", "b")),
                                       scan("u@post", "u"), eq("u", "x", "t", "x")), Field(Var("u"), "y"))

    results = [sorted(r["value"] for r in compiler.evaluate(plan(d)).collect()) for d in ("Δ(s)", "Δ(s)", "Δ(r)")]
    assert results == [["y3", "y7"], ["y3", "y7"], ["y5"]]
    assert computed == ["t@post", "u@post", "t@post", "u@post"]  # the second plan computed nothing
    compiler.cached.release()


def test_the_values_of_a_restriction_by_an_i_diff_the_driver_holds_are_taken_without_a_spark_job(
        spark, tmp_path, monkeypatch):
    """t@post restricted by a column of Δ(s), which the driver holds as Arrow, takes the values
    from those rows: no query computes them (the restricted read of t@post, which gives the
    values for u@post, still does); the result is the one without the rows in memory."""
    import pyarrow as pa

    from idivm.exec.compiler import PlanCompiler
    from idivm.storage import delta
    from idivm.storage import spark as spark_rows

    delta.create_table(tmp_path / "t", pa.table({"a": [f"k{i}" for i in range(100)], "x": list(range(100))}))
    delta.create_table(tmp_path / "u", pa.table({"x": list(range(100)), "y": [f"y{i}" for i in range(100)]}))
    held = {"Δ(s)": pa.table({"b": ["k3", "k7", "k8", "k7", None]})}
    tables = {"t@post": delta.read_spark(spark, tmp_path / "t"), "u@post": delta.read_spark(spark, tmp_path / "u"),
              "Δ(s)": spark.createDataFrame(held["Δ(s)"])}
    plan = O.ReturnBag(O.InnerJoin(O.InnerJoin(scan("Δ(s)", "s"), scan("t@post", "t"), eq("t", "a", "s", "b")),
                                   scan("u@post", "u"), eq("u", "x", "t", "x")), Field(Var("u"), "y"))
    jobs: list[str] = []
    to_arrow = spark_rows.arrow_rows  # where idivm collects a DataFrame
    monkeypatch.setattr(spark_rows, "arrow_rows", lambda df: jobs.append(df.columns[0]) or to_arrow(df))
    results, heard = [], []
    for in_memory in (held.get, None):
        jobs.clear()
        said: list[str] = []
        compiler = PlanCompiler(spark, tables.__getitem__, restrict=lambda name: "@" in name, progress=said.append,
                                in_memory=in_memory)
        results.append(sorted(r["value"] for r in compiler.evaluate(plan).collect()))
        heard.append((said, list(jobs)))
        compiler.cached.release()
    assert results == [["y3", "y7", "y7", "y8"]] * 2  # k7 is named twice
    expected = ["t@post: read where a is one of 3 value(s)", "u@post: read where x is one of 3 value(s)"]
    assert heard == [(expected, ["v"]), (expected, ["v", "v"])]


def test_a_subplan_a_query_holds_twice_under_the_same_restrictions_is_computed_once(spark, tmp_path):
    """The keys of a left join's right-side change hold the pairs, and again the pairs with
    the right IDs NULL (the padded tuples): the pairs' join over restricted reads is computed
    once, and the query reads it from memory in both places; the result is the same."""
    import pyarrow as pa

    from idivm.algebra.expressions import NULL
    from idivm.exec.compiler import PlanCompiler
    from idivm.storage import delta

    delta.create_table(tmp_path / "t", pa.table({"a": [f"k{i}" for i in range(100)], "x": list(range(100))}))
    tables = {"t@post": delta.read_spark(spark, tmp_path / "t"),
              "Δ(s)": spark.createDataFrame(pa.table({"b": ["k3", "k7"], "i": [1, 2]}))}

    def pairs() -> O.Operator:  # new scan objects every time, as the generator's copies are
        join = O.InnerJoin(scan("Δ(s)", "s"), scan("t@post", "t"), eq("t", "a", "s", "b"))
        return O.Project(join, (("k", Field(Var("t"), "x")), ("j", Field(Var("s"), "i"))))

    plan = O.ReturnBag(O.UnionAll(pairs(), O.Project(pairs(), (("k", Var("k")), ("j", NULL)))),
                       TupleExpr((("k", Var("k")), ("j", Var("j")))))
    for shared in (True, False):
        compiler = PlanCompiler(spark, tables.__getitem__, restrict=lambda name: "@" in name)
        if not shared:
            compiler._repeated = lambda plan: []
        df = compiler.evaluate(plan)
        assert sorted(map(tuple, df.collect()), key=str) == [(3, 1), (3, None), (7, 2), (7, None)]
        scans = df._jdf.queryExecution().executedPlan().toString().count("FileScan")
        assert (scans == 0) == shared, scans  # shared: computed before, the query reads memory
        compiler.cached.release()


def test_a_scan_is_restricted_by_the_values_of_a_bound_subplan_whose_own_reads_are_not(spark, tmp_path):
    """The keys of a replace are computed first and bound; the post-state query that reads
    them again restricts its scans by their values, although the keys' own plan reads a
    state no conjunct restricts (u@post whole): that plan is not evaluated again."""
    import pyarrow as pa

    from idivm.exec.compiler import PlanCompiler
    from idivm.storage import delta

    delta.create_table(tmp_path / "t", pa.table({"a": [f"k{i}" for i in range(100)], "x": list(range(100))}))
    delta.create_table(tmp_path / "u", pa.table({"b": ["k3", "k9"]}))
    tables = {"t@post": delta.read_spark(spark, tmp_path / "t"), "u@post": delta.read_spark(spark, tmp_path / "u")}
    keys = O.Project(scan("u@post", "u"), (("k", Field(Var("u"), "b")),))
    plan = O.ReturnBag(O.SemiJoin(scan("t@post", "t"), keys, Call("same", (Field(Var("t"), "a"), Var("k")))),
                       Field(Var("t"), "x"))
    for bound in (False, True):
        heard: list[str] = []
        compiler = PlanCompiler(spark, tables.__getitem__, restrict=lambda name: "@" in name, progress=heard.append)
        if bound:
            compiler.bind(keys, spark.createDataFrame(pa.table({"k": ["k3", "k9"]})))
        assert sorted(r["value"] for r in compiler.evaluate(plan).collect()) == [3, 9]
        assert heard == (["t@post: read where a is one of 2 value(s)"] if bound else []), heard


def test_the_rows_a_run_rewrites_are_read_by_the_values_of_their_ids(spark):
    """The view rows named by ID are read through a filter on each ID column that holds for
    every named ID, a NULL one included, and for no other row of this view."""
    import pyarrow as pa

    from idivm.exec.delta_script import _named_ids
    from idivm.storage.spark import Caches

    view = spark.createDataFrame(pa.table({"a": ["x", "x", "y", None, "z"], "b": [1, 2, 1, 3, None],
                                           "v": [10, 20, 30, 40, 50]}))
    named = spark.createDataFrame(pa.table({"a": ["x", None], "b": [2, 3]}))
    ids, only, values = _named_ids(named, Caches())
    assert sorted(values, key=str) == sorted(["x", None], key=str)
    assert sorted(map(tuple, ids.collect()), key=str) == [("x", 2), (None, 3)]
    assert sorted(r["v"] for r in view.filter(only).collect()) == [20, 40]
    # more IDs than the driver may hold (delta-spark engines): they stay in Spark, cached, and
    # the view is not filtered by their values
    bounded = Caches(in_memory_max_rows=1)
    ids, only, values = _named_ids(named, bounded)
    assert values is None and len(bounded) == 1
    assert sorted(map(tuple, ids.collect()), key=str) == [("x", 2), (None, 3)]
    assert view.filter(only).count() == 5
    bounded.release()


def test_a_view_maintained_by_id_is_stored_in_files_of_narrow_id_ranges_a_run_reads_and_rewrites_few_of(
        make_warehouse, tmp_path, monkeypatch):
    """Defined from 3,000 rows given in shuffled order, the view is stored in files of disjoint,
    increasing ranges of its ID, in row groups of at most CLUSTERED_ROW_GROUP rows.  A run that
    updates 20 rows all over it and inserts 5 past its end rewrites at most the 21 files that
    hold or take them, and the files keep disjoint ranges.  A run of three changes reads no
    more than the three files that hold their rows."""
    import json
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from idivm.storage import delta
    from idivm.storage.layout import CLUSTERED_ROW_GROUP

    keys = list(range(3000))
    random.Random(7).shuffle(keys)
    wh = make_warehouse("rowgroups", storage="delta-rs")  # the layout of delta-rs's clustered rewrite
    wh.create_table("t", ["k"], pa.table({"k": keys, "v": [k * 10 for k in keys]}))
    wh.define("CREATE VIEW w AS SELECT t.k, t.v FROM t WHERE t.v >= 0", strategy="id")
    path = wh.catalog.path_of(wh.catalog.view("w"))

    def files() -> list[tuple[int, int, int]]:
        """(rows, lowest k, highest k) of each file, by lowest k; its row groups at most
        CLUSTERED_ROW_GROUP rows each."""
        out = []
        for uri in delta.open_table(path).file_uris():
            table = pq.read_table(uri.removeprefix("file://"))
            meta = pq.ParquetFile(uri.removeprefix("file://")).metadata
            assert all(meta.row_group(i).num_rows <= CLUSTERED_ROW_GROUP for i in range(meta.num_row_groups))
            k = table.column("k").to_pylist()
            out.append((len(k), min(k), max(k)))
        return sorted(out, key=lambda f: f[1])

    before = files()
    assert len(before) >= 10, before
    assert all(a[2] < b[1] for a, b in zip(before, before[1:])), before  # disjoint ranges
    _events(tmp_path, wh, "t", *[({"k": k, "v": k * 10}, {"k": k, "v": k * 10 + 1}) for k in range(0, 3000, 150)],
            *[(None, {"k": k, "v": 1}) for k in range(3000, 3005)])
    _maintained(wh, "w")
    after = files()
    assert sum(n for n, _, _ in after) == 3005
    assert all(a[2] < b[1] for a, b in zip(after, after[1:])), after
    rewrite = json.loads(delta.history(path, 1)[0]["idivm.rewrite"])
    assert 1 <= rewrite["num_target_files_removed"] <= 21, rewrite
    assert len(set(after) & set(before)) >= len(before) - 21

    # a run of two updates and a delete: no Spark action of it reads more than those three
    # files of the view
    from idivm.storage import spark as spark_rows

    view_files = {u.removeprefix("file://") for u in delta.open_table(path).file_uris()}
    read: list[set[str]] = []
    to_arrow = spark_rows.arrow_rows  # where idivm collects a DataFrame

    def recorded(df):
        read.append({f.removeprefix("file://") for f in df.inputFiles()} & view_files)
        return to_arrow(df)

    monkeypatch.setattr(spark_rows, "arrow_rows", recorded)
    _events(tmp_path, wh, "t", ({"k": 7, "v": 70}, {"k": 7, "v": 71}), ({"k": 2900, "v": 29000}, {"k": 2900, "v": 5}),
            ({"k": 1500, "v": 15000}, None))
    _maintained(wh, "w")
    assert read and max(len(r) for r in read) <= 3, [len(r) for r in read]


def test_base_tables_are_stored_in_row_groups_a_restricted_read_can_skip(make_warehouse, tmp_path):
    """A base table of 40,000 rows is created in row groups of at most BASE_ROW_GROUP rows, each
    over its own range of the key the rows came ordered by; an ingest rewrites it in row
    groups of the same size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from idivm.storage import delta

    wh = make_warehouse("base-rowgroups")
    wh.create_table("t", ["k"], pa.table({"k": list(range(40_000)), "v": [1] * 40_000}))
    path = wh.table_path("t")

    def row_groups() -> list[tuple[int, int, int]]:
        out = []
        for uri in delta.open_table(path).file_uris():
            meta = pq.ParquetFile(uri.removeprefix("file://")).metadata
            for i in range(meta.num_row_groups):
                stats = meta.row_group(i).column(0).statistics
                out.append((meta.row_group(i).num_rows, stats.min, stats.max))
        return out

    groups = row_groups()
    assert len(groups) >= 3 and all(n <= delta.BASE_ROW_GROUP for n, _, _ in groups), groups
    assert sum(hi - lo + 1 for _, lo, hi in groups) == 40_000, groups  # ranges narrow and disjoint
    _events(tmp_path, wh, "t", ({"k": 7, "v": 1}, {"k": 7, "v": 2}), (None, {"k": 40_000, "v": 1}))
    groups = row_groups()
    assert sum(n for n, _, _ in groups) == 40_001
    assert len(groups) >= 3 and all(n <= delta.BASE_ROW_GROUP for n, _, _ in groups), groups


def test_a_key_filter_holds_for_exactly_its_values_of_every_key_type(spark):
    """The filter of a restricted read, built as one SQL expression, against Python's ``in``:
    strings with quotes, backslashes, line breaks and non-ASCII letters, integers beyond 32
    bits, booleans, dates, decimals, NULLs."""
    import datetime
    import decimal

    import pyarrow as pa

    from idivm.exec.compiler import key_filter

    columns = {
        "s": ["a'b", "c\\d", "e\nf", "ünï", "plain", "", None],
        "i": [1, -2, 2**40, 0, 7, 3, None],
        "b": [True, False, True, False, True, False, None],
        "d": [datetime.date(2020, 1, 1), datetime.date(1999, 12, 31), datetime.date(2020, 1, 2),
              datetime.date(2000, 2, 29), datetime.date(2024, 6, 1), datetime.date(1970, 1, 1), None],
        "m": [decimal.Decimal("1.50"), decimal.Decimal("-2.25"), decimal.Decimal("100.00"),
              decimal.Decimal("0.01"), decimal.Decimal("3.00"), decimal.Decimal("7.77"), None],
    }
    types = {"s": pa.string(), "i": pa.int64(), "b": pa.bool_(), "d": pa.date32(), "m": pa.decimal128(10, 2)}
    df = spark.createDataFrame(pa.table({c: pa.array(v, types[c]) for c, v in columns.items()}))
    for name, values in columns.items():
        for wanted, nulls in ((values[:3], False), (values[2:5] + [None], True), ([values[5]], False)):
            got = sorted(map(str, (r[name] for r in df.filter(key_filter(name, wanted, nulls)).collect())))
            expected = sorted(map(str, (v for v in values if v in wanted and (v is not None or nulls))))
            assert got == expected, (name, wanted, nulls)
