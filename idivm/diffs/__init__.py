"""i-diffs: instances (thesis §2.12.1), signatures (§2.12.2), effectiveness and condensation (§2.2).

* :mod:`~idivm.diffs.instances` — :class:`IDiff` ``#(p) {type, pre, post, diff}``, its nested
  :class:`TupleDiff` / :class:`BagDiff`, :class:`NamedDiff` ``<users: {...}>``, :class:`Provenance`;
* :mod:`~idivm.diffs.notation` — the thesis' notation: :func:`parse_idiff`, :func:`format_idiff`,
  :func:`parse_signature`, :func:`format_signature` (each printer lives beside its types, in
  ``values``, ``instances`` and ``signatures``; the parser here);
* :mod:`~idivm.diffs.codec` — JSON, validated by the shipped JSON Schemas;
* :mod:`~idivm.diffs.signatures` — :class:`RootSignature` trees, :func:`satisfies`,
  :func:`is_homogeneous`, :func:`signature_of`, :func:`split_by_bag`;
* :mod:`~idivm.diffs.data` — :class:`KeyedBag` data with provenance and :func:`apply_idiff`;
* :mod:`~idivm.diffs.effective` — :func:`effectiveness_violations` and :func:`condense`.
"""

from idivm.diffs.codec import (
    dumps_idiff,
    dumps_signature,
    idiff_from_json,
    idiff_schema,
    idiff_to_json,
    loads_idiff,
    loads_signature,
    signature_from_json,
    signature_schema,
    signature_to_json,
    validate_idiff_json,
    validate_signature_json,
)
from idivm.diffs.data import KeyedBag, apply_bag_diff, apply_idiff, apply_update
from idivm.diffs.effective import Reinsertion, check_effective, condense, effectiveness_violations, is_effective
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
    "KeyedBag",
    "NamedDiff",
    "Provenance",
    "Reinsertion",
    "RootSignature",
    "SignatureNode",
    "TupleDiff",
    "TupleSignature",
    "Violation",
    "apply_bag_diff",
    "apply_idiff",
    "apply_update",
    "check_effective",
    "condense",
    "dumps_idiff",
    "dumps_signature",
    "effectiveness_violations",
    "format_idiff",
    "format_provenance",
    "format_signature",
    "format_value",
    "freeze",
    "homogeneity_violations",
    "idiff_from_json",
    "idiff_schema",
    "idiff_to_json",
    "is_effective",
    "is_homogeneous",
    "loads_idiff",
    "loads_signature",
    "parse_idiff",
    "parse_signature",
    "parse_value",
    "same_value",
    "satisfaction_violations",
    "satisfies",
    "signature_from_json",
    "signature_of",
    "signature_schema",
    "signature_to_json",
    "split_by_bag",
    "thaw",
    "validate_idiff_json",
    "validate_signature_json",
]
