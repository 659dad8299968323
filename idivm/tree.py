"""What the immutable trees share (SQL++ AST nodes, plan terms, plan operators): the source
span field, and the traversal of child nodes."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Iterator, TypeVar

from idivm.errors import Span

N = TypeVar("N")


def span_field() -> Any:
    """A node's source span: keyword-only, not compared and not printed."""
    return field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class TreeNode:
    """A node of a tree whose children are the values of its root type held by its fields.

    A tree's root class names itself in ``_root``; :meth:`children` finds the values of that
    type in the fields (looking into tuples), :meth:`walk` is the pre-order traversal."""

    span: Span | None = span_field()

    _root: ClassVar[type] = object

    def children(self) -> Iterator[Any]:
        """Direct child nodes, in field order (tuples are flattened)."""
        return child_nodes(self, self._root)

    def walk(self) -> Iterator[Any]:
        """Pre-order traversal of this node and all descendants."""
        yield self
        for c in self.children():
            yield from c.walk()


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
