"""Differential tests of ID-based maintenance of nested SQL++ views.

One module-scoped warehouse holds a small Yelp-like database (:mod:`idivm.datasets.yelp`:
40 businesses, 16 of them in San Francisco, ~200 reviews, 50 users, about half of them with
``elite`` years and most with ``friends``) and a corpus of nested views (:data:`VIEWS`), each
defined once with ``strategy=STRATEGY``.  Then seeded batches of Debezium change events from
:class:`~idivm.datasets.yelp_changes.YelpChanges` (the default mix: review inserts, deletes and
star changes, user fans/name/friends/elite edits, business moves in and out of San Francisco,
category edits, business inserts and cascading business deletes) are written, ingested (one
file per table) and every view is maintained and checked:

* ``verify(view).ok``: the stored view equals its recomputation from scratch at its
  watermark, nested bags compared as multisets, recursively, hidden provenance included;
* a view whose base tables moved committed one version, made by ``STRATEGY`` (no silent
  fallback to recomputation); a view whose base tables did not move committed nothing.

Problems are collected over every view of a batch (a view that fails is left out of the later
batches, so that its first failure is reported and not the ones it causes) and reported
together, with the batch, its kinds of change and verify's missing/unexpected examples.

The Yelp-like tables have no collection of tuples (``businesses.hours`` is not generated), so
bags of tuples are unnested from a bag the view builds itself (``unnest_bag_of_tuples``).

``test_deep_update_of_users_elite_changes_exactly_that_users_review_elements`` checks the
thesis' view V by hand on a tiny dataset: an update of one user's ``elite`` list must change
that user's review elements inside every business and nothing else.
``test_deep_updates_in_v1_change_exactly_the_group_members_they_name`` does the same for V1 (V
written with a join and ``GROUP BY ... INTO``), whose group members hold the user one level
deeper, and then for a review's stars and a business's name.

The default run: 1 batch of 30 changes covering every kind of change; ``--runslow``
adds other databases and longer streams.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from idivm.datasets import view_path, yelp
from idivm.datasets.yelp_changes import KINDS, YelpChanges, write_batch
from idivm.warehouse import Warehouse

#: the strategy every view of the corpus is defined with
STRATEGY = "id"

#: the default run's database: a few dozen rows per table
SPEC = yelp.YelpSpec(businesses=40, reviews_per_business=5.0, users_per_business=1.25, sf_fraction=0.4,
                     unreviewed_fraction=0.1, repeat_fraction=0.1, friends_per_user=2.0, elite_fraction=0.5,
                     seed=0)
#: the default run's change stream (YelpChanges seed) and batch sizes; together they hold every kind
STREAM_SEED = 3
BATCH_SIZES = (30,)

SF = "San Francisco"
THREADS = 4  # views maintained and verified at the same time
B, R, U = "businesses", "reviews", "users"
ARROW_TYPES = {"int64": pa.int64(), "string": pa.string(),
               "list<string>": pa.list_(pa.string()), "list<int64>": pa.list_(pa.int64())}


# --- the corpus ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NestedView:
    name: str
    covers: str  # one line: what the view exercises
    tables: frozenset[str]
    text: str


def view(name: str, covers: str, tables: set[str], query: str) -> NestedView:
    return NestedView(name, covers, frozenset(tables), f"CREATE VIEW {name} AS\n{query}")


VIEWS = [
    # --- the thesis' views (§2.9, §2.16.3)
    view("sf_reviews", "thesis V: correlated subquery, a bag of reviews.*, users.* per SF business",
         {B, R, U}, """
        SELECT business_id, (
          SELECT reviews.*, users.*
          FROM reviews NATURAL JOIN users
          WHERE business_id = businesses.business_id
        ) AS full_reviews
        FROM businesses
        WHERE city = "San Francisco"
    """),
    view("sf_reviews_grouped", "thesis V1: left join, GROUP BY business_id GROUP AS g: g itself (V1's INTO), "
         "a subquery over g navigating both variables, COUNT",
         {B, R, U}, """
        SELECT business_id, g AS members,
               (SELECT x.reviews.review_id, x.reviews.stars, x.users.user_name, x.users.elite
                FROM g AS x WHERE x.reviews IS NOT NULL) AS full_reviews,
               COUNT(review_id) AS n_reviews
        FROM businesses NATURAL LEFT OUTER JOIN (
            reviews NATURAL JOIN
            users
        )
        WHERE city = "San Francisco"
        GROUP BY business_id GROUP AS g
    """),
    NestedView("sf_reviews_into", "thesis V1 as written (the shipped sf_reviews_grouped): GROUP BY business_id "
               "INTO full_reviews, the group bag stored as it is (updates of its members' users, reviews and "
               "businesses are nested updates)",
               frozenset({B, R, U}), view_path("sf_reviews_grouped").read_text().replace(
                   "CREATE VIEW sf_reviews_grouped AS", "CREATE VIEW sf_reviews_into AS", 1)),
    view("sf_reviews_counted", "thesis V1 with GROUP AS g stored as it is and COUNTs and a SUM of the group: "
         "the members' nested replace composed with increments (Tables E.11-E.13)",
         {B, R, U}, """
        SELECT business_id, g AS members, COUNT(review_id) AS n_reviews, COUNT(*) AS n_members,
               SUM(COALESCE(stars, 0)) AS total_stars
        FROM businesses NATURAL LEFT OUTER JOIN (
            reviews NATURAL JOIN
            users
        )
        WHERE city = "San Francisco"
        GROUP BY business_id GROUP AS g
    """),
    view("sf_reviews_flat", "thesis V2: flat NATURAL LEFT OUTER JOIN passing users' nested lists through",
         {B, R, U}, """
        SELECT business_id, reviews.*, users.*
        FROM businesses NATURAL LEFT OUTER JOIN (
            reviews NATURAL JOIN
            users
        )
        WHERE city = "San Francisco"
    """),

    # --- subqueries building nested bags
    view("business_reviewers", "subquery over a join: a bag of tuples with constructed fields holding u.elite",
         {B, R, U}, """
        SELECT b.business_id, b.name,
               (SELECT r.review_id, u.user_name AS author, {"stars": r.stars, "elite": u.elite} AS detail
                FROM reviews r JOIN users u ON r.user_id = u.user_id
                WHERE r.business_id = b.business_id AND r.stars >= 3) AS reviews
        FROM businesses b
    """),
    view("user_reviews", "SELECT VALUE / DISTINCT VALUE bags of scalars and a bag of constructed tuples",
         {R, U}, """
        SELECT u.user_id, u.user_name AS name,
               (SELECT VALUE r.business_id FROM reviews r WHERE r.user_id = u.user_id) AS businesses,
               (SELECT DISTINCT VALUE r.stars FROM reviews r WHERE r.user_id = u.user_id) AS star_values,
               (SELECT r.review_id, {"business": r.business_id, "stars": r.stars} AS about
                FROM reviews r WHERE r.user_id = u.user_id) AS reviews
        FROM users u
        WHERE u.fans > 0
    """),
    view("elsewhere", "a subquery inside a subquery, correlated with both outer levels",
         {B, R}, """
        SELECT b.business_id,
               (SELECT r.review_id,
                       (SELECT VALUE r2.review_id FROM reviews r2
                        WHERE r2.user_id = r.user_id AND r2.business_id <> b.business_id) AS other_reviews
                FROM reviews r
                WHERE r.business_id = b.business_id) AS reviews
        FROM businesses b
        WHERE b.city = "San Francisco"
    """),
    view("friend_names", "subquery unnesting users.friends joined with users (a self-join through a list)",
         {U}, """
        SELECT u.user_id,
               (SELECT VALUE v.user_name FROM u.friends AS f, users v WHERE v.user_id = f) AS friends
        FROM users u
    """),

    # --- GROUP AS with nested aggregates
    view("per_business", "GROUP AS: COUNT/SUM/AVG, ARRAY_COUNT(g), SELECT VALUE over g, a filtered bag of g",
         {R}, """
        SELECT r.business_id AS business_id,
               COUNT(*) AS n, SUM(r.stars) AS total, AVG(r.stars) AS mean,
               ARRAY_COUNT(g) AS n_members,
               (SELECT VALUE x.r.stars FROM g AS x) AS stars,
               (SELECT x.r.review_id, x.r.user_id FROM g AS x WHERE x.r.stars >= 4) AS good
        FROM reviews r
        GROUP BY r.business_id GROUP AS g
    """),
    view("elite_years", "GROUP AS over unnested users.elite (bag of scalars), filtered on fans; g passed through",
         {U}, """
        SELECT y AS year, COUNT(*) AS n, g AS members
        FROM users u, u.elite AS y
        WHERE u.fans < 5
        GROUP BY y GROUP AS g
    """),

    # --- unnesting
    view("user_elite", "unnest a bag of scalars (users.elite) in FROM, with AT positions",
         {U}, """
        SELECT u.user_id, y AS year, i AS pos, u.fans FROM users u, u.elite AS y AT i
    """),
    view("sf_categories", "UNNEST keyword over businesses.categories (bag of scalars), filtered on city",
         {B}, """
        SELECT b.business_id, c AS category
        FROM businesses b UNNEST b.categories AS c
        WHERE b.city = "San Francisco"
    """),
    view("unnest_bag_of_tuples", "unnest (AT) a bag of tuples a FROM subquery builds, filter on its fields",
         {B, R}, """
        SELECT x.business_id, t.review_id, t.stars, i AS pos
        FROM (SELECT b.business_id,
                     (SELECT r.review_id, r.stars FROM reviews r WHERE r.business_id = b.business_id) AS rs
              FROM businesses b WHERE b.city = "San Francisco") AS x,
             x.rs AS t AT i
        WHERE t.stars >= 3
    """),

    # --- constructors, SELECT VALUE, pass-through, SELECT *
    view("cards", "SELECT VALUE with tuple, array and bag constructors holding u.elite; u.friends[0]",
         {U}, """
        SELECT VALUE {"id": u.user_id,
                      "pair": [u.user_id, u.user_name],
                      "tags": {{"user", u.user_name}},
                      "stats": {"fans": u.fans, "elite": u.elite},
                      "first_friend": u.friends[0]}
        FROM users u
        WHERE u.fans >= 1
    """),
    view("good_sf_reviews", "pass-through of b.categories and of whole reviews (SELECT r.*) in a subquery",
         {B, R}, """
        SELECT b.business_id, b.categories,
               (SELECT r.* FROM reviews r WHERE r.business_id = b.business_id AND r.stars >= 4) AS good
        FROM businesses b
        WHERE b.city = "San Francisco"
    """),
    view("star_join", "SELECT * over a join: one nested tuple per variable (users' lists inside)",
         {R, U}, """
        SELECT * FROM reviews r JOIN users u ON r.user_id = u.user_id
        WHERE r.stars <= 2
    """),

    # --- collection functions, LET
    view("elite_stats", "ARRAY_COUNT/MIN/MAX/SUM/AVG over nested lists, an aggregate subquery over u.elite",
         {U}, """
        SELECT u.user_id, ARRAY_COUNT(u.elite) AS n, ARRAY_MIN(u.elite) AS first,
               ARRAY_MAX(u.elite) AS last, ARRAY_SUM(u.elite) AS total, ARRAY_AVG(u.elite) AS mean,
               ARRAY_COUNT(u.friends) AS n_friends,
               (SELECT VALUE COUNT(*) FROM u.elite AS y WHERE y >= 2015) AS recent_years
        FROM users u
    """),
    view("star_stats", "LET bound to a subquery; ARRAY_* over subqueries and over businesses.categories",
         {B, R}, """
        SELECT b.business_id,
               ARRAY_COUNT(b.categories) AS n_categories,
               ARRAY_COUNT(stars) AS n, ARRAY_SUM(stars) AS total, ARRAY_AVG(stars) AS mean,
               ARRAY_MIN((SELECT r.stars FROM reviews r WHERE r.business_id = b.business_id)) AS low,
               ARRAY_MAX(stars) AS high, n_stars > 2 AS popular
        FROM businesses b
        LET stars = (SELECT VALUE r.stars FROM reviews r WHERE r.business_id = b.business_id),
            n_stars = ARRAY_COUNT(stars)
    """),

    # --- joins, EXISTS
    view("business_reviews", "LEFT OUTER JOIN with nested output (b.categories, a constructed tuple)",
         {B, R}, """
        SELECT b.business_id, b.categories, r.review_id, {"stars": r.stars, "by": r.user_id} AS review
        FROM businesses b LEFT OUTER JOIN reviews r ON b.business_id = r.business_id
        WHERE b.city = "San Francisco"
    """),
    view("lonely", "EXISTS / NOT EXISTS over a nested collection and over a correlated table",
         {R, U}, """
        SELECT u.user_id, u.friends,
               EXISTS (SELECT VALUE y FROM u.elite AS y WHERE y >= 2014) AS recent_elite
        FROM users u
        WHERE NOT EXISTS (SELECT VALUE f FROM u.friends AS f)
           OR NOT EXISTS (SELECT VALUE r FROM reviews r WHERE r.user_id = u.user_id AND r.stars >= 4)
    """),
]
NAMES = [v.name for v in VIEWS]
assert len(set(NAMES)) == len(NAMES)


# --- the run ---------------------------------------------------------------------------------------------

@dataclass
class Corpus:
    """A warehouse holding ``spec``'s database, the views of :data:`VIEWS` that could be defined,
    the define errors, and the change stream that starts from the same database."""

    wh: Warehouse
    stream: YelpChanges
    batch_dir: Path
    views: list[NestedView]
    define_errors: list[str]
    empty: list[str]  # views defined empty (their checks would mean little)
    kinds: Counter = field(default_factory=Counter)  # changes made so far, per kind


def _short(text: str, limit: int = 1500) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


def build(wh: Warehouse, spec: yelp.YelpSpec, stream_seed: int, batch_dir: Path) -> Corpus:
    """Load ``spec``'s tables into ``wh`` and define every view with :data:`STRATEGY`; a view whose
    ``define`` fails is left out and its error kept, so that one view does not hide the others."""
    for name, rows in yelp.tables(spec).items():
        schema = pa.schema([(c, ARROW_TYPES[t]) for c, t in yelp.schemas(spec)[name].items()])
        wh.create_table(name, list(yelp.keys(spec)[name]), pa.Table.from_pylist(list(rows), schema=schema))
    views, errors, empty = [], [], []
    for v in VIEWS:
        try:
            info = wh.define(v.text, strategy=STRATEGY)
        except Exception as e:  # noqa: BLE001 -- reported with the others
            errors.append(f"define {v.name} ({v.covers}): {type(e).__name__}: {_short(str(e), 600)}")
            continue
        views.append(v)
        if info.rows == 0:
            empty.append(v.name)
    return Corpus(wh, YelpChanges(spec, seed=stream_seed), batch_dir, views, errors, empty)


def run_batch(corpus: Corpus, n: int) -> list[str]:
    """Draw a batch of ``n`` changes, ingest it (one Debezium file per table), maintain every view of
    the corpus and check it; the problems found.  Views with problems leave the corpus."""
    wh = corpus.wh
    batch = corpus.stream.next_batch(n)
    corpus.kinds.update({k: c for k, c in batch.kinds.items() if c})
    kinds = ", ".join(f"{k} x{c}" for k, c in batch.kinds.items() if c)
    context = f"batch {batch.number} ({kinds})"

    moved = set()
    for table, (path, events) in write_batch(batch, corpus.batch_dir).items():
        version = wh.table_info(table).version
        result = wh.ingest(table, path, format="debezium")
        assert result.version == version + (1 if events else 0), \
            f"{context}: ingest of {events} events into {table}: version {version} -> {result.version}"
        if events:
            moved.add(table)

    def check(v: NestedView) -> list[str]:
        """Maintain ``v`` and check it: its problems."""
        before = wh.view_info(v.name).version
        try:
            (result,) = wh.maintain(v.name)
        except Exception as e:  # noqa: BLE001 -- one failing view must not hide the others
            return [f"maintain raised {type(e).__name__}: {_short(str(e), 800)}"]
        mine = []
        if set(result.new_watermark) != v.tables:
            mine.append(f"maintain read {sorted(result.new_watermark)}, the test expects {sorted(v.tables)}")
        version = wh.view_info(v.name).version
        if not v.tables & moved:
            # nothing committed: the stored view is the one verified after the previous batch
            if result.version is not None or version != before:
                mine.append("committed although none of its base tables changed")
                return mine + verify(v.name)
            return mine
        if not (result.version == before + 1 == version):
            mine.append(f"should have committed one version (was {before}, maintain says {result.version}, "
                        f"now {version})")
        if result.strategy != STRATEGY:
            mine.append(f"was maintained by {result.strategy}, not {STRATEGY}"
                        + (f" ({result.note})" if result.note else ""))
        return mine + verify(v.name)

    def verify(name: str) -> list[str]:
        try:
            verification = wh.verify(name)
        except Exception as e:  # noqa: BLE001
            return [f"verify raised {type(e).__name__}: {_short(str(e), 800)}"]
        return [] if verification.ok else [_short(verification.summary())]

    # each view is maintained and verified by itself, concurrently: maintain(name) reads the base
    # tables and writes only that view, and most of the time goes to Spark's per-job latency
    with ThreadPoolExecutor(THREADS) as pool:
        problems = dict(zip([v.name for v in corpus.views], pool.map(check, corpus.views)))
    out = []
    for v in list(corpus.views):
        if problems[v.name]:
            corpus.views.remove(v)  # its later failures would only repeat this one
            out.append(f"{context}: view {v.name} ({v.covers}):\n    "
                       + "\n    ".join(p.replace("\n", "\n    ") for p in problems[v.name]))
    return out


def run_batches(corpus: Corpus, sizes: tuple[int, ...]) -> None:
    assert corpus.views, "no view could be defined:\n" + "\n".join(corpus.define_errors)
    problems = []
    for n in sizes:
        problems += run_batch(corpus, n)
    if problems:
        note = (f"\n({len(corpus.define_errors)} view(s) could not be defined: see "
                "test_every_view_defines_and_is_not_empty)" if corpus.define_errors else "")
        pytest.fail(f"{len(problems)} view(s) with problems:\n" + "\n".join(problems) + note, pytrace=False)


@pytest.fixture(scope="module")
def corpus(spark, tmp_path_factory) -> Corpus:
    root = tmp_path_factory.mktemp("nested_maintain")
    return build(Warehouse(root / "wh", spark=spark), SPEC, STREAM_SEED, root / "batches")


# --- tests ------------------------------------------------------------------------------------------------

def test_the_database_and_the_stream_exercise_the_views():
    """Pure Python: the default run's data has San Francisco businesses, reviewed and unreviewed,
    users with and without elite years and friends, and its batches hold every kind of change."""
    tables = {name: list(rows) for name, rows in yelp.tables(SPEC).items()}
    sf = {b["business_id"] for b in tables[B] if b["city"] == SF}
    reviewed = {r["business_id"] for r in tables[R]}
    assert 10 <= len(sf) < len(tables[B]) and sf & reviewed and sf - reviewed
    assert 100 <= len(tables[R]) <= 300 and len(tables[U]) == 50
    assert 10 <= sum(bool(u["elite"]) for u in tables[U]) <= 40
    assert 10 <= sum(bool(u["friends"]) for u in tables[U]) <= 45
    stream = YelpChanges(SPEC, seed=STREAM_SEED)
    kinds = Counter()
    for n in BATCH_SIZES:
        kinds.update({k: c for k, c in stream.next_batch(n).kinds.items() if c})
    assert set(kinds) == set(KINDS), f"kinds never drawn: {set(KINDS) - set(kinds)}"


def test_every_view_defines_and_is_not_empty(corpus):
    assert len(VIEWS) >= 16
    problems = corpus.define_errors + [f"view {name} is empty after define" for name in corpus.empty]
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)


def test_maintained_nested_views_match_recomputation(corpus):
    run_batches(corpus, BATCH_SIZES)
    assert set(corpus.kinds) == set(KINDS)


@pytest.mark.slow
@pytest.mark.parametrize("seed, stream_seed, sizes", [
    (1, 5, (10, 25, 30, 15, 20)),
    (2, 3, (30, 10, 30, 25)),
    (3, 6, (15, 15, 30, 10, 25, 20)),
])
def test_maintained_nested_views_match_recomputation_over_longer_streams(make_warehouse, tmp_path, seed,
                                                                           stream_seed, sizes):
    spec = SPEC.with_(seed=seed, sf_fraction=0.3 + 0.1 * seed, elite_fraction=0.3 + 0.1 * seed)
    corpus = build(make_warehouse(f"nested_{seed}"), spec, stream_seed, tmp_path / "batches")
    run_batches(corpus, sizes)
    assert not corpus.define_errors, "\n".join(corpus.define_errors)


# --- a deep change, by hand -------------------------------------------------------------------------------

TINY_SCHEMAS = {
    B: pa.schema([("business_id", pa.string()), ("name", pa.string()), ("city", pa.string()),
                  ("categories", pa.list_(pa.string()))]),
    R: pa.schema([("review_id", pa.string()), ("user_id", pa.string()), ("business_id", pa.string()),
                  ("stars", pa.int64())]),
    U: pa.schema([("user_id", pa.string()), ("user_name", pa.string()), ("fans", pa.int64()),
                  ("elite", pa.list_(pa.int64()))]),
}
TINY = {
    B: [
        {"business_id": "b1", "name": "Garaje", "city": SF, "categories": ["Mexican", "Burgers"]},
        {"business_id": "b2", "name": "Zuni Cafe", "city": SF, "categories": ["American"]},
        {"business_id": "b3", "name": "Tartine", "city": SF, "categories": ["Bakeries"]},  # no reviews
        {"business_id": "b4", "name": "Graze", "city": "Madison", "categories": ["Tapas"]},
    ],
    R: [
        {"review_id": "r1", "user_id": "u1", "business_id": "b1", "stars": 4},
        {"review_id": "r2", "user_id": "u2", "business_id": "b1", "stars": 2},
        {"review_id": "r3", "user_id": "u1", "business_id": "b2", "stars": 5},
        {"review_id": "r4", "user_id": "u1", "business_id": "b2", "stars": 3},  # u1 twice in b2
        {"review_id": "r5", "user_id": "u3", "business_id": "b2", "stars": 1},
        {"review_id": "r6", "user_id": "u1", "business_id": "b4", "stars": 5},  # not in San Francisco
    ],
    U: [
        {"user_id": "u1", "user_name": "Sebastien", "fans": 10, "elite": [2012, 2013]},
        {"user_id": "u2", "user_name": "Ana", "fans": 5, "elite": []},
        {"user_id": "u3", "user_name": "Bo", "fans": 0, "elite": [2013]},
    ],
}
THESIS_V = """
    CREATE VIEW v AS
    SELECT business_id, (
      SELECT reviews.*, users.*
      FROM reviews NATURAL JOIN users
      WHERE business_id = businesses.business_id
    ) AS full_reviews
    FROM businesses
    WHERE city = "San Francisco"
"""
V_BEFORE = [
    {"business_id": "b1", "full_reviews": [
        {"review_id": "r1", "user_id": "u1", "business_id": "b1", "stars": 4,
         "user_name": "Sebastien", "fans": 10, "elite": [2012, 2013]},
        {"review_id": "r2", "user_id": "u2", "business_id": "b1", "stars": 2,
         "user_name": "Ana", "fans": 5, "elite": []},
    ]},
    {"business_id": "b2", "full_reviews": [
        {"review_id": "r3", "user_id": "u1", "business_id": "b2", "stars": 5,
         "user_name": "Sebastien", "fans": 10, "elite": [2012, 2013]},
        {"review_id": "r4", "user_id": "u1", "business_id": "b2", "stars": 3,
         "user_name": "Sebastien", "fans": 10, "elite": [2012, 2013]},
        {"review_id": "r5", "user_id": "u3", "business_id": "b2", "stars": 1,
         "user_name": "Bo", "fans": 0, "elite": [2013]},
    ]},
    {"business_id": "b3", "full_reviews": []},
]
V_AFTER = [  # u1 becomes elite in 2014 too: r1, r3 and r4 change, in b1 and b2
    {"business_id": "b1", "full_reviews": [
        {"review_id": "r1", "user_id": "u1", "business_id": "b1", "stars": 4,
         "user_name": "Sebastien", "fans": 10, "elite": [2012, 2013, 2014]},
        {"review_id": "r2", "user_id": "u2", "business_id": "b1", "stars": 2,
         "user_name": "Ana", "fans": 5, "elite": []},
    ]},
    {"business_id": "b2", "full_reviews": [
        {"review_id": "r3", "user_id": "u1", "business_id": "b2", "stars": 5,
         "user_name": "Sebastien", "fans": 10, "elite": [2012, 2013, 2014]},
        {"review_id": "r4", "user_id": "u1", "business_id": "b2", "stars": 3,
         "user_name": "Sebastien", "fans": 10, "elite": [2012, 2013, 2014]},
        {"review_id": "r5", "user_id": "u3", "business_id": "b2", "stars": 1,
         "user_name": "Bo", "fans": 0, "elite": [2013]},
    ]},
    {"business_id": "b3", "full_reviews": []},
]


def canonical(value, field: str | None = None):
    """``value`` with every list sorted (a bag) except ``elite`` lists (ordered years)."""
    if isinstance(value, dict):
        return {k: canonical(v, k) for k, v in value.items()}
    if isinstance(value, list):
        items = [canonical(v) for v in value]
        return items if field == "elite" else sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    return value


def by_review(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """(business_id, review_id) -> the review element, for every element of every row."""
    return {(row["business_id"], e["review_id"]): e for row in rows for e in row["full_reviews"]}


def tiny_warehouse(make_warehouse, name: str) -> Warehouse:
    """A warehouse holding the :data:`TINY` tables."""
    wh = make_warehouse(name)
    for table, rows in TINY.items():
        wh.create_table(table, list(yelp.KEYS[table]), pa.Table.from_pylist(rows, schema=TINY_SCHEMAS[table]))
    return wh


def _events(tmp_path: Path, wh: Warehouse, table: str, *changes: tuple[dict | None, dict | None]):
    """Ingest Debezium events of ``table``, one per (before, after) change (None: inserted or deleted)."""
    path = tmp_path / f"{table}.jsonl"
    path.write_text("".join(json.dumps({"before": b, "after": a, "op": "c" if b is None else "d" if a is None else "u",
                                        "source": {"table": table}, "ts_ms": 1_700_000_000_000}) + "\n"
                            for b, a in changes))
    return wh.ingest(table, path, format="debezium")


def _maintained(wh: Warehouse, view: str, label: str = ""):
    """Maintain ``view``; check that ``STRATEGY`` did it and that the view equals its
    recomputation (``label`` prefixes the failure); the maintenance result."""
    (result,) = wh.maintain(view)
    assert result.strategy == STRATEGY, f"{label}{view} maintained by {result.strategy} ({result.note})"
    check = wh.verify(view)
    assert check.ok, f"{label}{check.summary()}"
    return result


def test_deep_update_of_users_elite_changes_exactly_that_users_review_elements(make_warehouse, tmp_path):
    wh = tiny_warehouse(make_warehouse, "deep")
    info = wh.define(THESIS_V, strategy=STRATEGY)
    before = wh.rows("v")
    assert canonical(before) == canonical(V_BEFORE)

    u1 = TINY[U][0]
    ingested = _events(tmp_path, wh, U, (u1, {**u1, "elite": [2012, 2013, 2014]}))
    assert (ingested.changes, ingested.updated) == (1, 1)

    (result,) = wh.maintain("v")
    assert result.strategy == STRATEGY, f"maintained by {result.strategy} ({result.note})"
    assert result.version == info.version + 1
    assert (result.inserted, result.deleted) == (0, 0), \
        f"a deep update is an update of the rows holding it: {result.summary()}"
    after = wh.rows("v")
    assert canonical(after) == canonical(V_AFTER)
    # every element of u1 changed, in every business, and nothing else did
    old, new = by_review(before), by_review(after)
    assert set(old) == set(new)
    changed = {k for k in old if canonical(old[k]) != canonical(new[k])}
    assert changed == {("b1", "r1"), ("b2", "r3"), ("b2", "r4")}
    assert all(new[k]["elite"] == [2012, 2013, 2014] and {**new[k], "elite": None} == {**old[k], "elite": None}
               for k in changed)
    check = wh.verify("v")
    assert check.ok, check.summary()


def test_inserts_and_deletes_of_reviews_and_users_replace_only_the_elements_they_name(make_warehouse, tmp_path):
    """Tables E.3/E.4 on the nested side: review and user inserts, deletes and moves change the
    elements they name, in the rows of the businesses that hold them before or after; every other
    element, and every row of a business not involved, stays as it was."""
    wh = tiny_warehouse(make_warehouse, "elements")
    wh.define(THESIS_V, strategy=STRATEGY)
    text = wh.explain("v")
    for table in ("reviews", "users"):
        assert f"from Δ({table}) AS {table}: replace the elements of full_reviews" in text
    before = by_review(wh.rows("v"))
    r = {row["review_id"]: row for row in TINY[R]}
    _events(tmp_path, wh, R,
            (None, {"review_id": "r7", "user_id": "u2", "business_id": "b3", "stars": 4}),  # into an empty bag
            (None, {"review_id": "r8", "user_id": "u3", "business_id": "b4", "stars": 2}),  # not in San Francisco
            (r["r2"], None),
            (r["r5"], {**r["r5"], "business_id": "b1"}))  # moves from b2 to b1
    result = _maintained(wh, "v")
    assert (result.inserted, result.updated, result.deleted) == (0, 3, 0), result.summary()
    after = by_review(wh.rows("v"))
    ana = {"user_name": "Ana", "fans": 5, "elite": []}
    assert set(after) == {("b1", "r1"), ("b1", "r5"), ("b2", "r3"), ("b2", "r4"), ("b3", "r7")}
    assert after[("b3", "r7")] == {"review_id": "r7", "user_id": "u2", "business_id": "b3", "stars": 4, **ana}
    assert after[("b1", "r5")] == {**before[("b2", "r5")], "business_id": "b1"}
    assert all(after[k] == before[k] for k in [("b1", "r1"), ("b2", "r3"), ("b2", "r4")])

    u = {row["user_id"]: row for row in TINY[U]}
    _events(tmp_path, wh, U, (None, {"user_id": "u4", "user_name": "Cy", "fans": 1, "elite": []}),  # no reviews
            (u["u3"], None))  # r5 loses its author: the join drops it
    result = _maintained(wh, "v")
    assert (result.inserted, result.updated, result.deleted) == (0, 1, 0), result.summary()
    assert set(by_review(wh.rows("v"))) == {("b1", "r1"), ("b2", "r3"), ("b2", "r4"), ("b3", "r7")}


#: an ApplyPlan operator in a printed plan (not a rule's name)
APPLY = re.compile(r"ApplyPlan \S+ :=")


def test_a_nested_replace_whose_subquery_reads_the_outer_tuple_beyond_a_predicate_stays_exact(
        make_warehouse, tmp_path):
    """A subquery that unnests a collection of its outer tuple cannot be flattened into a join
    with the outer tuples: its post-state elements are computed per outer tuple instead, with
    the same result as recomputation."""
    wh = tiny_warehouse(make_warehouse, "unflat")
    wh.define("""CREATE VIEW cat_reviews AS
        SELECT b.business_id, (SELECT r.review_id, c AS category
                               FROM b.categories AS c, reviews r
                               WHERE r.business_id = b.business_id) AS rs
        FROM businesses b WHERE b.city = "San Francisco"
    """, strategy=STRATEGY)
    statement = wh.explain("cat_reviews").split("from Δ(reviews) AS r: ")[1].split("\nΔ")[0]
    assert statement.startswith("replace the elements of rs") and APPLY.search(statement)
    r = {row["review_id"]: row for row in TINY[R]}
    _events(tmp_path, wh, R, (None, {"review_id": "r7", "user_id": "u2", "business_id": "b3", "stars": 4}),
            (r["r2"], None), (r["r5"], {**r["r5"], "business_id": "b1"}))
    result = _maintained(wh, "cat_reviews")
    assert (result.inserted, result.updated, result.deleted) == (0, 3, 0), result.summary()
    rows = {row["business_id"]: sorted((e["review_id"], e["category"]) for e in row["rs"])
            for row in wh.rows("cat_reviews")}
    assert rows == {"b1": [("r1", "Burgers"), ("r1", "Mexican"), ("r5", "Burgers"), ("r5", "Mexican")],
                    "b2": [("r3", "American"), ("r4", "American")], "b3": [("r7", "Bakeries")]}


def test_a_nested_replace_of_an_uncorrelated_subquery_reaches_every_outer_row(make_warehouse, tmp_path):
    """Every San Francisco business holds the same bag of five-star reviews: a review that
    gets or loses five stars is inserted into or deleted from each of their bags."""
    wh = tiny_warehouse(make_warehouse, "uncorrelated")
    wh.define("""CREATE VIEW fives AS
        SELECT b.business_id, (SELECT r.review_id FROM reviews r WHERE r.stars = 5) AS top
        FROM businesses b WHERE b.city = "San Francisco"
    """, strategy=STRATEGY)
    statement = wh.explain("fives").split("from Δ(reviews) AS r: ")[1].split("\nΔ")[0]
    assert statement.startswith("replace the elements of top") and not APPLY.search(statement)  # a join
    r = {row["review_id"]: row for row in TINY[R]}
    _events(tmp_path, wh, R, (None, {"review_id": "r7", "user_id": "u2", "business_id": "b4", "stars": 5}),
            (r["r3"], {**r["r3"], "stars": 4}), (r["r2"], None))
    result = _maintained(wh, "fives")
    assert (result.inserted, result.updated, result.deleted) == (0, 3, 0), result.summary()
    rows = {row["business_id"]: sorted(e["review_id"] for e in row["top"]) for row in wh.rows("fives")}
    assert rows == {b: ["r6", "r7"] for b in ("b1", "b2", "b3")}


#: V1 as the thesis writes it: the corpus' sf_reviews_into, named v1
THESIS_V1 = next(v for v in VIEWS if v.name == "sf_reviews_into").text.replace(
    "CREATE VIEW sf_reviews_into AS", "CREATE VIEW v1 AS", 1)


def by_member(rows: list[dict]) -> dict[tuple[str, str | None], dict]:
    """(business_id, review_id) -> the group member of V1, for every member of every row (the
    member of a business without reviews has review_id None)."""
    return {(row["business_id"], (e["reviews"] or {}).get("review_id")): e
            for row in rows for e in row["full_reviews"]}


def changed_members(before: list[dict], after: list[dict]) -> dict[tuple[str, str | None], tuple[dict, dict]]:
    old, new = by_member(before), by_member(after)
    assert set(old) == set(new), "a nested update neither adds nor removes group members"
    return {k: (old[k], new[k]) for k in old if canonical(old[k]) != canonical(new[k])}


def only(member: dict, variable: str, attribute: str) -> dict:
    """``member`` without ``variable.attribute`` (to compare what else it holds)."""
    return {**member, variable: {**member[variable], attribute: None}}


def test_deep_updates_in_v1_change_exactly_the_group_members_they_name(make_warehouse, tmp_path):
    wh = tiny_warehouse(make_warehouse, "deep_v1")
    info = wh.define(THESIS_V1, strategy=STRATEGY)
    before = wh.rows("v1")
    assert set(by_member(before)) == {("b1", "r1"), ("b1", "r2"), ("b2", "r3"), ("b2", "r4"), ("b2", "r5"),
                                      ("b3", None)}

    def apply(*events: tuple[str, dict, dict]):
        for table in {t for t, _, _ in events}:
            _events(tmp_path, wh, table, *[(b, a) for t, b, a in events if t == table])
        result = _maintained(wh, "v1")
        assert (result.inserted, result.deleted) == (0, 0), \
            f"a deep update is an update of the rows holding it: {result.summary()}"
        return result

    # Example 2.13.1: u1 becomes elite in 2014 too; its members r1 (b1), r3 and r4 (b2) change
    u1 = TINY[U][0]
    result = apply((U, u1, {**u1, "elite": [2012, 2013, 2014]}))
    assert result.version == info.version + 1
    assert result.updated == 2, result.summary()  # b1 and b2 hold u1's reviews; b3 is not read
    after = wh.rows("v1")
    changed = changed_members(before, after)
    assert set(changed) == {("b1", "r1"), ("b2", "r3"), ("b2", "r4")}
    for old, new in changed.values():
        assert new["users"]["elite"] == [2012, 2013, 2014]
        assert canonical(only(new, "users", "elite")) == canonical(only(old, "users", "elite"))

    # a review's stars and a business's name in one run: r3's member, and every member of b2
    r3, b2 = TINY[R][2], TINY[B][1]
    apply((R, r3, {**r3, "stars": 4}), (B, b2, {**b2, "name": "Zuni"}))
    final = wh.rows("v1")
    changed = changed_members(after, final)
    assert set(changed) == {("b2", "r3"), ("b2", "r4"), ("b2", "r5")}
    for (_, review), (old, new) in changed.items():
        assert new["businesses"]["name"] == "Zuni"
        assert new["reviews"]["stars"] == (4 if review == "r3" else old["reviews"]["stars"])
        assert canonical(only(only(new, "businesses", "name"), "reviews", "stars")) == \
            canonical(only(only(old, "businesses", "name"), "reviews", "stars"))

    # a business's name alone: its group's row, named by ID (the group key), and no other
    b1 = TINY[B][0]
    result = apply((B, b1, {**b1, "name": "Tadich Grill"}))
    assert result.updated == 1, result.summary()
    last = wh.rows("v1")
    changed = changed_members(final, last)
    assert set(changed) == {("b1", "r1"), ("b1", "r2")}
    for old, new in changed.values():
        assert new["businesses"]["name"] == "Tadich Grill"
        assert canonical(only(new, "businesses", "name")) == canonical(only(old, "businesses", "name"))


def test_inserts_and_deletes_in_v1_replace_only_the_group_members_they_name(make_warehouse, tmp_path):
    """Table E.11 for inserts and deletes, with Table C.9's padded rows: in V1 a change of
    reviews or users replaces the members it names in the groups of the businesses that hold
    them before or after, found by their IDs; a business gaining its first review loses its
    padded member, one losing its last gets it back; no group is recomputed."""
    wh = tiny_warehouse(make_warehouse, "members_v1")
    wh.define(THESIS_V1, strategy=STRATEGY)
    text = wh.explain("v1")
    for table in ("reviews", "users"):
        assert (f"from Δ({table}) AS {table}: replace the elements of full_reviews named by partial provenance "
                "(__idivm_prov.business_id = __idivm_key_business_id") in text
        assert "in the rows named by ID (__idivm_id_business_id)" in text
    before = by_member(wh.rows("v1"))
    r = {row["review_id"]: row for row in TINY[R]}
    _events(tmp_path, wh, R,
            (None, {"review_id": "r7", "user_id": "u2", "business_id": "b3", "stars": 4}),  # b3's first
            (None, {"review_id": "r8", "user_id": "u3", "business_id": "b4", "stars": 2}),  # not in San Francisco
            (r["r2"], None),
            (r["r5"], {**r["r5"], "business_id": "b1"}))  # moves from b2 to b1
    result = _maintained(wh, "v1")
    assert (result.inserted, result.updated, result.deleted) == (0, 3, 0), result.summary()
    after = by_member(wh.rows("v1"))
    assert set(after) == {("b1", "r1"), ("b1", "r5"), ("b2", "r3"), ("b2", "r4"), ("b3", "r7")}
    r7 = {"review_id": "r7", "user_id": "u2", "business_id": "b3", "stars": 4}
    assert after[("b3", "r7")]["reviews"] == r7
    assert after[("b3", "r7")]["users"]["user_name"] == "Ana"
    assert after[("b1", "r5")]["reviews"] == {**before[("b2", "r5")]["reviews"], "business_id": "b1"}
    assert after[("b1", "r5")]["businesses"] == before[("b1", "r1")]["businesses"]
    assert all(after[k] == before[k] for k in [("b1", "r1"), ("b2", "r3"), ("b2", "r4")])

    u = {row["user_id"]: row for row in TINY[U]}
    _events(tmp_path, wh, R, (r7, None))  # b3 loses its only review
    _events(tmp_path, wh, U, (None, {"user_id": "u4", "user_name": "Cy", "fans": 1, "elite": []}),  # no reviews
            (u["u3"], None))  # r5 loses its author: the join drops it
    result = _maintained(wh, "v1")
    assert (result.inserted, result.updated, result.deleted) == (0, 2, 0), result.summary()
    final = by_member(wh.rows("v1"))
    assert set(final) == {("b1", "r1"), ("b2", "r3"), ("b2", "r4"), ("b3", None)}
    assert final[("b3", None)] == before[("b3", None)]


def statements_from(text: str, table: str) -> list[str]:
    """The statements of an ``explain`` printout whose i-diffs come from a change of ``table``
    (alone, or among the i-diffs a statement makes together, ``from Δ(a) AS a; Δ(b) AS b``)."""
    blocks = re.split(r"\n(?=Δ\d+ from )", text)
    return [b for b in blocks if re.match(rf"Δ\d+ from ([^:\n]*; )?Δ\w*\({table}\) AS", b)]


def rules_from(statement: str, table: str) -> list[str]:
    """The rules a statement instantiated for the replace i-diff of ``table`` (in a statement
    made from several i-diffs, the rule lines marked with that i-diff)."""
    rules = re.findall(r"^\s*rule: (.*)$", statement, re.M)
    if re.match(rf"Δ\d+ from Δ\({table}\) AS \w+:", statement):
        return rules
    return [r for r in rules if r.startswith(f"Δ({table}) AS")]


V1_COUNTED = """
    CREATE VIEW v1c AS
    SELECT business_id, g AS members,
           (SELECT x.reviews.review_id, x.users.user_name FROM g AS x WHERE x.reviews IS NOT NULL) AS reviewed,
           COUNT(review_id) AS n_reviews, COUNT(*) AS n_members, SUM(COALESCE(stars, 0)) AS total_stars
    FROM businesses NATURAL LEFT OUTER JOIN (
        reviews NATURAL JOIN
        users
    )
    WHERE city = "San Francisco"
    GROUP BY business_id GROUP AS g
"""


def test_counts_and_a_subquery_of_v1_groups_change_by_the_members_a_change_names(make_warehouse, tmp_path):
    """Tables E.12 and E.13 composed with Table E.11's member replace: in V1 with a subquery over
    its groups, COUNTs and a SUM, a change of reviews or users replaces the members it names in
    the bag and, reshaped, in the subquery's bag, and increments the aggregates of their groups
    by the named members' post minus pre contributions; an update of users is a nested update
    of both bags.  No group is recomputed.  Expected values by hand from :data:`TINY`."""
    wh = tiny_warehouse(make_warehouse, "counted_v1")
    wh.define(V1_COUNTED, strategy=STRATEGY)
    text = wh.explain("v1c")
    for table in ("reviews", "users"):
        statements = statements_from(text, table)
        for column in ("members", "reviewed"):
            assert any(f"replace the elements of {column} named by partial provenance" in s
                       for s in statements), text
        assert any(": increment by ID (__idivm_id_business_id): n_reviews += " in s for s in statements), text
        assert not any("Table C.7" in r for s in statements for r in rules_from(s, table)), text

    def state():
        return {row["business_id"]: (row["n_reviews"], row["n_members"], row["total_stars"], len(row["members"]),
                                     sorted((e["review_id"], e["user_name"]) for e in row["reviewed"]))
                for row in wh.rows("v1c")}

    assert state() == {"b1": (2, 2, 6, 2, [("r1", "Sebastien"), ("r2", "Ana")]),
                       "b2": (3, 3, 9, 3, [("r3", "Sebastien"), ("r4", "Sebastien"), ("r5", "Bo")]),
                       "b3": (0, 1, 0, 1, [])}
    r = {row["review_id"]: row for row in TINY[R]}
    r7 = {"review_id": "r7", "user_id": "u2", "business_id": "b3", "stars": 4}
    _events(tmp_path, wh, R,
            (None, r7),  # b3's first
            (None, {"review_id": "r8", "user_id": "u3", "business_id": "b4", "stars": 2}),  # not in San Francisco
            (r["r2"], None),
            (r["r5"], {**r["r5"], "business_id": "b1"}),  # moves from b2 to b1
            (r["r3"], {**r["r3"], "stars": 2}))
    result = _maintained(wh, "v1c")
    assert (result.inserted, result.updated, result.deleted) == (0, 3, 0), result.summary()
    assert state() == {"b1": (2, 2, 5, 2, [("r1", "Sebastien"), ("r5", "Bo")]),
                       "b2": (2, 2, 5, 2, [("r3", "Sebastien"), ("r4", "Sebastien")]),
                       "b3": (1, 1, 4, 1, [("r7", "Ana")])}

    u = {row["user_id"]: row for row in TINY[U]}
    _events(tmp_path, wh, R, (r7, None))  # b3 loses its only review
    _events(tmp_path, wh, U, (None, {"user_id": "u4", "user_name": "Cy", "fans": 1, "elite": []}),  # no reviews
            (u["u3"], None),  # r5 loses its author: the join drops it
            (u["u1"], {**u["u1"], "user_name": "Seb"}))
    result = _maintained(wh, "v1c")
    assert (result.inserted, result.updated, result.deleted) == (0, 3, 0), result.summary()
    assert state() == {"b1": (1, 1, 4, 1, [("r1", "Seb")]),
                       "b2": (2, 2, 5, 2, [("r3", "Seb"), ("r4", "Seb")]),
                       "b3": (0, 1, 0, 1, [])}


# --- element i-diffs of a nested collection the view unnests, by hand (§2.14.2) ------------------------

@pytest.mark.parametrize("by", ["value", "position"])
def test_an_element_edit_of_an_unnested_list_changes_only_those_elements_rows(make_warehouse, tmp_path, by):
    """An update of ``users.elite`` that inserts or removes years is the replace i-diff of those
    elements (named by the user's key and the year, or its position with ``AT``), not of every
    row of the user; an update of ``fans`` beside it stays an update of the user's rows."""
    wh = make_warehouse(f"elements_{by}")
    wh.create_table(U, ["user_id"], pa.Table.from_pylist(TINY[U], schema=TINY_SCHEMAS[U]))
    at = " AT i" if by == "position" else ""
    pos = ", i AS pos" if by == "position" else ""
    wh.define(f"CREATE VIEW ey AS SELECT u.user_id, y AS year{pos}, u.fans FROM users u, u.elite AS y{at}",
              strategy=STRATEGY)
    script = wh.explain("ey")
    source = "Δ(users.elite AT)" if by == "position" else "Δ(users.elite)"
    assert f"elements of elite by {by} ({source})" in script and f"from {source} AS y: replace" in script

    def run(*changes: tuple[dict, dict]):
        _events(tmp_path, wh, U, *changes)
        result = _maintained(wh, "ey")
        rows = Counter(tuple(r.values()) for r in wh.rows("ey"))
        return (result.inserted, result.updated, result.deleted), rows

    u1, u3 = TINY[U][0], TINY[U][2]
    # a year appended to u1's [2012, 2013]: one new row, by value and by position
    counts, rows = run((u1, {**u1, "elite": [2012, 2013, 2015]}))
    assert counts == (1, 0, 0)
    if by == "value":
        assert rows == Counter({("u1", 2012, 10): 1, ("u1", 2013, 10): 1, ("u1", 2015, 10): 1, ("u3", 2013, 0): 1})
    else:
        assert rows == Counter({("u1", 2012, 1, 10): 1, ("u1", 2013, 2, 10): 1, ("u1", 2015, 3, 10): 1,
                                ("u3", 2013, 1, 0): 1})
    # 2012 removed from the front, and u3's fans (a plain update of its one row) in the same run:
    # by value one row goes; by position every later position changes and the last one goes
    u1b = {**u1, "elite": [2012, 2013, 2015]}
    counts, rows = run((u1b, {**u1, "elite": [2013, 2015]}), (u3, {**u3, "fans": 7}))
    if by == "value":
        assert counts == (0, 1, 1)  # u3's row updated, (u1, 2012) deleted
        assert rows == Counter({("u1", 2013, 10): 1, ("u1", 2015, 10): 1, ("u3", 2013, 7): 1})
    else:
        assert counts == (0, 3, 1)  # positions 1 and 2 of u1 rewritten, u3's row updated, position 3 deleted
        assert rows == Counter({("u1", 2013, 1, 10): 1, ("u1", 2015, 2, 10): 1, ("u3", 2013, 1, 7): 1})


TAGS = pa.schema([("item_id", pa.string()), ("tags", pa.list_(pa.string()))])
#: views over a bag of scalars that repeats values: one row per element, by value and by
#: position, and a count per value
TAG_VIEWS = {
    "item_tags": "SELECT i.item_id, t AS tag FROM items i, i.tags AS t WHERE LENGTH(t) <= 1",
    "tag_positions": "SELECT i.item_id, t AS tag, p AS pos FROM items i, i.tags AS t AT p",
    "tag_items": "SELECT t AS tag, COUNT(*) AS n FROM items i, i.tags AS t GROUP BY t",
}


def test_repeated_values_in_an_unnested_bag_keep_one_row_per_occurrence(make_warehouse, tmp_path):
    """A bag of scalars may repeat a value: the view keeps one row per occurrence (the value and
    its occurrence name the row), and an update changing how often a value occurs inserts or
    deletes exactly the occurrences that differ.  Then a seeded batch of edits that repeat
    values, an insert and a delete; every view of TAG_VIEWS is checked against recomputation
    after every batch."""
    import random

    wh = make_warehouse("repeats")
    items = [{"item_id": "i1", "tags": ["a", "b"]}, {"item_id": "i2", "tags": ["b"]}]
    wh.create_table("items", ["item_id"], pa.Table.from_pylist(items, schema=TAGS))
    for name, text in TAG_VIEWS.items():
        wh.define(f"CREATE VIEW {name} AS {text}", strategy=STRATEGY)

    def run(*changes: tuple[dict | None, dict | None], batch: int = 0):
        _events(tmp_path, wh, "items", *changes)
        counts = {}
        for name in TAG_VIEWS:
            result = _maintained(wh, name, f"batch {batch}: ")
            counts[name] = (result.inserted, result.updated, result.deleted)
        return counts

    def rows(name: str) -> Counter:
        return Counter(tuple(r.values()) for r in wh.rows(name))

    i1 = items[0]
    # "b" repeated: one more row; Δ(items.tags) names the value, so b's first row is rewritten too
    counts = run((i1, {**i1, "tags": ["a", "b", "b"]}))
    assert rows("item_tags") == Counter({("i1", "a"): 1, ("i1", "b"): 2, ("i2", "b"): 1})
    assert counts["item_tags"] == (1, 1, 0)
    assert rows("tag_items") == Counter({("a", 1): 1, ("b", 3): 1})
    # "a" and one "b" removed: the second occurrence of b goes, the first stays
    i1 = {**i1, "tags": ["a", "b", "b"]}
    counts = run((i1, {**i1, "tags": ["b"]}))
    assert rows("item_tags") == Counter({("i1", "b"): 1, ("i2", "b"): 1})
    assert counts["item_tags"] == (0, 1, 2)
    assert rows("tag_positions") == Counter({("i1", "b", 1): 1, ("i2", "b", 1): 1})

    rng = random.Random(11)
    state = {"i1": {**i1, "tags": ["b"]}, "i2": items[1]}
    changes = []
    for bid in state:  # two or three random edits of each item's tags, with repeats
        old = state[bid]
        tags = list(old["tags"])
        for _ in range(rng.randint(2, 3)):
            if tags and rng.random() < 0.4:
                tags.pop(rng.randrange(len(tags)))
            else:
                tags.insert(rng.randint(0, len(tags)), rng.choice(["a", "b", "cc"]))
        state[bid] = {**old, "tags": tags}
        changes.append((old, state[bid]))
    state["i3"] = {"item_id": "i3", "tags": [rng.choice("ab") for _ in range(4)]}
    changes += [(None, state["i3"]), (state.pop("i2"), None)]
    run(*changes, batch=1)
    assert sum(rows("tag_positions").values()) == sum(len(r["tags"]) for r in state.values())


HOURS = pa.schema([("business_id", pa.string()), ("city", pa.string()),
                   ("hours", pa.list_(pa.struct([("day", pa.string()), ("open", pa.int64()), ("close", pa.int64())])))])
DAYS = ("mon", "tue", "wed", "thu", "fri")


def test_element_edits_of_a_keyed_list_of_tuples_change_only_those_elements_rows(make_warehouse, tmp_path):
    """A collection of tuples with a declared element key (``hours`` by ``day``): an element
    whose fields change is replaced by its key, one added or removed is one row more or less;
    then a seeded random stream of element edits, city moves, inserts and deletes, each batch
    checked against recomputation."""
    import random

    wh = make_warehouse("element_keys")
    rows = [{"business_id": "b1", "city": SF, "hours": [{"day": "mon", "open": 8, "close": 17},
                                                         {"day": "tue", "open": 9, "close": 12}]},
            {"business_id": "b2", "city": "Madison", "hours": [{"day": "mon", "open": 7, "close": 15}]}]
    wh.create_table(B, ["business_id"], pa.Table.from_pylist(rows, schema=HOURS), element_keys={"hours": "day"})
    wh.define("CREATE VIEW early AS SELECT b.business_id, h.day, h.close - h.open AS length "
              "FROM businesses b, b.hours AS h WHERE h.open < 10 AND b.city = 'San Francisco'", strategy=STRATEGY)
    assert "elements of hours by key day (Δ(businesses.hours))" in wh.explain("early")

    def run(*changes: tuple[dict, dict]):
        _events(tmp_path, wh, B, *changes)
        result = _maintained(wh, "early")
        return (result.inserted, result.updated, result.deleted), {(r["day"], r["length"]) for r in wh.rows("early")
                                                                    if r["business_id"] == "b1"}

    b1 = rows[0]
    # tuesday closes later (an element changed), wednesday is added, monday opens at 10 (leaves the view)
    new = {**b1, "hours": [{"day": "mon", "open": 10, "close": 17}, {"day": "tue", "open": 9, "close": 14},
                           {"day": "wed", "open": 6, "close": 7}]}
    assert run((b1, new)) == ((1, 1, 1), {("tue", 5), ("wed", 1)})

    rng = random.Random(7)
    state = {"b1": new, "b2": rows[1]}
    for batch in range(3):
        changes = []
        for _ in range(4):
            bid = rng.choice(sorted(state))
            old = state[bid]
            hours = {h["day"]: h for h in old["hours"]}
            for day in rng.sample(DAYS, 2):
                if day in hours and rng.random() < 0.4:
                    del hours[day]
                else:
                    hours[day] = {"day": day, "open": rng.randint(5, 12), "close": rng.randint(13, 20)}
            city = old["city"] if rng.random() < 0.7 else rng.choice([SF, "Madison"])
            state[bid] = {**old, "city": city, "hours": list(hours.values())}
            changes.append((old, state[bid]))
        _events(tmp_path, wh, B, *changes)
        if batch == 1:  # a business inserted and one deleted
            fresh = {"business_id": f"b{batch + 3}", "city": SF, "hours": [{"day": "fri", "open": 6, "close": 9}]}
            _events(tmp_path, wh, B, (None, fresh), (state.pop("b2"), None))
            state[fresh["business_id"]] = fresh
        _maintained(wh, "early", f"batch {batch}: ")


def test_a_change_below_a_tuple_attribute_the_view_reads_in_part_is_dropped_only_where_unread(
        make_warehouse, tmp_path):
    """The view reads ``address.city`` (a condition) and ``address.geo.lat`` of a tuple attribute:
    a change of ``address.zip`` or ``address.geo.lon`` is dropped (no i-diff, no view change); a
    change of ``address.geo.lat`` is an update of the row, one of ``address.city`` a replace."""
    wh = make_warehouse("paths")
    geo = pa.struct([("lat", pa.float64()), ("lon", pa.float64())])
    schema = pa.schema([("id", pa.string()),
                        ("address", pa.struct([("city", pa.string()), ("zip", pa.string()), ("geo", geo)]))])
    rows = [{"id": "p1", "address": {"city": SF, "zip": "94110", "geo": {"lat": 37.7, "lon": -122.4}}},
            {"id": "p2", "address": {"city": "Madison", "zip": "53703", "geo": {"lat": 43.1, "lon": -89.4}}}]
    wh.create_table("places", ["id"], pa.Table.from_pylist(rows, schema=schema))
    wh.define("CREATE VIEW sf AS SELECT p.id, p.address.geo.lat AS lat FROM places p "
              "WHERE p.address.city = 'San Francisco'", strategy=STRATEGY)
    assert "places (key id): reads address.city, address.geo.lat; conditional: address" in wh.explain("sf")

    def run(old: dict, new: dict):
        _events(tmp_path, wh, "places", (old, new))
        (result,) = wh.maintain("sf")
        check = wh.verify("sf")
        assert check.ok, check.summary()
        return result.diff_rows, (result.inserted, result.updated, result.deleted), \
            sorted(wh.rows("sf"), key=lambda r: r["id"])

    p1 = rows[0]
    moved = {**p1, "address": {**p1["address"], "zip": "94103", "geo": {"lat": 37.7, "lon": -122.5}}}
    assert run(p1, moved) == (0, (0, 0, 0), [{"id": "p1", "lat": 37.7}])
    north = {**moved, "address": {**moved["address"], "geo": {"lat": 37.8, "lon": -122.5}}}
    assert run(moved, north) == (1, (0, 1, 0), [{"id": "p1", "lat": 37.8}])
    p2 = rows[1]
    assert run(p2, {**p2, "address": {**p2["address"], "city": SF}}) == \
        (1, (1, 0, 0), [{"id": "p1", "lat": 37.8}, {"id": "p2", "lat": 43.1}])


def test_a_nested_update_of_several_fields_rebuilds_each_tuple_once(spark):
    """Setting fields at several paths inside an element (a member's ``users.user_name``,
    ``fans``, ``friends``, ``elite`` at once) rebuilds each tuple on the way once, from the
    element's own fields: every new value occurs once in the optimized plan (a chain of
    updates, each over the tuple the previous one built, copies the earlier values at every
    step, and the code Spark generates for it outgrows a method)."""
    from pyspark.sql import functions as F

    from idivm.exec.delta_script import _with_paths

    df = spark.createDataFrame(
        [({"a": 1, "u": {"x": 1, "y": 2, "z": {"p": 1, "q": 2}}, "w": "k"},
          {"n0": 10, "n1": 20, "n2": "m", "n3": 30, "n4": 40})],
        "e struct<a:int,u:struct<x:int,y:int,z:struct<p:int,q:int>>,w:string>, "
        "v struct<n0:int,n1:int,n2:string,n3:int,n4:int>")
    v = F.col("v")
    paths = {("u", "x"): v.getField("n0"), ("u", "z", "q"): v.getField("n1"), ("w",): v.getField("n2"),
             ("u", "y"): v.getField("n3"), ("u", "z", "p"): v.getField("n4")}
    out = df.select(_with_paths(F.col("e"), paths).alias("e"))
    assert out.collect()[0]["e"].asDict(recursive=True) == \
        {"a": 1, "u": {"x": 10, "y": 30, "z": {"p": 40, "q": 20}}, "w": "m"}
    optimized = out._jdf.queryExecution().optimizedPlan().toString()
    assert [len(re.findall(rf"\bv#\d+\.n{i}\b", optimized)) for i in range(5)] == [1] * 5, optimized
