"""The child-node traversal shared by the immutable trees (AST nodes and plan terms)."""

from __future__ import annotations

from dataclasses import fields
from typing import Iterator, TypeVar

N = TypeVar("N")


def child_nodes(node: object, kind: type[N]) -> Iterator[N]:
    """The ``kind`` values held by a dataclass node's fields, in field order, looking into
    tuples and tuples of pairs (``span`` fields are not children)."""
    for f in fields(node):  # type: ignore[arg-type]
        if f.name == "span":
            continue
        v = getattr(node, f.name)
        if isinstance(v, kind):
            yield v
        elif isinstance(v, tuple):
            for x in v:
                if isinstance(x, kind):
                    yield x
                elif isinstance(x, tuple):
                    yield from (y for y in x if isinstance(y, kind))
