"""The Δ-scripts of nested views, by hand (pure Python: no Spark).

The thesis' worked examples are the expectations:

* Example 2.13.1: in view V (§2.9: per San Francisco business, the bag of its reviews joined
  with their users, ``SELECT reviews.*, users.*``), an update of a user's ``elite`` list is the
  single i-diff ``#() {full_reviews: #(user_id) {elite: {type: update, post}}}`` -- a
  *wildcard* top-level provenance (every business may hold a review of that user) and the
  partial provenance ``#(user_id)`` of the review elements: the elements are found by path
  navigation, nothing is recomputed and no base table is read;
* the same holds for the attributes of ``reviews`` the elements carry (``stars``, ``date``,
  ``text``), named by ``#(review_id)``;
* changes that decide *which* elements exist (inserts, deletes, updates of the join and
  correlation attributes) replace the top-level rows whose nested results hold the change
  before or after (§2.13, recursive instantiation): one statement for all of them, restricted
  at the outer tuples.

When the elements compute a value from the updated attribute together with another table's,
or a predicate of the nested plan reads it, the update is not navigable and replaces instead.
"""

from __future__ import annotations

import pytest

from idivm import types as T
from idivm.algebra import operators as O
from idivm.algebra.builder import build_view
from idivm.algebra.expressions import TableRef
from idivm.datasets import view_path
from idivm.generator import generate
from idivm.generator.script import DeltaScript, Statement
from idivm.provenance.ids import PROV_FIELD, infer_provenance
from idivm.sqlpp import parse_view

STRINGS = T.CollectionType(T.STRING)
TYPES = {
    "businesses": T.TupleType((("business_id", T.STRING), ("name", T.STRING), ("city", T.STRING),
                               ("state", T.STRING), ("categories", STRINGS))),
    "reviews": T.TupleType((("review_id", T.STRING), ("user_id", T.STRING), ("business_id", T.STRING),
                            ("stars", T.INT), ("date", T.STRING), ("text", T.STRING))),
    "users": T.TupleType((("user_id", T.STRING), ("user_name", T.STRING), ("fans", T.INT),
                          ("friends", STRINGS), ("elite", T.CollectionType(T.INT)))),
}
KEYS = {"businesses": ("business_id",), "reviews": ("review_id",), "users": ("user_id",)}

V = view_path("sf_reviews").read_text()  # thesis §2.9, Example 2.9.1


def script_of(text: str, strategy: str = "id") -> DeltaScript:
    name = text.split("CREATE VIEW", 1)[1].split()[0]
    view = build_view(parse_view(text, name), TYPES)
    return generate(view.name, infer_provenance(view.plan, KEYS, TYPES, {}), KEYS, TYPES, strategy)


def from_(script: DeltaScript, source: str) -> list[Statement]:
    """The statements that start from base i-diff ``source`` (e.g. ``Δu(users)``)."""
    return [s for s in script.statements if any(o.split(" AS ")[0] == source for o in s.origins())]


def base_reads(s: Statement) -> set[str]:
    return {o.source.name for _, p in s.plans() for o in O.walk(p)
            if isinstance(o, O.ScanCollection) and isinstance(o.source, TableRef)}


def test_example_2_13_1_an_update_of_users_is_one_wildcard_provenance_nested_update():
    (s,) = from_(script_of(V), "Δu(users)")
    assert s.kind == "nested_update"
    assert s.path == "full_reviews"
    assert [p for p, _ in s.match] == ["user_id"]  # #(user_id) under #()
    assert [f for f, _ in s.set] == ["user_name", "fans", "friends", "elite"]
    assert s.on == ()  # no top-level ID: every business may hold that user's reviews
    assert base_reads(s) == {"Δu(users)"}  # path navigation: no base table is read
    assert any("ApplyPlan[nested] update if navigable" in r for r in s.rules)


def test_an_update_of_the_reviews_attributes_the_elements_carry_names_them_by_review_id():
    (s,) = from_(script_of(V), "Δu(reviews)")
    assert (s.kind, s.path, [p for p, _ in s.match]) == ("nested_update", "full_reviews", ["review_id"])
    assert [f for f, _ in s.set] == ["stars", "date", "text"]
    assert base_reads(s) == {"Δu(reviews)"}


def test_changes_of_which_elements_exist_replace_the_outer_rows_in_one_statement():
    script = script_of(V)
    replaces = [s for s in script.statements if s.kind == "replace"]
    assert len(replaces) == 1
    (s,) = replaces
    assert set(s.origins()) == {"Δ(businesses) AS businesses", "Δ(reviews) AS reviews", "Δ(users) AS users"}
    assert s.on == ("__idivm_id_business_id",)
    # the rows are the view plan restricted once, at the outer tuples (businesses)
    semijoins = [o for o in O.walk(s.rows) if isinstance(o, O.SemiJoin)]
    assert len(semijoins) == 1
    assert isinstance(semijoins[0].left, O.ScanCollection) and semijoins[0].left.var == "businesses"
    assert len(script.statements) == 3


@pytest.mark.parametrize("text, why", [
    ("""CREATE VIEW mixed AS
        SELECT b.business_id,
               (SELECT r.review_id, u.fans + r.stars AS score
                FROM reviews r JOIN users u ON r.user_id = u.user_id
                WHERE r.business_id = b.business_id) AS scores
        FROM businesses b""", "an element field mixes users.fans with reviews.stars"),
    ("""CREATE VIEW counted AS
        SELECT b.business_id,
               ARRAY_COUNT((SELECT r.review_id, u.fans
                            FROM reviews r JOIN users u ON r.user_id = u.user_id
                            WHERE r.business_id = b.business_id)) AS n
        FROM businesses b""", "the bag is not stored, a count of it is"),
])
def test_updates_the_elements_do_not_just_carry_replace_the_outer_rows(text, why):
    (s,) = from_(script_of(text), "Δu(users)")
    assert s.kind == "replace", why
    assert any(r.startswith("Δu(users) AS u: ApplyPlan[nested] update -> replace") for r in s.rules), s.rules


def test_an_update_no_element_carries_is_discarded():
    text = """CREATE VIEW ids AS
        SELECT b.business_id,
               (SELECT r.review_id FROM reviews r JOIN users u ON r.user_id = u.user_id
                WHERE r.business_id = b.business_id) AS reviewed
        FROM businesses b"""
    script = script_of(text)
    # users are read for the join only: an update of their other attributes is no i-diff at all
    assert script.table("users").read == ()
    assert not from_(script, "Δu(users)")


def test_the_elements_keep_their_provenance_for_navigation():
    view = build_view(parse_view(V, "sf_reviews"), TYPES)
    prov = infer_provenance(view.plan, KEYS, TYPES, {})
    nested = [o for o in O.walk(prov.plan) if isinstance(o, O.ReturnBag) and o is not prov.plan]
    (el,) = [o.element for o in nested]
    fields = dict(el.fields)
    assert [p for p, _ in fields[PROV_FIELD].fields] == ["review_id", "user_id"]


def test_tuple_based_maintenance_has_no_nested_updates():
    assert all(s.kind != "nested_update" for s in script_of(V, "tuple").statements)
