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
* the thesis' V1 (§2.9: V written as ``businesses NATURAL LEFT OUTER JOIN (reviews NATURAL
  JOIN users) ... GROUP BY business_id INTO full_reviews``) is an equivalent plan, and gets the
  equivalent i-diff (Example 2.13.1, Table E.11): the update passes the joins and the selection
  as an update, and γ makes it the same wildcard ``#()`` update of the ``#(user_id)`` members of
  ``full_reviews``; a member holds one tuple per FROM variable, so the attributes are one level
  deeper (``full_reviews[*].users.elite``);
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
from idivm.generator.generate import generate
from idivm.script import DeltaScript, Statement
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
V1 = view_path("sf_reviews_grouped").read_text()  # thesis §2.9, Example 2.9.1: V with GROUP BY ... INTO


def script_of(text: str, strategy: str = "id") -> DeltaScript:
    name = text.split("CREATE VIEW", 1)[1].split()[0]
    view = build_view(parse_view(text, name), TYPES)
    return generate(view.name, infer_provenance(view.plan, KEYS, TYPES, {}), KEYS, TYPES, strategy)


def from_(script: DeltaScript, source: str) -> list[Statement]:
    """The statements that start from base i-diff ``source`` (e.g. ``Δu(users)``)."""
    return [s for s in script.statements if any(o.split(" AS ")[0] == source for o in s.origins())]


def base_reads(s: Statement) -> set[str]:
    return {str(o.source.name) for _, p in s.plans() for o in O.walk(p)
            if isinstance(o, O.ScanCollection) and isinstance(o.source, TableRef)}


def test_example_2_13_1_an_update_of_users_is_one_wildcard_provenance_nested_update():
    (s,) = from_(script_of(V), "Δu(users)")
    assert s.kind == "nested_update"
    assert s.path == "full_reviews"
    assert [p for p, _ in s.match] == ["user_id"]  # #(user_id) under #()
    assert [f for f, _ in s.set] == [("user_name",), ("fans",), ("friends",), ("elite",)]
    assert s.on == ()  # no top-level ID: every business may hold that user's reviews
    assert base_reads(s) == {"Δu(users)"}  # path navigation: no base table is read
    assert any("ApplyPlan[nested] update if navigable" in r for r in s.rules)


def test_an_update_of_the_reviews_attributes_the_elements_carry_names_them_by_review_id():
    (s,) = from_(script_of(V), "Δu(reviews)")
    assert (s.kind, s.path, [p for p, _ in s.match]) == ("nested_update", "full_reviews", ["review_id"])
    assert [f for f, _ in s.set] == [("stars",), ("date",), ("text",)]
    assert base_reads(s) == {"Δu(reviews)"}


def test_changes_of_the_outer_tuples_replace_the_outer_rows():
    script = script_of(V)
    (s,) = [s for s in script.statements if s.kind == "replace"]
    assert s.origins() == ("Δ(businesses) AS businesses",)
    assert s.on == ("__idivm_id_business_id",)
    # the rows are the view plan restricted once, at the outer tuples (businesses)
    semijoins = [o for o in O.walk(s.rows) if isinstance(o, O.SemiJoin)]
    assert semijoins == [] and "Δpost(businesses)" in base_reads(s)
    assert len(script.statements) == 5


@pytest.mark.parametrize("table, key, joined", [("reviews", "review_id", "users"), ("users", "user_id", "reviews")])
def test_inserts_and_deletes_of_the_nested_tables_replace_only_the_elements_they_name(table, key, joined):
    """Tables E.3/E.4 on the nested side: Δ(reviews) and Δ(users) name elements of
    full_reviews by partial provenance, #(review_id) / #(user_id) under #(); the post-state
    elements join the changed tuples only (not the whole table) and are placed by business."""
    (s,) = from_(script_of(V), f"Δ({table})")
    assert s.kind == "nested_replace"
    assert (s.path, s.match) == ("full_reviews", ((key, f"__idivm_key_{key}"),))
    assert s.on == ("__idivm_id_business_id",)
    assert base_reads(s) == {f"Δ({table})", f"Δpost({table})", f"{joined}@post", "businesses@post"}
    assert any("ApplyPlan[nested] replace if elements_navigable" in r for r in s.rules)


def test_an_update_the_elements_cannot_take_in_place_replaces_the_elements_it_names():
    text = """CREATE VIEW mixed AS
        SELECT b.business_id,
               (SELECT r.review_id, u.fans + r.stars AS score
                FROM reviews r JOIN users u ON r.user_id = u.user_id
                WHERE r.business_id = b.business_id) AS scores
        FROM businesses b"""
    (s,) = from_(script_of(text), "Δu(users)")  # an element field mixes users.fans with reviews.stars
    assert (s.kind, s.path, [p for p, _ in s.match]) == ("nested_replace", "scores", ["user_id"])
    assert "Δu(users)" in base_reads(s) and "users@post" not in base_reads(s)
    assert "ApplyPlan[nested]: the update becomes delete+insert" in s.rules


@pytest.mark.parametrize("text, why", [
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


# --- the equivalent plan V1: GROUP BY ... INTO (Example 2.13.1, Table E.11) ----------------------------

#: Example 2.13.1 by hand: in V and in V1 an update of users is the single i-diff
#: #() {full_reviews: #(user_id) {<the users attributes the elements hold>: {type: update, post}}};
#: V's elements hold them as their own fields, V1's under the member's ``users`` tuple
EXAMPLE_2_13_1 = {
    "V": ("full_reviews", ["user_id"], [("user_name",), ("fans",), ("friends",), ("elite",)]),
    "V1": ("full_reviews", ["user_id"],
           [("users", "user_name"), ("users", "fans"), ("users", "friends"), ("users", "elite")]),
}


def nested_update_of(text: str, source: str, on: tuple[str, ...] = ()) -> tuple[str, list[str], list[tuple[str, ...]]]:
    """The path, match and set paths of the nested update from ``source``, whose rows are
    named by the ID columns ``on`` (none: the wildcard #(), every business may hold that
    user's reviews)."""
    (s,) = from_(script_of(text), source)
    assert s.kind == "nested_update", s.rules
    assert s.on == on
    assert s.names_rows_by_id() == bool(on)
    assert base_reads(s) == {source}  # path navigation: no base table is read
    return s.path, [p for p, _ in s.match], [f for f, _ in s.set]


def test_example_2_13_1_v_and_v1_turn_an_update_of_users_into_the_same_nested_update():
    v, v1 = nested_update_of(V, "Δu(users)"), nested_update_of(V1, "Δu(users)")
    assert v == EXAMPLE_2_13_1["V"]
    assert v1 == EXAMPLE_2_13_1["V1"]
    # the same path, the same provenance, the same attributes: equivalent plans, equivalent i-diffs
    assert (v1[0], v1[1], [f[-1] for f in v1[2]]) == (v[0], v[1], [f[-1] for f in v[2]])
    (s,) = from_(script_of(V1), "Δu(users)")
    rules = [r.split("  (")[0] for r in s.rules]
    assert rules == ["ScanCollection[input] update -> update", "InnerJoin[right] update -> update",
                     "LeftJoin[right] update -> update", "Select[input] update -> update",
                     "GroupBy[input] update if navigable -> update"]
    assert "Table E.11" in s.rules[-1]


def test_v1_updates_of_reviews_and_businesses_are_nested_updates_of_their_member_tuples():
    assert nested_update_of(V1, "Δu(reviews)") == (
        "full_reviews", ["review_id"], [("reviews", "stars"), ("reviews", "date"), ("reviews", "text")])
    # every member of a business's group holds the business: named #(business_id), in the
    # one row whose ID is that business (the group key)
    assert nested_update_of(V1, "Δu(businesses)", on=("__idivm_id_business_id",)) == (
        "full_reviews", ["business_id"],
        [("businesses", "name"), ("businesses", "state"), ("businesses", "categories")])


def test_v1_inserts_and_deletes_of_reviews_and_users_replace_members_and_only_businesses_regroup():
    """Businesses are V1's groups: their changes create, delete or move groups (Table C.7).
    A review or user changes members of groups that stay (Table E.11 for insert/delete, over
    the preserved side of the left join), named by the pairs (business, review or user)."""
    script = script_of(V1)
    (s,) = [s for s in script.statements if s.kind == "replace"]
    assert s.origins() == ("Δ(businesses) AS businesses",)
    members = {m.origin: m for m in script.statements if m.kind == "nested_replace"}
    assert set(members) == {"Δ(reviews) AS reviews", "Δ(users) AS users"}
    for table, key in (("reviews", "review_id"), ("users", "user_id")):
        m = members[f"Δ({table}) AS {table}"]
        assert (m.path, [p for p, _ in m.match], m.names_rows_by_id()) == ("full_reviews", ["business_id", key], True)
        rules = [r.split("  (")[0] for r in m.rules]
        at = rules.index("LeftJoin[right] replace -> replace, reads Input_pre+Input_post")
        assert rules[at:at + 3] == ["LeftJoin[right] replace -> replace, reads Input_pre+Input_post",
                                    "Select[input] replace -> replace",
                                    "GroupBy[input] replace if members_navigable -> replace, reads Input_post"]
        assert "Table E.11" in m.rules[at + 2]
    assert len(script.statements) == 6


V1_WITH_SUBQUERY = """CREATE VIEW v1s AS
    SELECT business_id, g AS members,
           (SELECT x.reviews.review_id, x.reviews.stars, x.users.user_name
            FROM g AS x WHERE x.reviews IS NOT NULL) AS full_reviews,
           COUNT(review_id) AS n_reviews
    FROM businesses NATURAL LEFT OUTER JOIN (reviews NATURAL JOIN users)
    WHERE city = "San Francisco"
    GROUP BY business_id GROUP AS g"""


def test_v1_with_a_subquery_over_g_and_a_count_changes_both_bags_and_increments_the_count():
    """A subquery that filters and reshapes the members of g one by one stores g element by
    element: a change of reviews or users replaces the members it names in g and, reshaped
    (the subquery's σ and π over the post-state members), in the subquery's bag, and the
    COUNT is incremented (Tables E.11, E.13); an update of reviews or users is a nested update
    of both bags (the subquery's test of a padded member does not read the update).  Only
    businesses regroup."""
    script = script_of(V1_WITH_SUBQUERY)
    (s,) = [s for s in script.statements if s.kind == "replace"]
    assert s.origins() == ("Δ(businesses) AS businesses",)
    for table, key in (("reviews", "review_id"), ("users", "user_id")):
        own = from_(script, f"Δ({table})")
        assert sorted((m.kind, m.path) for m in own) == [
            ("increment", ""), ("nested_replace", "full_reviews"), ("nested_replace", "members")]
        sub = next(m for m in own if m.path == "full_reviews")
        assert [p for p, _ in sub.match] == ["business_id", key] and sub.names_rows_by_id()
        assert str(sub.rows.input.condition) == "NOT reviews IS NULL"
        assert str(sub.rows.element) == (
            '{"__idivm_id_business_id": businesses.business_id, "__idivm_element": {"review_id": reviews.review_id, '
            '"stars": reviews.stars, "user_name": users.user_name, "__idivm_prov": {"business_id": '
            'businesses.business_id, "review_id": reviews.review_id, "user_id": users.user_id}}}')
        (inc,) = [m for m in own if m.kind == "increment"]
        assert [c for c, _ in inc.set] == ["n_reviews"]
        assert "GroupBy[input] replace if members_counted -> replace+increment" in " ".join(inc.rules)
    updates = {(m.origin, m.path): [f for f, _ in m.set] for m in script.statements if m.kind == "nested_update"}
    assert updates[("Δu(users) AS users", "full_reviews")] == [("user_name",)]
    assert updates[("Δu(users) AS users", "members")][0] == ("users", "user_name")
    assert updates[("Δu(reviews) AS reviews", "full_reviews")] == [("stars",)]


def test_a_subquery_over_g_that_is_not_element_by_element_recomputes_the_groups():
    """A subquery over g that aggregates, or whose value is not a bag of tuples, does not map
    members one by one: the groups a change of reviews touches are recomputed (Table C.7)."""
    for subquery in ("(SELECT VALUE x.reviews.stars FROM g AS x)",
                     "(SELECT COUNT(*) AS n FROM g AS x)"):
        text = V1_WITH_SUBQUERY.replace(
            "(SELECT x.reviews.review_id, x.reviews.stars, x.users.user_name\n"
            "            FROM g AS x WHERE x.reviews IS NOT NULL)", subquery)
        assert subquery in text
        kinds = {m.kind for m in from_(script_of(text), "Δ(reviews)")}
        assert kinds == {"replace"}, (subquery, kinds)


def scans(plan: O.Operator) -> set[str]:
    return {str(o.source.name) for o in O.walk(plan) if isinstance(o, O.ScanCollection) and isinstance(o.source, TableRef)}


def test_the_groups_a_change_of_the_group_keys_table_recomputes_are_named_by_its_own_keys():
    """V1's groups are its businesses: a business inserted, deleted or moving in or out of San
    Francisco names its group by its own key, so the keys of the replace read the i-diffs of
    businesses only, not the states of the left join.  Grouped by a value that is no ID of the
    change (reviews by stars, a user inserted), the groups are found by reading the states."""
    (s,) = [s for s in from_(script_of(V1), "Δ(businesses)") if s.kind == "replace"]
    assert scans(s.keys) <= {"Δ(businesses)", "Δu(businesses)"}, scans(s.keys)
    assert any("the groups are named by the i-diff's own keys" in r for r in s.rules), s.rules
    by_stars = """CREATE VIEW by_stars AS
        SELECT r.stars AS stars, COUNT(*) AS n FROM reviews r JOIN users u ON r.user_id = u.user_id
        GROUP BY r.stars"""
    (s,) = [s for s in from_(script_of(by_stars), "Δ(users)") if s.kind == "replace"]
    assert {"reviews@pre", "reviews@post"} <= scans(s.keys), scans(s.keys)
    assert not any("the groups are named by" in r for r in s.rules)


GROUPED = """CREATE VIEW grouped AS
    SELECT r.business_id AS business_id, {extra}
    FROM reviews r JOIN users u ON r.user_id = u.user_id
    GROUP BY r.business_id GROUP AS g"""


def test_a_group_bag_returned_under_another_name_with_aggregates_that_do_not_read_the_update():
    text = GROUPED.format(extra="g AS members, COUNT(*) AS n, SUM(r.stars) AS total")
    assert nested_update_of(text, "Δu(users)") == (
        "members", ["user_id"], [("u", "user_name"), ("u", "fans"), ("u", "friends"), ("u", "elite")])


@pytest.mark.parametrize("extra, why", [
    ("g AS members, SUM(u.fans) AS fans", "an aggregate reads users.fans"),
    ("ARRAY_COUNT(g) AS n", "the bag is not stored, a count of it is"),
    ("g AS members, (SELECT VALUE x.u.user_name FROM g AS x) AS names", "a subquery over the group reads it"),
])
def test_updates_a_group_bag_does_not_just_carry_recompute_the_groups(extra, why):
    text = GROUPED.format(extra=extra)
    statements = from_(script_of(text), "Δu(users)")
    assert statements and all(s.kind == "replace" for s in statements), why
    assert any("GroupBy[input]: the update becomes delete+insert" in r for s in statements for r in s.rules)


def test_an_attribute_a_join_condition_below_the_group_reads_is_not_navigated():
    text = """CREATE VIEW grouped AS
        SELECT r.business_id AS business_id, g AS members
        FROM reviews r JOIN users u ON r.user_id = u.user_id AND u.fans > r.stars
        GROUP BY r.business_id GROUP AS g"""
    script = script_of(text)
    assert "fans" in script.table("users").conditional  # its updates change which members exist
    (s,) = from_(script, "Δu(users)")
    assert s.kind == "nested_update"
    assert [f for f, _ in s.set] == [("u", "user_name"), ("u", "friends"), ("u", "elite")]


def test_tuple_based_maintenance_of_v1_has_no_nested_updates():
    assert all(s.kind != "nested_update" for s in script_of(V1, "tuple").statements)
