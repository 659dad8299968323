"""Base-table i-diff signature generation (thesis §2.5, §2.14.1, Example 2.14.1)."""

from __future__ import annotations

from idivm import types as T
from idivm.algebra.builder import build_view
from idivm.diffs import DiffType
from idivm.diffs.base_signatures import generate_base_signatures
from idivm.sqlpp import parse_view

S, I = T.STRING, T.INT
TABLES = {
    "businesses": T.TupleType((("business_id", S), ("name", S), ("city", S), ("state", S),
                               ("categories", T.CollectionType(S)))),
    "reviews": T.TupleType((("review_id", S), ("user_id", S), ("business_id", S), ("stars", I),
                            ("date", S), ("text", S))),
    "users": T.TupleType((("user_id", S), ("user_name", S), ("fans", I), ("friends", T.CollectionType(S)),
                          ("elite", T.CollectionType(I)))),
    "parts": T.TupleType((("pid", I), ("price", T.DOUBLE))),
    "devices": T.TupleType((("did", I), ("category", S))),
    "devices_parts": T.TupleType((("did", I), ("pid", I))),
}
KEYS = {"businesses": ("business_id",), "reviews": ("review_id",), "users": ("user_id",),
        "parts": ("pid",), "devices": ("did",), "devices_parts": ("did", "pid")}

V = """CREATE VIEW V AS SELECT business_id, (
  SELECT reviews.*, users.* FROM reviews NATURAL JOIN users
  WHERE business_id = businesses.business_id) AS full_reviews
FROM businesses WHERE city = "San Francisco" """
V1 = """CREATE VIEW V1 AS SELECT business_id, full_reviews
FROM businesses NATURAL LEFT OUTER JOIN (reviews NATURAL JOIN users)
WHERE city = "San Francisco" GROUP BY business_id INTO full_reviews"""


def signatures(text):
    return generate_base_signatures(build_view(parse_view(text), TABLES).plan, KEYS, TABLES)


def updated(sig) -> dict[str, tuple[bool, bool]]:
    """attribute -> (pre, post) of an update signature of a top-level table."""
    assert sig.element.type is DiffType.UPDATE
    return {a: (n.pre, n.post) for a, n in sig.element.diff.attributes}


def test_example_2_14_1_view_v():
    s = signatures(V)
    assert s.tables() == ("businesses", "reviews", "users")
    for c in s.collections:
        assert c.collection[1] == ()  # no signature for nested elite/friends (not iterated by V)
        assert c.insert.element.type is DiffType.INSERT and c.insert.element.post
        assert c.delete.element.type is DiffType.DELETE and c.delete.element.pre
    b = s.of("businesses")
    # city is conditional (the key business_id is immutable, so it gets no update signature)
    assert [updated(sig) for _, sig in b.conditional_updates] == [{"city": (True, True)}]
    assert b.nonconditional_update is None and not b.wildcard
    # reviews and users are read by wildcard (reviews.*, users.*)
    assert set(s.wildcard) == {("reviews", ()), ("users", ())}
    r = s.of("reviews")
    assert sorted(tuple(sorted(a)) for a, _ in r.conditional_updates) == [("business_id",), ("user_id",)]
    assert updated(r.nonconditional_update) == {"stars": (False, True), "date": (False, True),
                                                 "text": (False, True)}
    u = s.of("users")
    assert u.conditional_updates == ()  # user_id is the key
    assert set(updated(u.nonconditional_update)) == {"user_name", "fans", "friends", "elite"}


def test_example_2_14_1_v1_has_the_same_conditional_attributes():
    s, s1 = signatures(V), signatures(V1)
    assert s1.tables() == s.tables()
    for table in s.tables():
        assert ({a for a, _ in s1.of(table).conditional_updates}
                == {a for a, _ in s.of(table).conditional_updates}), table
    # V1's GROUP AS keeps whole binding tuples, so businesses too reaches the view by wildcard
    assert set(s1.wildcard) == {("businesses", ()), ("reviews", ()), ("users", ())}


def test_relational_view_fig_2_1b():
    s = signatures("""CREATE VIEW v AS SELECT did, pid, price FROM parts NATURAL JOIN devices_parts
        NATURAL JOIN devices WHERE category = "phone" """)
    assert updated(s.of("parts").nonconditional_update) == {"price": (False, True)}
    assert s.of("parts").conditional_updates == ()
    assert [updated(x) for _, x in s.of("devices").conditional_updates] == [{"category": (True, True)}]
    dp = s.of("devices_parts")  # all key: only insert and delete
    assert dp.conditional_updates == () and dp.nonconditional_update is None


def test_nested_collection_signatures():
    s = signatures("""CREATE VIEW v AS SELECT u.user_id AS u, y AS year
        FROM users AS u, u.elite AS y WHERE u.fans > 3""")
    elite = s.of("users", ("elite",))
    assert elite.key == ("elite",)  # a bag of scalars: the value is its provenance
    ins = elite.insert
    assert ins.provenance == ("user_id",)
    inner = ins.element.diff["elite"].diff
    assert inner.provenance == ("elite",) and inner.element.type is DiffType.INSERT
    users = s.of("users")
    assert [updated(x) for _, x in users.conditional_updates] == [{"fans": (True, True)}]
