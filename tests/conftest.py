"""Shared fixtures: one SparkSession for the whole run, warehouses in temporary directories.

Options: ``--runslow`` also runs tests marked ``slow``; ``--update-goldens``
rewrites golden files instead of comparing with them (see the
``update_goldens`` fixture); ``--asterixdb DIR`` runs the SQL++ conformance
cases (tests/conformance).
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite golden files with the current output")
    parser.addoption("--asterixdb", metavar="DIR", default=None,
                     help="a local copy of apache/asterixdb (checkout or git directory): run the "
                          "SQL++ conformance cases of tests/conformance against it")
    parser.addoption("--asterixdb-groups", metavar="G,G", default=None,
                     help="only these groups of the conformance cases")
    parser.addoption("--asterixdb-report", metavar="FILE", default=None,
                     help="write the conformance outcome of every query as JSON lines to FILE")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def update_goldens(request) -> bool:
    """Whether golden files should be rewritten rather than compared."""
    return request.config.getoption("--update-goldens")


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test run (local[2], 2 shuffle partitions, UI off)."""
    from idivm.storage.spark import get_session

    session = get_session("local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()


@pytest.fixture
def make_warehouse(spark, tmp_path_factory):
    """Factory: ``make_warehouse()`` returns a Warehouse in a fresh temporary directory
    that uses the session's SparkSession (``storage=``: its storage engine)."""
    from idivm.warehouse import Warehouse

    def make(name: str = "wh", storage: str | None = None) -> Warehouse:
        return Warehouse(tmp_path_factory.mktemp(name), spark=spark, storage=storage)

    return make


@pytest.fixture(scope="session", autouse=True)
def small_view_files():
    """Views maintained by ID and their index tables are stored in files of about 4 KiB in
    tests (instead of CLUSTERED_FILE_BYTES and INDEX_FILE_BYTES), so that tables of a few
    dozen rows span several files and every run reads and rewrites only some of them."""
    from idivm.exec import indexes
    from idivm.storage import layout

    defaults = layout.CLUSTERED_FILE_BYTES, indexes.INDEX_FILE_BYTES
    layout.CLUSTERED_FILE_BYTES = indexes.INDEX_FILE_BYTES = 4096
    yield
    layout.CLUSTERED_FILE_BYTES, indexes.INDEX_FILE_BYTES = defaults


@pytest.fixture
def run(capsys, spark):
    """``run(*args) -> (exit code, stdout, stderr)`` of one in-process invocation of the
    command line.

    The CLI applies idivm's session settings to the shared SparkSession; the test
    run's shuffle partitions are put back afterwards.
    """
    from idivm import cli

    partitions = spark.conf.get("spark.sql.shuffle.partitions")

    def invoke(*args):
        try:
            code = cli.main([str(a) for a in args])
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", partitions)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke
