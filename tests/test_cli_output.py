"""What the command line prints around the work: errors in one line with their cause, Spark's
and Py4J's logs kept off the terminal, progress bars only on a terminal."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from idivm import cli


def test_error_with_cause_names_the_innermost_cause():
    try:
        try:
            raise FileNotFoundError("no such file: x.parquet\nsecond line")
        except FileNotFoundError as inner:
            raise RuntimeError("reading table t failed\n  at somewhere") from inner
    except RuntimeError as e:
        text = cli.error_with_cause(e)
    assert text == "RuntimeError: reading table t failed; caused by FileNotFoundError: no such file: x.parquet"
    assert cli.error_with_cause(ValueError("")) == "ValueError"


@pytest.mark.slow
def test_a_failing_spark_command_prints_one_line(tmp_path):
    """A table whose data files are gone: Spark fails reading it; the terminal gets one line,
    none of Spark's log (which goes to the driver log instead) and no traceback."""
    rows = tmp_path / "t.jsonl"
    rows.write_text('{"id": 1, "x": 2}\n{"id": 2, "x": 3}\n', encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parents[1])}

    def idivm(*args):
        return subprocess.run([sys.executable, "-m", "idivm.cli", "--warehouse", str(tmp_path / "wh"), *args],
                              capture_output=True, text=True, env=env, timeout=600)

    assert idivm("table", "create", "t", "--key", "id", "--from", str(rows)).returncode == 0
    for data in (tmp_path / "wh").rglob("*.parquet"):
        data.unlink()
    failed = idivm("show", "t")
    assert failed.returncode == 1 and failed.stdout == ""
    assert len(failed.stderr.splitlines()) == 1, failed.stderr
    assert failed.stderr.startswith("internal error: ") and "does not exist" in failed.stderr
    assert "WARN" not in failed.stderr and "Traceback" not in failed.stderr


def test_progress_is_silent_off_a_terminal():
    from idivm.progress import Progress

    stream = io.StringIO()  # not a terminal
    with Progress("maintain", stream=stream) as progress:
        progress("phone_cost: merging 3 i-diff rows")
        progress.step(5)
    assert stream.getvalue() == ""


def test_progress_draws_on_a_terminal():
    from idivm.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    with Progress("maintain", total=2, stream=stream) as progress:
        progress("phone_cost: merging 3 i-diff rows")
        progress.step()
        progress.step()
    drawn = stream.getvalue()
    assert "maintain" in drawn and "merging 3 i-diff rows" in drawn and "2/2" in drawn
