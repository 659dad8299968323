"""The state of a Yelp-like database under a change stream: the current rows of
``businesses``, ``reviews`` and ``users`` in compact form, and the checked changes that
:mod:`idivm.datasets.yelp_changes` draws, each returning its Debezium event(s)."""

from __future__ import annotations

import bisect
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping
from random import Random

from idivm.datasets import yelp
from idivm.datasets.yelp import YelpSpec, business_id, review_id, user_id

TABLES = ("businesses", "reviews", "users")


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
    that checks it keeps the invariants of :mod:`idivm.datasets.yelp_changes`, applies it and
    returns its
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
