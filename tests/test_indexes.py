"""Global provenance index selection (thesis §2.15.2) and the upper bound of §2.15.4.

Plans are built without Spark, over the static types of the shipped datasets (the thesis'
views) and of the test corpora's tables.  The expected indexes are written from the thesis:
Example 2.15.3 for V and V1 of §2.9, and by hand for the relational running example.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from idivm import types as T
from idivm.algebra.builder import build_view
from idivm.datasets import DATASETS, arrow_schema, view_path
from idivm.diffs.base_signatures import generate_base_signatures
from idivm.provenance.ids import infer_provenance
from idivm.provenance.indexes import IndexBound, select_indexes
from idivm.sqlpp import parse_view


def dataset_types(dataset: str) -> dict[str, T.TupleType]:
    module = DATASETS[dataset]
    return {t: T.from_arrow(arrow_schema(s)) for t, s in module.SCHEMAS.items()}


def explain_parts(text: str, types, keys, element_keys=None):
    view = build_view(parse_view(text), types)
    provenance = infer_provenance(view.plan, keys, types, element_keys)
    signatures = generate_base_signatures(view.plan, keys, types, element_keys)
    return view, select_indexes(view.plan, provenance, signatures)


def thesis_view(name: str, dataset: str):
    return explain_parts(view_path(name).read_text(), dataset_types(dataset), DATASETS[dataset].KEYS)


def chosen(selection) -> set[tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]]:
    """Each index as (collection path, provenance attributes named per level from the root)."""
    return {(i.collection, i.levels) for i in selection.indexes}


# Example 2.15.3, written from the thesis: for V, "a global provenance index on the root
# collection of V with bid as provenance attribute, four global provenance indexes on the
# nested collection full_reviews with uid, rid, (uid, rid) and (bid, uid, rid)"; none for
# the nested elite collection.  A level that names no attribute is a wildcard, #().
BID, UID, RID = "business_id", "user_id", "review_id"
EXAMPLE_2_15_3 = {
    ((), ((BID,),)),
    (("full_reviews",), ((), (UID,))),
    (("full_reviews",), ((), (RID,))),
    (("full_reviews",), ((), (RID, UID))),
    (("full_reviews",), ((BID,), (RID, UID))),
}


@pytest.mark.parametrize("view", ["sf_reviews", "sf_reviews_grouped"])
def test_the_five_indexes_of_example_2_15_3(view):
    """V (correlated subquery) and V1 (joins + GROUP BY ... INTO) give the same five indexes."""
    _, selection = thesis_view(view, "yelp")
    assert chosen(selection) == EXAMPLE_2_15_3
    assert {frozenset(i.attributes) for i in selection.of(("full_reviews",))} == \
        {frozenset({UID}), frozenset({RID}), frozenset({UID, RID}), frozenset({BID, UID, RID})}
    assert not any("elite" in ".".join(i.collection) for i in selection.indexes)


def test_example_2_15_3_reasons():
    """Which base-table i-diffs call for which index of V (§2.15.2, Examples 2.13.1 / 2.13.2)."""
    _, selection = thesis_view("sf_reviews", "yelp")
    sources = {(i.collection, i.levels): set(i.sources) for i in selection.indexes}
    # businesses: σ city's inserts, deletes and conditional updates name the root element
    assert sources[((), ((BID,),))] == {"businesses insert", "businesses delete", "businesses update(city)"}
    # a users update reaches every business: #() over #(uid) (Example 2.13.1, Example 2.9.1)
    assert "users update(elite, fans, friends, user_name)" in sources[(("full_reviews",), ((), (UID,)))]
    # a review moving to another business is conditional on the correlation (Example 2.13.2)
    assert "reviews update(business_id)" in sources[(("full_reviews",), ((BID,), (RID, UID)))]
    # a review changing its author is conditional on the join only
    assert "reviews update(user_id)" in sources[(("full_reviews",), ((), (RID, UID)))]


def test_bound_of_example_2_15_3():
    """§2.15.4 for V: 3 base tables + 2 selects (city, correlation) + 1 join; for V1: 3 base
    tables + 1 select + 2 joins (left outer, inner) + 1 group-by."""
    _, v = thesis_view("sf_reviews", "yelp")
    assert v.bound == IndexBound(base_components=3, selects=2, joins=1, correlates=0, group_bys=0)
    assert v.bound.value == 6 >= len(v.indexes)
    _, v1 = thesis_view("sf_reviews_grouped", "yelp")
    assert v1.bound == IndexBound(base_components=3, selects=1, joins=2, correlates=0, group_bys=1)
    assert v1.bound.value == 7 >= len(v1.indexes)


def test_relational_running_example():
    """devices_v (Fig. 2.1b): parts ⋈ devices_parts ⋈ σ_category(devices).  Worked by hand:
    deletes and the non-conditional update of price keep their table's key, (pid) and (did);
    inserts join the other tables and name the whole view ID (did, pid), as do a devices_parts
    delete and the inserts and deletes a change of devices.category makes at σ (§2.2)."""
    _, selection = thesis_view("devices_v", "devices")
    assert chosen(selection) == {((), (("did",),)), ((), (("pid",),)), ((), (("did", "pid"),))}
    sources = {i.levels[0]: set(i.sources) for i in selection.indexes}
    assert sources[("pid",)] == {"parts delete", "parts update(price)"}
    assert sources[("did",)] == {"devices delete", "devices update(category)"}
    assert {"parts insert", "devices_parts insert", "devices_parts delete", "devices insert",
            "devices update(category)"} == sources[("did", "pid")]
    assert selection.bound.value == 3 + 1 + 2


def test_aggregate_view_is_indexed_on_its_groups():
    """devices_cost (Fig. 2.5b): every i-diff reaches the view as an update of a group sum,
    found by the grouping attribute (Tables C.4 / C.6)."""
    _, selection = thesis_view("devices_cost", "devices")
    assert chosen(selection) == {((), (("did",),))}


def test_a_global_aggregate_needs_no_index():
    types = dataset_types("devices")
    _, selection = explain_parts("CREATE VIEW n AS SELECT COUNT(*) AS n FROM parts", types, DATASETS["devices"].KEYS)
    assert selection.indexes == ()
    assert all(d.target is None for d in selection.view_diffs)


def test_values_are_immutable_and_serialize():
    _, selection = thesis_view("sf_reviews", "yelp")
    with pytest.raises(dataclasses.FrozenInstanceError):
        selection.indexes[0].levels = ()  # type: ignore[misc]
    data = json.loads(json.dumps(selection.to_json()))
    assert len(data["selected"]) == 5 and data["bound"]["value"] == 6
    assert {"collection": ["full_reviews"], "levels": [["business_id"], ["review_id", "user_id"]],
            "attributes": ["business_id", "review_id", "user_id"]}.items() <= \
        next(i for i in data["selected"] if i["levels"][0] and i["collection"]).items()
    text = str(selection)
    assert text.splitlines()[0].startswith("5 indexes; upper bound (§2.15.4) 6 = 3 base-table provenance")
    assert "  full_reviews #(business_id) / #(review_id, user_id)  <- " in text


# --- every view of the test corpora --------------------------------------------------------------


def corpus():
    """(case id, view text, types, keys) of every view in the nested and relational corpora."""
    import test_nested_views as N
    import test_relational_views as R
    from idivm.ingest.load import idivm_schema, load_source
    from idivm.storage import schema as schemas

    def typed(rows):
        return idivm_schema(schemas.delta_schema(load_source(rows).table.schema), "rows")

    nested_types = {"businesses": typed(N.BUSINESSES), "reviews": typed(N.REVIEWS), "users": typed(N.USERS)}
    nested_keys = {"businesses": ("business_id",), "reviews": ("review_id",), "users": ("user_id",)}
    relational_types = {n: T.from_arrow(s) for n, s in R.SCHEMAS.items()}
    relational_keys = {n: tuple(k) for n, k in R.KEYS.items()}
    out = [(p.values[0], p.values[1], nested_types, nested_keys) for p in N.CASES]
    out += [(c[0], R.view_text(c[0], c[1]), relational_types, relational_keys) for c in R.CASES]
    for name in ("devices_v", "devices_cost", "sf_reviews", "sf_reviews_flat", "sf_reviews_grouped"):
        dataset = "yelp" if name.startswith("sf_") else "devices"
        out.append((name, view_path(name).read_text(), dataset_types(dataset), DATASETS[dataset].KEYS))
    return out


def test_the_count_never_exceeds_the_bound_of_2_15_4():
    pytest.importorskip("duckdb")  # the relational corpus module needs it
    cases = corpus()
    assert len(cases) > 80
    for case_id, text, types, keys in cases:
        view, selection = explain_parts(text, types, keys)
        assert len(selection.indexes) <= selection.bound.value, (case_id, str(selection))
        for index in selection.indexes:  # only collections of the view definition (§2.15.2)
            t: T.Type = view.type
            for step in index.collection:
                for name in step.split("."):
                    assert isinstance(t, T.TupleType) and t.field(name) is not None, (case_id, index)
                    t = t.field(name)
                assert isinstance(t, T.CollectionType), (case_id, index)
                t = t.element
        assert len({(i.collection, i.levels) for i in selection.indexes}) == len(selection.indexes), case_id
