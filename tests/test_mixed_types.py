"""Open data whose fields hold values of different types across rows (an integer in one record, a
string in another), stored as tagged unions (:class:`idivm.types.UnionType`), defined and maintained.

A value keeps its own type through storage and comes back as it was (an integer as an integer, a
string as a string); IS NULL and IS MISSING test it as any value; GROUP BY groups and a join
matches equal values of the same type; a comparison with a value of another type is NULL (not
true in WHERE), as AsterixDB compares values of incomparable types.  The expectations are
written out by hand from those rules.  Each view is defined by ID (and, under ``--runslow``,
recomputed), and maintained through a batch that changes the types of values; every copy must
give the expected rows after the batch and ``verify`` against its recomputation.
"""

from __future__ import annotations

import pytest

from tests.test_missing import STRATEGIES, check, define_and_maintain

M_ROWS = [{"id": 1, "a": 1}, {"id": 2, "a": "1"}, {"id": 3, "a": 2.5}, {"id": 4, "a": None}, {"id": 5},
          {"id": 6, "a": 2}, {"id": 7, "a": "b"}, {"id": 8, "a": "b"}]
N_ROWS = [{"nid": 1, "a": "1"}, {"nid": 2, "a": 2}, {"nid": 3, "a": True}]
# id 1 becomes a string, id 2 goes, id 4 becomes an integer, id 9 comes with a double
BATCH = [{"id": 1, "a": "x"}, {"__delete": {"id": 2}}, {"id": 4, "a": 3}, {"id": 9, "a": 1.0}]

VIEWS = {
    "whole": (
        "SELECT VALUE m FROM m",
        M_ROWS,
        [{"id": 1, "a": "x"}, {"id": 3, "a": 2.5}, {"id": 4, "a": 3}, {"id": 5}, {"id": 6, "a": 2},
         {"id": 7, "a": "b"}, {"id": 8, "a": "b"}, {"id": 9, "a": 1.0}]),
    "field": (
        "SELECT m.id, m.a FROM m WHERE m.id < 3",
        [{"id": 1, "a": 1}, {"id": 2, "a": "1"}],
        [{"id": 1, "a": "x"}]),
    "is_null": (
        "SELECT m.id FROM m WHERE m.a IS NULL",
        [{"id": 4}],
        []),
    "is_missing": (
        "SELECT m.id FROM m WHERE m.a IS MISSING",
        [{"id": 5}],
        [{"id": 5}]),
    "eq_number": (  # the string "1" is not the number 1: their comparison is NULL
        "SELECT m.id FROM m WHERE m.a = 1",
        [{"id": 1}],
        [{"id": 9}]),
    "gt_number": (
        "SELECT m.id FROM m WHERE m.a > 1",
        [{"id": 3}, {"id": 6}],
        [{"id": 3}, {"id": 4}, {"id": 6}]),
    "eq_string": (
        "SELECT m.id FROM m WHERE m.a = 'b' OR m.a = 'x'",
        [{"id": 7}, {"id": 8}],
        [{"id": 1}, {"id": 7}, {"id": 8}]),
    "not_eq": (  # NOT of NULL is NULL: a value of another type is in neither view
        "SELECT m.id FROM m WHERE NOT (m.a = 'b')",
        [{"id": 2}],
        [{"id": 1}]),
    "group": (
        "SELECT g AS a, COUNT(*) AS n FROM m WHERE m.a IS NOT UNKNOWN GROUP BY m.a AS g",
        [{"a": 1, "n": 1}, {"a": "1", "n": 1}, {"a": 2.5, "n": 1}, {"a": 2, "n": 1}, {"a": "b", "n": 2}],
        [{"a": "x", "n": 1}, {"a": 2.5, "n": 1}, {"a": 3, "n": 1}, {"a": 2, "n": 1}, {"a": "b", "n": 2},
         {"a": 1.0, "n": 1}]),
    "join": (  # values match when they are equal and of one type
        "SELECT m.id, n.nid FROM m JOIN n ON m.a = n.a",
        [{"id": 2, "nid": 1}, {"id": 6, "nid": 2}],
        [{"id": 6, "nid": 2}]),
    "arithmetic": (  # a number of a field that also holds integers and doubles is a double
        "SELECT m.id, m.a + 1 AS b FROM m WHERE m.id < 4",
        [{"id": 1, "b": 2.0}, {"id": 2, "b": None}, {"id": 3, "b": 3.5}],
        [{"id": 1, "b": None}, {"id": 3, "b": 3.5}]),
    "case": (  # the branches of a CASE, IF_MISSING and UNION ALL may have different types
        "SELECT m.id, CASE WHEN m.id < 3 THEN m.id ELSE 'big' END AS c FROM m WHERE m.id IN [1, 6]",
        [{"id": 1, "c": 1}, {"id": 6, "c": "big"}],
        [{"id": 1, "c": 1}, {"id": 6, "c": "big"}]),
    "if_missing": (
        "SELECT m.id, IF_MISSING(m.a, 'none') AS v FROM m WHERE m.id IN [4, 5, 6]",
        [{"id": 4, "v": None}, {"id": 5, "v": "none"}, {"id": 6, "v": 2}],
        [{"id": 4, "v": 3}, {"id": 5, "v": "none"}, {"id": 6, "v": 2}]),
    "union_all": (
        "SELECT m.id AS k, m.id AS w FROM m WHERE m.id < 3 UNION ALL SELECT m.id AS k, 'low' AS w FROM m "
        "WHERE m.id < 3",
        [{"k": 1, "w": 1}, {"k": 2, "w": 2}, {"k": 1, "w": "low"}, {"k": 2, "w": "low"}],
        [{"k": 1, "w": 1}, {"k": 1, "w": "low"}]),
    "union_all_records": (  # records of the same fields in another order are one type
        "SELECT VALUE {'a': m.id, 'b': 'x'} FROM m WHERE m.id = 1 "
        "UNION ALL SELECT VALUE {'b': m.a, 'a': m.id} FROM m WHERE m.id = 3",
        [{"a": 1, "b": "x"}, {"a": 3, "b": 2.5}],
        [{"a": 1, "b": "x"}, {"a": 3, "b": 2.5}]),
    "union_all_other_fields": (  # records of other fields: the fields one lacks are MISSING in it
        "SELECT VALUE r FROM (SELECT VALUE {'id': m.id, 'a': m.a} FROM m WHERE m.id = 3 "
        "UNION ALL SELECT VALUE n FROM n WHERE n.nid = 1) AS r",
        [{"id": 3, "a": 2.5}, {"nid": 1, "a": "1"}],
        [{"id": 3, "a": 2.5}, {"nid": 1, "a": "1"}]),
    "fields_of_other_records": (
        "SELECT r.id, r.nid, r.id IS MISSING AS gone FROM (SELECT VALUE {'id': m.id} FROM m WHERE m.id < 3 "
        "UNION ALL SELECT VALUE n FROM n WHERE n.nid = 1) AS r",
        [{"id": 1, "gone": False}, {"id": 2, "gone": False}, {"nid": 1, "gone": True}],
        [{"id": 1, "gone": False}, {"nid": 1, "gone": True}]),
}


@pytest.fixture(scope="module")
def maintained(request, tmp_path_factory):
    return define_and_maintain(request, tmp_path_factory.mktemp("mixed"),
                               {"m": ("id", M_ROWS), "n": ("nid", N_ROWS)}, VIEWS, "m", BATCH)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("view", list(VIEWS))
def test_mixed_types_as_asterixdb_compares_them(maintained, view, strategy):
    check(maintained, VIEWS, view, strategy)


def test_a_mixed_column_has_a_union_type(maintained):
    from idivm import types as T

    wh = maintained[0]
    assert wh.table_info("m").schema.field("a") == T.UnionType((T.INT, T.DOUBLE, T.STRING))
    assert wh.table_info("n").schema.field("a") == T.UnionType((T.BOOL, T.INT, T.STRING))


def test_functions_of_mixed_values_are_refused_or_narrowed(maintained):
    from idivm.errors import IdivmError

    wh = maintained[0]
    with pytest.raises(IdivmError, match=r"^1:\d+: .*mixed types \(int \| double \| string\) is not supported"):
        wh.define("CREATE VIEW bad AS SELECT m.id, TO_STRING(m.a) AS s FROM m")
    wh.define("CREATE VIEW low AS SELECT m.id, LOWER(m.a) AS s FROM m WHERE m.id IN [1, 3]")  # after the batch
    assert sorted(wh.rows("low"), key=lambda r: r["id"]) == [{"id": 1, "s": "x"}, {"id": 3, "s": None}]


# --- seeded random batches -----------------------------------------------------------------------

RANDOM_VIEWS = {
    "r_group": "SELECT g AS a, COUNT(*) AS n FROM m WHERE m.a IS NOT UNKNOWN GROUP BY m.a AS g",
    "r_filter": "SELECT m.id FROM m WHERE m.a > 1",
    "r_case": "SELECT m.id, CASE WHEN m.id % 2 = 0 THEN m.a ELSE 'odd' END AS c FROM m",
    # an array of mixed items compared item by item: a value of another kind is unequal to 1
    "r_array": "SELECT m.id, [m.a, 1] = [1, 1.0] AS ones FROM m WHERE m.a IS NOT UNKNOWN",
    # tuple functions over a value of mixed types, MISSING where the record lacks it
    "r_object": "SELECT VALUE OBJECT_CONCAT({'id': m.id, 'k': 0}, OBJECT_PUT({'a': m.a}, 'k', m.id % 3)) FROM m",
}


def _random_value(rng):
    return rng.choice([None, rng.randint(0, 3), str(rng.randint(0, 3)), rng.choice([0.5, 1.5, 2.5]), True])


def _oracle(rows: dict) -> dict:
    """Each view's rows, computed in plain Python from the table's rows (id -> value of a, or a
    missing key), as sorted JSON texts."""
    import json

    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    groups: dict[str, int] = {}
    for r in rows.values():
        if r.get("a") is not None:
            key = json.dumps(r["a"])
            groups[key] = groups.get(key, 0) + 1
    out = {
        "r_group": [{"a": json.loads(k), "n": n} for k, n in groups.items()],
        "r_filter": [{"id": i} for i, r in rows.items() if number(r.get("a")) and r["a"] > 1],
        "r_case": [({"id": i, "c": r["a"]} if "a" in r else {"id": i}) if i % 2 == 0 else {"id": i, "c": "odd"}
                   for i, r in rows.items()],
        "r_array": [{"id": i, "ones": number(r["a"]) and r["a"] == 1} for i, r in rows.items()
                    if r.get("a") is not None],
        "r_object": [{"id": i, "k": i % 3, **({"a": r["a"]} if "a" in r else {})} for i, r in rows.items()],
    }
    return {v: sorted(json.dumps(x, sort_keys=True) for x in xs) for v, xs in out.items()}


@pytest.mark.parametrize("seed", [7, 11])
def test_random_batches_of_mixed_values_are_maintained(make_warehouse, tmp_path, seed):
    """Batches of upserts that change a value's type, deletes and inserts (some lacking the field):
    after each, every view passes ``verify`` and equals the rows computed in plain Python."""
    import json
    import random

    rng = random.Random(seed)
    rows: dict[int, dict] = {}
    for i in range(1, 13):
        rows[i] = {"id": i, "a": _random_value(rng)} if i % 5 else {"id": i}
    for i, v in zip(range(1, 5), (1, "x", 0.5, True)):  # every type from the start (ingest adds none)
        rows[i]["a"] = v
    wh = make_warehouse()
    wh.create_table("m", "id", list(rows.values()))
    for name, query in RANDOM_VIEWS.items():
        wh.define(f"CREATE VIEW {name} AS {query}", strategy="id")
        assert sorted(json.dumps(x, sort_keys=True) for x in wh.rows(name)) == _oracle(rows)[name], name
    for batch_no in range(3):
        batch = []
        for i in rng.sample(sorted(rows), 4):
            if rng.random() < 0.3:
                batch.append({"__delete": {"id": i}})
                del rows[i]
            else:
                rows[i] = {"id": i, "a": _random_value(rng)}
                batch.append(rows[i])
        new = max(rows, default=0) + 1 + batch_no
        rows[new] = {"id": new} if rng.random() < 0.5 else {"id": new, "a": _random_value(rng)}
        batch.append(rows[new])
        path = tmp_path / f"batch{batch_no}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in batch))
        wh.ingest("m", path, format="rows")
        expected = _oracle(rows)
        for name in RANDOM_VIEWS:
            wh.maintain(name)
            check = wh.verify(name)
            assert check.ok, (batch_no, name, check.summary())
            assert sorted(json.dumps(x, sort_keys=True) for x in wh.rows(name)) == expected[name], (batch_no, name)


def test_ingest_refuses_a_type_the_column_does_not_hold(make_warehouse, tmp_path):
    from idivm.errors import DataError

    wh = make_warehouse()
    wh.create_table("m", "id", [{"id": 1, "a": 1}, {"id": 2, "a": "x"}])
    path = tmp_path / "b.jsonl"
    path.write_text('{"id": 3, "a": true}\n')
    with pytest.raises(DataError, match=r"b\.jsonl:1: .*column 'a' holds values of the types int, string only, "
                                        r"got a boolean true$"):
        wh.ingest("m", path, format="rows", strict=True)


# --- arrays of items of mixed types ------------------------------------------------------------------

K_ROWS = [{"id": 1, "l": ["a", "b"]}, {"id": 2, "l": [1.0, "a"]}, {"id": 3, "l": [None, 3]},
          {"id": 4, "l": [[1, 2], "a"]}, {"id": 5, "l": 7}, {"id": 6}]
# id 1 changes an item's type, id 2 goes, id 5 becomes an array, id 7 comes
K_BATCH = [{"id": 1, "l": ["a", 1]}, {"__delete": {"id": 2}}, {"id": 5, "l": [[1, 2], "a"]}, {"id": 7, "l": [3, 3]}]
# AsterixDB's = of arrays: item by item, items of different kinds (a number and a string, an array
# and a string) unequal, a NULL item NULL unless another position differs; an array is unequal to
# a number; [i] of a value that is not an array is MISSING
ARRAY_VIEWS = {
    "array_items": (
        "SELECT k.id, k.l = [1, 'a'] AS num_a, k.l = ['a', 'b'] AS ab, k.l = [3, 3] AS threes, "
        "k.l != [[1, 2], 'a'] AS not_nested, k.l[0] AS first FROM k",
        [{"id": 1, "num_a": False, "ab": True, "threes": False, "not_nested": True, "first": "a"},
         {"id": 2, "num_a": True, "ab": False, "threes": False, "not_nested": True, "first": 1.0},
         {"id": 3, "num_a": False, "ab": False, "threes": None, "not_nested": True, "first": None},
         {"id": 4, "num_a": False, "ab": False, "threes": False, "not_nested": False, "first": [1, 2]},
         {"id": 5, "num_a": False, "ab": False, "threes": False, "not_nested": True},
         {"id": 6}],
        [{"id": 1, "num_a": False, "ab": False, "threes": False, "not_nested": True, "first": "a"},
         {"id": 3, "num_a": False, "ab": False, "threes": None, "not_nested": True, "first": None},
         {"id": 4, "num_a": False, "ab": False, "threes": False, "not_nested": False, "first": [1, 2]},
         {"id": 5, "num_a": False, "ab": False, "threes": False, "not_nested": False, "first": [1, 2]},
         {"id": 6},
         {"id": 7, "num_a": False, "ab": False, "threes": True, "not_nested": True, "first": 3}]),
    "array_filter": (  # the orderings of arrays are NULL, IS_MISSING of a MISSING operand true
        "SELECT k.id FROM k WHERE k.l = ['a', 'b'] OR IS_MISSING(k.l < [1]) OR k.l > [0]",
        [{"id": 1}, {"id": 6}],
        [{"id": 6}]),
}


@pytest.fixture(scope="module")
def arrays_maintained(request, tmp_path_factory):
    return define_and_maintain(request, tmp_path_factory.mktemp("mixed-arrays"), {"k": ("id", K_ROWS)},
                               ARRAY_VIEWS, "k", K_BATCH)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("view", list(ARRAY_VIEWS))
def test_arrays_of_mixed_items_compare_as_asterixdb_compares_them(arrays_maintained, view, strategy):
    check(arrays_maintained, ARRAY_VIEWS, view, strategy)
