"""Nested SQL++ views over a small Yelp-like dataset, checked against hand-written results.

The data is written out below; every expected result was worked out by hand from
it and the SQL++ semantics of DESIGN.md ("SQL++ scope"): ``SELECT *`` gives one
field per FROM variable, ``GROUP AS``/``INTO`` bags hold one tuple per binding
({variable: value}), a subquery in SELECT is a bag, an outer join's missing side
is NULL, ``AT`` positions start at 1 and ARRAY_* functions ignore NULL elements.

Results are compared as bags, recursively: every list is sorted by its elements'
canonical JSON unless the case names it as ordered.

Each case also has a golden ``explain`` printout (view type, IDs, plan annotated with
the IDs of every operator, base-table i-diff signatures) in
``tests/goldens/explain_nested/<case id>.txt``; ``pytest --update-goldens`` rewrites them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from idivm.datasets import view_path

GOLDENS = Path(__file__).parent / "goldens" / "explain_nested"

BUSINESSES = [
    {"business_id": "b1", "name": "Garaje", "city": "San Francisco",
     "categories": ["Mexican", "Burgers", "Gastropub"],
     "hours": [{"day": "Mon", "open": 9, "close": 17}, {"day": "Sat", "open": 10, "close": 14}]},
    {"business_id": "b2", "name": "Zuni Cafe", "city": "San Francisco", "categories": ["American"], "hours": []},
    {"business_id": "b3", "name": "Tartine", "city": "San Francisco", "categories": [],  # no reviews
     "hours": [{"day": "Sun", "open": 8, "close": 12}]},
    {"business_id": "b4", "name": "Graze", "city": "Madison", "categories": ["Tapas", "Bars"],
     "hours": [{"day": "Mon", "open": 11, "close": 23}]},
    {"business_id": "b5", "name": "Nowhere", "city": None, "categories": None, "hours": None},
]

REVIEWS = [
    {"review_id": "r1", "user_id": "u1", "business_id": "b1", "stars": 4, "date": "2016-03-09"},
    {"review_id": "r2", "user_id": "u2", "business_id": "b1", "stars": 2, "date": "2017-01-02"},
    {"review_id": "r3", "user_id": "u1", "business_id": "b2", "stars": 5, "date": "2015-05-05"},
    {"review_id": "r4", "user_id": "u1", "business_id": "b2", "stars": 3, "date": "2018-07-01"},  # u1 again
    {"review_id": "r5", "user_id": "u3", "business_id": "b4", "stars": 5, "date": "2019-02-14"},
    {"review_id": "r6", "user_id": "u2", "business_id": "b5", "stars": None, "date": None},
    {"review_id": "r7", "user_id": "u9", "business_id": "b1", "stars": 3, "date": "2020-12-31"},  # no such user
]

USERS = [
    {"user_id": "u1", "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"], "elite": [2012, 2013]},
    {"user_id": "u2", "user_name": "Ana", "fans": 5, "friends": ["u1"], "elite": []},
    {"user_id": "u3", "user_name": "Bo", "fans": None, "friends": [], "elite": [2013, 2014]},
    {"user_id": "u4", "user_name": "Cy", "fans": 0, "friends": ["u1", "u2", "u3"], "elite": [2015, 2016, 2017]},
]


def canonical(value, ordered: frozenset[str] = frozenset(), field: str | None = None):
    """``value`` with every list sorted (bags), except lists held by a field named in ``ordered``."""
    if isinstance(value, dict):
        return {k: canonical(v, ordered, k) for k, v in value.items()}
    if isinstance(value, list):
        items = [canonical(v, ordered) for v in value]
        if field in ordered:
            return items
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    return value


def assert_same_bag(actual, expected, ordered=frozenset()):
    assert canonical(actual, frozenset(ordered)) == canonical(expected, frozenset(ordered))


@pytest.fixture
def yelp(make_warehouse):
    wh = make_warehouse("yelp")
    wh.create_table("businesses", "business_id", BUSINESSES)
    wh.create_table("reviews", "review_id", REVIEWS)
    wh.create_table("users", "user_id", USERS)
    return wh


def check(wh, text, expected, ordered=()):
    info = wh.define(text)
    rows = wh.rows(info.name)
    assert_same_bag(rows, expected, ordered)
    assert info.rows == len(expected)


# --- the comparison itself ----------------------------------------------------------------------

def test_canonical_ignores_bag_order_at_every_level_but_not_ordered_fields():
    a = [{"k": 1, "bag": [[2, 1], [3]]}, {"k": 0, "bag": []}]
    b = [{"k": 0, "bag": []}, {"k": 1, "bag": [[3], [1, 2]]}]
    assert canonical(a) == canonical(b)
    assert canonical([{"xs": [1, 2]}], frozenset({"xs"})) != canonical([{"xs": [2, 1]}], frozenset({"xs"}))
    assert canonical([1, 1, 2]) != canonical([1, 2, 2])  # multiplicities count


# --- the views: (case id, view text, expected rows, fields whose lists are ordered) ----------------

def case(case_id, text, expected, ordered=()):
    return pytest.param(case_id, text, expected, frozenset(ordered), id=case_id)


CASES = [
    # --- the thesis' views (§2.9, §2.16.3) ----------------------------------------------------------
    case("thesis_view_v_correlated_subquery", """
        CREATE VIEW v AS
        SELECT business_id, (
          SELECT reviews.*, users.*
          FROM reviews NATURAL JOIN users
          WHERE business_id = businesses.business_id
        ) AS full_reviews
        FROM businesses
        WHERE city = "San Francisco"
    """, [
        {"business_id": "b1", "full_reviews": [
            {"review_id": "r1", "user_id": "u1", "business_id": "b1", "stars": 4, "date": "2016-03-09",
             "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"], "elite": [2012, 2013]},
            {"review_id": "r2", "user_id": "u2", "business_id": "b1", "stars": 2, "date": "2017-01-02",
             "user_name": "Ana", "fans": 5, "friends": ["u1"], "elite": []},
        ]},
        {"business_id": "b2", "full_reviews": [
            {"review_id": "r3", "user_id": "u1", "business_id": "b2", "stars": 5, "date": "2015-05-05",
             "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"], "elite": [2012, 2013]},
            {"review_id": "r4", "user_id": "u1", "business_id": "b2", "stars": 3, "date": "2018-07-01",
             "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"], "elite": [2012, 2013]},
        ]},
        {"business_id": "b3", "full_reviews": []},
    ]),
    case("thesis_view_v_with_select_star_nests_each_variable", """
        CREATE VIEW v_star AS
        SELECT business_id, (
          SELECT *
          FROM reviews NATURAL JOIN users
          WHERE business_id = businesses.business_id
        ) AS full_reviews
        FROM businesses
        WHERE city = "San Francisco"
    """, [
        {"business_id": "b1", "full_reviews": [
            {"reviews": {"review_id": "r1", "user_id": "u1", "business_id": "b1", "stars": 4, "date": "2016-03-09"},
             "users": {"user_id": "u1", "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"],
                       "elite": [2012, 2013]}},
            {"reviews": {"review_id": "r2", "user_id": "u2", "business_id": "b1", "stars": 2, "date": "2017-01-02"},
             "users": {"user_id": "u2", "user_name": "Ana", "fans": 5, "friends": ["u1"], "elite": []}},
        ]},
        {"business_id": "b2", "full_reviews": [
            {"reviews": {"review_id": "r3", "user_id": "u1", "business_id": "b2", "stars": 5, "date": "2015-05-05"},
             "users": {"user_id": "u1", "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"],
                       "elite": [2012, 2013]}},
            {"reviews": {"review_id": "r4", "user_id": "u1", "business_id": "b2", "stars": 3, "date": "2018-07-01"},
             "users": {"user_id": "u1", "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"],
                       "elite": [2012, 2013]}},
        ]},
        {"business_id": "b3", "full_reviews": []},
    ]),
    # V1 as the thesis writes it is the shipped sf_reviews_grouped view
    case("thesis_view_v1_group_by_into", view_path("sf_reviews_grouped").read_text().replace(
        "CREATE VIEW sf_reviews_grouped AS", "CREATE VIEW v1 AS", 1), [
        {"business_id": "b1", "full_reviews": [
            {"businesses": {"business_id": "b1", "name": "Garaje", "city": "San Francisco",
                            "categories": ["Mexican", "Burgers", "Gastropub"],
                            "hours": [{"day": "Mon", "open": 9, "close": 17},
                                      {"day": "Sat", "open": 10, "close": 14}]},
             "reviews": {"review_id": "r1", "user_id": "u1", "business_id": "b1", "stars": 4,
                         "date": "2016-03-09"},
             "users": {"user_id": "u1", "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"],
                       "elite": [2012, 2013]}},
            {"businesses": BUSINESSES[0],
             "reviews": {"review_id": "r2", "user_id": "u2", "business_id": "b1", "stars": 2,
                         "date": "2017-01-02"},
             "users": {"user_id": "u2", "user_name": "Ana", "fans": 5, "friends": ["u1"], "elite": []}},
        ]},
        {"business_id": "b2", "full_reviews": [
            {"businesses": BUSINESSES[1],
             "reviews": {"review_id": "r3", "user_id": "u1", "business_id": "b2", "stars": 5,
                         "date": "2015-05-05"},
             "users": {"user_id": "u1", "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"],
                       "elite": [2012, 2013]}},
            {"businesses": BUSINESSES[1],
             "reviews": {"review_id": "r4", "user_id": "u1", "business_id": "b2", "stars": 3,
                         "date": "2018-07-01"},
             "users": {"user_id": "u1", "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"],
                       "elite": [2012, 2013]}},
        ]},
        {"business_id": "b3", "full_reviews": [{"businesses": BUSINESSES[2], "reviews": None, "users": None}]},
    ]),
    case("thesis_view_v2_flat_left_outer_join", """
        CREATE VIEW v2 AS
        SELECT business_id, reviews.*, users.*
        FROM businesses NATURAL LEFT OUTER JOIN (
            reviews NATURAL JOIN
            users
        )
        WHERE city = "San Francisco"
    """, [
        {"business_id": "b1", "review_id": "r1", "user_id": "u1", "stars": 4, "date": "2016-03-09",
         "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"], "elite": [2012, 2013]},
        {"business_id": "b1", "review_id": "r2", "user_id": "u2", "stars": 2, "date": "2017-01-02",
         "user_name": "Ana", "fans": 5, "friends": ["u1"], "elite": []},
        {"business_id": "b2", "review_id": "r3", "user_id": "u1", "stars": 5, "date": "2015-05-05",
         "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"], "elite": [2012, 2013]},
        {"business_id": "b2", "review_id": "r4", "user_id": "u1", "stars": 3, "date": "2018-07-01",
         "user_name": "Sebastien", "fans": 1032, "friends": ["u2", "u3"], "elite": [2012, 2013]},
        # no review: the fields of the unmatched side are MISSING, left out of the row
        {"business_id": "b3"},
    ]),


    # --- subqueries ---------------------------------------------------------------------------------
    case("correlated_subquery_bag_of_scalars", """
        CREATE VIEW reviewed AS
        SELECT u.user_id,
               (SELECT VALUE r.business_id FROM reviews r WHERE r.user_id = u.user_id) AS businesses,
               (SELECT DISTINCT VALUE r.business_id FROM reviews r WHERE r.user_id = u.user_id) AS distinct_businesses
        FROM users u
    """, [
        {"user_id": "u1", "businesses": ["b1", "b2", "b2"], "distinct_businesses": ["b1", "b2"]},
        {"user_id": "u2", "businesses": ["b1", "b5"], "distinct_businesses": ["b1", "b5"]},
        {"user_id": "u3", "businesses": ["b4"], "distinct_businesses": ["b4"]},
        {"user_id": "u4", "businesses": [], "distinct_businesses": []},
    ]),
    case("correlated_subquery_bag_of_tuples_with_constructed_fields", """
        CREATE VIEW user_reviews AS
        SELECT u.user_name AS name,
               (SELECT r.review_id, {"business": r.business_id, "stars": r.stars} AS about
                FROM reviews r WHERE r.user_id = u.user_id) AS reviews
        FROM users u
        WHERE u.fans > 0
    """, [
        {"name": "Sebastien", "reviews": [
            {"review_id": "r1", "about": {"business": "b1", "stars": 4}},
            {"review_id": "r3", "about": {"business": "b2", "stars": 5}},
            {"review_id": "r4", "about": {"business": "b2", "stars": 3}},
        ]},
        {"name": "Ana", "reviews": [
            {"review_id": "r2", "about": {"business": "b1", "stars": 2}},
            {"review_id": "r6", "about": {"business": "b5", "stars": None}},
        ]},
    ]),
    case("subquery_inside_subquery_correlated_with_both_outer_levels", """
        CREATE VIEW elsewhere AS
        SELECT b.business_id,
               (SELECT r.review_id,
                       (SELECT VALUE r2.review_id FROM reviews r2
                        WHERE r2.user_id = r.user_id AND r2.business_id <> b.business_id) AS other_reviews
                FROM reviews r
                WHERE r.business_id = b.business_id) AS reviews
        FROM businesses b
        WHERE b.city = "San Francisco"
    """, [
        {"business_id": "b1", "reviews": [
            {"review_id": "r1", "other_reviews": ["r3", "r4"]},
            {"review_id": "r2", "other_reviews": ["r6"]},
            {"review_id": "r7", "other_reviews": []},
        ]},
        {"business_id": "b2", "reviews": [
            {"review_id": "r3", "other_reviews": ["r1"]},
            {"review_id": "r4", "other_reviews": ["r1"]},
        ]},
        {"business_id": "b3", "reviews": []},
    ]),
    case("subquery_over_a_nested_collection_joined_with_a_table", """
        CREATE VIEW friend_names AS
        SELECT u.user_id,
               (SELECT VALUE v.user_name FROM u.friends AS f, users v WHERE v.user_id = f) AS friends
        FROM users u
    """, [
        {"user_id": "u1", "friends": ["Ana", "Bo"]},
        {"user_id": "u2", "friends": ["Sebastien"]},
        {"user_id": "u3", "friends": []},
        {"user_id": "u4", "friends": ["Sebastien", "Ana", "Bo"]},
    ]),


    # --- GROUP AS / INTO ----------------------------------------------------------------------------
    case("group_as_with_aggregates_over_the_group", """
        CREATE VIEW per_business AS
        SELECT r.business_id AS business_id,
               COUNT(*) AS n,
               (SELECT VALUE COUNT(*) FROM g) AS n_bag,
               ARRAY_COUNT(g) AS n_members,
               (SELECT VALUE x.r.stars FROM g AS x) AS stars,
               ARRAY_AVG((SELECT VALUE x.r.stars FROM g AS x)) AS avg_stars
        FROM reviews r
        GROUP BY r.business_id GROUP AS g
    """, [
        {"business_id": "b1", "n": 3, "n_bag": [3], "n_members": 3, "stars": [4, 2, 3], "avg_stars": 3.0},
        {"business_id": "b2", "n": 2, "n_bag": [2], "n_members": 2, "stars": [5, 3], "avg_stars": 4.0},
        {"business_id": "b4", "n": 1, "n_bag": [1], "n_members": 1, "stars": [5], "avg_stars": 5.0},
        {"business_id": "b5", "n": 1, "n_bag": [1], "n_members": 1, "stars": [None], "avg_stars": None},
    ]),
    case("group_as_over_unnested_scalars_holds_every_variable", """
        CREATE VIEW elite_years AS
        SELECT y AS year, COUNT(*) AS n, g AS members
        FROM users u, u.elite AS y
        WHERE u.fans IS NULL OR u.fans < 100
        GROUP BY y GROUP AS g
    """, [
        {"year": 2013, "n": 1, "members": [
            {"u": {"user_id": "u3", "user_name": "Bo", "fans": None, "friends": [], "elite": [2013, 2014]},
             "y": 2013}]},
        {"year": 2014, "n": 1, "members": [
            {"u": {"user_id": "u3", "user_name": "Bo", "fans": None, "friends": [], "elite": [2013, 2014]},
             "y": 2014}]},
        {"year": 2015, "n": 1, "members": [
            {"u": {"user_id": "u4", "user_name": "Cy", "fans": 0, "friends": ["u1", "u2", "u3"],
                   "elite": [2015, 2016, 2017]}, "y": 2015}]},
        {"year": 2016, "n": 1, "members": [
            {"u": {"user_id": "u4", "user_name": "Cy", "fans": 0, "friends": ["u1", "u2", "u3"],
                   "elite": [2015, 2016, 2017]}, "y": 2016}]},
        {"year": 2017, "n": 1, "members": [
            {"u": {"user_id": "u4", "user_name": "Cy", "fans": 0, "friends": ["u1", "u2", "u3"],
                   "elite": [2015, 2016, 2017]}, "y": 2017}]},
    ]),
    case("left_join_grouped_into_nested_bags", """
        CREATE VIEW user_review_ids AS
        SELECT u.user_id, (SELECT VALUE x.r.review_id FROM g AS x WHERE x.r IS NOT NULL) AS reviews,
               ARRAY_COUNT(g) AS n_members, COUNT(r.review_id) AS n_reviews
        FROM users u LEFT OUTER JOIN reviews r ON r.user_id = u.user_id
        GROUP BY u.user_id GROUP AS g
    """, [
        {"user_id": "u1", "reviews": ["r1", "r3", "r4"], "n_members": 3, "n_reviews": 3},
        {"user_id": "u2", "reviews": ["r2", "r6"], "n_members": 2, "n_reviews": 2},
        {"user_id": "u3", "reviews": ["r5"], "n_members": 1, "n_reviews": 1},
        {"user_id": "u4", "reviews": [], "n_members": 1, "n_reviews": 0},
    ]),


    # --- unnesting ------------------------------------------------------------------------------------
    case("unnest_bag_of_scalars_in_from", """
        CREATE VIEW user_elite AS
        SELECT u.user_id, y AS year FROM users u, u.elite AS y
    """, [
        {"user_id": "u1", "year": 2012}, {"user_id": "u1", "year": 2013},
        {"user_id": "u3", "year": 2013}, {"user_id": "u3", "year": 2014},
        {"user_id": "u4", "year": 2015}, {"user_id": "u4", "year": 2016}, {"user_id": "u4", "year": 2017},
    ]),
    case("unnest_with_at_positions", """
        CREATE VIEW friend_positions AS
        SELECT u.user_id, f AS friend, i AS pos FROM users u, u.friends AS f AT i
    """, [
        {"user_id": "u1", "friend": "u2", "pos": 1}, {"user_id": "u1", "friend": "u3", "pos": 2},
        {"user_id": "u2", "friend": "u1", "pos": 1},
        {"user_id": "u4", "friend": "u1", "pos": 1}, {"user_id": "u4", "friend": "u2", "pos": 2},
        {"user_id": "u4", "friend": "u3", "pos": 3},
    ]),
    case("unnest_keyword", """
        CREATE VIEW sf_categories AS
        SELECT b.business_id, c AS category
        FROM businesses b UNNEST b.categories AS c
        WHERE b.city = "San Francisco"
    """, [
        {"business_id": "b1", "category": "Mexican"}, {"business_id": "b1", "category": "Burgers"},
        {"business_id": "b1", "category": "Gastropub"}, {"business_id": "b2", "category": "American"},
    ]),
    # AT gives the elements their provenance (tables cannot declare element keys yet)
    case("unnest_bag_of_tuples_and_navigate_their_fields", """
        CREATE VIEW early AS
        SELECT b.business_id, i AS pos, h.day, h.close - h.open AS open_hours
        FROM businesses b, b.hours AS h AT i
        WHERE h.open < 10
    """, [
        {"business_id": "b1", "pos": 1, "day": "Mon", "open_hours": 8},
        {"business_id": "b3", "pos": 1, "day": "Sun", "open_hours": 4},
    ]),
    case("global_aggregates_over_nested_collections", """
        CREATE VIEW weekly AS
        SELECT b.business_id,
               (SELECT VALUE SUM(h.close - h.open) FROM b.hours AS h) AS total_hours,
               (SELECT VALUE COUNT(*) FROM b.hours AS h) AS days,
               (SELECT MAX(h.close) AS latest FROM b.hours AS h) AS latest
        FROM businesses b
    """, [
        {"business_id": "b1", "total_hours": [12], "days": [2], "latest": [{"latest": 17}]},
        {"business_id": "b2", "total_hours": [None], "days": [0], "latest": [{"latest": None}]},
        {"business_id": "b3", "total_hours": [4], "days": [1], "latest": [{"latest": 12}]},
        {"business_id": "b4", "total_hours": [12], "days": [1], "latest": [{"latest": 23}]},
        {"business_id": "b5", "total_hours": [None], "days": [0], "latest": [{"latest": None}]},
    ]),


    # --- constructors, SELECT VALUE, SELECT * ---------------------------------------------------------
    case("tuple_bag_and_array_constructors_in_select_value", """
        CREATE VIEW cards AS
        SELECT VALUE {"id": u.user_id,
                      "pair": [u.user_id, u.user_name],
                      "tags": {{"user", u.user_name}},
                      "stats": {"fans": u.fans, "elite": u.elite}}
        FROM users u
        WHERE u.user_id IN ("u2", "u3")
    """, [
        {"id": "u2", "pair": ["u2", "Ana"], "tags": ["user", "Ana"], "stats": {"fans": 5, "elite": []}},
        {"id": "u3", "pair": ["u3", "Bo"], "tags": ["Bo", "user"], "stats": {"fans": None, "elite": [2013, 2014]}},
    ], ordered={"pair", "elite"}),
    case("from_subquery_of_constructed_tuples_with_index_access", """
        CREATE VIEW cards_flat AS
        SELECT c.id, c.stats.fans AS fans, c.first_friend
        FROM (SELECT VALUE {"id": u.user_id, "stats": {"fans": u.fans}, "first_friend": u.friends[0]}
              FROM users u) AS c
    """, [
        {"id": "u1", "fans": 1032, "first_friend": "u2"},
        {"id": "u2", "fans": 5, "first_friend": "u1"},
        {"id": "u3", "fans": None},  # no friends: friends[0] is out of the array, MISSING
        {"id": "u4", "fans": 0, "first_friend": "u1"},
    ]),
    case("select_star_gives_one_field_per_variable", """
        CREATE VIEW star AS
        SELECT * FROM users u, u.elite AS y WHERE u.user_id = "u1"
    """, [
        {"u": USERS[0], "y": 2012},
        {"u": USERS[0], "y": 2013},
    ]),
    case("select_star_over_a_join", """
        CREATE VIEW star_join AS
        SELECT * FROM businesses b JOIN reviews r ON b.business_id = r.business_id WHERE b.city = "Madison"
    """, [
        {"b": {"business_id": "b4", "name": "Graze", "city": "Madison", "categories": ["Tapas", "Bars"],
               "hours": [{"day": "Mon", "open": 11, "close": 23}]},
         "r": {"review_id": "r5", "user_id": "u3", "business_id": "b4", "stars": 5, "date": "2019-02-14"}},
    ]),


    # --- collection functions -------------------------------------------------------------------------
    case("array_functions_over_nested_lists", """
        CREATE VIEW elite_stats AS
        SELECT u.user_id, ARRAY_COUNT(u.elite) AS n, ARRAY_MIN(u.elite) AS first,
               ARRAY_MAX(u.elite) AS last, ARRAY_SUM(u.elite) AS total, ARRAY_AVG(u.elite) AS mean,
               ARRAY_COUNT(u.friends) AS n_friends
        FROM users u
    """, [
        {"user_id": "u1", "n": 2, "first": 2012, "last": 2013, "total": 4025, "mean": 2012.5, "n_friends": 2},
        {"user_id": "u2", "n": 0, "first": None, "last": None, "total": None, "mean": None, "n_friends": 1},
        {"user_id": "u3", "n": 2, "first": 2013, "last": 2014, "total": 4027, "mean": 2013.5, "n_friends": 0},
        {"user_id": "u4", "n": 3, "first": 2015, "last": 2017, "total": 6048, "mean": 2016.0, "n_friends": 3},
    ]),
    case("array_functions_over_subqueries", """
        CREATE VIEW star_stats AS
        SELECT b.business_id,
               ARRAY_COUNT(b.categories) AS n_categories,
               ARRAY_COUNT(stars) AS n, ARRAY_SUM(stars) AS total, ARRAY_AVG(stars) AS mean,
               ARRAY_MIN((SELECT r.stars FROM reviews r WHERE r.business_id = b.business_id)) AS low,
               ARRAY_MAX(stars) AS high
        FROM businesses b
        LET stars = (SELECT VALUE r.stars FROM reviews r WHERE r.business_id = b.business_id)
    """, [
        {"business_id": "b1", "n_categories": 3, "n": 3, "total": 9, "mean": 3.0, "low": 2, "high": 4},
        {"business_id": "b2", "n_categories": 1, "n": 2, "total": 8, "mean": 4.0, "low": 3, "high": 5},
        {"business_id": "b3", "n_categories": 0, "n": 0, "total": None, "mean": None, "low": None, "high": None},
        {"business_id": "b4", "n_categories": 2, "n": 1, "total": 5, "mean": 5.0, "low": 5, "high": 5},
        # b5's categories are null: ARRAY_COUNT of null is 0 (AsterixDB's array_count)
        {"business_id": "b5", "n_categories": 0, "n": 0, "total": None, "mean": None, "low": None,
         "high": None},
    ]),


    # --- joins, LET, EXISTS -----------------------------------------------------------------------------
    case("left_join_with_nested_output", """
        CREATE VIEW business_reviews AS
        SELECT b.business_id, b.categories, r.review_id, {"stars": r.stars, "by": r.user_id} AS review
        FROM businesses b LEFT OUTER JOIN reviews r ON b.business_id = r.business_id
        WHERE b.city = "San Francisco" OR b.city IS NULL
    """, [
        {"business_id": "b1", "categories": ["Mexican", "Burgers", "Gastropub"], "review_id": "r1",
         "review": {"stars": 4, "by": "u1"}},
        {"business_id": "b1", "categories": ["Mexican", "Burgers", "Gastropub"], "review_id": "r2",
         "review": {"stars": 2, "by": "u2"}},
        {"business_id": "b1", "categories": ["Mexican", "Burgers", "Gastropub"], "review_id": "r7",
         "review": {"stars": 3, "by": "u9"}},
        {"business_id": "b2", "categories": ["American"], "review_id": "r3", "review": {"stars": 5, "by": "u1"}},
        {"business_id": "b2", "categories": ["American"], "review_id": "r4", "review": {"stars": 3, "by": "u1"}},
        # unmatched: r's fields are MISSING, and so are those of the constructed review
        {"business_id": "b3", "categories": [], "review": {}},
        {"business_id": "b5", "categories": None, "review_id": "r6", "review": {"stars": None, "by": "u2"}},
    ]),
    case("let", """
        CREATE VIEW elite_users AS
        SELECT u.user_id, n AS n_elite, veteran
        FROM users u
        LET n = ARRAY_COUNT(u.elite), veteran = n >= 3
        WHERE n > 0
    """, [
        {"user_id": "u1", "n_elite": 2, "veteran": False},
        {"user_id": "u3", "n_elite": 2, "veteran": False},
        {"user_id": "u4", "n_elite": 3, "veteran": True},
    ]),
    case("exists_over_a_nested_collection", """
        CREATE VIEW recent_elite AS
        SELECT u.user_id,
               EXISTS (SELECT VALUE f FROM u.friends AS f WHERE f = "u1") AS befriends_u1
        FROM users u
        WHERE EXISTS (SELECT VALUE y FROM u.elite AS y WHERE y >= 2014)
    """, [
        {"user_id": "u3", "befriends_u1": False},
        {"user_id": "u4", "befriends_u1": True},
    ]),
    case("not_exists_over_a_nested_collection_and_a_table", """
        CREATE VIEW lonely AS
        SELECT u.user_id
        FROM users u
        WHERE NOT EXISTS (SELECT VALUE f FROM u.friends AS f)
           OR NOT EXISTS (SELECT VALUE r FROM reviews r WHERE r.user_id = u.user_id)
    """, [
        {"user_id": "u3"},
        {"user_id": "u4"},
    ]),
    # --- ORDER BY, LIMIT, OFFSET and AT over subqueries -------------------------------------------------
    case("top_k_per_parent_ordered_subquery_with_limit", """
        CREATE VIEW top_reviews AS
        SELECT b.business_id,
               (SELECT r.review_id, r.stars FROM reviews r WHERE r.business_id = b.business_id
                ORDER BY r.stars DESC LIMIT 2) AS top
        FROM businesses b
    """, [
        {"business_id": "b1", "top": [{"review_id": "r1", "stars": 4}, {"review_id": "r7", "stars": 3}]},
        {"business_id": "b2", "top": [{"review_id": "r3", "stars": 5}, {"review_id": "r4", "stars": 3}]},
        {"business_id": "b3", "top": []},
        {"business_id": "b4", "top": [{"review_id": "r5", "stars": 5}]},
        {"business_id": "b5", "top": [{"review_id": "r6", "stars": None}]},  # NULL last when descending
    ], ordered={"top"}),
    case("ordered_subquery_over_a_nested_collection", """
        CREATE VIEW elite_desc AS
        SELECT u.user_id, (FROM u.elite AS y SELECT VALUE y ORDER BY y DESC) AS years,
               (FROM u.elite AS y SELECT VALUE y ORDER BY y OFFSET 1) AS later
        FROM users u
    """, [
        {"user_id": "u1", "years": [2013, 2012], "later": [2013]},
        {"user_id": "u2", "years": [], "later": []},
        {"user_id": "u3", "years": [2014, 2013], "later": [2014]},
        {"user_id": "u4", "years": [2017, 2016, 2015], "later": [2016, 2017]},
    ], ordered={"years", "later"}),
    case("at_over_an_ordered_from_subquery", """
        CREATE VIEW fan_rank AS
        FROM (FROM users u SELECT u.user_id, u.fans AS f ORDER BY f DESC) AS x AT p
        SELECT x.user_id, p
    """, [  # fans 1032, 5, 0 and NULL (last when descending); the ORDER BY key is a SELECT alias
        {"user_id": "u1", "p": 1},
        {"user_id": "u2", "p": 2},
        {"user_id": "u4", "p": 3},
        {"user_id": "u3", "p": 4},
    ]),
    case("order_by_an_aggregate_of_a_grouped_subquery", """
        CREATE VIEW favourite AS
        SELECT u.user_id,
               (FROM reviews r WHERE r.user_id = u.user_id GROUP BY r.business_id AS bid
                SELECT bid, COUNT(*) AS n ORDER BY COUNT(*) DESC, bid LIMIT 1) AS fav
        FROM users u
    """, [  # u2 reviewed b1 and b5 once each: the tie goes to the smaller id
        {"user_id": "u1", "fav": [{"bid": "b2", "n": 2}]},
        {"user_id": "u2", "fav": [{"bid": "b1", "n": 1}]},
        {"user_id": "u3", "fav": [{"bid": "b4", "n": 1}]},
        {"user_id": "u4", "fav": []},
    ]),
]
IDS = [p.id for p in CASES]
assert len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("case_id, text, expected, ordered", CASES)
def test_view(yelp, case_id, text, expected, ordered):
    check(yelp, text, expected, ordered)


@pytest.mark.parametrize("case_id, text, expected, ordered", CASES)
def test_explain_golden(yelp, update_goldens, case_id, text, expected, ordered):
    explained = yelp.explain(text) + "\n"
    path = GOLDENS / f"{case_id}.txt"
    if update_goldens:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(explained)
    assert path.exists(), f"missing golden {path}: run pytest --update-goldens and review it"
    assert explained == path.read_text()


# --- bags do not depend on the order Spark collects them in --------------------------------------------

def test_bags_are_the_same_whatever_order_the_rows_come_in(spark):
    """A nested plan's environments are joined back to the outer tuples by the value of their
    parameters, and a GROUP AS bag or a subquery's bag may be one (here ``g``, read by the
    subquery): the outer tuples are evaluated twice, so a bag must not depend on the order in
    which Spark happens to collect it.  Evaluated over the rows in one order and in the reverse
    order, every bag is the same list, and the subquery over ``g`` sees all of ``g``."""
    import pyarrow as pa

    from idivm import types as T
    from idivm.algebra.builder import build_view
    from idivm.exec.compiler import PlanCompiler
    from idivm.sqlpp import parse_view

    schema = pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
    rows = [{"id": i, "k": "ab"[i % 2], "v": v} for i, v in enumerate([5, 1, 4, 2, 3, 6, 0])]
    text = """CREATE VIEW v AS SELECT k, g AS members, (SELECT VALUE x.t.v FROM g AS x WHERE x.t.v > 1) AS big
              FROM t GROUP BY t.k AS k GROUP AS g"""
    view = build_view(parse_view(text), {"t": T.TupleType((("id", T.INT), ("k", T.STRING), ("v", T.INT)))})

    def evaluate(order: list[dict]) -> dict:
        table = spark.createDataFrame(pa.Table.from_pylist(order, schema=schema)).coalesce(1)
        out = PlanCompiler(spark, lambda name: table).evaluate(view.plan).collect()
        return {r["k"]: r.asDict(recursive=True) for r in out}

    forward, backward = evaluate(rows), evaluate(rows[::-1])
    assert forward == backward  # the same lists, not only the same multisets
    # k = "a": ids 0, 2, 4, 6 (v 5, 4, 3, 0); k = "b": ids 1, 3, 5 (v 1, 2, 6)
    assert sorted(forward["a"]["big"]) == [3, 4, 5] and sorted(forward["b"]["big"]) == [2, 6]
    assert sorted(m["t"]["v"] for m in forward["b"]["members"]) == [1, 2, 6]


def test_a_view_grouped_by_an_array_is_written_and_maintained_by_id(make_warehouse, tmp_path):
    """A grouping key that is an array is an ID column of a list type, which the clustered
    layout orders its rows by (Arrow sorts no lists: they are ordered by their JSON text)."""
    wh = make_warehouse()
    wh.create_table("t", ["id"], [{"id": 1, "tags": [1, 2]}, {"id": 2, "tags": [1, 2]}, {"id": 3, "tags": [3]}])
    wh.define("CREATE VIEW by_tags AS SELECT t.tags, COUNT(*) AS n FROM t GROUP BY t.tags", strategy="id")
    assert sorted(map(str, wh.rows("by_tags"))) == sorted(map(str, [{"tags": [1, 2], "n": 2}, {"tags": [3], "n": 1}]))
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"id": 3, "tags": [1, 2]}\n{"id": 4, "tags": [5, 0]}\n')
    wh.ingest("t", batch, format="rows")
    wh.maintain("by_tags")
    assert wh.verify("by_tags").ok
    assert sorted(map(str, wh.rows("by_tags"))) == sorted(map(str, [{"tags": [1, 2], "n": 3}, {"tags": [5, 0], "n": 1}]))


def test_subqueries_over_a_large_group_as_bag(make_warehouse):
    """Subqueries that iterate a GROUP AS bag (``FROM g AS x``) see each group's members once:
    the iteration's rows do not carry the whole bag along (with 5,000 members in a group that
    would be 5,000² copies of a member, more than the driver's heap)."""
    wh = make_warehouse()
    rows = [{"id": i, "k": "ab"[i % 2 * (i % 7 == 0)], "v": i % 11, "w": float(i % 5), "s": f"{i:040d}"}
            for i in range(6_000)]
    wh.create_table("t", ["id"], rows)
    wh.define("""CREATE VIEW sums AS
                 SELECT k, STRICT_SUM((FROM g AS x SELECT VALUE x.t.v)) AS sv,
                        STRICT_AVG((FROM g AS x SELECT VALUE x.t.w)) AS aw,
                        ARRAY_COUNT((FROM g AS x WHERE x.t.v >= 5 SELECT VALUE x.t.id)) AS big
                 FROM t GROUP BY t.k AS k GROUP AS g""")
    expected = {}
    for k in "ab":
        members = [r for r in rows if r["k"] == k]
        expected[k] = (sum(r["v"] for r in members), sum(r["w"] for r in members) / len(members),
                       sum(1 for r in members if r["v"] >= 5))
    got = {r["k"]: (r["sv"], r["aw"], r["big"]) for r in wh.rows("sums")}
    assert got.keys() == expected.keys()
    for k in expected:
        assert got[k][0] == expected[k][0] and got[k][2] == expected[k][2]
        assert abs(got[k][1] - expected[k][1]) < 1e-9


def test_group_as_with_a_field_list_keeps_only_those_variables(make_warehouse, tmp_path):
    """``GROUP AS g(x AS f, …)``: each member of ``g`` holds only the listed variables, under
    the given names; maintained by ID like any GROUP AS."""
    from idivm.errors import SemanticError

    wh = make_warehouse()
    wh.create_table("t", ["id"], [{"id": 1, "k": "a", "v": 2}, {"id": 2, "k": "a", "v": 5}, {"id": 3, "k": "b", "v": 1}])
    wh.define("""CREATE VIEW gv AS FROM t LET w = t.v * 10 GROUP BY t.k AS k GROUP AS g(w AS ten)
                 SELECT k, g AS members, STRICT_SUM((FROM g AS m SELECT VALUE m.ten)) AS total""", strategy="id")

    def rows():
        return sorted((r["k"], sorted(m["ten"] for m in r["members"]), sorted(r["members"][0]), r["total"])
                      for r in wh.rows("gv"))

    assert rows() == [("a", [20, 50], ["ten"], 70), ("b", [10], ["ten"], 10)]
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"id": 3, "k": "a", "v": 4}\n{"id": 4, "k": "c", "v": 7}\n')
    wh.ingest("t", batch, format="rows")
    wh.maintain("gv")
    assert wh.verify("gv").ok
    assert rows() == [("a", [20, 40, 50], ["ten"], 110), ("c", [70], ["ten"], 70)]
    with pytest.raises(SemanticError, match=r"GROUP AS g\(u AS u\): unknown variable 'u'"):
        wh.define("CREATE VIEW bad AS FROM t GROUP BY t.k AS k GROUP AS g(u AS u) SELECT k")


def test_ordered_subqueries_have_no_id_rules_and_auto_recomputes_them(make_warehouse, tmp_path):
    from idivm.errors import UnsupportedError

    wh = make_warehouse("ordered")
    wh.create_table("users", "user_id", USERS)
    text = ("CREATE VIEW v AS SELECT u.user_id, (FROM u.elite AS y SELECT VALUE y ORDER BY y LIMIT 1) AS first "
            "FROM users u")
    with pytest.raises(UnsupportedError, match="no i-diff rules for OrderBy"):
        wh.define(text, strategy="id")
    info = wh.define(text)
    assert info.strategy_note.startswith("recompute: no i-diff rules for OrderBy")
    change = tmp_path / "users-0001.jsonl"
    change.write_text(json.dumps({"op": "u", "before": USERS[0], "after": {**USERS[0], "elite": [2012, 2011]}}) + "\n")
    wh.ingest("users", change)
    wh.maintain("v")
    assert {r["user_id"]: r["first"] for r in wh.rows("v")} == {"u1": [2011], "u2": [], "u3": [2013], "u4": [2015]}
    check = wh.verify("v")
    assert (check.missing, check.extra) == (0, 0)
