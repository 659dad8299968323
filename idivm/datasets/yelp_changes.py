"""Update streams for the Yelp-like database: batches of Debezium change events.

Input: a :class:`~idivm.datasets.yelp.YelpSpec` (the database the stream starts from), a mix
(a weight per kind of change), a seed, and a number of changes per batch.  Output: batch after
batch, for each table, the change events :mod:`idivm.ingest.debezium` reads::

    {"before": null, "after": {<row>}, "op": "c"}       insert
    {"before": {<row>}, "after": {<row>}, "op": "u"}    update (the key never changes)
    {"before": {<row>}, "after": null, "op": "d"}       delete

``before`` is the row exactly as it is just before the change (after every earlier change,
including the earlier changes of the same batch) and ``after`` the row just after it, with every
field, in the tables' column order.

Kinds of change (:data:`KINDS`; the default weight of :data:`DEFAULT_MIX` in parentheses):

* ``review_insert`` (25) -- a review with a fresh ``review_id`` of a live business, written by
  an existing user (with probability ``spec.repeat_fraction`` by an earlier reviewer of the
  same business); stars, date and text drawn as by the generator;
* ``review_delete`` (10) -- a live review;
* ``review_stars`` (20) -- a live review's ``stars`` changes (the text stays);
* ``user_fans`` (8) -- ``fans`` goes up or down by 1..5 (never below 0);
* ``user_name`` (4) -- another ``user_name``;
* ``user_friends`` (8) -- one user id added to or removed from ``friends``;
* ``user_elite`` (8) -- one year of 2006..2022 added to or removed from ``elite``;
* ``business_city`` (6) -- another ``city`` (and its ``state``): a business in San Francisco
  moves out, one elsewhere moves to San Francisco half of the time, so views that filter on
  San Francisco see rows enter and leave;
* ``business_categories`` (5) -- one category added to or removed from ``categories``;
* ``business_insert`` (3) -- a business with a fresh ``business_id`` and no reviews;
* ``business_delete`` (3) -- a live business, **and every review of it**: the reviews' delete
  events (in ``review_id`` order) come in the ``reviews`` events of the same batch, as a
  foreign key with ``ON DELETE CASCADE`` would produce them.

Users are never inserted or deleted.  A batch of ``n`` changes holds ``n`` changes drawn from
the mix, and possibly more events (one per cascaded review).  A kind that cannot
apply to the current state (no live review to delete, no business to move) is left out of the
draw; when no kind of the mix applies, :meth:`YelpChanges.next_batch` raises ``ValueError``.

Invariants after every batch (:class:`YelpState` checks keys, references and distinct values
on every change, so a violation raises instead of being written): keys are unique and fresh ids
are never reused, not even those of deleted rows; every review's ``business_id`` and ``user_id``
exist; ``friends`` are distinct other existing users, ascending; ``elite`` years are distinct,
ascending; ``categories`` are distinct and non-empty; no update leaves its row unchanged.  The
events of one table come in the order the changes were drawn; the tables of a batch may be
ingested in any order, and once all three are in, the database is consistent again.

Determinism: batch ``k`` draws from a ``random.Random`` seeded from ``(spec.seed, seed, k)`` and
depends on the state the batches before it left, so the same spec, mix, seed and batch sizes
give the same events on every run.  The state is held compactly (reviews in flat arrays): 100k
businesses and a million reviews take about 250 MB; the database is generated once, never per
batch.
"""

from __future__ import annotations

import bisect
import datetime
import math
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from random import Random

from idivm.datasets import write_jsonl, yelp
from idivm.datasets.yelp import (
    _NAME_FIRST,
    _NAME_KIND,
    _NAME_SECOND,
    _STAR_WEIGHTS,
    _USER_NAMES,
    CATEGORIES,
    FIRST_DATE,
    FIRST_ELITE_YEAR,
    LAST_DATE,
    LAST_ELITE_YEAR,
    OTHER_CITIES,
    SAN_FRANCISCO,
    YelpSpec,
    _review_text,
    business_id,
    review_id,
    user_id,
)

TABLES = ("businesses", "reviews", "users")

KINDS = (
    "review_insert", "review_delete", "review_stars",
    "user_fans", "user_name", "user_friends", "user_elite",
    "business_city", "business_categories", "business_insert", "business_delete",
)

DEFAULT_MIX: dict[str, float] = {
    "review_insert": 25, "review_delete": 10, "review_stars": 20,
    "user_fans": 8, "user_name": 4, "user_friends": 8, "user_elite": 8,
    "business_city": 6, "business_categories": 5, "business_insert": 3, "business_delete": 3,
}
"""Every kind; review inserts roughly balance review deletes plus the reviews of deleted businesses."""

ELITE_YEARS = tuple(range(FIRST_ELITE_YEAR, LAST_ELITE_YEAR + 1))
_FIRST_DAY = FIRST_DATE.toordinal()
_DAYS = LAST_DATE.toordinal() - _FIRST_DAY + 1


def check_mix(mix: Mapping[str, float]) -> dict[str, float]:
    """``mix`` as a dict in :data:`KINDS` order; ``ValueError`` for an unknown kind, a negative
    or non-finite weight, or no positive weight.  Kinds left out weigh 0."""
    unknown = [k for k in mix if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown change kind {unknown[0]!r}; known kinds: {', '.join(KINDS)}")
    out = {}
    for kind in KINDS:
        weight = mix.get(kind, 0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                or weight < 0:
            raise ValueError(f"the weight of {kind} must be a finite number >= 0, got {weight!r}")
        out[kind] = weight
    if not any(out.values()):
        raise ValueError("a mix needs at least one kind with a positive weight")
    return out


def parse_mix(text: str) -> dict[str, float]:
    """``"review_stars=2,user_elite=1"`` -> a checked mix (kinds not named weigh 0)."""
    mix: dict[str, float] = {}
    for part in text.split(","):
        kind, sep, weight = part.strip().partition("=")
        if not sep:
            raise ValueError(f"expected KIND=WEIGHT, got {part.strip()!r}")
        try:
            mix[kind.strip()] = float(weight)
        except ValueError:
            raise ValueError(f"the weight of {kind.strip()} is not a number: {weight.strip()!r}") from None
    return check_mix(mix)


def _number(value: object, prefix: str, what: str) -> int:
    """The number of an id such as ``b000042`` (42)."""
    if isinstance(value, str) and value[:1] == prefix and value[1:].isdigit():
        number = int(value[1:])
        if number > 0:
            return number
    raise ValueError(f"{what} {value!r} is not of the form {prefix}<digits> (from 1)")


def _event(op: str, before: dict | None, after: dict | None) -> dict:
    return {"before": before, "after": after, "op": op}


class _Live:
    """A set of positive ints (the numbers of live rows) with O(1) add, remove and uniform choice."""

    __slots__ = ("_items", "_slot")

    def __init__(self) -> None:
        self._items = array("q")
        self._slot = array("q")  # number -> index in _items, -1 when absent

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, number: int) -> bool:
        return 0 <= number < len(self._slot) and self._slot[number] >= 0

    def add(self, number: int) -> None:
        if number >= len(self._slot):
            self._slot.extend([-1] * (number + 1 - len(self._slot)))
        self._slot[number] = len(self._items)
        self._items.append(number)

    def remove(self, number: int) -> None:
        i = self._slot[number]
        last = self._items.pop()
        if last != number:
            self._items[i] = last
            self._slot[last] = i
        self._slot[number] = -1

    def choice(self, rng: Random) -> int:
        return self._items[rng.randrange(len(self._items))]

    def ascending(self) -> Iterator[int]:
        return (n for n, slot in enumerate(self._slot) if slot >= 0)


class YelpState:
    """The current rows of ``businesses``, ``reviews`` and ``users``.

    Loaded from rows (:meth:`load`, :meth:`recording`); then every change goes through a method
    that checks it keeps the invariants of the module docstring, applies it and returns its
    Debezium event(s).  Reviews live in flat arrays indexed by review number, businesses and
    users in dicts of tuples, so a million reviews take about a hundred megabytes.
    """

    def __init__(self) -> None:
        # business number -> (name, city, state, categories)
        self._businesses: dict[int, tuple[str, str, str, tuple[str, ...]]] = {}
        self._live_businesses = _Live()
        self._reviews_of: dict[int, list[int]] = {}  # business number -> live review numbers, ascending
        # review number -> columns; index 0 and the numbers of absent reviews hold placeholders
        self._review_user = array("q", [0])
        self._review_business = array("q", [0])
        self._review_stars = array("b", [0])
        self._review_date: list[str] = [""]
        self._review_text: list[str] = [""]
        self._live_reviews = _Live()
        # user number -> (user_name, fans, friends (user numbers), elite)
        self._users: dict[int, tuple[str, int, tuple[int, ...], tuple[int, ...]]] = {}
        self._user_numbers: list[int] = []
        self._last_business = 0
        self._last_review = 0

    # --- loading ----------------------------------------------------------------------------------

    @classmethod
    def of(cls, rows_by_table: Mapping[str, Iterable[Mapping]]) -> YelpState:
        """The state holding these rows (table name -> rows, as :func:`~idivm.datasets.yelp.tables` gives)."""
        state = cls()
        state.load(rows_by_table)
        return state

    @classmethod
    def of_spec(cls, spec: YelpSpec) -> YelpState:
        """The state holding the database ``spec`` generates."""
        return cls.of(yelp.tables(spec))

    def load(self, rows_by_table: Mapping[str, Iterable[Mapping]]) -> None:
        """Add existing rows (no events); references are checked once everything is in."""
        unknown = set(rows_by_table) - set(TABLES)
        if unknown:
            raise ValueError(f"no table {sorted(unknown)[0]!r} in the Yelp database")
        for table in TABLES:
            for row in rows_by_table.get(table, ()):
                self.add(table, row)
        self.check_references()

    def recording(self, table: str, rows: Iterable[Mapping]) -> Iterator[Mapping]:
        """``rows`` unchanged, each added to the state as it passes (to write a dataset and load
        it in one pass); call :meth:`check_references` once every table went through."""
        for row in rows:
            self.add(table, row)
            yield row

    def add(self, table: str, row: Mapping) -> None:
        """Add one existing row of ``table`` (references are not checked: see :meth:`check_references`)."""
        if table == "businesses":
            b = _number(row["business_id"], "b", "business_id")
            if b in self._businesses:
                raise ValueError(f"duplicate business_id {row['business_id']!r}")
            self._put_business(b, (row["name"], row["city"], row["state"], tuple(row["categories"])))
            self._reviews_of.setdefault(b, [])
        elif table == "reviews":
            r = _number(row["review_id"], "r", "review_id")
            if r in self._live_reviews:
                raise ValueError(f"duplicate review_id {row['review_id']!r}")
            self._put_review(r, _number(row["user_id"], "u", "user_id"),
                             _number(row["business_id"], "b", "business_id"),
                             row["stars"], row["date"], row["text"])
        elif table == "users":
            u = _number(row["user_id"], "u", "user_id")
            if u in self._users:
                raise ValueError(f"duplicate user_id {row['user_id']!r}")
            friends = tuple(_number(f, "u", "friend") for f in row["friends"])
            self._users[u] = (row["user_name"], row["fans"], friends, tuple(row["elite"]))
            self._user_numbers.append(u)
        else:
            raise ValueError(f"no table {table!r} in the Yelp database")

    def check_references(self) -> None:
        """``ValueError`` unless every review's business and user and every friend exist."""
        for r in self._live_reviews.ascending():
            if self._review_business[r] not in self._businesses:
                raise ValueError(f"review {review_id(r)} names a missing business "
                                 f"{business_id(self._review_business[r])}")
            if self._review_user[r] not in self._users:
                raise ValueError(f"review {review_id(r)} names a missing user "
                                 f"{user_id(self._review_user[r])}")
        for u, (_, _, friends, _) in self._users.items():
            self._check_friends(u, friends)

    # --- reading ----------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        return {table: self.count(table) for table in TABLES}

    def rows(self, table: str) -> Iterator[dict]:
        """The current rows of ``table``, fresh dicts in key order."""
        if table == "businesses":
            return (self.business_row(b) for b in sorted(self._businesses))
        if table == "reviews":
            return (self.review_row(r) for r in self._live_reviews.ascending())
        if table == "users":
            return (self.user_row(u) for u in sorted(self._users))
        raise ValueError(f"no table {table!r} in the Yelp database")

    def tables(self) -> dict[str, list[dict]]:
        """Every table's current rows."""
        return {table: list(self.rows(table)) for table in TABLES}

    def count(self, table: str) -> int:
        """Rows of ``table``."""
        if table == "businesses":
            return len(self._businesses)
        if table == "reviews":
            return len(self._live_reviews)
        if table == "users":
            return len(self._users)
        raise ValueError(f"no table {table!r} in the Yelp database")

    def random_number(self, table: str, rng: Random) -> int:
        """The number of a uniformly chosen row of ``table`` (``IndexError`` when it is empty)."""
        if table == "businesses":
            return self._live_businesses.choice(rng)
        if table == "reviews":
            return self._live_reviews.choice(rng)
        if table == "users":
            return self._user_numbers[rng.randrange(len(self._user_numbers))]
        raise ValueError(f"no table {table!r} in the Yelp database")

    def user_numbers(self) -> list[int]:
        """The numbers of all users, in load order."""
        return list(self._user_numbers)

    def business(self, b: int) -> tuple[str, str, str, tuple[str, ...]]:
        """(name, city, state, categories) of business ``b``."""
        return self._businesses[b]

    def user(self, u: int) -> tuple[str, int, tuple[int, ...], tuple[int, ...]]:
        """(user_name, fans, friends as user numbers, elite) of user ``u``."""
        return self._users[u]

    def stars(self, r: int) -> int:
        """The stars of review ``r``."""
        return self._review_stars[r]

    def reviewers(self, b: int) -> list[int]:
        """The user number of every review of business ``b``, by review (so with repeats)."""
        return [self._review_user[r] for r in self._reviews_of[b]]

    def business_row(self, b: int) -> dict:
        name, city, state, categories = self._businesses[b]
        return {"business_id": business_id(b), "name": name, "city": city, "state": state,
                "categories": list(categories)}

    def review_row(self, r: int) -> dict:
        return {"review_id": review_id(r), "user_id": user_id(self._review_user[r]),
                "business_id": business_id(self._review_business[r]), "stars": self._review_stars[r],
                "date": self._review_date[r], "text": self._review_text[r]}

    def user_row(self, u: int) -> dict:
        name, fans, friends, elite = self._users[u]
        return {"user_id": user_id(u), "user_name": name, "fans": fans,
                "friends": [user_id(f) for f in friends], "elite": list(elite)}

    # --- changes ----------------------------------------------------------------------------------

    def insert_business(self, name: str, city: str, state: str, categories: Iterable[str]) -> dict:
        """A business with the next fresh ``business_id``; its ``c`` event."""
        categories = tuple(categories)
        self._check_categories(categories)
        b = self._last_business + 1
        self._put_business(b, (name, city, state, categories))
        self._reviews_of[b] = []
        return _event("c", None, self.business_row(b))

    def update_business(self, b: int, *, city: tuple[str, str] | None = None,
                        categories: Iterable[str] | None = None) -> dict:
        """Move business ``b`` to ``city`` (a (city, state) pair) and/or set its ``categories``;
        its ``u`` event."""
        before = self.business_row(b)
        name, old_city, old_state, old_categories = self._businesses[b]
        new_city, new_state = (old_city, old_state) if city is None else city
        new_categories = old_categories if categories is None else tuple(categories)
        self._check_categories(new_categories)
        value = (name, new_city, new_state, new_categories)
        if value == self._businesses[b]:
            raise ValueError(f"update of business {business_id(b)} changes nothing")
        self._businesses[b] = value
        return _event("u", before, self.business_row(b))

    def delete_business(self, b: int) -> tuple[list[dict], dict]:
        """Delete business ``b`` and its reviews: (the reviews' ``d`` events, the business' ``d`` event)."""
        if b not in self._businesses:
            raise ValueError(f"no business {business_id(b)}")
        review_events = [self.delete_review(r) for r in list(self._reviews_of[b])]
        before = self.business_row(b)
        del self._businesses[b]
        del self._reviews_of[b]
        self._live_businesses.remove(b)
        return review_events, _event("d", before, None)

    def insert_review(self, u: int, b: int, stars: int, date: str, text: str) -> dict:
        """A review with the next fresh ``review_id``; its ``c`` event."""
        if b not in self._businesses:
            raise ValueError(f"a new review names a missing business {business_id(b)}")
        if u not in self._users:
            raise ValueError(f"a new review names a missing user {user_id(u)}")
        if stars not in range(1, 6):
            raise ValueError(f"stars must be 1..5, got {stars!r}")
        r = self._last_review + 1
        self._put_review(r, u, b, stars, date, text)
        return _event("c", None, self.review_row(r))

    def update_review_stars(self, r: int, stars: int) -> dict:
        """Review ``r`` gets ``stars``; its ``u`` event."""
        if r not in self._live_reviews:
            raise ValueError(f"no review {review_id(r)}")
        if stars not in range(1, 6) or stars == self._review_stars[r]:
            raise ValueError(f"review {review_id(r)} has {self._review_stars[r]} stars; "
                             f"cannot change to {stars!r}")
        before = self.review_row(r)
        self._review_stars[r] = stars
        return _event("u", before, self.review_row(r))

    def delete_review(self, r: int) -> dict:
        """Delete review ``r``; its ``d`` event."""
        if r not in self._live_reviews:
            raise ValueError(f"no review {review_id(r)}")
        before = self.review_row(r)
        self._reviews_of[self._review_business[r]].remove(r)
        self._live_reviews.remove(r)
        self._review_business[r] = self._review_user[r] = 0
        self._review_date[r] = self._review_text[r] = ""
        return _event("d", before, None)

    def update_user(self, u: int, *, user_name: str | None = None, fans: int | None = None,
                    friends: Iterable[int] | None = None, elite: Iterable[int] | None = None) -> dict:
        """Set fields of user ``u`` (``friends`` as user numbers, in the order given); its ``u`` event."""
        if u not in self._users:
            raise ValueError(f"no user {user_id(u)}")
        before = self.user_row(u)
        old = self._users[u]
        new = (
            old[0] if user_name is None else user_name,
            old[1] if fans is None else fans,
            old[2] if friends is None else tuple(friends),
            old[3] if elite is None else tuple(elite),
        )
        if new[1] < 0:
            raise ValueError(f"fans of {user_id(u)} would be {new[1]}")
        self._check_friends(u, new[2])
        if len(set(new[3])) != len(new[3]):
            raise ValueError(f"elite years of {user_id(u)} would repeat: {list(new[3])}")
        if new == old:
            raise ValueError(f"update of user {user_id(u)} changes nothing")
        self._users[u] = new
        return _event("u", before, self.user_row(u))

    # --- internals --------------------------------------------------------------------------------

    def _put_business(self, b: int, value: tuple[str, str, str, tuple[str, ...]]) -> None:
        self._businesses[b] = value
        self._live_businesses.add(b)
        self._last_business = max(self._last_business, b)

    def _put_review(self, r: int, u: int, b: int, stars: int, date: str, text: str) -> None:
        missing = r + 1 - len(self._review_user)
        if missing > 0:
            for column in (self._review_user, self._review_business, self._review_stars):
                column.extend([0] * missing)
            self._review_date.extend([""] * missing)
            self._review_text.extend([""] * missing)
        self._review_user[r], self._review_business[r], self._review_stars[r] = u, b, stars
        # reviews share few distinct dates and texts: keep one copy of each
        self._review_date[r], self._review_text[r] = sys.intern(date), sys.intern(text)
        self._live_reviews.add(r)
        bisect.insort(self._reviews_of.setdefault(b, []), r)
        self._last_review = max(self._last_review, r)

    def _check_friends(self, u: int, friends: tuple[int, ...]) -> None:
        if len(set(friends)) != len(friends):
            raise ValueError(f"friends of {user_id(u)} would repeat: {[user_id(f) for f in friends]}")
        for f in friends:
            if f == u or f not in self._users:
                raise ValueError(f"{user_id(f)} cannot be a friend of {user_id(u)}")

    @staticmethod
    def _check_categories(categories: tuple[str, ...]) -> None:
        if not categories or len(set(categories)) != len(categories):
            raise ValueError(f"categories must be distinct and not empty, got {list(categories)}")


@dataclass(frozen=True, slots=True)
class ChangeBatch:
    """One batch: its number (from 1), each table's events in order, and the changes per kind."""

    number: int
    events: dict[str, list[dict]]
    kinds: dict[str, int]

    @property
    def changes(self) -> int:
        return sum(self.kinds.values())


class YelpChanges:
    """The update stream of one Yelp-like database: ``next_batch(n)`` draws ``n`` changes from
    the mix, applies them to :attr:`state` and returns their events (see the module docstring).

    ``state`` defaults to the database ``spec`` generates; give one (e.g. filled by
    :meth:`YelpState.recording` while the dataset was written) to skip generating it again.
    ``seed`` (default ``spec.seed``) chooses the stream.
    """

    def __init__(self, spec: YelpSpec, mix: Mapping[str, float] | None = None, seed: int | None = None,
                 state: YelpState | None = None):
        self.spec = spec
        self.mix = check_mix(DEFAULT_MIX if mix is None else mix)
        self.seed = spec.seed if seed is None else seed
        self.state = YelpState.of_spec(spec) if state is None else state
        self.batches = 0  # batches made so far
        self._failed: str | None = None

    def next_batch(self, n: int) -> ChangeBatch:
        """Batch number ``batches + 1``: ``n`` changes.  ``ValueError`` when no kind of the mix
        applies any more (the stream is then unusable: the batch was half applied)."""
        if n < 0:
            raise ValueError(f"a batch has n >= 0 changes, got {n}")
        if self._failed:
            raise ValueError(f"the change stream stopped in an earlier batch: {self._failed}")
        number = self.batches + 1
        rng = Random(f"idivm.datasets.yelp:{self.spec.seed}:changes:{self.seed}:{number}")
        events: dict[str, list[dict]] = {table: [] for table in TABLES}
        kinds = dict.fromkeys(KINDS, 0)
        draw = _Draw(self.spec, self.state, rng, events)
        for _ in range(n):
            applicable = [k for k, w in self.mix.items() if w > 0 and draw.applies(k)]
            if not applicable:
                self._failed = (f"batch {number}: no kind of the mix applies to the current state "
                                f"({self.state.counts()}) after {sum(kinds.values())} changes")
                raise ValueError(self._failed)
            kind = rng.choices(applicable, weights=[self.mix[k] for k in applicable])[0]
            getattr(draw, kind)()
            kinds[kind] += 1
        self.batches = number
        return ChangeBatch(number, events, kinds)


class _Draw:
    """The random changes of one batch, one method per kind; each appends its events."""

    def __init__(self, spec: YelpSpec, state: YelpState, rng: Random, events: dict[str, list[dict]]):
        self.spec, self.state, self.rng, self.events = spec, state, rng, events

    def applies(self, kind: str) -> bool:
        count = self.state.count
        if kind in ("review_delete", "review_stars"):
            return count("reviews") > 0
        if kind == "review_insert":
            return count("businesses") > 0 and count("users") > 0
        if kind == "user_friends":
            return count("users") > 1
        if kind.startswith("user_"):
            return count("users") > 0
        if kind == "business_insert":
            return True
        return count("businesses") > 0  # business_city, business_categories, business_delete

    def _pick(self, table: str) -> int:
        return self.state.random_number(table, self.rng)

    def _adds(self, size: int, room: int) -> bool:
        """Whether to add an element to a collection of ``size`` elements with ``room`` left
        (else remove one): add to an empty one, remove from a full one, otherwise toss a coin."""
        if size == 0:
            return True
        if room == 0:
            return False
        return self.rng.random() < 0.5

    @staticmethod
    def _with(values: tuple, value: object) -> tuple:
        """``values`` (ascending) with ``value`` inserted in order."""
        i = bisect.bisect_left(values, value)
        return (*values[:i], value, *values[i:])

    # --- reviews

    def review_insert(self) -> None:
        rng = self.rng
        b = self._pick("businesses")
        reviewers = self.state.reviewers(b)
        if reviewers and rng.random() < self.spec.repeat_fraction:
            u = rng.choice(reviewers)
        else:
            u = self._pick("users")
        stars = rng.choices(range(1, 6), weights=_STAR_WEIGHTS)[0]
        date = datetime.date.fromordinal(_FIRST_DAY + rng.randrange(_DAYS)).isoformat()
        self.events["reviews"].append(self.state.insert_review(u, b, stars, date, _review_text(rng, stars)))

    def review_delete(self) -> None:
        self.events["reviews"].append(self.state.delete_review(self._pick("reviews")))

    def review_stars(self) -> None:
        r = self._pick("reviews")
        others = [k for k in range(1, 6) if k != self.state.stars(r)]
        stars = self.rng.choices(others, weights=[_STAR_WEIGHTS[k - 1] for k in others])[0]
        self.events["reviews"].append(self.state.update_review_stars(r, stars))

    # --- users

    def user_fans(self) -> None:
        u = self._pick("users")
        fans = self.state.user(u)[1]
        step = self.rng.randint(1, 5)
        fans = fans - min(step, fans) if fans > 0 and self.rng.random() < 0.3 else fans + step
        self.events["users"].append(self.state.update_user(u, fans=fans))

    def user_name(self) -> None:
        u = self._pick("users")
        name = self.rng.choice([n for n in _USER_NAMES if n != self.state.user(u)[0]])
        self.events["users"].append(self.state.update_user(u, user_name=name))

    def user_friends(self) -> None:
        u = self._pick("users")
        friends = self.state.user(u)[2]
        others = self.state.count("users") - 1
        if self._adds(len(friends), others - len(friends)):
            taken = set(friends)
            if 2 * len(friends) < others:  # mostly free: rejection sampling ends fast
                f = u
                while f == u or f in taken:
                    f = self._pick("users")
            else:
                f = self.rng.choice([v for v in self.state.user_numbers() if v != u and v not in taken])
            friends = self._with(friends, f)
        else:
            gone = self.rng.choice(friends)
            friends = tuple(f for f in friends if f != gone)
        self.events["users"].append(self.state.update_user(u, friends=friends))

    def user_elite(self) -> None:
        u = self._pick("users")
        elite = self.state.user(u)[3]
        free = [y for y in ELITE_YEARS if y not in elite]
        if self._adds(len(elite), len(free)):
            elite = self._with(elite, self.rng.choice(free))
        else:
            gone = self.rng.choice(elite)
            elite = tuple(y for y in elite if y != gone)
        self.events["users"].append(self.state.update_user(u, elite=elite))

    # --- businesses

    def business_city(self) -> None:
        b = self._pick("businesses")
        current = self.state.business(b)[1:3]
        if current != SAN_FRANCISCO and self.rng.random() < 0.5:
            city = SAN_FRANCISCO
        else:
            city = self.rng.choice([c for c in OTHER_CITIES if c != current])
        self.events["businesses"].append(self.state.update_business(b, city=city))

    def business_categories(self) -> None:
        b = self._pick("businesses")
        categories = self.state.business(b)[3]
        # one category always stays: the room to shrink is len - 1
        free = [c for c in CATEGORIES if c not in categories]
        if self._adds(len(categories) - 1, len(free)):
            categories = (*categories, self.rng.choice(free))
        else:
            gone = self.rng.choice(categories)
            categories = tuple(c for c in categories if c != gone)
        self.events["businesses"].append(self.state.update_business(b, categories=categories))

    def business_insert(self) -> None:
        rng = self.rng
        city, state = SAN_FRANCISCO if rng.random() < self.spec.sf_fraction else rng.choice(OTHER_CITIES)
        name = f"{rng.choice(_NAME_FIRST)} {rng.choice(_NAME_SECOND)} {rng.choice(_NAME_KIND)}"
        categories = rng.sample(CATEGORIES, rng.randint(1, 3))
        self.events["businesses"].append(self.state.insert_business(name, city, state, categories))

    def business_delete(self) -> None:
        review_events, event = self.state.delete_business(self._pick("businesses"))
        self.events["reviews"].extend(review_events)
        self.events["businesses"].append(event)


def change_batches(spec: YelpSpec, batches: int, n: int, mix: Mapping[str, float] | None = None,
                   seed: int | None = None, state: YelpState | None = None) -> Iterator[ChangeBatch]:
    """``batches`` consecutive batches of ``n`` changes each (see :class:`YelpChanges`)."""
    if batches < 0:
        raise ValueError(f"batches must be >= 0, got {batches}")
    stream = YelpChanges(spec, mix, seed, state)
    for _ in range(batches):
        yield stream.next_batch(n)


def batch_dir(out_dir: str | Path, number: int) -> Path:
    """``out_dir/batch-0001`` for batch 1."""
    return Path(out_dir) / f"batch-{number:04d}"


def write_batch(batch: ChangeBatch, out_dir: str | Path) -> dict[str, tuple[Path, int]]:
    """Write ``out_dir/batch-NNNN/<table>.jsonl`` (every table, empty files included);
    returns ``{table: (path, events)}``."""
    directory = batch_dir(out_dir, batch.number)
    directory.mkdir(parents=True, exist_ok=True)
    return {table: (directory / f"{table}.jsonl", write_jsonl(events, directory / f"{table}.jsonl"))
            for table, events in batch.events.items()}
