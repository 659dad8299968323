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

Invariants after every batch (:class:`~idivm.datasets.yelp_state.YelpState` checks keys, references and distinct values
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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from random import Random

from idivm.datasets import write_jsonl
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
)
from idivm.datasets.yelp_state import TABLES, YelpState

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
