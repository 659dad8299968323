"""What ``table describe`` and ``view describe`` report about a table or a view: its schema,
keys, storage features and latest commits, read from the catalog and the Delta logs (no
Spark), as text for people (:meth:`Description.render`) or JSON for programs
(:meth:`Description.as_json`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from idivm.algebra.builder import VALUE_COLUMN, VALUE_NAME, scalar_type
from idivm.types import TupleType

if TYPE_CHECKING:
    from idivm.declared_schema import DeclaredSchema

#: the prefix of idivm's keys in the metadata of a Delta commit
METADATA_PREFIX = "idivm."
#: how many commits ``describe`` shows by default
HISTORY = 10


def commit_time(timestamp_ms: Any) -> str:
    """A Delta commit's timestamp (ms since the epoch) as an ISO-8601 UTC time with seconds."""
    if timestamp_ms is None:
        return ""
    at = datetime.fromtimestamp(int(timestamp_ms) / 1000, timezone.utc).replace(microsecond=0)
    return at.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Commit:
    """One commit of a table: its version, time, Delta operation (``WRITE``, ``MERGE``,
    ``OPTIMIZE``, ...) and idivm's metadata (``operation``, ``watermark``, ``origin``, ``run``,
    ...: the keys without their ``idivm.`` prefix, JSON values decoded)."""

    version: int
    time: str
    operation: str
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def of(cls, commit: Mapping[str, Any]) -> "Commit":
        """A commit as :func:`idivm.storage.delta.history` gives it."""
        metadata = {k[len(METADATA_PREFIX):]: _decoded(v) for k, v in commit.items()
                    if k.startswith(METADATA_PREFIX)}
        return cls(int(commit["version"]), commit_time(commit.get("timestamp")), str(commit.get("operation", "")),
                   metadata)

    def as_json(self) -> dict[str, Any]:
        return {"version": self.version, "time": self.time, "operation": self.operation,
                "metadata": dict(self.metadata)}

    def render(self) -> str:
        """``origin=…, run=…``: the metadata in a line (values cut at 60 characters)."""
        return ", ".join(f"{k}={_short(v)}" for k, v in self.metadata.items())


def _decoded(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass(frozen=True, slots=True)
class Description:
    """A base table (``kind`` ``table``) or a view (``view``) as ``describe`` reports it.

    ``key``: a table's primary key, or a view's ID columns (hidden columns of its Delta table
    that name its rows); ``element_keys``: a table's declared keys of nested collections;
    ``features``: :func:`idivm.storage.delta.features` and, for a view maintained by ID, the
    columns its files are ordered by (``clustered_by``); ``readers``: the views that read it;
    ``history``: its latest commits, newest first; ``declared_schema``: the schema a table was
    declared with, as written (None: its types were inferred from its data).  A view also has its definition ``text``,
    ``strategy``, ``inputs`` (what it reads), ``watermark`` (the versions of its inputs it
    reflects), ``lag`` (the versions of its inputs committed past its watermark), its last
    maintenance time ``maintained``, and its caches, maps and indexes (``parts``: name ->
    path relative to the warehouse)."""

    kind: str
    name: str
    path: Path
    schema: TupleType
    rows: int
    version: int
    created: str
    key: tuple[str, ...]
    features: Mapping[str, Any] = field(hash=False)
    readers: tuple[str, ...] = ()
    history: tuple[Commit, ...] = ()
    element_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    text: str = ""
    strategy: str = ""
    inputs: tuple[str, ...] = ()
    watermark: Mapping[str, int] = field(default_factory=dict, hash=False)
    lag: int = 0
    maintained: str = ""
    parts: Mapping[str, str] = field(default_factory=dict, hash=False)
    declared_schema: "DeclaredSchema | None" = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "path": str(self.path),
                               "schema": [{"name": n, "type": str(t)} for n, t in self.schema.fields],
                               "rows": self.rows, "version": self.version, "created": self.created,
                               "key": list(self.key)}
        if self.kind == "table":
            out["element_keys"] = {p: list(k) for p, k in self.element_keys.items()}
            out["declared_schema"] = None if self.declared_schema is None else {
                **self.declared_schema.to_json(), "open_records": sorted(self.declared_schema.open_records)}
        else:
            out |= {"strategy": self.strategy, "inputs": list(self.inputs), "watermark": dict(self.watermark),
                    "lag": self.lag, "maintained": self.maintained, "parts": dict(self.parts), "text": self.text}
        return out | {"features": dict(self.features), "readers": list(self.readers),
                      "history": [c.as_json() for c in self.history]}

    def render(self) -> str:
        lines = [f"{self.kind} {self.name}"]

        def row(label: str, value: Any) -> None:
            lines.append(f"  {label + ':':<12} {value}")

        if self.kind == "table":
            row("key", ", ".join(self.key))
            for p, k in self.element_keys.items():
                row("element key", f"{p}({', '.join(k)})")
        else:
            row("strategy", self.strategy)
            row("reads", ", ".join(self.inputs) or "nothing")
            row("watermark", ", ".join(f"{t}@{v}" for t, v in sorted(self.watermark.items())) or "none")
            row("lag", f"{self.lag} version{'' if self.lag == 1 else 's'} of its inputs past its watermark"
                       if self.lag else "0 (up to date)")
            row("maintained", self.maintained or "never")
            row("IDs", ", ".join(self.key) or "none")
        row("rows", f"{self.rows}, version {self.version}")
        row("path", self.path)
        row("created", self.created)
        row("storage", ", ".join(storage_features(self.features)) or "plain Delta table")
        for name, rel in self.parts.items():
            row(name, rel)
        row("read by", ", ".join(self.readers) or "no view")
        lines.append("schema:" if self.kind == "view" or self.declared_schema is None else
                     "schema (as stored):")
        values = scalar_type(self.schema) if self.kind == "view" else None
        if values is not None:
            lines.append(f"  {VALUE_NAME}: {values} (a view of values, stored in column {VALUE_COLUMN})")
        else:
            lines += [f"  {n}: {t}" for n, t in self.schema.fields]
        if self.declared_schema is not None:
            lines.append(f"declared schema ({self.declared_schema.summary()}):")
            lines += [f"  {line}" for line in self.declared_schema.text.strip().splitlines()]
        if self.text:
            lines.append("definition:")
            lines += [f"  {line}" for line in self.text.strip().splitlines()]
        lines.append("history (newest first):")
        width = max((len(str(c.version)) for c in self.history), default=1)
        for c in self.history:
            lines.append(f"  {c.version:>{width}}  {c.time}  {c.operation:<9} {c.render()}".rstrip())
        return "\n".join(lines)


def storage_features(features: Mapping[str, Any]) -> list[str]:
    """The features of :attr:`Description.features` in words."""
    out = []
    if features.get("change_data_feed"):
        out.append("change data feed")
    if features.get("deletion_vectors"):
        out.append("deletion vectors")
    if features.get("partition_columns"):
        out.append(f"partitioned by {', '.join(features['partition_columns'])}")
    if features.get("clustered_by"):
        out.append(f"files ordered by {', '.join(features['clustered_by'])}")
    return out
