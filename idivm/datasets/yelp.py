"""A Yelp-like nested database (thesis §2.9, after the Yelp Open Dataset).

Tables::

    businesses(business_id string, name string, city string, state string,
               categories list<string>)                                   key business_id
    reviews(review_id string, user_id string, business_id string, stars int 1..5,
            date string 'YYYY-MM-DD', text string)                        key review_id
    users(user_id string, user_name string, fans int,
          friends list<string> (user ids), elite list<int> (years))      key user_id

The users' name is ``user_name`` and businesses carry no ``stars``, so natural joins of the three
tables join on ``business_id`` and ``user_id`` only.  Nested lists hold distinct values (a bag of
scalars is keyed by its values) and may be empty.  Ids are zero-padded strings: ``b000001``,
``u000001``, ``r0000001``.

Knobs:

* ``businesses`` -- the scale (``at_scale(n)``);
* ``reviews_per_business`` -- mean number of reviews per business, over all businesses;
* ``users_per_business`` -- users = ``round(businesses * users_per_business)``;
* ``sf_fraction`` -- fraction of businesses in San Francisco (exactly
  ``round(sf_fraction * businesses)`` of them);
* ``unreviewed_fraction`` -- probability that a business has no review at all; the others get
  1 + a geometric number of reviews (a long tail, as on Yelp);
* ``repeat_fraction`` -- probability that a review is written by a user who already reviewed the
  same business (otherwise the author is a uniformly chosen user);
* ``friends_per_user`` -- mean length of ``friends`` (geometric, so some lists are empty);
* ``elite_fraction`` -- fraction of users with a non-empty ``elite`` list (consecutive years).

Each table has its own ``random.Random`` seeded from ``(seed, table name)``; every table streams
in bounded memory and comes out the same on every run.
"""

from __future__ import annotations

import datetime
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace

SAN_FRANCISCO = ("San Francisco", "CA")
OTHER_CITIES = (
    ("Oakland", "CA"),
    ("Berkeley", "CA"),
    ("Las Vegas", "NV"),
    ("Phoenix", "AZ"),
    ("Toronto", "ON"),
    ("Pittsburgh", "PA"),
    ("Charlotte", "NC"),
    ("Madison", "WI"),
)
CATEGORIES = (
    "Mexican", "Burgers", "Gastropub", "Pizza", "Italian", "Chinese", "Japanese", "Sushi Bars",
    "Thai", "Vietnamese", "Indian", "Coffee & Tea", "Bakeries", "Breakfast & Brunch", "Bars",
    "Seafood", "Vegan", "Sandwiches", "Korean", "Desserts",
)
_NAME_FIRST = (
    "Golden", "Blue", "Little", "Lucky", "Red", "Green", "Happy", "Old", "Urban", "Sunny",
    "Silver", "Corner", "Royal", "Wild", "Brick",
)
_NAME_SECOND = (
    "Dragon", "Door", "Garden", "Taco", "Oven", "Table", "Lantern", "Harbor", "Spoon", "Fig",
    "Bean", "Anchor", "Pepper", "Leaf", "Barrel",
)
_NAME_KIND = ("Kitchen", "Cafe", "Bistro", "Grill", "House", "Bar", "Eatery", "Diner")
_USER_NAMES = (
    "Sebastien", "Maria", "John", "Aiko", "Priya", "Carlos", "Emma", "Wei", "Fatima", "Liam",
    "Olga", "Noah", "Chloe", "Ahmed", "Sofia", "Mateo", "Hana", "Lucas", "Amara", "Ivan",
    "Grace", "Diego", "Yuki", "Omar", "Nina", "Kofi", "Elena", "Raj", "Zoe", "Tariq",
)
_PRAISE = (
    "Great place to hang out after work.", "Friendly staff and quick service.",
    "The food was fantastic.", "Best brunch in the neighborhood.", "Will definitely come back.",
)
_NEUTRAL = (
    "Decent food, a bit pricey.", "Nothing special but solid.", "Long wait on weekends.",
    "Portions are on the small side.", "Good for a quick bite.",
)
_COMPLAINT = (
    "Service was slow and rude.", "My order was cold.", "Way too noisy to talk.",
    "Overpriced for what you get.", "Would not recommend.",
)
_STAR_WEIGHTS = (12, 8, 11, 22, 47)  # share of 1..5 stars, roughly as on Yelp
FIRST_DATE = datetime.date(2008, 1, 1)
LAST_DATE = datetime.date(2022, 12, 31)
FIRST_ELITE_YEAR = 2006
LAST_ELITE_YEAR = 2022


@dataclass(frozen=True, slots=True)
class YelpSpec:
    """Sizes and knobs of one Yelp-like database; see the module docstring."""

    businesses: int = 1_000
    reviews_per_business: float = 5.0
    users_per_business: float = 2.0
    sf_fraction: float = 0.2
    unreviewed_fraction: float = 0.1
    repeat_fraction: float = 0.05
    friends_per_user: float = 3.0
    elite_fraction: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.businesses < 0:
            raise ValueError("businesses must be >= 0")
        for name in ("sf_fraction", "unreviewed_fraction", "repeat_fraction", "elite_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {getattr(self, name)}")
        if self.unreviewed_fraction == 1.0 and self.reviews_per_business > 0:
            raise ValueError("reviews_per_business must be 0 when unreviewed_fraction is 1")
        for name in ("users_per_business", "friends_per_user"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.reviews_per_business < 0:
            raise ValueError("reviews_per_business must be >= 0")
        reviewed = 1.0 - self.unreviewed_fraction
        if self.reviews_per_business > 0 and self.reviews_per_business < reviewed:
            raise ValueError(
                "reviews_per_business must be at least 1 - unreviewed_fraction "
                f"({reviewed:g}): every reviewed business has a review"
            )
        if self.businesses > 0 and self.reviews_per_business > 0 and self.users == 0:
            raise ValueError("reviews need users: users_per_business is too small")

    @classmethod
    def at_scale(cls, scale: int, **knobs: object) -> YelpSpec:
        """``scale`` businesses, other knobs as given."""
        return cls(businesses=scale, **knobs)  # type: ignore[arg-type]

    @property
    def users(self) -> int:
        return round(self.businesses * self.users_per_business)

    @property
    def sf_businesses(self) -> int:
        return round(self.sf_fraction * self.businesses)

    def with_(self, **changes: object) -> YelpSpec:
        return replace(self, **changes)  # type: ignore[arg-type]


KEYS: dict[str, tuple[str, ...]] = {
    "businesses": ("business_id",),
    "reviews": ("review_id",),
    "users": ("user_id",),
}

SCHEMAS: dict[str, dict[str, str]] = {
    "businesses": {
        "business_id": "string", "name": "string", "city": "string", "state": "string",
        "categories": "list<string>",
    },
    "reviews": {
        "review_id": "string", "user_id": "string", "business_id": "string", "stars": "int64",
        "date": "string", "text": "string",
    },
    "users": {
        "user_id": "string", "user_name": "string", "fans": "int64", "friends": "list<string>",
        "elite": "list<int64>",
    },
}


def keys(spec: YelpSpec) -> dict[str, tuple[str, ...]]:
    """Primary key of every table."""
    return dict(KEYS)


def schemas(spec: YelpSpec) -> dict[str, dict[str, str]]:
    """Field name -> type name of every table, in column order."""
    return dict(SCHEMAS)


def business_id(i: int) -> str:
    return f"b{i:06d}"


def user_id(i: int) -> str:
    return f"u{i:06d}"


def review_id(i: int) -> str:
    return f"r{i:07d}"


def _rng(spec: YelpSpec, stream: str) -> random.Random:
    return random.Random(f"idivm.datasets.yelp:{spec.seed}:{stream}")


def _geometric(rng: random.Random, mean: float) -> int:
    """Number of failures before the first success, with the given mean (0, 1, 2, ...)."""
    if mean <= 0:
        return 0
    p = 1.0 / (1.0 + mean)
    return int(math.log(1.0 - rng.random()) / math.log(1.0 - p))


def businesses_rows(spec: YelpSpec) -> Iterator[dict]:
    """``businesses`` rows, business_id b000001..; exactly ``spec.sf_businesses`` in San Francisco."""
    rng = _rng(spec, "businesses")
    remaining_sf, remaining = spec.sf_businesses, spec.businesses
    for i in range(1, spec.businesses + 1):
        if rng.random() * remaining < remaining_sf:  # selection sampling: exact count, O(1) memory
            city, state = SAN_FRANCISCO
            remaining_sf -= 1
        else:
            city, state = rng.choice(OTHER_CITIES)
        remaining -= 1
        name = f"{rng.choice(_NAME_FIRST)} {rng.choice(_NAME_SECOND)} {rng.choice(_NAME_KIND)}"
        categories = rng.sample(CATEGORIES, rng.randint(1, 3))
        yield {
            "business_id": business_id(i),
            "name": name,
            "city": city,
            "state": state,
            "categories": categories,
        }


def _review_text(rng: random.Random, stars: int) -> str:
    if stars >= 4:
        pool = _PRAISE
    elif stars == 3:
        pool = _NEUTRAL
    else:
        pool = _COMPLAINT
    first, second = rng.sample(pool, 2)
    return f"{first} {second}"


def reviews_rows(spec: YelpSpec) -> Iterator[dict]:
    """``reviews`` rows grouped by business (b000001's first), review_id r0000001.. in that order."""
    rng = _rng(spec, "reviews")
    users = spec.users
    reviewed = 1.0 - spec.unreviewed_fraction
    # reviewed businesses get 1 + Geometric(extra) reviews: mean over all = reviews_per_business
    extra = spec.reviews_per_business / reviewed - 1.0 if reviewed > 0 else 0.0
    first_day = FIRST_DATE.toordinal()
    days = LAST_DATE.toordinal() - first_day + 1
    next_id = 1
    for b in range(1, spec.businesses + 1):
        if spec.reviews_per_business == 0 or rng.random() < spec.unreviewed_fraction:
            continue
        authors: list[int] = []
        for _ in range(1 + _geometric(rng, extra)):
            if authors and rng.random() < spec.repeat_fraction:
                author = rng.choice(authors)
            else:
                author = rng.randrange(1, users + 1)
                authors.append(author)
            stars = rng.choices(range(1, 6), weights=_STAR_WEIGHTS)[0]
            date = datetime.date.fromordinal(first_day + rng.randrange(days)).isoformat()
            yield {
                "review_id": review_id(next_id),
                "user_id": user_id(author),
                "business_id": business_id(b),
                "stars": stars,
                "date": date,
                "text": _review_text(rng, stars),
            }
            next_id += 1


def users_rows(spec: YelpSpec) -> Iterator[dict]:
    """``users`` rows, user_id u000001..; friends are distinct other users, sorted; elite years ascending."""
    rng = _rng(spec, "users")
    n = spec.users
    for i in range(1, n + 1):
        fans = min(int(rng.paretovariate(1.2)) - 1, 100_000)
        k = min(_geometric(rng, spec.friends_per_user), n - 1)
        # k distinct users other than i: sample 1..n-1 and skip over i
        friends = [user_id(f if f < i else f + 1) for f in sorted(rng.sample(range(1, n), k))]
        elite: list[int] = []
        if rng.random() < spec.elite_fraction:
            start = rng.randint(FIRST_ELITE_YEAR, LAST_ELITE_YEAR)
            elite = list(range(start, min(start + rng.randint(1, 5), LAST_ELITE_YEAR + 1)))
        yield {
            "user_id": user_id(i),
            "user_name": rng.choice(_USER_NAMES),
            "fans": fans,
            "friends": friends,
            "elite": elite,
        }


def tables(spec: YelpSpec) -> dict[str, Iterator[dict]]:
    """Every table of ``spec``, by name, as a fresh lazy row iterator."""
    return {
        "businesses": businesses_rows(spec),
        "reviews": reviews_rows(spec),
        "users": users_rows(spec),
    }


SAMPLE = YelpSpec(
    businesses=6,
    reviews_per_business=3.5,
    users_per_business=4 / 3,
    sf_fraction=0.5,
    unreviewed_fraction=0.2,
    repeat_fraction=0.15,
    friends_per_user=1.5,
    elite_fraction=0.4,
    seed=10,
)
"""The spec of the sample shipped in ``idivm/datasets/samples/yelp/``."""
