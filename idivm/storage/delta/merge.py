"""The clauses of a MERGE, which both engines' merges take (``WHEN MATCHED ... THEN ...``), and
the quoting of column names in their predicates and assignments."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

@dataclass(frozen=True, slots=True)
class MatchedUpdate:
    """``WHEN MATCHED [AND predicate] THEN UPDATE SET col = expr, ...``; ``set=None`` updates all columns."""

    set: Mapping[str, str] | None = None
    predicate: str | None = None


@dataclass(frozen=True, slots=True)
class MatchedDelete:
    """``WHEN MATCHED [AND predicate] THEN DELETE``."""

    predicate: str | None = None


@dataclass(frozen=True, slots=True)
class NotMatchedInsert:
    """``WHEN NOT MATCHED [AND predicate] THEN INSERT``; ``values=None`` inserts all columns."""

    values: Mapping[str, str] | None = None
    predicate: str | None = None


@dataclass(frozen=True, slots=True)
class NotMatchedBySourceDelete:
    """``WHEN NOT MATCHED BY SOURCE [AND predicate] THEN DELETE``."""

    predicate: str | None = None


@dataclass(frozen=True, slots=True)
class NotMatchedBySourceUpdate:
    """``WHEN NOT MATCHED BY SOURCE [AND predicate] THEN UPDATE SET col = expr, ...``."""

    set: Mapping[str, str] = field(default_factory=dict)
    predicate: str | None = None


MergeClause = MatchedUpdate | MatchedDelete | NotMatchedInsert | NotMatchedBySourceDelete | NotMatchedBySourceUpdate


def quoted(name: str, alias: str | None = None) -> str:
    """Column ``name`` (of table ``alias``) in a MERGE predicate or assignment, for delta-rs and
    Spark SQL alike: backquoted, so case, reserved words and odd characters are kept."""
    name = "`" + name.replace("`", "``") + "`"
    return f"{alias}.{name}" if alias else name


def _clause_calls(clauses: Sequence[MergeClause]) -> Iterator[tuple[str, dict | None, str | None]]:
    """(delta-rs's merge builder method, its assignments or None, the predicate) of each clause."""
    for clause in clauses:
        match clause:
            case MatchedUpdate(set=None, predicate=p):
                yield "when_matched_update_all", None, p
            case MatchedUpdate(set=updates, predicate=p):
                yield "when_matched_update", dict(updates), p
            case MatchedDelete(predicate=p):
                yield "when_matched_delete", None, p
            case NotMatchedInsert(values=None, predicate=p):
                yield "when_not_matched_insert_all", None, p
            case NotMatchedInsert(values=values, predicate=p):
                yield "when_not_matched_insert", dict(values), p
            case NotMatchedBySourceDelete(predicate=p):
                yield "when_not_matched_by_source_delete", None, p
            case NotMatchedBySourceUpdate(set=updates, predicate=p):
                yield "when_not_matched_by_source_update", dict(updates), p
            case _:
                raise TypeError(f"not a merge clause: {clause!r}")

