"""Effective i-diffs (thesis §2.2, §2.12.1): checking them, and condensing a modification
sequence into them.

**Effectiveness.**  A set of i-diffs is effective w.r.t. a pre-state and a post-state when
each of them reflects the final value of what it changes, so that applying them in any
order gives the post-state (§2.2, "Effective i-diff instances"; §2.12.1 for nested data).
:func:`effectiveness_violations` checks, for the element i-diffs of a bag against the
bag's pre-state ``V^pre`` and post-state ``V^post``:

* insert: no value of ``V^pre`` has its provenance; its ``post`` is in ``V^post``
  (``Δ⁺.post ∈ b^post``);
* delete: some value of ``V^pre`` has its provenance, and its ``pre`` (possibly part of the
  value) agrees with it; no value of ``V^post`` has it (``x ∉ b^post``);
* update: some value of ``V^pre`` has its provenance and its ``pre`` agrees with it; where
  the value is in ``V^post``, its ``post`` equals the value there (``Δᵘ.post = x^post``),
  and its nested i-diffs are effective recursively (attributes of a tuple: an inserted
  attribute is new, a deleted one is gone, an updated one existed).

Without ``V^post``, the post-state is the pre-state after the i-diffs in their given
order; two i-diffs that disagree about a value then fail the post-state conditions.

**Condensation.**  A modification log may change one value several times.
:func:`condense` folds a sequence of element i-diffs of a bag, in order, into at most one
effective i-diff per provenance (§2.5, "combines multiple modifications to the same tuple
to a single modification").  It works on the i-diff value model of §2.12 (nested i-diffs,
provenance) and is the reference semantics the tests check the thesis' examples against;
ingest and maintenance condense rows keyed by their primary key with the one fold of
:func:`idivm.changes.condense`, which agrees with it on tuples of a keyed table:

=================  =============================================================
insert, update     insert of the updated value
insert, delete     nothing
delete, insert     an update (pre of the delete, post of the insert), or the pair
                   delete + insert: :class:`Reinsertion`, as the signatures need
update, update     one update with the first ``pre`` and the last ``post``; nested
                   diffs are merged (tuples attribute by attribute, bags condensed)
update, delete     delete with the ``pre`` of the update
=================  =============================================================

Anything else (insert of an existing value, delete or update of a missing one) means the
sequence is not a modification log of one bag: :class:`DataError` naming the position.
The provenances of the sequence must identify values exactly: one that matches another
(``#(a=1)`` and ``#(a=1, b=2)``) is rejected, as its changes could not be ordered.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from idivm.diffs.instances import (
    ABSENT,
    BagDiff,
    DiffType,
    IDiff,
    NamedDiff,
    Provenance,
    TupleDiff,
    Violation,
    attribute_path,
    element_path,
)
from idivm.diffs.model.data import KeyedBag, apply_bag_diff, apply_update
from idivm.diffs.values import FrozenBag, FrozenTuple, canonical
from idivm.errors import DataError

__all__ = ["Reinsertion", "check_effective", "condense", "effectiveness_violations", "is_effective"]


class Reinsertion(str, enum.Enum):
    """What a delete followed by an insert of the same provenance condenses to.

    ``UPDATE``: one update with the delete's ``pre`` and the insert's ``post`` (effective in
    the strict sense of §2.2).  ``DELETE_INSERT``: the delete and the insert, for when the
    signatures need the value to leave and re-enter (e.g. a changed conditional attribute);
    the pair reads as one replacement, delete first.  Tuple attributes always condense to
    an update: a tuple diff holds one i-diff per attribute.
    """

    UPDATE = "update"
    DELETE_INSERT = "delete+insert"


# ----------------------------------------------------------------------------- checking


def effectiveness_violations(diffs: "BagDiff | NamedDiff | Iterable[IDiff]", pre: KeyedBag,
                             post: KeyedBag | None = None, *,
                             reinsertion: Reinsertion | str = Reinsertion.UPDATE) -> tuple[Violation, ...]:
    """Why the element i-diffs ``diffs`` of a bag are not effective w.r.t. ``pre`` and ``post``
    (empty if they are); paths point into the JSON encoding of ``diffs``.

    ``diffs`` is a :class:`BagDiff`, a sequence of element i-diffs, or a :class:`NamedDiff`
    updating the named bag (``pre``/``post`` are then that bag).  With
    ``reinsertion=DELETE_INSERT``, a delete and an insert of the same provenance are read as
    one replacement of the value (see :class:`Reinsertion`).
    """
    mode = Reinsertion(reinsertion)
    elements, path = _elements(diffs)
    if not isinstance(pre, KeyedBag):
        raise DataError("the pre-state of a bag is a KeyedBag")
    out: list[Violation] = []
    if post is None:
        try:
            post = apply_bag_diff(pre, elements)
        except DataError as e:
            out.append(Violation(path, f"cannot be applied to the pre-state: {e.message}"))
    elif not isinstance(post, KeyedBag):
        raise DataError("the post-state of a bag is a KeyedBag")
    _check_bag(elements, pre, post, path, out, mode)
    return tuple(out)


def is_effective(diffs: "BagDiff | NamedDiff | Iterable[IDiff]", pre: KeyedBag, post: KeyedBag | None = None, *,
                 reinsertion: Reinsertion | str = Reinsertion.UPDATE) -> bool:
    """Whether :func:`effectiveness_violations` finds nothing."""
    return not effectiveness_violations(diffs, pre, post, reinsertion=reinsertion)


def check_effective(diffs: "BagDiff | NamedDiff | Iterable[IDiff]", pre: KeyedBag, post: KeyedBag | None = None, *,
                    reinsertion: Reinsertion | str = Reinsertion.UPDATE) -> None:
    """:class:`DataError` with the first violation (and how many there are) unless effective."""
    found = effectiveness_violations(diffs, pre, post, reinsertion=reinsertion)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise DataError(f"not effective: {found[0]}{more}")


def _elements(diffs: "BagDiff | NamedDiff | Iterable[IDiff]") -> tuple[tuple[IDiff, ...], str]:
    if isinstance(diffs, NamedDiff):
        root = diffs.idiff
        if root.type is not DiffType.UPDATE or not isinstance(root.diff, BagDiff):
            raise DataError(f"the i-diff of {diffs.name!r} must be an update with a bag diff of its elements")
        return root.diff.elements, "$.idiff.diff"
    if isinstance(diffs, IDiff):
        raise DataError("pass the element i-diffs of a bag as a BagDiff or a sequence, not one IDiff")
    elements = tuple(diffs)
    for i, e in enumerate(elements):
        if not isinstance(e, IDiff) or e.provenance is None:
            raise DataError(f"$[{i}]: an element i-diff of a bag with its provenance is needed")
    return elements, "$"


def _check_bag(elements: Sequence[IDiff], pre: KeyedBag, post: KeyedBag | None, path: str, out: list[Violation],
               mode: Reinsertion) -> None:
    """``post`` None: the post-state is unknown (the i-diffs could not be applied), check the pre-state only."""
    replaced: set[Provenance] = set()
    if mode is Reinsertion.DELETE_INSERT:
        deleted = {e.provenance for e in elements if e.type is DiffType.DELETE}
        replaced = {e.provenance for e in elements if e.type is DiffType.INSERT and e.provenance in deleted}
    for i, element in enumerate(elements):
        where = element_path(path, i)
        prov = element.provenance
        assert prov is not None
        if element.type is DiffType.INSERT:
            if prov not in replaced and pre.matching(prov):
                out.append(Violation(where, f"inserts {prov}, but the pre-state already has a value with this "
                                            "provenance"))
            if post is None:
                continue
            after = post.get(prov, ABSENT)
            if after is ABSENT:
                out.append(Violation(where, f"inserts {prov}, but the post-state has no value with this provenance"))
            elif not _same(element.post, after):
                out.append(Violation(f"{where}.post", f"{_show(element.post)} is not the post-state value "
                                                      f"{_show(after)}"))
            continue
        matched = pre.matching(prov)
        if not matched:
            out.append(Violation(where, f"{element.type}s {prov}, but the pre-state has no value with this provenance"))
            continue
        if element.type is DiffType.DELETE:
            if element.has_pre:
                for _, value in matched:
                    if not _agrees(element.pre, value):
                        out.append(Violation(f"{where}.pre", f"{_show(element.pre)} does not agree with the "
                                                             f"pre-state value {_show(value)}"))
            if prov not in replaced and post is not None and post.matching(prov):
                out.append(Violation(where, f"deletes {prov}, but the post-state still has a value with this "
                                            "provenance"))
            continue
        for p, value in matched:
            _check_update(element, value, post.get(p, ABSENT) if post is not None else None, where, out, mode)


def _check_update(node: IDiff, before: Any, after: Any, path: str, out: list[Violation], mode: Reinsertion) -> None:
    """``after``: the value in the post-state, ABSENT if it is not there, None if the post-state is unknown."""
    if node.has_pre and not _agrees(node.pre, before):
        out.append(Violation(f"{path}.pre", f"{_show(node.pre)} does not agree with the pre-state value "
                                            f"{_show(before)}"))
    if after is ABSENT or after is None:
        return  # §2.2: only values that exist in the post-state must reflect the update
    if node.has_post and not _same(node.post, after):
        out.append(Violation(f"{path}.post", f"{_show(node.post)} is not the post-state value {_show(after)}"))
    diff_path = f"{path}.diff"
    if isinstance(node.diff, TupleDiff):
        if not isinstance(before, FrozenTuple) or not isinstance(after, FrozenTuple):
            out.append(Violation(diff_path, "a tuple diff, but the value is not a tuple"))
            return
        for name, child in node.diff.attributes:
            where = attribute_path(diff_path, name)
            was, now = before.get(name, ABSENT), after.get(name, ABSENT)
            if child.type is DiffType.INSERT:
                if was is not ABSENT:
                    out.append(Violation(where, f"inserts attribute {name!r}, but the pre-state value has it"))
                if now is ABSENT:
                    out.append(Violation(where, f"inserts attribute {name!r}, but the post-state value lacks it"))
                elif not _same(child.post, now):
                    out.append(Violation(f"{where}.post", f"{_show(child.post)} is not the post-state value "
                                                          f"{_show(now)}"))
            elif was is ABSENT:
                out.append(Violation(where, f"{child.type}s attribute {name!r}, but the pre-state value lacks it"))
            elif child.type is DiffType.DELETE:
                if child.has_pre and not _agrees(child.pre, was):
                    out.append(Violation(f"{where}.pre", f"{_show(child.pre)} does not agree with the pre-state "
                                                         f"value {_show(was)}"))
                if now is not ABSENT:
                    out.append(Violation(where, f"deletes attribute {name!r}, but the post-state value has it"))
            else:
                _check_update(child, was, now, where, out, mode)
    elif isinstance(node.diff, BagDiff):
        if not isinstance(before, KeyedBag) or not isinstance(after, KeyedBag):
            out.append(Violation(diff_path, "a bag diff, but the value is not a bag whose elements carry provenance"))
            return
        _check_bag(node.diff.elements, before, after, diff_path, out, mode)


def _plain(value: Any) -> Any:
    """:func:`canonical` with the provenance of keyed bags forgotten (i-diff values carry none)."""
    if isinstance(value, KeyedBag):
        return ("bag", frozenset(Counter(_plain(v) for v in value.values()).items()))
    if isinstance(value, FrozenBag):
        return ("bag", frozenset(Counter(_plain(v) for v in value).items()))
    if isinstance(value, FrozenTuple):
        return ("tuple", frozenset((k, _plain(v)) for k, v in value.items()))
    return canonical(value)


def _same(a: Any, b: Any) -> bool:
    return _plain(a) == _plain(b)


def _agrees(partial: Any, actual: Any) -> bool:
    """Whether ``partial`` (a ``pre``: possibly part of the value, §2.12.1) agrees with ``actual``."""
    if isinstance(partial, FrozenTuple):
        return isinstance(actual, FrozenTuple) and all(
            k in actual and _agrees(v, actual[k]) for k, v in partial.items())
    return _same(partial, actual)


def _show(value: Any) -> str:
    from idivm.diffs.values import format_value

    return format_value(value)


# ----------------------------------------------------------------------------- condensation


def condense(modifications: "BagDiff | Iterable[IDiff]", *,
             reinsertion: Reinsertion | str = Reinsertion.UPDATE) -> BagDiff:
    """Fold a sequence of element i-diffs of a bag into effective i-diffs, one per provenance
    (two for a reinsertion kept as delete + insert), in the order provenances first appear.

    See the module docstring for the folding table.  :class:`DataError` when the sequence
    is not a consistent modification log.  This is the reference semantics over the i-diff
    value model that the tests use; ingest and maintenance condense the rows of keyed tables
    with :func:`idivm.changes.condense`.
    """
    mode = Reinsertion(reinsertion)
    elements = tuple(modifications)
    for i, e in enumerate(elements):
        if not isinstance(e, IDiff) or e.provenance is None:
            raise DataError(f"$[{i}]: condense takes element i-diffs of a bag, each with its provenance")
    return BagDiff(_condense(elements, "$", mode))


def _condense(elements: Sequence[IDiff], path: str, mode: Reinsertion) -> tuple[IDiff, ...]:
    _check_disjoint(elements, path)
    nets: dict[Provenance, _Net] = {}
    for i, element in enumerate(elements):
        prov = element.provenance
        assert prov is not None
        nets[prov] = _fold(nets.get(prov), element, element_path(path, i), mode)
    out: list[IDiff] = []
    for prov, net in nets.items():
        if net.kind == "replace" and mode is Reinsertion.DELETE_INSERT:
            out.append(IDiff.delete(prov, pre=net.pre))
            out.append(IDiff.insert(net.post, prov))
        else:
            node = net.emit()
            if node is not None:
                out.append(node.with_provenance(prov))
    return tuple(out)


def _check_disjoint(elements: Sequence[IDiff], path: str) -> None:
    """No provenance of the sequence may match another, different one (their order would matter)."""
    by_keys: dict[frozenset[str], dict[Provenance, int]] = {}
    for i, e in enumerate(elements):
        assert e.provenance is not None
        by_keys.setdefault(frozenset(e.provenance.key_names), {}).setdefault(e.provenance, i)
    for small, small_provs in by_keys.items():
        for big, big_provs in by_keys.items():
            if small >= big:
                continue
            for prov, i in big_provs.items():
                projected = Provenance(tuple((k, v) for k, v in prov.pairs if k in small))
                if projected in small_provs:
                    j = small_provs[projected]
                    raise DataError(f"{element_path(path, j)}: provenance {projected} also matches {prov} of "
                                    f"{element_path(path, i)}; condense needs provenance that names one value")


@dataclass(frozen=True, slots=True)
class _Net:
    """The net effect on one value of the modifications folded so far.

    ``kind``: ``none`` (inserted, then deleted), ``insert`` (``post``), ``delete`` (``pre``),
    ``update`` (``update``), ``replace`` (deleted with ``pre``, re-inserted with ``post``).
    """

    kind: str
    pre: Any = ABSENT
    post: Any = ABSENT
    update: IDiff | None = None

    def emit(self) -> IDiff | None:
        """The one i-diff with this net effect (a replacement as an update), or None."""
        if self.kind == "insert":
            return IDiff.insert(self.post)
        if self.kind == "delete":
            return IDiff.delete(pre=self.pre)
        if self.kind == "update":
            assert self.update is not None
            return self.update.with_provenance(None)
        if self.kind == "replace":
            return IDiff.update(pre=self.pre, post=self.post)
        return None


def _fold(net: _Net | None, node: IDiff, where: str, mode: Reinsertion) -> _Net:
    """The net effect after ``node``, given the net effect ``net`` before it (None: untouched)."""
    kind = node.type
    if net is None:
        if kind is DiffType.INSERT:
            return _Net("insert", post=node.post)
        if kind is DiffType.DELETE:
            return _Net("delete", pre=node.pre)
        return _Net("update", update=node)
    if net.kind == "none":
        if kind is DiffType.INSERT:
            return _Net("insert", post=node.post)
        raise _inconsistent(where, node, "it was inserted and deleted before, so it does not exist")
    if net.kind in ("insert", "replace"):
        if kind is DiffType.INSERT:
            raise _inconsistent(where, node, "it was inserted before, so it exists")
        if kind is DiffType.DELETE:
            return _Net("none") if net.kind == "insert" else _Net("delete", pre=net.pre)
        return replace(net, post=_updated(net.post, node, where))
    if net.kind == "delete":
        if kind is DiffType.INSERT:
            return _Net("replace", pre=net.pre, post=node.post)
        raise _inconsistent(where, node, "it was deleted before")
    assert net.update is not None
    if kind is DiffType.INSERT:
        raise _inconsistent(where, node, "it was updated before, so it exists")
    if kind is DiffType.DELETE:
        return _Net("delete", pre=net.update.pre)
    return _Net("update", update=_merge_updates(net.update, node, where, mode))


def _merge_updates(first: IDiff, second: IDiff, where: str, mode: Reinsertion) -> IDiff:
    """One update with the effect of ``first`` then ``second``: ``first``'s pre, the last post."""
    if second.diff is None:
        return IDiff.update(first.provenance, pre=first.pre, post=second.post)
    if first.diff is None:
        post = second.post if second.has_post else _updated(first.post, second, where)
        return IDiff.update(first.provenance, pre=first.pre, post=post)
    diff = _merge_diffs(first.diff, second.diff, f"{where}.diff", mode)
    if second.has_post:
        post = second.post
    elif first.has_post:
        post = _updated(first.post, second, where)
    else:
        post = ABSENT
    return IDiff(DiffType.UPDATE, first.provenance, pre=first.pre, post=post, diff=diff)


def _merge_diffs(first: "TupleDiff | BagDiff", second: "TupleDiff | BagDiff", path: str,
                 mode: Reinsertion) -> "TupleDiff | BagDiff":
    """The nested diff of two successive updates.  In error paths below ``path``, element positions
    count the elements of ``first``'s bag diff, then ``second``'s."""
    if isinstance(first, BagDiff) and isinstance(second, BagDiff):
        return BagDiff(_condense(first.elements + second.elements, path, mode))
    if isinstance(first, TupleDiff) and isinstance(second, TupleDiff):
        nets: dict[str, _Net] = {}
        for name, child in first.attributes + second.attributes:
            nets[name] = _fold(nets.get(name), child, attribute_path(path, name), mode)
        return TupleDiff(tuple((name, node) for name, node in ((n, net.emit()) for n, net in nets.items())
                               if node is not None))
    raise DataError(f"{path}: one update has a tuple diff and the next a bag diff; they describe different values")


def _updated(value: Any, update: IDiff, where: str) -> Any:
    try:
        return apply_update(value, update)
    except DataError as e:
        raise DataError(f"{where}: cannot fold this update into the value before it: {e.message}") from None


def _inconsistent(where: str, node: IDiff, reason: str) -> DataError:
    target = f"{node.provenance}" if node.provenance is not None else "the attribute"
    return DataError(f"{where}: {node.type} of {target}, but {reason}; the sequence is not a modification log")
