"""i-diff signatures (thesis §2.12.2): what the i-diffs of a view or base table look like,
fixed at view definition time.

A signature is a tree shaped like the i-diff instances it describes:

* :class:`SignatureNode` — the type of the i-diff, whether it carries ``pre`` and/or
  ``post``, and optionally the signature of its nested diff;
* :class:`TupleSignature` — attribute name → signature of the attribute's i-diff;
* :class:`BagSignature` — the provenance key names of a bag's elements and the *single*
  signature all element i-diffs share (this is what makes the instances of one
  signature homogeneous, §2.12.2);
* :class:`RootSignature` — a signature tree rooted at a top-level bag (a view, or a
  named base table): the provenance key names of the bag's elements and their signature.

Thesis notation (Example 2.12.1, signature S₁ of view V)::

    #() {
      type: update,
      diff: {
        #(uid) full_reviews: {
          type: update,
          diff: {
            user_id: { post }
          }
        }
      }
    }

``#(uid) full_reviews: {type: update, diff: E}`` says that ``full_reviews`` is a bag whose
elements have provenance keys ``uid`` and whose element i-diffs follow ``E``; ``{ post }``
is short for ``{ type: update, post }`` and ``{ user_id: {...} }`` for
``{ type: update, diff: { user_id: {...} } }``.

Checks on instances:

* :func:`satisfies` / :func:`satisfaction_violations` — an instance satisfies a signature
  when it has every component the signature declares and every nested instance satisfies
  the nested signature (§2.12.2).  Instances may be *deeper than the signature* (§2.12.3,
  Example 2.12.3): nested i-diffs of attributes the signature does not mention, or below a
  signature that declares no nested diff, are accepted as they are.
* :func:`is_homogeneous` / :func:`homogeneity_violations` — the element i-diffs of every
  bag diff share their type and provenance keys (§2.12.2; Δ₃ of Example 2.12.2 is not).
* :func:`signature_of` — the most specific signature of a homogeneous instance.

idIVM restricts a signature tree to be about a single bag (§2.12.2 after Example 2.12.3):
:meth:`RootSignature.target_bag`, :attr:`RootSignature.is_single_bag` and
:func:`split_by_bag` (Example 2.12.4: one signature per bag).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Union

from idivm.diffs.instances import (
    AttributeMap,
    BagDiff,
    DiffType,
    IDiff,
    IDiffDocument,
    NamedDiff,
    TupleDiff,
    Violation,
    attribute_path,
    attribute_pairs,
    element_path,
    format_key_names,
)
from idivm.diffs.values import format_name
from idivm.errors import DataError, UnsupportedError

__all__ = [
    "ELEMENTS_STEP",
    "BagSignature",
    "RootSignature",
    "SignatureNode",
    "TupleSignature",
    "homogeneity_violations",
    "is_homogeneous",
    "satisfaction_violations",
    "satisfies",
    "signature_of",
    "split_by_bag",
]


# ----------------------------------------------------------------------------- model


@dataclass(frozen=True, slots=True)
class SignatureNode:
    """The signature of one i-diff: its type, whether it carries ``pre``/``post``, its nested diff."""

    type: DiffType
    pre: bool = False
    post: bool = False
    diff: "TupleSignature | BagSignature | None" = None

    def __post_init__(self) -> None:
        kind = DiffType.of(self.type)
        object.__setattr__(self, "type", kind)
        if not isinstance(self.pre, bool) or not isinstance(self.post, bool):
            raise DataError("the pre and post of a signature are flags (booleans)")
        if self.diff is not None and not isinstance(self.diff, (TupleSignature, BagSignature)):
            raise DataError(f"a signature's diff is a TupleSignature or a BagSignature, got {type(self.diff).__name__}")
        if kind is DiffType.INSERT and (self.pre or self.diff is not None):
            raise DataError("an insert signature has neither pre nor a nested diff (§2.12.1)")
        if kind is DiffType.DELETE and (self.post or self.diff is not None):
            raise DataError("a delete signature has neither post nor a nested diff (§2.12.1)")

    def children(self) -> tuple["SignatureNode", ...]:
        """The nested signatures: one per attribute of a tuple, the element signature of a bag."""
        if isinstance(self.diff, TupleSignature):
            return tuple(node for _, node in self.diff.attributes)
        if isinstance(self.diff, BagSignature):
            return (self.diff.element,)
        return ()

    def __str__(self) -> str:

        return format_signature(self)


@dataclass(frozen=True, slots=True, eq=False)
class TupleSignature(AttributeMap):
    """The nested signature of an update of a tuple: attribute name → signature (at least one)."""

    attributes: tuple[tuple[str, SignatureNode], ...]

    def __post_init__(self) -> None:
        checked = attribute_pairs(self.attributes, "tuple signature", SignatureNode, "signature")
        if not checked:
            raise DataError("a tuple signature names at least one attribute")
        object.__setattr__(self, "attributes", checked)

    def __str__(self) -> str:

        return format_signature(self)


def _key_names(names: Iterable[str], what: str) -> tuple[str, ...]:
    if isinstance(names, str):
        raise DataError(f"{what}: provenance key names are a sequence of strings, not one string")
    out = tuple(names)
    for n in out:
        if not isinstance(n, str) or not n:
            raise DataError(f"{what}: provenance key names are non-empty strings, got {n!r}")
    if len(set(out)) != len(out):
        raise DataError(f"{what}: duplicate provenance key name in {out!r}")
    return out


@dataclass(frozen=True, slots=True, eq=False)
class BagSignature:
    """The nested signature of an update of a bag: the provenance key names of its elements and
    the one signature every element i-diff follows (homogeneity, §2.12.2)."""

    provenance: tuple[str, ...]
    element: SignatureNode

    def __post_init__(self) -> None:
        object.__setattr__(self, "provenance", _key_names(self.provenance, "bag signature"))
        if not isinstance(self.element, SignatureNode):
            raise DataError("a bag signature's element signature must be a SignatureNode")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BagSignature):
            return set(self.provenance) == set(other.provenance) and self.element == other.element
        return NotImplemented

    def __hash__(self) -> int:
        return hash((frozenset(self.provenance), self.element))

    def __str__(self) -> str:

        return format_signature(self)


@dataclass(frozen=True, slots=True, eq=False)
class RootSignature:
    """A signature tree rooted at a top-level bag: a view (``name`` None) or a named base table.

    ``provenance`` are the provenance key names of the bag's elements, ``element`` the
    signature of their i-diffs.  Printed ``#(uid) {...}`` or ``<users: #(uid) {...}>``.
    """

    provenance: tuple[str, ...]
    element: SignatureNode
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "provenance", _key_names(self.provenance, "root signature"))
        if not isinstance(self.element, SignatureNode):
            raise DataError("a root signature's element signature must be a SignatureNode")
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise DataError(f"a root signature's name is a non-empty string, got {self.name!r}")

    @property
    def bag(self) -> BagSignature:
        """The root bag as a :class:`BagSignature` (dropping the name)."""
        return BagSignature(self.provenance, self.element)

    def bag_paths(self) -> tuple[tuple[str, ...], ...]:
        """The path of every bag in the tree, the root bag first (``()``).

        A path lists the attribute names leading from the root elements to the bag; a bag
        inside the elements of a bag is entered implicitly by the next name, and a bag whose
        elements are bags themselves is entered with the step :data:`ELEMENTS_STEP` (``'[]'``).
        """
        found: list[tuple[str, ...]] = [()]
        _collect_bag_paths(self.element, (), found, element=True)
        return tuple(found)

    @property
    def is_single_bag(self) -> bool:
        """Whether the tree is about a single bag, as idIVM requires (§2.12.2): each i-diff above the
        bag has exactly one nested i-diff (towards the bag) and the bag's element signature has no
        nested bag signatures."""
        try:
            self.target_bag()
        except UnsupportedError:
            return False
        return True

    def target_bag(self) -> tuple[str, ...]:
        """The path (see :meth:`bag_paths`) of the one bag this tree is about; ``()`` is the root bag.
        :class:`UnsupportedError` if the tree is about several bags (Example 2.12.4);
        :func:`split_by_bag` splits such a tree."""
        path: list[str] = []
        node = self.element
        while True:
            nested = _bags_below(node, element=True)
            if not nested:
                return tuple(path)
            if len(nested) > 1 or not _is_chain(node):
                where = ".".join(path) or "the root"
                below = ", ".join(".".join(path + list(steps)) for steps, _ in nested)
                raise UnsupportedError(
                    f"the signature{'' if self.name is None else ' of ' + self.name} is about several bags below "
                    f"{where} ({below}): idIVM keeps one signature tree per bag (§2.12.2, Example 2.12.4); "
                    "split it with split_by_bag")
            steps, bag = nested[0]
            path.extend(steps)
            node = bag.element

    def __str__(self) -> str:

        return format_signature(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RootSignature):
            return (self.name, set(self.provenance), self.element) == (other.name, set(other.provenance), other.element)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.name, frozenset(self.provenance), self.element))


Signature = Union[RootSignature, SignatureNode]


ELEMENTS_STEP = "[]"
"""The path step into the elements of a bag that is itself an element of a bag."""


def _collect_bag_paths(node: SignatureNode, path: tuple[str, ...], out: list[tuple[str, ...]], element: bool) -> None:
    """``element``: ``node`` describes the elements of the bag at ``path``."""
    if isinstance(node.diff, BagSignature):
        here = path + (ELEMENTS_STEP,) if element else path
        out.append(here)
        _collect_bag_paths(node.diff.element, here, out, element=True)
    elif isinstance(node.diff, TupleSignature):
        for name, child in node.diff.attributes:
            _collect_bag_paths(child, path + (name,), out, element=False)


def _bags_below(node: SignatureNode, element: bool) -> list[tuple[tuple[str, ...], BagSignature]]:
    """The bag signatures reachable from ``node`` through tuple signatures only, with their steps."""
    if isinstance(node.diff, BagSignature):
        return [((ELEMENTS_STEP,) if element else (), node.diff)]
    if isinstance(node.diff, TupleSignature):
        return [((name,) + steps, bag) for name, child in node.diff.attributes
                for steps, bag in _bags_below(child, element=False)]
    return []


def _is_chain(node: SignatureNode) -> bool:
    """Whether every tuple signature from ``node`` down to its nested bag has a single attribute."""
    if isinstance(node.diff, TupleSignature):
        return len(node.diff) == 1 and _is_chain(node.diff.attributes[0][1])
    return True


def split_by_bag(signature: RootSignature) -> tuple[RootSignature, ...]:
    """One single-bag signature tree per bag of ``signature`` (§2.12.2, Example 2.12.4).

    For each bag, the tree keeps the chain of i-diffs from the root down to the bag (with
    their pre/post flags, and only the attribute leading on at each level) and the bag's
    element signature without its nested bags.  A bag whose element signature has nothing
    but nested bags gets no tree of its own.  A tree already about a single bag comes back
    unchanged.
    """
    if signature.is_single_bag:
        return (signature,)
    out: list[RootSignature] = []
    for path in signature.bag_paths():
        element = _chain_to_bag(signature.element, path, element=True)
        if element is not None:
            out.append(replace(signature, element=element))
    return tuple(out)


def _strip_bags(node: SignatureNode) -> SignatureNode | None:
    """``node`` without nested bag signatures; ``None`` if it described nothing but nested bags."""
    if isinstance(node.diff, BagSignature):
        return replace(node, diff=None) if (node.pre or node.post) else None
    if isinstance(node.diff, TupleSignature):
        kept = [(n, s) for n, s in ((n, _strip_bags(c)) for n, c in node.diff.attributes) if s is not None]
        if not kept:
            return replace(node, diff=None) if (node.pre or node.post) else None
        return replace(node, diff=TupleSignature(tuple(kept)))
    return node


def _chain_to_bag(node: SignatureNode, path: tuple[str, ...], element: bool) -> SignatureNode | None:
    """``node`` reduced to the chain down ``path`` (see :meth:`RootSignature.bag_paths`) and the
    bag there, whose element signature loses its nested bags; None if nothing is left of it.
    ``element``: ``node`` describes the elements of a bag."""
    if element and not path:
        return _strip_bags(node)
    if isinstance(node.diff, BagSignature) and (not element or path[0] == ELEMENTS_STEP):
        rest = path[1:] if element else path
        inner = _chain_to_bag(node.diff.element, rest, element=True)
        return None if inner is None else replace(node, diff=BagSignature(node.diff.provenance, inner))
    if isinstance(node.diff, TupleSignature) and path and path[0] in node.diff:
        inner = _chain_to_bag(node.diff[path[0]], path[1:], element=False)
        return None if inner is None else replace(node, diff=TupleSignature(((path[0], inner),)))
    raise DataError(f"no bag at {'.'.join(path)!r} in this signature")


# ----------------------------------------------------------------------------- satisfaction


def satisfies(instance: "IDiffDocument", signature: Signature, *, require_all_attributes: bool = False) -> bool:
    """Whether ``instance`` satisfies ``signature`` (§2.12.2); see :func:`satisfaction_violations`."""
    return not satisfaction_violations(instance, signature, require_all_attributes=require_all_attributes)


def satisfaction_violations(instance: "IDiffDocument", signature: Signature, *,
                            require_all_attributes: bool = False) -> tuple[Violation, ...]:
    """Why ``instance`` does not satisfy ``signature`` (empty if it does), paths into its JSON encoding.

    The rules (§2.12.2, §2.12.3):

    * the types are equal; a declared ``pre``/``post`` is present; extra parts are fine;
    * a declared nested diff is present and of the same kind (bag or tuple);
    * a bag diff's elements carry at least the declared provenance keys, each satisfies the
      element signature, and together they are homogeneous (one type, one set of provenance
      keys, Example 2.12.2);
    * a tuple diff's attributes that the signature names satisfy their signatures; attributes
      it does not name are i-diffs deeper than the signature and accepted as they are
      (Example 2.12.3); attributes it names may be missing from an instance (an update that
      leaves them alone) unless ``require_all_attributes``;
    * below a signature without nested diff, any nested diff is accepted.

    ``instance`` against a :class:`RootSignature`: a :class:`BagDiff` is checked element by
    element, a :class:`NamedDiff` must be an update of the named bag, a lone :class:`IDiff`
    is checked as one element.  Against a :class:`SignatureNode`: ``instance`` is an
    :class:`IDiff` checked at that level.
    """
    out: list[Violation] = []
    if isinstance(signature, RootSignature):
        _check_root(instance, signature, out, require_all_attributes)
    elif isinstance(signature, SignatureNode):
        if not isinstance(instance, IDiff):
            out.append(Violation("$", f"a node signature describes one i-diff, got a {type(instance).__name__}"))
        else:
            _check_node(instance, signature, "$", out, require_all_attributes)
    else:
        raise DataError(f"not a signature: {type(signature).__name__}")
    return tuple(out)


def _check_root(instance: "IDiffDocument", signature: RootSignature, out: list[Violation], strict: bool) -> None:
    bag = signature.bag
    if isinstance(instance, BagDiff):
        _check_bag(instance, bag, "$", out, strict)
    elif isinstance(instance, NamedDiff):
        if signature.name is not None and instance.name != signature.name:
            out.append(Violation("$.name", f"the i-diff is of {instance.name!r}, the signature of {signature.name!r}"))
        root = instance.idiff
        if root.type is not DiffType.UPDATE:
            out.append(Violation("$.idiff.type", f"{root.type} of the whole bag, but a signature tree describes "
                                                  "i-diffs of its elements, inside an update of the bag"))
        elif not isinstance(root.diff, BagDiff):
            out.append(Violation("$.idiff", "an update of a bag needs a bag diff {{ ... }} of its elements"))
        else:
            _check_bag(root.diff, bag, "$.idiff.diff", out, strict)
    elif isinstance(instance, IDiff):
        _check_element(instance, bag, "$", out, strict)
    else:
        raise DataError(f"not an i-diff instance: {type(instance).__name__}")


def _check_bag(diff: BagDiff, signature: BagSignature, path: str, out: list[Violation], strict: bool) -> None:
    for i, element in enumerate(diff):
        _check_element(element, signature, element_path(path, i), out, strict)
    out.extend(_bag_homogeneity(diff, path))


def _check_element(element: IDiff, signature: BagSignature, path: str, out: list[Violation], strict: bool) -> None:
    keys = set(element.provenance.key_names) if element.provenance is not None else set()
    missing = [k for k in signature.provenance if k not in keys]
    if missing:
        out.append(Violation(f"{path}.provenance", f"lacks provenance key{'s' if len(missing) > 1 else ''} "
                                                   f"{', '.join(missing)} declared by the signature"))
    _check_node(element, signature.element, path, out, strict)


def _check_node(node: IDiff, signature: SignatureNode, path: str, out: list[Violation], strict: bool) -> None:
    if node.type is not signature.type:
        out.append(Violation(f"{path}.type", f"{node.type}, but the signature requires {signature.type}"))
        return
    if signature.pre and not node.has_pre:
        out.append(Violation(path, "lacks the pre-state the signature declares"))
    if signature.post and not node.has_post:
        out.append(Violation(path, "lacks the post-state the signature declares"))
    if signature.diff is None:
        return  # anything nested is deeper than the signature (§2.12.3)
    diff_path = f"{path}.diff"
    if node.diff is None:
        out.append(Violation(path, "lacks the nested diff the signature declares"))
    elif isinstance(signature.diff, BagSignature):
        if not isinstance(node.diff, BagDiff):
            out.append(Violation(diff_path, "is a tuple diff, but the signature declares a bag diff"))
        else:
            _check_bag(node.diff, signature.diff, diff_path, out, strict)
    else:
        if not isinstance(node.diff, TupleDiff):
            out.append(Violation(diff_path, "is a bag diff, but the signature declares a tuple diff"))
            return
        for name, child in node.diff.attributes:
            if name in signature.diff:
                _check_node(child, signature.diff[name], attribute_path(diff_path, name), out, strict)
        if strict:
            for name in signature.diff:
                if name not in node.diff:
                    out.append(Violation(diff_path, f"lacks the i-diff of attribute {name!r} the signature declares"))


# ----------------------------------------------------------------------------- homogeneity


def is_homogeneous(instance: "IDiffDocument", signature: Signature | None = None) -> bool:
    """Whether the element i-diffs of every bag diff in ``instance`` share one type and one set of
    provenance keys (§2.12.2); with ``signature``, only down to where the signature ends."""
    return not homogeneity_violations(instance, signature)


def homogeneity_violations(instance: "IDiffDocument", signature: Signature | None = None) -> tuple[Violation, ...]:
    """The bag diffs of ``instance`` whose elements are not homogeneous (see :func:`is_homogeneous`).

    With a signature, bag diffs deeper than it (§2.12.3) are not looked at: they are
    propagated as they are, so nothing batches over them.
    """
    out: list[Violation] = []
    limited = signature is not None
    if isinstance(instance, NamedDiff):
        root = instance.idiff
        if isinstance(signature, RootSignature):
            if isinstance(root.diff, BagDiff):
                _walk_bag(root.diff, "$.idiff.diff", signature.bag, out, limited)
        else:
            _walk_node(root, "$.idiff", signature, out, limited)
    elif isinstance(instance, BagDiff):
        if isinstance(signature, SignatureNode):
            raise DataError("a bag diff is described by a RootSignature, not by a node signature")
        _walk_bag(instance, "$", signature.bag if signature is not None else None, out, limited)
    elif isinstance(instance, IDiff):
        node_sig = signature.element if isinstance(signature, RootSignature) else signature
        _walk_node(instance, "$", node_sig, out, limited)
    else:
        raise DataError(f"not an i-diff instance: {type(instance).__name__}")
    return tuple(out)


def _walk_bag(diff: BagDiff, path: str, signature: BagSignature | None, out: list[Violation], limited: bool) -> None:
    out.extend(_bag_homogeneity(diff, path))
    for i, element in enumerate(diff):
        _walk_node(element, element_path(path, i), signature.element if signature is not None else None, out, limited)


def _walk_node(node: IDiff, path: str, signature: SignatureNode | None, out: list[Violation], limited: bool) -> None:
    """``limited``: stop where ``signature`` ends (no signature means: look everywhere)."""
    if node.diff is None or (limited and (signature is None or signature.diff is None)):
        return
    sig_diff = signature.diff if signature is not None else None
    if isinstance(node.diff, BagDiff):
        nested = sig_diff if isinstance(sig_diff, BagSignature) else None
        if not limited or nested is not None:
            _walk_bag(node.diff, f"{path}.diff", nested, out, limited)
        return
    for name, child in node.diff.attributes:
        child_sig = sig_diff.get(name) if isinstance(sig_diff, TupleSignature) else None
        if not limited or child_sig is not None:
            _walk_node(child, attribute_path(f"{path}.diff", name), child_sig, out, limited)


def _bag_homogeneity(diff: BagDiff, path: str) -> list[Violation]:
    if len(diff) < 2:
        return []
    first = diff[0]
    first_keys = frozenset(first.provenance.key_names)
    for i, element in enumerate(diff.elements[1:], start=1):
        if element.type is not first.type:
            return [Violation(path, f"the bag diff is not homogeneous: element [0] is a {first.type}, "
                                    f"element [{i}] a {element.type} (§2.12.2)")]
        if frozenset(element.provenance.key_names) != first_keys:
            return [Violation(path, f"the bag diff is not homogeneous: element [0] has provenance keys "
                                    f"({', '.join(sorted(first_keys))}), element [{i}] "
                                    f"({', '.join(sorted(element.provenance.key_names))}) (§2.12.2)")]
    return []


# ----------------------------------------------------------------------------- inference


def signature_of(instance: "IDiffDocument") -> Signature:
    """The most specific signature ``instance`` satisfies: its types, the ``pre``/``post`` it carries,
    its provenance keys and nested diffs.  :class:`DataError` (with the JSON path) when the
    elements of a bag diff do not agree on one signature.

    A :class:`BagDiff` gives a :class:`RootSignature`, a :class:`NamedDiff` a named one (the
    i-diff must be an update with a bag diff); an :class:`IDiff` gives its
    :class:`SignatureNode`.  An empty bag diff has no signature (:class:`DataError`).
    """
    if isinstance(instance, BagDiff):
        bag = _bag_signature_of(instance, "$")
        return RootSignature(bag.provenance, bag.element)
    if isinstance(instance, NamedDiff):
        root = instance.idiff
        if root.type is not DiffType.UPDATE or not isinstance(root.diff, BagDiff):
            raise DataError("$.idiff: only an update with a bag diff of the elements has a signature tree")
        bag = _bag_signature_of(root.diff, "$.idiff.diff")
        return RootSignature(bag.provenance, bag.element, instance.name)
    if isinstance(instance, IDiff):
        return _node_signature_of(instance, "$")
    raise DataError(f"not an i-diff instance: {type(instance).__name__}")


def _node_signature_of(node: IDiff, path: str) -> SignatureNode:
    diff: TupleSignature | BagSignature | None = None
    if isinstance(node.diff, BagDiff):
        diff = _bag_signature_of(node.diff, f"{path}.diff") if len(node.diff) else None
    elif isinstance(node.diff, TupleDiff) and len(node.diff):
        diff = TupleSignature(tuple((name, _node_signature_of(child, attribute_path(f"{path}.diff", name)))
                                    for name, child in node.diff.attributes))
    return SignatureNode(node.type, pre=node.has_pre, post=node.has_post, diff=diff)


def _bag_signature_of(diff: BagDiff, path: str) -> BagSignature:
    if not len(diff):
        raise DataError(f"{path}: an empty bag diff has no signature")
    problems = _bag_homogeneity(diff, path)
    if problems:
        raise DataError(str(problems[0]))
    first = _node_signature_of(diff[0], element_path(path, 0))
    for i, element in enumerate(diff.elements[1:], start=1):
        other = _node_signature_of(element, element_path(path, i))
        if other != first:
            raise DataError(f"{element_path(path, i)}: its signature differs from element [0]'s "
                            f"({_one_line(other)} vs {_one_line(first)})")
    return BagSignature(diff[0].provenance.key_names, first)


def _one_line(node: SignatureNode) -> str:
    return " ".join(str(node).split())


# ----------------------------------------------------------------------------- the thesis' notation

def format_signature(signature: "RootSignature | SignatureNode | TupleSignature | BagSignature") -> str:
    """The thesis' notation for a signature (Examples 2.12.1 and 2.12.4), or for the nested
    signature of a tuple (``{ name: {...} }``) or a bag (``#(keys) {...}``)."""
    if isinstance(signature, RootSignature):
        body = f"{format_key_names(signature.provenance)} {_format_signature_node(signature.element, 0)}"
        return body if signature.name is None else f"<{format_name(signature.name)}: {body}>"
    if isinstance(signature, SignatureNode):
        return _format_signature_node(signature, 0)
    if isinstance(signature, (TupleSignature, BagSignature)):
        return _format_signature_diff(signature, 0, None)
    raise DataError(f"not a signature: {type(signature).__name__}")


def _format_signature_node(node: SignatureNode, level: int, elements_of: BagSignature | None = None) -> str:
    """``elements_of``: the node is a bag attribute whose ``#(keys)`` is already printed before its
    name, so its diff is printed as the bare element signature."""
    parts = [f"type: {node.type}"] + (["pre"] if node.pre else []) + (["post"] if node.post else [])
    if node.diff is None:
        return f"{{ {', '.join(parts)} }}"
    pad = "  " * (level + 1)
    lines = ["{"] + [f"{pad}{p}," for p in parts]
    lines.append(f"{pad}diff: {_format_signature_diff(node.diff, level + 1, elements_of)}")
    lines.append(f"{'  ' * level}}}")
    return "\n".join(lines)


def _format_signature_diff(diff: "TupleSignature | BagSignature", level: int, elements_of: BagSignature | None) -> str:
    if isinstance(diff, BagSignature):
        prefix = "" if elements_of is diff else f"{format_key_names(diff.provenance)} "
        return f"{prefix}{_format_signature_node(diff.element, level)}"
    pad = "  " * (level + 1)
    attributes = []
    for name, child in diff.attributes:
        if isinstance(child.diff, BagSignature):
            attributes.append(f"{pad}{format_key_names(child.diff.provenance)} {format_name(name)}: "
                              f"{_format_signature_node(child, level + 1, elements_of=child.diff)}")
        else:
            attributes.append(f"{pad}{format_name(name)}: {_format_signature_node(child, level + 1)}")
    return "{\n" + ",\n".join(attributes) + f"\n{'  ' * level}}}"
