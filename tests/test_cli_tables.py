"""The `idivm` command: table create/list, exit codes and error output."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from idivm import cli
from idivm.errors import DataError, Span, SqlppSyntaxError
from idivm.warehouse import Warehouse


def run(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def users(tmp_path):
    path = tmp_path / "users.jsonl"
    rows = [{"user_id": i, "name": f"u{i}", "reviews": [{"stars": i}]} for i in range(1, 4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_create_and_list(capsys, tmp_path, users):
    wh = str(tmp_path / "wh")
    code, out, err = run(capsys, "--warehouse", wh, "table", "create", "users", "--key", "user_id",
                         "--from", str(users))
    assert (code, err) == (0, "")
    assert out == "created table users (key user_id): 3 rows, version 0\n"
    (tmp_path / "pairs.csv").write_text("a,b,v\n1,1,x\n1,2,y\n")
    code, out, _ = run(capsys, "--warehouse", wh, "table", "create", "pairs", "--key", "a,b",
                       "--from", str(tmp_path / "pairs.csv"))
    assert code == 0
    code, out, err = run(capsys, "--warehouse", wh, "table", "list")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "name   key      rows  version",
        "pairs  a,b         2        0",
        "users  user_id     3        0",
    ]


def test_list_of_empty_warehouse_creates_nothing(capsys, tmp_path):
    code, out, _ = run(capsys, "--warehouse", str(tmp_path / "none"), "table", "list")
    assert (code, out) == (0, "no tables\n")
    assert not (tmp_path / "none").exists()


def test_format_option_overrides_extension(capsys, tmp_path, users):
    renamed = users.rename(tmp_path / "users.data")
    code, _, err = run(capsys, "--warehouse", str(tmp_path / "wh"), "table", "create", "u", "--key", "user_id",
                       "--from", str(renamed), "--format", "jsonl")
    assert (code, err) == (0, "")


def test_warehouse_from_environment(capsys, tmp_path, users, monkeypatch):
    monkeypatch.setenv("IDIVM_WAREHOUSE", str(tmp_path / "envwh"))
    assert run(capsys, "table", "create", "u", "--key", "user_id", "--from", str(users))[0] == 0
    assert [t.name for t in Warehouse(tmp_path / "envwh").tables()] == ["u"]


@pytest.mark.parametrize("args, expected", [
    (["table", "create", "u", "--key", "nope", "--from", "{users}"], "key column nope not found"),
    (["table", "create", "u", "--key", "user_id", "--from", "{tmp}/missing.jsonl"], "no such file"),
    (["table", "create", "u", "--key", "user_id", "--from", "{tmp}/x.xml"], "cannot infer the format"),
    (["table", "create", "../bad", "--key", "user_id", "--from", "{users}"], "invalid table name"),
    (["table", "create", "u", "--key", "", "--from", "{users}"], "needs a key"),
])
def test_idivm_errors_exit_1_with_one_line(capsys, tmp_path, users, args, expected):
    args = [a.format(users=users, tmp=tmp_path) for a in args]
    code, out, err = run(capsys, "--warehouse", str(tmp_path / "wh"), *args)
    assert code == 1 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and expected in err
    assert "Traceback" not in err
    assert not (tmp_path / "wh").exists()


def test_duplicate_table_is_an_error(capsys, tmp_path, users):
    wh = str(tmp_path / "wh")
    assert run(capsys, "--warehouse", wh, "table", "create", "u", "--key", "user_id", "--from", str(users))[0] == 0
    code, _, err = run(capsys, "--warehouse", wh, "table", "create", "u", "--key", "user_id", "--from", str(users))
    assert code == 1 and err == "error: a table named 'u' already exists\n"


@pytest.mark.parametrize("args", [
    ["table", "create", "u", "--from", "x.jsonl"],                      # missing --key
    ["table", "create", "u", "--key", "k", "--from", "x", "--format", "xml"],
    ["frobnicate"],
    ["table", "create"],
    ["--no-such-option", "table", "list"],
])
def test_usage_errors_exit_2(capsys, tmp_path, args):
    code, _, err = run(capsys, "--warehouse", str(tmp_path / "wh"), *args)
    assert code == 2 and "Usage:" in err and "Traceback" not in err


def test_help_and_version_exit_0(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "table" in out
    code, out, _ = run(capsys, "--version")
    assert code == 0 and "idivm" in out


def test_internal_error_without_and_with_debug(capsys, tmp_path, monkeypatch):
    def boom(self):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(Warehouse, "tables", boom)
    code, _, err = run(capsys, "--warehouse", str(tmp_path), "table", "list")
    assert code == 1 and err == "internal error: RuntimeError: boom (run with --debug for the traceback)\n"
    code, _, err = run(capsys, "--warehouse", str(tmp_path), "--debug", "table", "list")
    assert code == 1 and "Traceback" in err and err.rstrip().endswith("internal error: RuntimeError: boom")


def test_error_with_source_prints_excerpt(capsys, tmp_path, monkeypatch):
    def fail(self):
        raise SqlppSyntaxError("unexpected 'FORM'", Span(1, 10), source="SELECT u FORM users u", filename="v.sqlpp")

    monkeypatch.setattr(Warehouse, "tables", fail)
    code, _, err = run(capsys, "--warehouse", str(tmp_path), "table", "list")
    assert code == 1
    assert err.splitlines() == ["error: v.sqlpp:1:10: unexpected 'FORM'", "  SELECT u FORM users u", "           ^"]


def test_debug_shows_traceback_for_idivm_errors(capsys, tmp_path, monkeypatch):
    def fail(self):
        raise DataError("bad data")

    monkeypatch.setattr(Warehouse, "tables", fail)
    code, _, err = run(capsys, "--warehouse", str(tmp_path), "--debug", "table", "list")
    assert code == 1 and "Traceback" in err and err.rstrip().endswith("error: bad data")


def test_console_entry_point_in_a_subprocess(tmp_path, users):
    base = [sys.executable, "-m", "idivm.cli", "--warehouse", str(tmp_path / "wh")]
    ok = subprocess.run([*base, "table", "create", "u", "--key", "user_id", "--from", str(users)],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([*base, "table", "create", "v", "--key", "name,nope", "--from", str(users)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert bad.stderr == f"error: {users}: key column nope not found; columns: user_id, name, reviews\n"
    usage = subprocess.run([*base, "table", "create", "v"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2
