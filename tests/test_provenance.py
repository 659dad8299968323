"""ID / provenance inference (thesis Table 2.1, Table 2.6, Appendix B) on plans built from SQL++."""

from __future__ import annotations

import pytest

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.builder import build_view
from idivm.errors import UnsupportedError
from idivm.provenance.ids import PROV_FIELD, infer_provenance
from idivm.sqlpp import parse_view

TABLES = {
    "parts": T.TupleType((("pid", T.INT), ("price", T.DOUBLE))),
    "devices": T.TupleType((("did", T.INT), ("category", T.STRING))),
    "devices_parts": T.TupleType((("did", T.INT), ("pid", T.INT))),
    "employees": T.TupleType((("eid", T.INT), ("ename", T.STRING), ("did", T.INT))),
    "departments": T.TupleType((("did", T.INT), ("dname", T.STRING))),
    "contractors": T.TupleType((("cid", T.INT), ("cname", T.STRING))),
    "users": T.TupleType((("user_id", T.STRING), ("elite", T.CollectionType(T.INT)),
                          ("tags", T.CollectionType(T.TupleType((("t", T.STRING),)))))),
}
KEYS = {"parts": ("pid",), "devices": ("did",), "devices_parts": ("did", "pid"), "employees": ("eid",),
        "departments": ("did",), "contractors": ("cid",), "users": ("user_id",)}


def infer(text: str):
    view = build_view(parse_view(text), TABLES)
    return view, infer_provenance(view.plan, KEYS, TABLES)


def ids_by_operator(view, result) -> list[tuple[str, tuple[str, ...]]]:
    """(operator name, ID names) in pre-order, nested plans included."""
    return [(op.name, result.ids[op].names()) for op in O.walk(view.plan) if not isinstance(op, O.Ground)]


def test_ids_of_every_operator_of_fig_2_5a():
    view, result = infer("""CREATE VIEW v AS SELECT did, sum(price) AS cost
        FROM parts NATURAL JOIN devices_parts NATURAL JOIN devices
        WHERE category = "phone" GROUP BY did""")
    assert ids_by_operator(view, result) == [
        ("ReturnBag", ("did",)),
        ("Project", ("did",)),
        ("GroupBy", ("did",)),
        ("Select", ("pid", "did")),
        ("InnerJoin", ("pid", "did")),
        ("InnerJoin", ("pid", "did")),
        ("ScanCollection", ("pid",)),
        ("ScanCollection", ("did", "pid")),
        ("ScanCollection", ("did",)),
    ]
    assert [n for _, n in result.view_ids] == ["did"]


def test_fig_2_1b_view_keeps_both_ids_without_retouching():
    view, result = infer("""CREATE VIEW v AS SELECT did, pid, price
        FROM parts NATURAL JOIN devices_parts NATURAL JOIN devices WHERE category = "phone" """)
    assert [n for _, n in result.view_ids] == ["pid", "did"]
    project = result.plan.input
    assert isinstance(project, O.Project)
    assert [v for v, _ in project.outputs] == ["did", "pid", "price"]  # nothing added


def test_retouching_adds_the_dropped_key_appendix_b_4_1():
    view, result = infer("CREATE VIEW v AS SELECT d.dname AS dname FROM departments AS d")
    project = result.plan.input
    assert isinstance(project, O.Project)
    assert len(project.outputs) == 2
    hidden, term = project.outputs[1]
    assert hidden.startswith("__idivm_") and str(term) == "d.did"
    assert [n for _, n in result.view_ids] == ["did"]
    # the original plan is unchanged
    assert len(view.plan.input.outputs) == 1


def test_equivalent_key_copies_table_b_1():
    # Navigate e.eid AS eid_copy; Join e.did = d.did; Project eid_copy, d
    view, result = infer("""CREATE VIEW v AS SELECT eid_copy, d
        FROM employees AS e JOIN departments AS d ON e.did = d.did LET eid_copy = e.eid""")
    project = result.plan.input
    assert isinstance(project, O.Project)
    assert len(project.outputs) == 2  # no retouching: eid_copy and d.did carry the key
    assert sorted(n for _, n in result.view_ids) == ["did", "eid"]
    join_ids = result.ids[view.plan.input.input.input]
    assert join_ids.names() == ("eid", "did")


def test_union_all_adds_branch_attribute_appendix_b_4_2():
    view, result = infer("""CREATE VIEW v AS SELECT e.ename AS name FROM employees AS e
        UNION ALL SELECT c.cname AS name FROM contractors AS c""")
    assert [n for _, n in result.view_ids] == ["branch", "eid", "cid"]
    union = result.plan.input
    assert isinstance(union, O.UnionAll)
    lterms = {v: str(t) for v, t in union.left.outputs}
    rterms = {v: str(t) for v, t in union.right.outputs}
    assert set(lterms) == set(rterms)
    branch = [v for v in lterms if "branch" in v][0]
    assert (lterms[branch], rterms[branch]) == ("0", "1")
    eid = [v for v in lterms if "eid" in v][0]
    assert rterms[eid] == "null" and lterms[eid] != "null"
    inner_left = {v: str(t) for v, t in union.left.input.outputs}
    assert inner_left[lterms[eid]] == "e.eid"


def test_group_by_ids_are_the_grouping_keys_and_group_members_keep_theirs():
    view, result = infer("""CREATE VIEW v AS SELECT d, g FROM employees AS e
        GROUP BY e.did AS d GROUP AS g""")
    assert [n for _, n in result.view_ids] == ["d"]
    group = result.plan.input.input
    assert isinstance(group, O.GroupBy)
    assert group.group_fields[-1][0] == PROV_FIELD
    assert str(group.group_fields[-1][1]) == '{"eid": e.eid}'


def test_nested_subquery_elements_get_a_provenance_field():
    view, result = infer("""CREATE VIEW v AS SELECT d.did AS did,
        (SELECT e.ename FROM employees AS e WHERE e.did = d.did) AS staff FROM departments AS d""")
    apply = result.plan.input.input
    assert isinstance(apply, O.ApplyPlan)
    names = [n for n, _ in apply.plan.element.fields]
    assert names == ["ename", PROV_FIELD]
    assert result.ids[view.plan.input.input.plan].names() == ("eid",)


def test_unnesting_a_bag_of_scalars_uses_the_value_and_its_occurrence_as_provenance():
    view, result = infer("CREATE VIEW v AS SELECT u.user_id AS u, y AS year FROM users AS u, u.elite AS y")
    assert [n for _, n in result.view_ids] == ["user_id", "elite", "elite_occurrence"]
    (scan,) = [op for op in O.walk(result.plan) if isinstance(op, O.ScanCollection) and op.var == "y"]
    assert scan.occurrence is not None  # the retouched scan binds it


def test_a_bag_of_scalars_in_a_nested_query_is_named_by_value_alone():
    view, result = infer("CREATE VIEW v AS SELECT u.user_id AS u, (SELECT VALUE y FROM u.elite AS y) AS years "
                         "FROM users AS u")
    assert [n for _, n in result.view_ids] == ["user_id"]
    assert not [op for op in O.walk(result.plan) if isinstance(op, O.ScanCollection) and op.occurrence]


def test_unknown_nested_key_is_refused_naming_the_operator():
    with pytest.raises(UnsupportedError, match="ScanCollection over u.tags"):
        infer("CREATE VIEW v AS SELECT u.user_id AS u, t.t AS tag FROM users AS u, u.tags AS t")


def test_unknown_key_below_the_output_is_tolerated():
    # the nested bag of tags has no element key, but only its count reaches the view
    view, result = infer("CREATE VIEW v AS SELECT u.user_id AS u, ARRAY_COUNT(u.tags) AS n FROM users AS u")
    assert [n for _, n in result.view_ids] == ["user_id"]


def test_distinct_is_not_retouched_and_is_keyed_by_all_columns():
    view, result = infer("CREATE VIEW v AS SELECT DISTINCT d.dname AS dname FROM departments AS d")
    assert result.plan.input == view.plan.input  # unchanged below the Return
    assert len(result.view_ids) == 1
