"""The ``idivm`` command.

    idivm [--warehouse DIR] [--spark-master URL] [--storage ENGINE] [--debug] COMMAND ...

Exit codes: 0 success; 1 an idivm error (printed as ``error: <message>``, plus
the source excerpt when the error has one) or an internal error (``internal
error: ...``; ``--debug`` adds the traceback); 2 a usage error (click's).

Each command is a function in this file, registered on :data:`cli` or one of
its groups; commands reach the warehouse through :func:`open_warehouse`,
which creates it once per invocation (Spark starts only if the command
needs it).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from idivm import __version__
from idivm.algebra.builder import VALUE_NAME, scalar_type
from idivm.display import format_value, json_text
from idivm.errors import CatalogError, IdivmError, InternalError
from idivm.exec.runtime import versions_text
from idivm.ingest import INGEST_FORMATS
from idivm.ingest.load import FORMATS
from idivm.progress import Progress
from idivm.storage.delta import ENGINE_ENV, ENGINES
from idivm.warehouse import DEFAULT_WAREHOUSE, WAREHOUSE_ENV, Warehouse


@dataclass
class CliState:
    """Global options of one invocation, and the warehouse once it is open."""

    warehouse_path: str = DEFAULT_WAREHOUSE
    spark_master: str | None = None
    storage: str | None = None
    debug: bool = False
    warehouse: Warehouse | None = field(default=None, repr=False)


def open_warehouse(ctx: click.Context) -> Warehouse:
    """The invocation's Warehouse (opened on first use)."""
    state = ctx.find_object(CliState)
    if state.warehouse is None:
        from idivm.storage.spark import jvm_log_path

        state.warehouse = Warehouse(state.warehouse_path, spark_master=state.spark_master, storage=state.storage,
                                    spark_log=None if state.debug else jvm_log_path())
    return state.warehouse


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--warehouse", "warehouse_path", metavar="DIR", envvar=WAREHOUSE_ENV, default=DEFAULT_WAREHOUSE,
              show_default=True, help=f"Warehouse directory (or ${WAREHOUSE_ENV}).")
@click.option("--spark-master", metavar="URL", envvar="IDIVM_SPARK_MASTER", default=None,
              help="Spark master URL (or $IDIVM_SPARK_MASTER); default local[*].")
@click.option("--storage", type=click.Choice(ENGINES), envvar=ENGINE_ENV, default=None,
              help=f"Storage engine of what Spark computes (or ${ENGINE_ENV}); default delta-rs on a "
                   "local master, delta-spark-dv on a cluster.")
@click.option("--debug", is_flag=True, help="Show tracebacks, and Spark's and Py4J's logs (otherwise Spark's "
              "driver log goes to ~/.cache/idivm/spark-driver.log).")
@click.version_option(__version__, prog_name="idivm")
@click.pass_context
def cli(ctx: click.Context, warehouse_path: str, spark_master: str | None, storage: str | None,
        debug: bool) -> None:
    """Incrementally maintained SQL++ views on Spark and Delta Lake."""
    state = ctx.ensure_object(CliState)
    state.warehouse_path = warehouse_path
    state.spark_master = spark_master
    state.storage = storage
    state.debug = debug
    quiet_libraries(debug)


def quiet_libraries(debug: bool) -> None:
    """Py4J's and PySpark's Python loggers (the connection to Spark's JVM) silenced, unless
    ``debug``, when they print from INFO up."""
    import logging

    for name in ("py4j", "pyspark"):
        logger = logging.getLogger(name)
        logger.propagate = debug
        logger.setLevel(logging.INFO if debug else logging.CRITICAL + 1)
    if debug and not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s %(message)s")


#: ``--format`` of the commands that print for people or for programs
OUTPUT_FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                             show_default=True, help="json: for programs, on standard output.")
#: the same, for the commands whose ``--format`` names the format of their input
OUTPUT_OPTION = click.option("--output", "output", type=click.Choice(["text", "json"]), default="text",
                             show_default=True, help="json: for programs, on standard output.")


def json_line(value: Any) -> str:
    """``value`` as one line of JSON (what the commands print for programs)."""
    return json.dumps(value, ensure_ascii=False, default=str)


def echo_json(value: Any) -> None:
    """One JSON document (or line) on standard output."""
    click.echo(json_line(value))


# --- table ---------------------------------------------------------------------------------------

@cli.group()
def table() -> None:
    """Create, list and describe base tables (drop them with 'idivm drop table')."""


@table.command("create")
@click.argument("name")
@click.option("--key", required=True, metavar="COL[,COL]", help="Primary key column(s), comma-separated.")
@click.option("--from", "source", default=None, metavar="FILE", help="File (or Parquet directory) to load.")
@click.option("--schema", "schema", default=None, metavar="FILE|TEXT",
              help="Declared schema: SQL++ DDL-like text ('id BIGINT, name STRING, tags ARRAY<STRING>, "
                   "address {city STRING}'; CLOSED {...} allows no other fields), a JSON Schema, or a file "
                   "holding either.  Without --from the table is created empty.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="File format; default: from the file extension.")
@click.option("--element-key", "element_keys", multiple=True, metavar="PATH=COL[,COL]",
              callback=lambda ctx, param, value: parse_element_key_options(value),
              help="Key of the elements of nested collection PATH (e.g. hours=day, a.b=id); repeatable.")
@click.option("--static", is_flag=True, help="The table never changes (ingest refuses it): the maps of the views "
                                             "over it keep nothing for its changes.")
@OUTPUT_OPTION
@click.pass_context
def table_create(ctx: click.Context, name: str, key: str, source: str | None, schema: str | None,
                 fmt: str | None, element_keys: dict[str, str], static: bool, output: str) -> None:
    """Create base table NAME from FILE, with a declared --schema, or both (an empty table:
    --schema alone).  (--output json: the table as 'table list --format json' shows it, and
    the undeclared fields left out.)"""
    if source is None and schema is None:
        raise click.UsageError("give --from FILE, --schema FILE|TEXT (an empty table), or both")
    info = open_warehouse(ctx).create_table(name, key, source, format=fmt, element_keys=element_keys,
                                            schema=schema, static=static)
    if output == "json":
        echo_json({**info.as_json(), "undeclared": dict(info.undeclared)})
        return
    rows = f"{info.rows} row{'' if info.rows == 1 else 's'}"
    declared = f", declared schema ({info.declared_schema.summary()})" if info.declared_schema is not None else ""
    click.echo(f"created table {info.name} (key {key_description(info.key, info.element_keys, ', ')}): "
               f"{rows}, version {info.version}{declared}{', static' if info.static else ''}")
    if info.undeclared:
        click.echo(f"{name}: {undeclared_text(info.undeclared)}")


def parse_element_key_options(values: Sequence[str]) -> dict[str, str]:
    """``--element-key PATH=COL[,COL]`` options as ``{path: "col,col"}``."""
    out: dict[str, str] = {}
    for v in values:
        path, eq, columns = v.partition("=")
        if not eq or not path.strip() or not columns.strip():
            raise click.BadParameter(f"{v!r}: expected PATH=COL[,COL], e.g. hours=day", param_hint="--element-key")
        if path.strip() in out:
            raise click.BadParameter(f"{path.strip()} given twice", param_hint="--element-key")
        out[path.strip()] = columns
    return out


def key_description(key: Sequence[str], element_keys: Mapping[str, Sequence[str]], sep: str = ",") -> str:
    """``business_id; hours(day)``: the primary key, then each declared element key."""
    return "; ".join([sep.join(key)] + [f"{p}({sep.join(k)})" for p, k in element_keys.items()])


@table.command("list")
@OUTPUT_FORMAT
@click.pass_context
def table_list(ctx: click.Context, fmt: str) -> None:
    """List base tables: name (static: never changes), key, rows, version (json: an array of
    objects)."""
    infos = open_warehouse(ctx).tables()
    if fmt == "json":
        echo_json([i.as_json() for i in infos])
        return
    if not infos:
        click.echo("no tables")
        return
    click.echo(format_table(["name", "key", "rows", "version"],
                            [[i.name + (" (static)" if i.static else ""), key_description(i.key, i.element_keys),
                              i.rows, i.version] for i in infos],
                            right={"rows", "version"}))


HISTORY_OPTION = click.option("--history", "history", type=click.IntRange(min=0), default=None, metavar="N",
                              help="Show the latest N commits (default 10).")


@table.command("describe")
@click.argument("name")
@HISTORY_OPTION
@OUTPUT_FORMAT
@click.pass_context
def table_describe(ctx: click.Context, name: str, history: int | None, fmt: str) -> None:
    """Schema, key, storage features, the views that read it and the latest commits of base table NAME."""
    d = open_warehouse(ctx).describe_table(name, history)
    if fmt == "json":
        echo_json(d.as_json())
    else:
        click.echo(d.render())


#: the exit code of an ingest that quarantined records
QUARANTINED = 3


@cli.command()
@click.argument("name", metavar="TABLE")
@click.argument("source", metavar="SOURCE")
@click.option("--format", "fmt", type=click.Choice(INGEST_FORMATS), default="debezium", show_default=True,
              help="debezium: Debezium change events; rows: whole rows (upserts) and "
                   '{"__delete": {KEY...}} lines; idiff: i-diffs of rows (provenance: the key), '
                   "updates by path included.")
@click.option("--strict", is_flag=True, help="A bad record fails its file (nothing of it applied) "
              "instead of going to the table's quarantine.")
@click.option("--evolve", is_flag=True, help="Add the columns the records have and TABLE lacks (schema "
              "drift) to TABLE, nullable, typed from their values, in the commit of their batch; without it "
              "they are an error.")
@click.option("--follow", is_flag=True, help="Keep ingesting: read SOURCE again every --interval seconds "
              "(a directory's new files, a topic's new messages) until SIGINT or SIGTERM.")
@click.option("--interval", type=click.FloatRange(min=0), default=5.0, show_default=True, metavar="SECONDS",
              help="With --follow: the time between two reads of SOURCE.")
@OUTPUT_OPTION
@click.pass_context
def ingest(ctx: click.Context, name: str, source: str, fmt: str, strict: bool, evolve: bool, follow: bool,
           interval: float, output: str) -> int:
    """Apply the changes in SOURCE to base table TABLE: a JSON Lines file, a directory of them
    (name order), - (standard input) or a Kafka topic (kafka://HOST:PORT/TOPIC), each file or
    partition's new messages in one commit (--output json: a JSON object per file or partition
    batch, JSON lines).  What was ingested before is skipped.  Bad records go to the table's
    quarantine (see 'idivm quarantine') and the rest is applied; the exit code is then 3."""
    wh = open_warehouse(ctx)
    if follow and source == "-":
        raise click.UsageError("--follow reads a file, a directory or a topic again, not standard input")
    quarantined = 0
    stop = Stop()

    def one_round() -> None:
        nonlocal quarantined
        with Progress(f"ingest {name}") as bar:
            r = wh.ingest(name, source, format=fmt, strict=strict, evolve=evolve, progress=bar)
        for b in r.batches or (r,):
            if not follow or (b.replayed is None and (b.changes or b.skipped or b.quarantined)):  # following: what is new
                if output == "json":
                    echo_json(b.as_json(name))
                else:
                    click.echo(ingest_line(b, name))
        if r.batches and not follow and output == "text":
            click.echo(f"{len(r.batches)} batches: {ingest_counts(r)}")
        quarantined += r.quarantined

    stop.repeat(one_round, interval if follow else None)
    if stop.requested:
        click.echo(f"stopped by {stop.requested}", err=True)
    if quarantined:
        click.echo(f"{quarantined} record{'s' if quarantined > 1 else ''} quarantined: "
                   f"see 'idivm quarantine show {name}'", err=True)
        ctx.exit(QUARANTINED)
    return 0


def ingest_counts(r, where: str = "") -> str:
    """``N changes[ from F into T]: I inserted, U updated, D deleted[, S skipped][, Q quarantined]``."""
    skipped = f", {r.skipped} skipped" if r.skipped else ""
    quarantined = f", {r.quarantined} quarantined" if r.quarantined else ""
    quarantined += f" ({undeclared_text(r.undeclared)})" if r.undeclared else ""
    changes = f"{r.changes} change{'' if r.changes == 1 else 's'}{where}"
    if not r.changes and where:
        return f"{changes}{skipped}{quarantined}"
    return f"{changes}: {r.inserted} inserted, {r.updated} updated, {r.deleted} deleted{skipped}{quarantined}"


def undeclared_text(undeclared: Sequence[tuple[str, int]]) -> str:
    """``fields the schema does not declare, not stored: extra (3 rows), address.note (1 row)``."""
    fields = ", ".join(f"{path} ({rows} row{'' if rows == 1 else 's'})" for path, rows in undeclared)
    return f"fields the schema does not declare, not stored: {fields}"


def ingest_line(r, table: str) -> str:
    """What one batch of an ingest did, in a line."""
    if r.replayed is not None:
        return f"{r.source}: already ingested into {table} (version {r.replayed}), skipped"
    counts = ingest_counts(r, f" from {r.source} into {table}")
    added = f"; added column{'s' if len(r.added) > 1 else ''} {', '.join(map(repr, r.added))}" if r.added else ""
    return f"ingested {counts}: nothing to commit, version {r.version}" if not r.changes else \
        f"ingested {counts}{added}; version {r.version}"


@cli.group()
def quarantine() -> None:
    """Records ingest rejected: list, show and replay them."""


@quarantine.command("list")
@click.argument("name", metavar="[TABLE]", required=False)
@OUTPUT_FORMAT
@click.pass_context
def quarantine_list(ctx: click.Context, name: str | None, fmt: str) -> None:
    """Quarantined records per base table (or, for TABLE, per file they came from) (json: an
    array of objects)."""
    wh = open_warehouse(ctx)
    if name is None:
        counts = [(t, wh.quarantined(t).num_rows) for t in sorted(wh.catalog.tables)]
        counts = [(t, n) for t, n in counts if n]
        if fmt == "json":
            echo_json([{"table": t, "records": n} for t, n in counts])
        else:
            click.echo(format_table(["table", "records"], counts, right={"records"}))
        return
    per: dict[tuple, list] = {}
    for r in wh.quarantined(name).to_pylist():
        per.setdefault((r["source"], r["origin"]), []).append(r)
    if fmt == "json":
        echo_json([{"table": name, "source": s, "origin": origin, "records": len(rs), "first_line": rs[0]["line"],
                    "quarantined_at": rs[0]["quarantined_at"].isoformat()} for (s, origin), rs in per.items()])
        return
    click.echo(format_table(["source", "records", "first line", "quarantined at"],
                            [(s, len(rs), rs[0]["line"], rs[0]["quarantined_at"].isoformat(timespec="seconds"))
                             for (s, _), rs in per.items()], right={"records", "first line"}))


@quarantine.command("show")
@click.argument("name", metavar="TABLE")
@click.option("--format", "fmt", type=click.Choice(["text", "jsonl", "json"]), default="text", show_default=True,
              help="text: position, reason and record; jsonl: the records only, as they were, "
                   "to fix and replay with 'quarantine retry --from'; json: an array of objects, "
                   "each record with where it came from and why it was quarantined.")
@click.option("--limit", type=int, default=None, help="Show at most this many records.")
@click.pass_context
def quarantine_show(ctx: click.Context, name: str, fmt: str, limit: int | None) -> None:
    """The quarantined records of base table TABLE, oldest first."""
    rows = open_warehouse(ctx).quarantined(name).to_pylist()[:limit]
    if fmt == "json":
        echo_json([{**r, "quarantined_at": r["quarantined_at"].isoformat()} for r in rows])
        return
    for r in rows:
        if fmt == "jsonl":
            click.echo(r["record"])
        else:
            at = "@" if r["source"].endswith("]") else ":"  # a topic's partition and offset, or file:line
            click.echo(f"{r['source']}{at}{r['line']}: {r['reason']}\n    {r['record']}")


@quarantine.command("retry")
@click.argument("name", metavar="TABLE")
@click.option("--from", "fixed", metavar="SOURCE", default=None,
              help="Replay the records of SOURCE (a file, a directory or -) in place of the quarantined ones.")
@click.option("--format", "fmt", type=click.Choice(INGEST_FORMATS), default="debezium", show_default=True,
              help="The format of SOURCE.")
@OUTPUT_OPTION
@click.pass_context
def quarantine_retry(ctx: click.Context, name: str, fixed: str | None, fmt: str, output: str) -> int:
    """Replay the quarantined records of TABLE: the valid ones are applied in one commit, the
    others stay quarantined with their new reason (exit code 3).  (--output json: an object
    as 'ingest --output json' prints, ``quarantined`` the records still quarantined.)"""
    r = open_warehouse(ctx).retry_quarantined(name, fixed, fmt if fixed else None)
    if output == "json":
        echo_json(r.as_json(name))
    elif r.replayed is not None:
        click.echo(f"retry already applied in version {r.replayed}; quarantine cleared of it")
    else:
        click.echo(f"replayed into {name}: {ingest_counts(r)}; version {r.version}")
    if r.quarantined:
        click.echo(f"{r.quarantined} record{'s' if r.quarantined > 1 else ''} still quarantined", err=True)
        ctx.exit(QUARANTINED)
    return 0


# --- views ---------------------------------------------------------------------------------------

@cli.command()
@click.argument("file", metavar="FILE")
@click.option("--strategy", type=click.Choice(["id", "tuple", "recompute", "auto", "maps"]), default="auto",
              show_default=True, help="How maintain keeps the view fresh: ID-based i-diffs, tuple-based "
              "t-diffs, recomputation, auto (id unless the view has no rules or a run's change set is large), "
              "or maps (higher-order delta maps, for a view of one GROUP BY over joins of tables).")
@click.option("--replace", is_flag=True, help="Replace the view of that name, if there is one (as CREATE OR "
              "REPLACE VIEW does): the new view is materialized beside it and swapped in atomically.")
@OUTPUT_FORMAT
@click.pass_context
def define(ctx: click.Context, file: str, strategy: str, replace: bool, fmt: str) -> None:
    """Plan and materialize the view defined in FILE (CREATE [OR REPLACE] VIEW name AS ...)
    (json: the view as 'view list --format json' shows it)."""
    with Progress("define") as bar:
        info = open_warehouse(ctx).define(Path(file), strategy=strategy, replace=replace,
                                          progress=bar)  # a file, never SQL++ text
    for warning in info.warnings:
        click.echo(f"warning: {file}:{warning}", err=True)
    if fmt == "json":
        echo_json(info.as_json())
        return
    note = f" ({info.strategy_note})" if info.strategy_note else ""
    click.echo(f"defined view {info.name}: {info.rows} row{'' if info.rows == 1 else 's'}, version {info.version}, "
               f"strategy {info.strategy}{note}")


@cli.group()
def view() -> None:
    """List and describe views (define them with 'idivm define', drop them with 'idivm drop view')."""


@view.command("list")
@OUTPUT_FORMAT
@click.pass_context
def view_list(ctx: click.Context, fmt: str) -> None:
    """List views: name, strategy, rows, watermark, last maintenance, lag (the versions of
    their inputs committed past their watermark) (json: an array of objects)."""
    infos = open_warehouse(ctx).views()
    if fmt == "json":
        echo_json([i.as_json() for i in infos])
        return
    if not infos:
        click.echo("no views")
        return
    click.echo(format_table(["name", "strategy", "rows", "watermark", "maintained", "lag"],
                            [[i.name, i.strategy, i.rows, versions_text(i.watermark), i.maintained or "never", i.lag]
                             for i in infos], right={"rows", "lag"}))


@view.command("describe")
@click.argument("name")
@HISTORY_OPTION
@OUTPUT_FORMAT
@click.pass_context
def view_describe(ctx: click.Context, name: str, history: int | None, fmt: str) -> None:
    """Strategy, inputs, watermark, lag, schema, IDs, storage, caches, maps and indexes,
    definition and latest commits of view NAME."""
    d = open_warehouse(ctx).describe_view(name, history)
    if fmt == "json":
        echo_json(d.as_json())
    else:
        click.echo(d.render())


@cli.group()
def drop() -> None:
    """Drop a view or a base table (its catalog entry first, then its files)."""


@drop.command("view")
@click.argument("name")
@click.option("--cascade", is_flag=True, help="Also drop the views that read it (first).")
@OUTPUT_FORMAT
@click.pass_context
def drop_view(ctx: click.Context, name: str, cascade: bool, fmt: str) -> None:
    """Drop view NAME: its table, caches, maps, indexes and program (json: the views and
    tables dropped, in order)."""
    echo_dropped(open_warehouse(ctx).drop_view(name, cascade=cascade), [], fmt)


@drop.command("table")
@click.argument("name")
@click.option("--cascade", is_flag=True, help="Drop the views that read it first (else they prevent the drop).")
@OUTPUT_FORMAT
@click.pass_context
def drop_table(ctx: click.Context, name: str, cascade: bool, fmt: str) -> None:
    """Drop base table NAME: its Delta table and quarantine.  Refused while views read it,
    unless --cascade (json: the views and tables dropped, in order)."""
    dropped = open_warehouse(ctx).drop_table(name, cascade=cascade)
    echo_dropped(dropped[:-1], dropped[-1:], fmt)


def echo_dropped(views: Sequence[str], tables: Sequence[str], fmt: str) -> None:
    """``dropped view V`` per view, then ``dropped table T``; or, as JSON, ``{"views": [...],
    "tables": [...]}``."""
    if fmt == "json":
        echo_json({"views": list(views), "tables": list(tables)})
        return
    for kind, names in (("view", views), ("table", tables)):
        for n in names:
            click.echo(f"dropped {kind} {n}")


@cli.command()
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
@click.option("--limit", type=click.IntRange(min=0), default=None, help="Show at most N rows.")
@click.pass_context
def show(ctx: click.Context, name: str, fmt: str, limit: int | None) -> None:
    """Print the rows of view (or base table) NAME."""
    wh = open_warehouse(ctx)
    from idivm.algebra.expressions import ABSENT
    from idivm.exec.materialize import collect_rows, spark_errors

    scalars = False
    if name in wh.catalog.tables:
        df, columns = wh.read_table(name), wh.catalog.table(name).schema.names
    else:
        schema = wh.catalog.view(name).schema
        # a field that is MISSING in a row: left out of its JSON line, an empty cell in the table
        df, columns = wh.read(name, absent=True), [c for c in schema.names if c != ABSENT]
        if scalar_type(schema) is not None:  # a view of scalars: its values, in a column 'value'
            scalars, columns = True, (VALUE_NAME,)
    with spark_errors(name, "table" if name in wh.catalog.tables else "view"):
        rows = collect_rows(df, limit, scalars=False)  # decimals as they are, printed as written
    if fmt == "jsonl":
        for r in rows:
            click.echo(json_text(r[VALUE_NAME] if scalars else r))
        return
    cells = [[_cell(r[c]) if c in r else "" for c in columns] for r in rows]
    click.echo(format_table(list(columns), cells))
    click.echo(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")


def _cell(v: Any, width: int = 60) -> str:
    text = format_value(v)
    return text if len(text) <= width else text[: width - 1] + "…"


@cli.command()
@click.argument("target", metavar="FILE|NAME")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "dot", "svg", "png"]), default="text",
              show_default=True, help="dot: the plan and the Δ-script as a Graphviz graph; svg, png: that graph "
              "drawn by Graphviz's dot program.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None, metavar="FILE",
              help="Write to FILE instead of standard output.")
@click.pass_context
def explain(ctx: click.Context, target: str, fmt: str, output: str | None) -> None:
    """Print the plan, IDs, base-table signatures, indexes and Δ-script of view NAME or of the view
    in FILE; or draw them."""
    from idivm.explain import PICTURE_FORMATS, draw

    wh = open_warehouse(ctx)
    views = wh.catalog.views
    if target not in views and not os.path.exists(target):
        known = ", ".join(sorted(views)) or "none"
        raise CatalogError(f"no view named {target!r} and no file {target} (views: {known})")
    text = wh.explain(target if target in views else Path(target), "dot" if fmt in PICTURE_FORMATS else fmt)
    if fmt not in PICTURE_FORMATS:
        if output is not None:
            Path(output).write_text(text.rstrip("\n") + "\n", encoding="utf-8")
        else:
            click.echo(text)
        return
    picture = draw(text, fmt)
    if output is not None:
        Path(output).write_bytes(picture)
    elif fmt == "png" and sys.stdout.isatty():
        raise click.UsageError("a PNG is not for a terminal: give --output FILE or redirect standard output")
    else:
        stream = click.get_binary_stream("stdout")
        stream.write(picture)
        stream.flush()


@cli.command()
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--all", "all_views", is_flag=True, help="Maintain every view.")
@click.option("--no-index", "no_index", is_flag=True,
              help="Find the rows holding changed nested elements by scanning the view, not through "
                   "its provenance indexes (which this run leaves alone).")
@click.option("--verify-every", "verify_every", type=click.IntRange(min=1), default=None, metavar="N",
              help="Compare every N-th run of a view with its recomputation; a view that differs is "
                   "reported, repaired by recomputation, and the command exits with code 1.")
@click.option("--every", "every", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Keep maintaining: a round every SECONDS (from the start of the last one), in this "
                   "one process, whose Spark session, opened tables and loaded programs stay warm; "
                   "Ctrl-C between rounds stops it.")
@click.option("--rounds", "rounds", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --every: stop after N rounds.")
@click.option("--max-changes", "max_changes", type=click.IntRange(min=1), default=None, metavar="N",
              help="Cap a run at the base-table commits (oldest first) that change about N rows; "
                   "the rest waits for the next run.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON object per view per run on standard output (progress stays on "
                   "standard error).")
@click.pass_context
def maintain(ctx: click.Context, names: tuple[str, ...], all_views: bool, no_index: bool,
             verify_every: int | None, every: float | None, rounds: int | None, max_changes: int | None,
             fmt: str) -> int:
    """Bring views up to date with their base tables (one commit per view), each after the views
    it reads; a view named alone reads the views it reads as they are.  With --every, a
    SIGINT or SIGTERM stops the loop after the view being maintained (a second SIGINT at once)."""
    if bool(names) == all_views:
        raise click.UsageError("name the views to maintain, or give --all")
    if rounds is not None and every is None:
        raise click.UsageError("--rounds goes with --every")
    wh = open_warehouse(ctx)
    diverged: list[str] = []
    stop = Stop()

    def one_round() -> None:
        # every view after the views it reads (named views alone read the others as they are)
        views = wh.catalog.dependency_order(names or None)
        with Progress("maintain", total=len(views), echo=lambda m: click.echo(m, err=True)) as bar:
            for name in views:
                if stop.requested:
                    return
                for result in wh.maintain(name, progress=bar, use_indexes=not no_index, verify_every=verify_every,
                                          max_changes=max_changes):
                    bar.print(json_line(result.as_json()) if fmt == "json"
                              else result.summary(), click.echo)
                    if result.diverged:
                        diverged.append(result.name)
                bar.step()

    done = stop.repeat(one_round, every, rounds)
    if stop.requested:
        click.echo(f"stopped by {stop.requested} after {done} round(s)", err=True)
    if diverged:
        click.echo(f"error: {len(diverged)} view(s) differed from their recomputation and were repaired: "
                   f"{', '.join(sorted(set(diverged)))}", err=True)
        return 1
    return 0


class Stop:
    """A stop requested by SIGINT or SIGTERM while a loop runs: the loop finishes the view it
    is maintaining (its commits stay whole either way) and ends; a second SIGINT interrupts at once."""

    def __init__(self) -> None:
        import threading

        self.requested: str | None = None
        self._event = threading.Event()

    def repeat(self, body: Callable[[], None], every: float | None, rounds: int | None = None) -> int:
        """Run ``body`` once (``every`` None), or every ``every`` seconds (from the start of the
        last run) until a stop is requested or ``rounds`` runs are done: the runs done."""
        if every is None:
            body()
            return 1
        done = 0
        with self.on_signals():
            while True:
                started = time.monotonic()
                body()
                done += 1
                if self.requested or (rounds is not None and done >= rounds):
                    return done
                self._event.wait(max(0.0, started + every - time.monotonic()))
                if self.requested:
                    return done

    def request(self, why: str) -> None:
        self.requested = why
        self._event.set()

    @contextlib.contextmanager
    def on_signals(self):
        """SIGINT and SIGTERM request the stop while in this context."""
        import signal

        def handler(signum, frame):
            if self.requested and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self.request(signal.Signals(signum).name)

        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


@cli.command()
@click.argument("name")
@click.option("--full", is_flag=True, required=True, help="Recompute the view (and its caches and maps) "
              "from scratch at the current versions of its base tables.")
@OUTPUT_FORMAT
@click.pass_context
def refresh(ctx: click.Context, name: str, full: bool, fmt: str) -> None:
    """Rebuild view NAME from scratch (for a view whose changes can no longer be read) (json:
    an object as 'maintain --format json' prints)."""
    result = open_warehouse(ctx).refresh(name)
    if fmt == "json":
        echo_json(result.as_json())
    else:
        click.echo(result.summary())


@cli.command()
@click.argument("name")
@OUTPUT_FORMAT
@click.pass_context
def verify(ctx: click.Context, name: str, fmt: str) -> int:
    """Recompute view NAME at the base-table versions it reflects and compare (exit 1 if it differs)."""
    with Progress("verify") as bar:
        result = open_warehouse(ctx).verify(name, progress=bar)
    if fmt == "json":
        echo_json(result.as_json())
    else:
        click.echo(result.summary())
    return 0 if result.ok else 1


@cli.command()
@click.option("--scale", type=click.IntRange(min=10), default=None, metavar="N",
              help="Instead: generate devices/parts with N devices and N parts (10 parts per device), "
                   "define the view of the thesis' Fig. 2.5b twice (strategies id and recompute), ingest "
                   "one batch of price changes and compare the two maintenance runs' times.")
@OUTPUT_FORMAT
@click.pass_context
def demo(ctx: click.Context, scale: int | None, fmt: str) -> None:
    """Load the sample data, define the thesis' example views, ingest a batch of Debezium change
    events, maintain the views and show what changed, with the time beside a recomputation."""
    from idivm.demo import run_demo, run_scale_demo, scale_report

    wh = open_warehouse(ctx)
    with Progress("demo") as bar:
        def echo(text: str) -> None:
            if fmt == "text":
                bar.print(text, click.echo)

        if scale is None:
            report = run_demo(wh, echo=echo, progress=bar).as_json()
        else:
            report = scale_report(scale, run_scale_demo(wh, scale, echo=echo, progress=bar))
    if fmt == "json":
        click.echo(json_text(report))  # decimals and floats as written, like show --format jsonl


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]], right: set[str] = frozenset()) -> str:
    """Columns aligned with two spaces between them; columns named in ``right`` are right-aligned.
    Cells are printed by :func:`idivm.display.format_value` (strings as they are, numbers without
    binary noise)."""
    cells = [list(map(str, header))] + [[format_value(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for r in cells:
        parts = [c.rjust(w) if h in right else c.ljust(w) for c, w, h in zip(r, widths, header)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


# --- entry point ---------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    state = CliState()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = cli.main(args=args, prog_name="idivm", standalone_mode=False, obj=state)
        return result if isinstance(result, int) and not isinstance(result, bool) else 0
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except IdivmError as e:
        if state.debug:
            traceback.print_exc()
        if isinstance(e, InternalError):  # our bug, or a failure of Spark's we do not know
            hint = "" if state.debug else " (run with --debug for the traceback)"
            click.echo(f"internal error: {e.one_line()}{hint}", err=True)
            return 1
        click.echo(f"error: {e.one_line()}", err=True)
        excerpt = e.excerpt()
        if excerpt:
            click.echo(excerpt, err=True)
        return 1
    except Exception as e:  # our bug, or a library failure we do not translate yet
        if state.debug:
            traceback.print_exc()
        hint = "" if state.debug else " (run with --debug for the traceback)"
        click.echo(f"internal error: {error_with_cause(e)}{hint}", err=True)
        return 1


def error_with_cause(e: BaseException) -> str:
    """``Type: first line of the message``, then ``; caused by Type: ...`` for the innermost cause:
    Python's (``raise ... from``), or for an error of Spark's JVM the root of its Java causes."""
    def line(kind: str, message: str | None) -> str:
        text = (message or "").strip().splitlines()
        return f"{kind}: {text[0].strip()}" if text else kind

    own = line(type(e).__name__, str(e))
    java = getattr(e, "java_exception", None) or getattr(e, "_origin", None)  # Py4JJavaError, pyspark's errors
    root = None
    try:
        while java is not None:
            root, java = java, java.getCause()
        if root is not None:
            cause = line(root.getClass().getSimpleName(), root.getMessage())
            return own if cause.split(": ", 1)[-1] in own else f"{own}; caused by {cause}"
    except Exception:  # the JVM is gone: its error is all there is
        pass
    inner = e
    while inner.__cause__ is not None:
        inner = inner.__cause__
    return own if inner is e else f"{own}; caused by {line(type(inner).__name__, str(inner))}"


if __name__ == "__main__":
    sys.exit(main())
