"""The one place that creates a SparkSession, and caches of its DataFrames.

Everything else receives a session (``Warehouse.spark``, test fixtures) and
never builds its own.  The embedded default is ``local[*]``; a cluster is
chosen with the ``master`` argument or ``IDIVM_SPARK_MASTER``.  Sessions are
quiet (driver logs at ERROR, no progress bars, no UI), use UTC, write
microsecond timestamps (the only precision Delta Lake stores), exchange
data with Python through Arrow and have delta-spark's extension and catalog
(its jars are resolved by Spark at the first start and cached).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from idivm.errors import SetupError
from idivm.provenance.ids import HIDDEN

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

DEFAULT_MASTER = "local[*]"
MASTER_ENV = "IDIVM_SPARK_MASTER"
SHUFFLE_PARTITIONS = 4

JAVA_MISSING = ("no Java runtime found: install Java 17 or 21 "
                "(e.g. 'apt-get install openjdk-17-jre-headless') or set JAVA_HOME")

_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")

SESSION_CONFIG: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # the driver runs the work in local mode: Spark's default heap (1 GiB) runs out on the
    # state of a long maintenance session at 100,000s of rows
    "spark.driver.memory": "4g",
    # a maintenance run is many small queries: keep the plans of the last ones only
    "spark.sql.ui.retainedExecutions": "100",
    # tables are read by the list of their active files: stat them in the driver, never by a
    # Spark job (which costs about a second once a table has more than 32 files)
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
    # a restricted read (``key IN (few values)``) gives Parquet the range of the values, which
    # the files' statistics prune as well as the values themselves would, but without Parquet's
    # per-value dictionary filtering: for 2-10 random keys of a table of millions of rows,
    # 0.15-0.3 s instead of 0.7-0.8 s
    "spark.sql.parquet.pushdown.inFilterThreshold": "1",
    # a maintenance run compiles the code of some 30-90 small queries, most of them the same
    # from run to run; Spark's default cache of 100 classes evicts them before the next run
    # (one view at 2M businesses: 32 compilations, 0.69 s, in its second run; 5 with this)
    "spark.sql.codegen.cache.maxEntries": "2000",
    # pyspark records the Python call site of every DataFrame and Column call in the JVM, for
    # error messages: some five Py4J round trips per call, a third of a maintenance run's
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Delta Lake through delta-spark: ``format("delta")`` reads (time travel, the change data
    # feed) and MERGE / DELETE / overwrite by the executors (see :mod:`idivm.storage.delta`)
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # every table delta-spark creates keeps its change data feed, as delta-rs's do
    "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "true",
    # a table's log is replayed by a Spark job of this many tasks (default 50: about a second
    # per snapshot of a small table on two cores)
    "spark.databricks.delta.snapshotPartitions": "2",
}


def check_java() -> str:
    """Return the path of the ``java`` executable Spark will launch.

    Spark's launcher uses ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set and
    ``java`` on ``PATH`` otherwise; this checks the same places.  Raises
    :class:`SetupError` (one line, saying how to install Java) when there is none.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home, "bin", "java")
        if java.is_file() and os.access(java, os.X_OK):
            return str(java)
        raise SetupError(f"JAVA_HOME={java_home} has no bin/java: point JAVA_HOME at a Java 17 or 21 "
                         "runtime, or unset it to use 'java' from PATH")
    java = shutil.which("java")
    if java is None:
        raise SetupError(JAVA_MISSING)
    return java


def resolve_master(master: str | None = None) -> str:
    """The Spark master URL: the argument, else ``$IDIVM_SPARK_MASTER``, else ``local[*]``."""
    return master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER


def get_session(master: str | None = None, jvm_log: Path | None = None) -> "SparkSession":
    """Create (or return the already active) SparkSession configured for idivm.

    If a session is already active in this process, Spark returns it; its
    runtime settings (time zone, shuffle partitions, ...) are then set to ours,
    while its master stays what it was.  ``jvm_log``: a file that the Java
    driver's standard error (its log, the JVM's own warnings) is appended to
    instead of this process's standard error (the command line's, but with ``--debug``).
    """
    check_java()
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    from delta import configure_spark_with_delta_pip

    builder = SparkSession.builder.master(resolve_master(master)).appName("idivm")
    for key, value in SESSION_CONFIG.items():
        builder = builder.config(key, value)
    # delta-spark's jars: resolved by Spark's package resolution at the first start (into the
    # Ivy cache, ``~/.ivy2.5.2``); the files it resolved are listed in idivm's cache, and later
    # sessions load them directly, without resolving again (seconds of every start)
    jars = cached_jars()
    builder = builder.config("spark.jars", ",".join(jars)) if jars else configure_spark_with_delta_pip(builder)
    if _LOG_CONFIG.is_file():
        builder = builder.config("spark.driver.extraJavaOptions",
                                 f"-Dlog4j2.configurationFile={_LOG_CONFIG.as_uri()}")
    try:
        with stderr_to(jvm_log):
            spark = builder.getOrCreate()
    except PySparkRuntimeError as e:
        if getattr(e, "getCondition", lambda: None)() == "JAVA_GATEWAY_EXITED" or "JAVA_GATEWAY" in str(e):
            raise SetupError("Spark could not start its Java gateway: check that Java 17 or 21 is installed "
                             "(JAVA_HOME or 'java' on PATH), that the Spark master is reachable and that "
                             "delta-spark's jars can be resolved (Maven Central, or Spark's Ivy cache)") from e
        raise
    spark.sparkContext.setLogLevel("ERROR")
    if not jars:
        remember_jars(spark)
    return spark


@contextlib.contextmanager
def stderr_to(path: Path | None) -> Iterator[None]:
    """This process's standard error (file descriptor 2, which the processes it starts inherit)
    appended to ``path`` while in the context; nothing changes when ``path`` is None or cannot be
    opened."""
    if path is None:
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(target, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


CACHE_ENV = "IDIVM_CACHE_DIR"


def cache_dir() -> Path:
    """idivm's cache: ``$IDIVM_CACHE_DIR``, else ``$XDG_CACHE_HOME/idivm``, else ``~/.cache/idivm``."""
    return Path(os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "idivm")


def jvm_log_path() -> Path:
    """Where the command line sends the Java driver's standard error (:func:`get_session`)."""
    return cache_dir() / "spark-driver.log"


def _jar_list() -> Path:
    """The file listing the jars that delta-spark resolved to for this pyspark and delta-spark,
    in :func:`cache_dir`."""
    from importlib.metadata import version

    import pyspark

    return cache_dir() / f"jars-delta-spark-{version('delta-spark')}-pyspark-{pyspark.__version__}.txt"


def cached_jars() -> list[str]:
    """The jars of delta-spark listed by an earlier session (:func:`remember_jars`), when every
    one of them is still there; else none (Spark resolves them again)."""
    try:
        jars = [line for line in _jar_list().read_text(encoding="utf-8").splitlines() if line]
    except OSError:
        return []
    if not jars or not all(Path(j.removeprefix("file://")).is_file() for j in jars):
        return []
    return jars


def remember_jars(spark: "SparkSession") -> None:
    """List the jar files Spark resolved delta-spark's package to (``spark.jars``) for
    :func:`cached_jars`; nothing when the session did not resolve it (a session created
    elsewhere) or the cache cannot be written."""
    conf = spark.sparkContext.getConf()
    jars = [j for j in (conf.get("spark.jars") or "").split(",") if j]
    if "io.delta" not in (conf.get("spark.jars.packages") or "") or not any("delta-spark" in j for j in jars):
        return
    target = _jar_list()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}")
        temporary.write_text("\n".join(jars) + "\n", encoding="utf-8")
        temporary.replace(target)
    except OSError:
        pass


def by_name(names) -> list["Column"]:
    """The columns ``names`` of a DataFrame, each quoted (:func:`idivm.storage.delta.quoted`):
    a name with dots, backquotes or spaces is one column, never a path into a struct.  Every
    selection of columns by name whose names come from users goes through here."""
    from pyspark.sql import functions as F

    from idivm.storage.delta.merge import quoted

    return [F.col(quoted(n)) for n in names]


def is_local(df: "DataFrame") -> bool:
    """Whether Spark's optimizer turns ``df`` into rows it holds in the driver (a local
    relation: built from rows in memory, or known to be empty), which it collects without a
    job; not for timestamps, whose collected values depend on the driver's time zone."""
    from pyspark.sql.types import TimestampNTZType, TimestampType

    if any(isinstance(t, (TimestampType, TimestampNTZType)) for t in nested_types(df.schema)):
        return False
    return df._jdf.queryExecution().optimizedPlan().nodeName() == "LocalRelation"


def local_rows(df: "DataFrame") -> "pa.Table":
    """The rows of a local ``df`` (:func:`is_local`) as an Arrow table, collected without a job."""
    import pyarrow as pa

    from idivm.storage.schema import arrow_schema

    schema = arrow_schema(df.schema, nullable=True)
    return pa.Table.from_pylist([r.asDict(recursive=True) for r in df.collect()], schema=schema)


def to_arrow(df: "DataFrame", adaptive: bool | None = None) -> "pa.Table":
    """``df``'s rows as an Arrow table: collected without a job when it is local
    (:func:`is_local`), else by Spark (:func:`collect`, ``adaptive`` as there)."""
    return local_rows(df) if is_local(df) else collect(df, adaptive)


#: the leaves of a plan that hold their rows in the driver (see :func:`collect`)
_IN_MEMORY_LEAVES = frozenset({"LocalRelation", "OneRowRelation"})


def collect(df: "DataFrame", adaptive: bool | None = None) -> "pa.Table":
    """``df``'s rows as an Arrow table, by Spark.  A query over rows the driver holds only (every
    leaf of its optimized plan a local relation: i-diff rows aggregated, joined or unioned)
    runs without adaptive query execution, which would run each of its shuffles' stages as a
    job of its own to re-plan what is small already: an aggregate of a few hundred i-diff rows
    in one job instead of two.  A query that reads a table keeps it (it prunes the empty
    branches of a run's queries at run time, and picks the joins by the sizes it finds), unless
    ``adaptive`` is False (a caller that knows its query reads few rows: the distinct values of
    a column of reads restricted to a few keys)."""
    conf = df.sparkSession.conf
    key = "spark.sql.adaptive.enabled"
    if conf.get(key) != "true" or adaptive or (adaptive is None and not _in_memory(df)):
        return arrow_rows(df)
    conf.set(key, "false")
    try:
        return arrow_rows(df)
    finally:
        conf.set(key, "true")


def arrow_rows(df: "DataFrame") -> "pa.Table":
    """``df.toArrow()``, typed with every field nullable: Spark may declare a field of a struct
    not null whose value is null where the whole struct is (a LEFT JOIN's padded side), which
    Arrow refuses to read as non-nullable."""
    import pyarrow as pa

    from idivm.storage.schema import arrow_schema

    schema = arrow_schema(df.schema, nullable=True)
    batches = df._collect_as_arrow(split_batches=False, empty_list_if_zero_records=False)
    if not any(b.num_rows for b in batches):  # with a chunk per column, as Spark's conversions expect (a
        return schema.empty_table().combine_chunks()  # cast of no rows may leave a column none)
    return pa.Table.from_batches(batches).cast(schema)


def small_result(df: "DataFrame", max_input_bytes: int) -> "pa.Table | None":
    """``df``'s rows as an Arrow table (:func:`to_arrow`, in ``df``'s order) when its plan reads at
    most ``max_input_bytes`` (the sizes Spark knows of the files and rows at its leaves); else
    None, computing nothing."""
    leaves = df._jdf.queryExecution().optimizedPlan().collectLeaves()
    read = 0
    for i in range(leaves.size()):
        size = leaves.apply(i).stats().sizeInBytes()  # a Scala BigInt, converted by Py4J
        read += int(size if isinstance(size, int) else size.toString())
        if read > max_input_bytes:
            return None
    return to_arrow(df)


def _in_memory(df: "DataFrame") -> bool:
    """Whether every leaf of ``df``'s optimized plan holds its rows in the driver."""
    leaves = df._jdf.queryExecution().optimizedPlan().collectLeaves()
    return all(leaves.apply(i).nodeName() in _IN_MEMORY_LEAVES for i in range(leaves.size()))


def nested_types(t):
    """``t`` and every type nested in it."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    yield t
    if isinstance(t, StructType):
        for f in t.fields:
            yield from nested_types(f.dataType)
    elif isinstance(t, ArrayType):
        yield from nested_types(t.elementType)
    elif isinstance(t, MapType):
        yield from nested_types(t.keyType)
        yield from nested_types(t.valueType)


#: the rows of an intermediate result of a maintenance run that the delta-spark engines bring into
#: the driver at most (:meth:`Caches.computed`)
IN_MEMORY_MAX_ROWS = 10_000

#: the column that makes a cached plan its owner's own (see :class:`Caches`)
_CACHE_TOKEN = f"{HIDDEN}cache_token"


class Caches:
    """The DataFrames one owner (a maintenance run, a comparison) keeps cached, apart from every
    other owner's; :meth:`release` unpersists them.

    Spark keys its cache by plan: a second ``cache()`` of an equal plan (another view's run in
    another thread, reading the same base rows) shares the first one's entry, and when the first
    owner unpersists it the blocks go from under the other's running job, which Spark then fails
    ("Block rdd_N does not exist").  Here the cached plan carries a column holding a literal of
    this owner, which the frame returned projects away again: equal plans of one owner still
    share an entry (one run reads them one after the other), no other owner's plan matches."""

    def __init__(self, in_memory_max_rows: int | None = None) -> None:
        """``in_memory_max_rows``: the rows :meth:`computed` brings into the driver at most
        (None: all; a bound costs a Spark job or two more per result, as Spark takes the
        rows partition by partition)."""
        self._token = uuid.uuid4().hex
        self._frames: list["DataFrame"] = []
        self.in_memory_max_rows = in_memory_max_rows

    def add(self, df: "DataFrame") -> "DataFrame":
        """``df``, cached by this owner."""
        from pyspark.sql import functions as F

        own = df.select("*", F.lit(self._token).alias(_CACHE_TOKEN)).cache()
        self._frames.append(own)
        return own.drop(_CACHE_TOKEN)

    def computed(self, df: "DataFrame") -> tuple["pa.Table | None", "DataFrame"]:
        """``df`` evaluated now: (its rows, an in-memory DataFrame of them), unless it has more
        than ``in_memory_max_rows`` rows: then (None, ``df`` cached by this owner), so that no
        result of the size of a table or of a large batch passes through the driver."""
        bound = self.in_memory_max_rows
        local = is_local(df)  # the rows are in the driver already: collected without a job
        if local:
            table = local_rows(df)
        else:
            table = collect(df) if bound is None else collect(df.limit(bound + 1))
        if bound is None or table.num_rows <= bound:
            return table, df if local else df.sparkSession.createDataFrame(table, df.schema)
        return None, self.add(df)

    def __iter__(self):
        """The frames held (with the owner's column)."""
        return iter(self._frames)

    def __len__(self) -> int:
        return len(self._frames)

    def release(self) -> None:
        for df in self._frames:
            df.unpersist()
        self._frames.clear()
