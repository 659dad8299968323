"""i-diffs: instances (thesis §2.12.1), signatures (§2.12.2) and base-table signatures (§2.5).

* :mod:`~idivm.diffs.instances` — :class:`IDiff` ``#(p) {type, pre, post, diff}``, its nested
  :class:`TupleDiff` / :class:`BagDiff`, :class:`NamedDiff` ``<users: {...}>``, :class:`Provenance`;
* :mod:`~idivm.diffs.notation` — the thesis' notation: :func:`parse_idiff`, :func:`format_idiff`,
  :func:`parse_signature`, :func:`format_signature` (each printer lives beside its types, in
  ``values``, ``instances`` and ``signatures``; the parser here, its grammar in
  ``grammars/idiff.lark``);
* :mod:`~idivm.diffs.signatures` — :class:`RootSignature` trees, :func:`satisfies`,
  :func:`is_homogeneous`, :func:`signature_of`, :func:`split_by_bag`;
* :mod:`~idivm.diffs.base_signatures` — the signatures of the i-diffs each base table's
  changes become.

The value model of i-diffs — application to data, effectiveness and condensation (§2.2), JSON —
is :mod:`idivm.diffs.model`, the reference semantics the tests check; maintenance does not
import it.
"""

from idivm.diffs.instances import (
    ABSENT,
    BagDiff,
    DiffType,
    IDiff,
    IDiffDocument,
    NamedDiff,
    Provenance,
    TupleDiff,
    Violation,
)
from idivm.diffs.notation import (
    format_idiff,
    format_provenance,
    format_signature,
    format_value,
    parse_idiff,
    parse_signature,
    parse_value,
)
from idivm.diffs.signatures import (
    BagSignature,
    RootSignature,
    SignatureNode,
    TupleSignature,
    homogeneity_violations,
    is_homogeneous,
    satisfaction_violations,
    satisfies,
    signature_of,
    split_by_bag,
)
from idivm.diffs.values import FrozenBag, FrozenTuple, freeze, same_value, thaw

__all__ = [
    "ABSENT",
    "BagDiff",
    "BagSignature",
    "DiffType",
    "FrozenBag",
    "FrozenTuple",
    "IDiff",
    "IDiffDocument",
    "NamedDiff",
    "Provenance",
    "RootSignature",
    "SignatureNode",
    "TupleDiff",
    "TupleSignature",
    "Violation",
    "format_idiff",
    "format_provenance",
    "format_signature",
    "format_value",
    "freeze",
    "homogeneity_violations",
    "is_homogeneous",
    "parse_idiff",
    "parse_signature",
    "parse_value",
    "same_value",
    "satisfaction_violations",
    "satisfies",
    "signature_of",
    "split_by_bag",
    "thaw",
]
