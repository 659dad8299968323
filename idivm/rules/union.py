"""Union all ⊎ with the branch attribute (thesis Table C.2, App. B.4.10): every i-diff of a
branch gets the branch's constant as one more ID."""

from idivm.rules.common import Rule

RULES = tuple(
    Rule("UnionAll", side, kind, "always", "union_branch", kind, source="Table C.2")
    for side in ("left", "right") for kind in ("replace", "update", "increment")
)
