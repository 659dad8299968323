"""Deterministic dataset generators, small shipped samples and the thesis' example views.

Two datasets, each a module with a frozen spec (sizes and knobs, including ``seed``), one row
generator per table, ``tables(spec)``, ``keys(spec)``, ``schemas(spec)`` and the ``SAMPLE`` spec:

* :mod:`idivm.datasets.devices` -- devices/parts/devices_parts (thesis Fig. 2.1a, Fig. 2.11);
* :mod:`idivm.datasets.yelp` -- businesses/reviews/users, nested (thesis §2.9); its update
  streams (batches of Debezium change events) are in :mod:`idivm.datasets.yelp_changes`.

Rows are plain dicts.  This module writes them as JSON Lines or Parquet (streamed in chunks, so
memory stays bounded at any scale) and locates the shipped samples and views::

    from idivm.datasets import devices, write_dataset
    spec = devices.DevicesSpec.at_scale(100_000, fanout=10, selectivity=0.2, seed=1)
    write_dataset(devices.tables(spec), devices.schemas(spec), "out/", format="parquet")

No Spark here: generators are pure Python; pyarrow is imported only to write Parquet.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from idivm.datasets import devices, yelp

PACKAGE_DIR = Path(__file__).resolve().parent
SAMPLES_DIR = PACKAGE_DIR / "samples"
VIEWS_DIR = PACKAGE_DIR / "views"
DATASETS = {"devices": devices, "yelp": yelp}
FORMATS = ("jsonl", "parquet")
DEFAULT_CHUNK_ROWS = 100_000

__all__ = [
    "DATASETS",
    "SAMPLES_DIR",
    "VIEWS_DIR",
    "devices",
    "yelp",
    "read_jsonl",
    "sample_path",
    "sample_rows",
    "sample_tables",
    "view_path",
    "view_names",
    "write_jsonl",
    "write_parquet",
    "write_dataset",
    "write_sample",
]


# ----------------------------------------------------------------------------- JSON Lines


def dumps_row(row: Mapping) -> str:
    """One JSON Lines record: fields in the row's order, non-ASCII kept as is."""
    return json.dumps(row, ensure_ascii=False)


def write_jsonl(rows: Iterable[Mapping], path: str | Path) -> int:
    """Write ``rows`` to ``path``, one JSON object per line; returns the number of rows."""
    count = 0
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for row in rows:
            out.write(dumps_row(row))
            out.write("\n")
            count += 1
    return count


def read_jsonl(path: str | Path) -> Iterator[dict]:
    """The objects of a JSON Lines file, skipping blank lines."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


# ----------------------------------------------------------------------------- Parquet


def arrow_schema(schema: Mapping[str, str]):
    """The pyarrow schema for a ``field -> type name`` mapping of a dataset module's ``schemas()``."""
    import pyarrow as pa

    scalar = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}

    def arrow_type(name: str):
        if name.startswith("list<") and name.endswith(">"):
            return pa.list_(arrow_type(name[5:-1]))
        if name not in scalar:
            raise ValueError(f"no Arrow type for {name!r}")
        return scalar[name]

    return pa.schema([pa.field(field, arrow_type(type_name)) for field, type_name in schema.items()])


def _chunks(rows: Iterable[Mapping], size: int) -> Iterator[list[Mapping]]:
    chunk: list[Mapping] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def write_parquet(
    rows: Iterable[Mapping],
    path: str | Path,
    schema: Mapping[str, str],
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> int:
    """Write ``rows`` to one Parquet file, one row group per ``chunk_rows`` rows; returns the count.

    ``schema`` (``field -> type name``) fixes the column types, so empty lists and empty tables
    still get the right types.  At most one chunk is held in memory.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if chunk_rows < 1:
        raise ValueError("chunk_rows must be >= 1")
    arrow = arrow_schema(schema)
    count = 0
    with pq.ParquetWriter(str(path), arrow) as writer:
        for chunk in _chunks(rows, chunk_rows):
            columns = [pa.array([row[f.name] for row in chunk], type=f.type) for f in arrow]
            writer.write_table(pa.Table.from_arrays(columns, schema=arrow))
            count += len(chunk)
    return count


# ----------------------------------------------------------------------------- datasets


def write_dataset(
    tables: Mapping[str, Iterable[Mapping]],
    schemas: Mapping[str, Mapping[str, str]],
    out_dir: str | Path,
    format: str = "jsonl",
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> dict[str, tuple[Path, int]]:
    """Write every table to ``out_dir/<table>.<format>``; returns ``{table: (path, rows)}``."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, tuple[Path, int]] = {}
    for name, rows in tables.items():
        path = out / f"{name}.{format}"
        if format == "jsonl":
            count = write_jsonl(rows, path)
        else:
            count = write_parquet(rows, path, schemas[name], chunk_rows)
        written[name] = (path, count)
    return written


# ----------------------------------------------------------------------------- samples and views


def _dataset(name: str):
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}") from None


def sample_path(dataset: str, table: str) -> Path:
    """Path of a shipped sample table, e.g. ``sample_path("yelp", "users")``."""
    module = _dataset(dataset)
    if table not in module.schemas(module.SAMPLE):
        raise ValueError(f"dataset {dataset!r} has no table {table!r}")
    return SAMPLES_DIR / dataset / f"{table}.jsonl"


def sample_rows(dataset: str, table: str) -> list[dict]:
    """The rows of a shipped sample table."""
    return list(read_jsonl(sample_path(dataset, table)))


def sample_tables(dataset: str) -> dict[str, list[dict]]:
    """Every table of a shipped sample, by name."""
    module = _dataset(dataset)
    return {table: sample_rows(dataset, table) for table in module.schemas(module.SAMPLE)}


def write_sample(dataset: str, out_dir: str | Path | None = None) -> dict[str, tuple[Path, int]]:
    """Regenerate a sample from its ``SAMPLE`` spec (into the package's samples directory by default)."""
    module = _dataset(dataset)
    spec = module.SAMPLE
    target = SAMPLES_DIR / dataset if out_dir is None else Path(out_dir)
    return write_dataset(module.tables(spec), module.schemas(spec), target, "jsonl")


def view_names() -> list[str]:
    """Names of the shipped example view files (without ``.sqlpp``)."""
    return sorted(p.stem for p in VIEWS_DIR.glob("*.sqlpp"))


def view_path(name: str) -> Path:
    """Path of a shipped example view, e.g. ``view_path("sf_reviews")``."""
    path = VIEWS_DIR / f"{name}.sqlpp"
    if not path.is_file():
        raise ValueError(f"no example view {name!r}; known: {', '.join(view_names())}")
    return path
