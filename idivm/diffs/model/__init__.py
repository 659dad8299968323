"""The i-diff value model: the reference semantics of the thesis' i-diffs over values held in
memory, which the tests check against the thesis' examples.  Maintenance does not use it: a
run computes its i-diffs as Spark DataFrames (:mod:`idivm.exec.delta_script`) and applies
them by MERGE or rewrite (:mod:`idivm.storage.delta`).

* :mod:`~idivm.diffs.model.data` — :class:`KeyedBag` data with provenance and
  :func:`apply_idiff` (§2.11.1, §2.12.1);
* :mod:`~idivm.diffs.model.effective` — :func:`effectiveness_violations` and :func:`condense`
  (§2.2);
* :mod:`~idivm.diffs.model.codec` — i-diff instances and signatures as JSON, validated by the
  JSON Schemas shipped beside it (``idiff.schema.json``, ``signature.schema.json``).

The i-diffs themselves (:mod:`idivm.diffs.instances`, :mod:`idivm.diffs.signatures`) and their
notation (:mod:`idivm.diffs.notation`) are those of :mod:`idivm.diffs`.
"""

from idivm.diffs.model.codec import (
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
from idivm.diffs.model.data import KeyedBag, apply_bag_diff, apply_idiff, apply_update
from idivm.diffs.model.effective import Reinsertion, check_effective, condense, effectiveness_violations, is_effective

__all__ = [
    "KeyedBag",
    "Reinsertion",
    "apply_bag_diff",
    "apply_idiff",
    "apply_update",
    "check_effective",
    "condense",
    "dumps_idiff",
    "dumps_signature",
    "effectiveness_violations",
    "idiff_from_json",
    "idiff_schema",
    "idiff_to_json",
    "is_effective",
    "loads_idiff",
    "loads_signature",
    "signature_from_json",
    "signature_schema",
    "signature_to_json",
    "validate_idiff_json",
    "validate_signature_json",
]
