"""JSON encoding of i-diff instances (§2.12.1) and signatures (§2.12.2), checked against the
JSON Schemas shipped next to this module (``idiff.schema.json``, ``signature.schema.json``).

Instances — a document is one of::

    {"provenance": {"uid": "Ha3i"}, "type": "update", "pre": ..., "post": ..., "diff": ...}
    [ <i-diff with provenance>, ... ]                      a bag diff (the i-diff of a view)
    {"name": "users", "idiff": <i-diff without provenance>}  a named i-diff (a base table)

where ``diff`` is an array of i-diffs with provenance for a bag and an object
``{attribute: i-diff without provenance}`` for a tuple; ``pre``/``post`` are plain JSON
values (arrays are bags); absent parts are left out (``null`` is the null value).

Signatures — a tree rooted at a bag::

    {"name": "users", "provenance": ["uid"], "element": <signature>}
    <signature> = {"type": "update", "pre": true, "post": true,
                   "diff": {"attributes": {name: <signature>, ...}}
                         | {"provenance": [key, ...], "element": <signature>}}

``*_from_json`` validate first and raise :class:`~idivm.errors.DataError` whose message
starts with the JSON path of the offending part, e.g.
``$.diff[0].type: 'upsert' is not one of ['insert', 'delete', 'update']``.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from idivm.diffs.instances import (
    ABSENT,
    BagDiff,
    IDiff,
    IDiffDocument,
    NamedDiff,
    Provenance,
    TupleDiff,
    attribute_path,
    element_path,
)
from idivm.diffs.signatures import BagSignature, RootSignature, SignatureNode, TupleSignature
from idivm.diffs.values import thaw
from idivm.errors import DataError, Span


# ----------------------------------------------------------------------------- schemas


@functools.cache
def idiff_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of i-diff instance documents."""
    return _load_schema("idiff.schema.json")


@functools.cache
def signature_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of signature trees."""
    return _load_schema("signature.schema.json")


def _load_schema(filename: str) -> dict[str, Any]:
    text = resources.files("idivm.diffs.model").joinpath(filename).read_text(encoding="utf-8")
    return json.loads(text)


@functools.cache
def _validator(filename: str) -> Draft202012Validator:
    schema = idiff_schema() if filename == "idiff" else signature_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validate_idiff_json(data: Any) -> None:
    """:class:`DataError` naming the JSON path of the first problem, unless ``data`` follows the schema."""
    _validate(data, "idiff")


def validate_signature_json(data: Any) -> None:
    """:class:`DataError` naming the JSON path of the first problem, unless ``data`` follows the schema."""
    _validate(data, "signature")


def _validate(data: Any, which: str) -> None:
    error = best_match(_validator(which).iter_errors(data))
    if error is not None:
        raise DataError(_describe(error))


def _describe(error: ValidationError) -> str:
    """``$.path: message``, worded by the schema's ``errorMessage`` annotation where it has one."""
    schema = error.schema if isinstance(error.schema, dict) else {}
    message = schema.get("errorMessage", error.message)
    return f"{error.json_path}: {message}"


# ----------------------------------------------------------------------------- instances


def idiff_to_json(document: IDiffDocument) -> Any:
    """The JSON value (dicts, lists, scalars) of an i-diff document."""
    if isinstance(document, NamedDiff):
        return {"name": document.name, "idiff": _node_to_json(document.idiff)}
    if isinstance(document, BagDiff):
        return [_node_to_json(e) for e in document]
    if isinstance(document, IDiff):
        return _node_to_json(document)
    raise DataError(f"not an i-diff document: {type(document).__name__}")


def _node_to_json(node: IDiff) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if node.provenance is not None:
        out["provenance"] = dict(node.provenance.pairs)
    out["type"] = node.type.value
    if node.pre is not ABSENT:
        out["pre"] = thaw(node.pre)
    if node.post is not ABSENT:
        out["post"] = thaw(node.post)
    if isinstance(node.diff, BagDiff):
        out["diff"] = [_node_to_json(e) for e in node.diff]
    elif isinstance(node.diff, TupleDiff):
        out["diff"] = {name: _node_to_json(child) for name, child in node.diff.attributes}
    return out


def idiff_from_json(data: Any) -> IDiffDocument:
    """The i-diff document of a JSON value, validated against ``idiff.schema.json``."""
    validate_idiff_json(data)
    if isinstance(data, list):
        return BagDiff(tuple(_node_from_json(e, element_path("$", i)) for i, e in enumerate(data)))
    if "name" in data:
        return _build(lambda: NamedDiff(data["name"], _node_from_json(data["idiff"], "$.idiff")), "$")
    return _node_from_json(data, "$")


def _node_from_json(data: dict[str, Any], path: str) -> IDiff:
    diff: TupleDiff | BagDiff | None = None
    raw = data.get("diff")
    if isinstance(raw, list):
        diff = BagDiff(tuple(_node_from_json(e, element_path(f"{path}.diff", i)) for i, e in enumerate(raw)))
    elif isinstance(raw, dict):
        diff = TupleDiff(tuple((name, _node_from_json(child, attribute_path(f"{path}.diff", name)))
                               for name, child in raw.items()))
    provenance = data.get("provenance")
    return _build(lambda: IDiff(
        data["type"],
        Provenance(tuple(provenance.items())) if provenance is not None else None,
        pre=data.get("pre", ABSENT),
        post=data.get("post", ABSENT),
        diff=diff,
    ), path)


def dumps_idiff(document: IDiffDocument, *, indent: int | None = 2) -> str:
    """JSON text of an i-diff document."""
    return json.dumps(idiff_to_json(document), indent=indent, ensure_ascii=False)


def loads_idiff(text: str) -> IDiffDocument:
    """The i-diff document in JSON text (duplicate object keys and NaN/Infinity are errors)."""
    return idiff_from_json(_loads(text))


# ----------------------------------------------------------------------------- signatures


def signature_to_json(signature: RootSignature) -> dict[str, Any]:
    """The JSON value of a signature tree."""
    out: dict[str, Any] = {}
    if signature.name is not None:
        out["name"] = signature.name
    out["provenance"] = list(signature.provenance)
    out["element"] = _signature_node_to_json(signature.element)
    return out


def _signature_node_to_json(node: SignatureNode) -> dict[str, Any]:
    out: dict[str, Any] = {"type": node.type.value}
    if node.pre:
        out["pre"] = True
    if node.post:
        out["post"] = True
    if isinstance(node.diff, TupleSignature):
        out["diff"] = {"attributes": {n: _signature_node_to_json(s) for n, s in node.diff.attributes}}
    elif isinstance(node.diff, BagSignature):
        out["diff"] = {"provenance": list(node.diff.provenance), "element": _signature_node_to_json(node.diff.element)}
    return out


def signature_from_json(data: Any) -> RootSignature:
    """The signature tree of a JSON value, validated against ``signature.schema.json``."""
    validate_signature_json(data)
    element = _signature_node_from_json(data["element"], "$.element")
    return _build(lambda: RootSignature(tuple(data["provenance"]), element, data.get("name")), "$")


def _signature_node_from_json(data: dict[str, Any], path: str) -> SignatureNode:
    diff: TupleSignature | BagSignature | None = None
    raw = data.get("diff")
    if raw is not None and "attributes" in raw:
        base = f"{path}.diff.attributes"
        diff = TupleSignature(tuple((n, _signature_node_from_json(s, attribute_path(base, n)))
                                    for n, s in raw["attributes"].items()))
    elif raw is not None:
        element = _signature_node_from_json(raw["element"], f"{path}.diff.element")
        diff = _build(lambda: BagSignature(tuple(raw["provenance"]), element), f"{path}.diff")
    return _build(lambda: SignatureNode(data["type"], pre=data.get("pre", False), post=data.get("post", False),
                                        diff=diff), path)


def dumps_signature(signature: RootSignature, *, indent: int | None = 2) -> str:
    """JSON text of a signature tree."""
    return json.dumps(signature_to_json(signature), indent=indent, ensure_ascii=False)


def loads_signature(text: str) -> RootSignature:
    """The signature tree in JSON text."""
    return signature_from_json(_loads(text))


# ----------------------------------------------------------------------------- helpers


def _build(make: Any, path: str) -> Any:
    try:
        return make()
    except DataError as e:
        if e.message.startswith("$"):
            raise
        raise DataError(f"{path}: {e.message}") from None


def _loads(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_object_without_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise DataError(f"invalid JSON: {e.msg}", Span(e.lineno, e.colno), source=text) from None


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DataError(f"duplicate key {key!r} in a JSON object")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise DataError(f"{name} is not a JSON number")
