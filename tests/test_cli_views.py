"""The `idivm` command end to end on views: define, show, explain, and its errors (demo: test_demo.py).

Commands run in-process through ``idivm.cli.main`` (they reuse the test run's
SparkSession); two checks run the console script in a subprocess, on paths that
need no Spark.  Every error must exit 1 with one ``error: …`` line (plus, for
errors in query text, the offending line and a caret) and leave the warehouse
exactly as it was.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


BUSINESSES = [
    {"business_id": "b1", "name": "Garaje", "city": "San Francisco", "categories": ["Mexican", "Burgers"]},
    {"business_id": "b2", "name": "Zuni Cafe", "city": "San Francisco", "categories": []},
    {"business_id": "b3", "name": "Graze", "city": "Madison", "categories": ["Tapas"]},
    {"business_id": "b4", "name": "Tartine", "city": "San Francisco", "categories": ["Bakery"]},
]
REVIEWS = [
    {"review_id": "r1", "user_id": "u1", "business_id": "b1", "stars": 5},
    {"review_id": "r2", "user_id": "u2", "business_id": "b1", "stars": 3},
    {"review_id": "r3", "user_id": "u1", "business_id": "b3", "stars": 4},
    {"review_id": "r4", "user_id": "u1", "business_id": "b4", "stars": None},
]
USERS = [
    {"user_id": "u1", "user_name": "Ana", "friends": ["u2"], "elite": [2019, 2020]},
    {"user_id": "u2", "user_name": "Bo", "friends": [], "elite": []},
]

SF_REVIEWS = """\
-- San Francisco businesses with their reviews and authors
CREATE VIEW sf_reviews AS
SELECT b.business_id,
       (SELECT r.review_id, r.stars, u.user_name
        FROM reviews r, users u
        WHERE r.user_id = u.user_id AND r.business_id = b.business_id) AS reviews
FROM businesses b
WHERE b.city = "San Francisco"
"""

SF_REVIEWS_ROWS = [
    {"business_id": "b1", "reviews": [{"review_id": "r1", "stars": 5, "user_name": "Ana"},
                                      {"review_id": "r2", "stars": 3, "user_name": "Bo"}]},
    {"business_id": "b2", "reviews": []},
    {"business_id": "b4", "reviews": [{"review_id": "r4", "stars": None, "user_name": "Ana"}]},
]


def canonical(value):
    """Bags compared without order, at every level."""
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted((canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    return value


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def wh(tmp_path, run):
    """A warehouse directory with businesses, reviews and users created through the CLI."""
    data = tmp_path / "data"
    data.mkdir()
    path = tmp_path / "wh"
    for name, key, rows in [("businesses", "business_id", BUSINESSES), ("reviews", "review_id", REVIEWS),
                            ("users", "user_id", USERS)]:
        code, out, err = run("--warehouse", path, "table", "create", name, "--key", key,
                             "--from", write_jsonl(data / f"{name}.jsonl", rows))
        assert (code, err) == (0, ""), err
    return path


def view_file(tmp_path: Path, text: str, name: str = "view.sqlpp") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def snapshot(wh: Path):
    """What an error must not change: the catalog's bytes and every path under the warehouse."""
    return (wh / "catalog.json").read_bytes(), sorted(str(p.relative_to(wh)) for p in wh.rglob("*"))


def assert_one_line_error(code, out, err, expected: str):
    assert code == 1 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert expected in err, err
    assert "Traceback" not in err


# --- define, show, explain -------------------------------------------------------------------------

def test_define_then_show_jsonl_and_table(run, wh, tmp_path):
    code, out, err = run("--warehouse", wh, "define", view_file(tmp_path, SF_REVIEWS))
    assert (code, err) == (0, "")
    assert out == "defined view sf_reviews: 3 rows, version 0, strategy auto\n"

    code, out, err = run("--warehouse", wh, "show", "sf_reviews", "--format", "jsonl")
    assert (code, err) == (0, "")
    rows = [json.loads(line) for line in out.splitlines()]
    assert canonical(rows) == canonical(SF_REVIEWS_ROWS)

    code, out, err = run("--warehouse", wh, "show", "sf_reviews", "--format", "table", "--limit", "2")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["business_id", "reviews"]
    assert len(lines) == 4 and lines[-1] == "(2 rows)"
    cells = {line.split(maxsplit=1)[0]: line.split(maxsplit=1)[1] for line in lines[1:3]}
    assert set(cells) <= {"b1", "b2", "b4"}
    expected_cells = {"b1": '[{"review_id": "r', "b2": "[]", "b4": '[{"review_id": "r4", "stars": null, '
                                                                    '"user_name": "Ana"}]'}
    for business, cell in cells.items():
        assert cell.startswith(expected_cells[business])


def test_show_of_a_base_table(run, wh):
    code, out, err = run("--warehouse", wh, "show", "users", "--format", "jsonl")
    assert (code, err) == (0, "")
    assert canonical([json.loads(line) for line in out.splitlines()]) == canonical(USERS)


def test_explain_by_name_and_by_file(run, wh, tmp_path):
    path = view_file(tmp_path, SF_REVIEWS)
    before = snapshot(wh)
    code, out, err = run("--warehouse", wh, "explain", path)  # a file: nothing is defined
    assert (code, err) == (0, "")
    assert out.startswith("view sf_reviews: {business_id: string, reviews: {{")
    for operator in ("ReturnBag", "ApplyPlan", "ScanCollection table businesses AS b",
                     "ScanCollection table reviews AS r", "ScanCollection table users AS u"):
        assert operator in out
    assert snapshot(wh) == before

    assert run("--warehouse", wh, "define", path)[0] == 0
    code, by_name, err = run("--warehouse", wh, "explain", "sf_reviews")
    assert (code, err) == (0, "")
    # the same, but that a defined view's provenance indexes say where they are stored, and
    # its strategy (auto, with what its recorded runs estimate) is named
    stored = re.compile(r"^    table indexes/\d+; ", re.M)
    strategy = re.compile(r"^strategy: auto \(auto: .*\)\n", re.M)
    assert stored.search(by_name) and not stored.search(out)
    assert strategy.search(by_name) and not strategy.search(out)
    assert strategy.sub("", stored.sub("    ", by_name)) == out


# --- errors ----------------------------------------------------------------------------------------

QUERY_ERRORS = [
    pytest.param("CREATE VIEW v AS\nSELECT u.user_id\nFROM users u\nWHERE u.fans >> 1\n",
                 4, 15, "unexpected '>'", id="syntax-error"),
    pytest.param("CREATE VIEW v AS\nSELECT u.user_id\nFROM users u\nORDER BY u.user_id\n",
                 4, 1, "ORDER BY", id="order-by-in-view"),
    pytest.param("CREATE VIEW v AS\nSELECT t.x\nFROM nosuch t\n", 3, 6, "'nosuch'", id="unknown-table"),
    pytest.param("CREATE VIEW v AS\n  SELECT user_name, stars\n  FROM users u\n", 2, 21, "unknown name 'stars'",
                 id="unknown-column"),
]


@pytest.mark.parametrize("text, line, column, message", QUERY_ERRORS)
def test_query_errors_show_location_line_and_caret(run, wh, tmp_path, text, line, column, message):
    path = view_file(tmp_path, text, "bad.sqlpp")
    before = snapshot(wh)
    code, out, err = run("--warehouse", wh, "define", path)
    assert code == 1 and out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 3, err
    assert lines[0].startswith(f"error: {path}:{line}:{column}: ") and message in lines[0], err
    assert lines[1] == "  " + text.splitlines()[line - 1]
    assert lines[2] == "  " + " " * (column - 1) + "^"
    assert snapshot(wh) == before
    assert run("--warehouse", wh, "explain", path)[:2] == (1, "")


def test_define_warns_of_fields_no_record_has(run, wh, tmp_path):
    """A field no row of the table has is MISSING (SQL++), which ``define`` says on standard
    error with its position, the view defined."""
    text = "CREATE VIEW v_nope AS\nSELECT b.business_id, (SELECT VALUE r.nope FROM reviews r) AS x\nFROM businesses b\n"
    path = view_file(tmp_path, text, "nope.sqlpp")
    code, out, err = run("--warehouse", wh, "define", path)
    assert code == 0 and out.startswith("defined view v_nope: "), err
    assert err == f"warning: {path}:2:37: r has no field 'nope' (fields: " + err.split("(fields: ")[1]
    assert err.endswith("): it is MISSING\n") and err.count("\n") == 1


def test_defining_an_existing_name_is_an_error(run, wh, tmp_path):
    assert run("--warehouse", wh, "define", view_file(tmp_path, SF_REVIEWS))[0] == 0
    before = snapshot(wh)
    code, out, err = run("--warehouse", wh, "define", view_file(tmp_path, SF_REVIEWS, "again.sqlpp"))
    assert_one_line_error(code, out, err, "error: a view named 'sf_reviews' already exists")
    same_as_table = "CREATE VIEW users AS SELECT u.user_id FROM users u"
    code, out, err = run("--warehouse", wh, "define", view_file(tmp_path, same_as_table, "users.sqlpp"))
    assert_one_line_error(code, out, err, "error: a table named 'users' already exists")
    assert snapshot(wh) == before


@pytest.mark.parametrize("args, expected", [
    (["define", "{tmp}/missing.sqlpp"], "missing.sqlpp"),
    (["define", "{tmp}/missing.txt"], "missing.txt"),
    (["define", "{tmp}"], "directory"),
    (["explain", "nosuch"], "nosuch"),
    (["show", "nosuch"], "unknown view 'nosuch'"),
])
def test_missing_views_and_files(run, wh, tmp_path, args, expected):
    before = snapshot(wh)
    code, out, err = run("--warehouse", wh, *[a.format(tmp=tmp_path) for a in args])
    assert_one_line_error(code, out, err, expected)
    assert snapshot(wh) == before


@pytest.mark.parametrize("content, key, expected", [
    ('{"id": 1, "v": "a"}\n{"id": 2, "v": "b"}\n{"id": 1, "v": "c"}\n', "id", "duplicate key id=1 at lines 1, 3"),
    ('{"id": 1, "v": "a"}\n{"id": null, "v": "b"}\n', "id", "key column id is null at line 2"),
    ('{"id": 1, "v": "a"}\n{"v": "b"}\n', "id", "key column id is null at line 2"),
    ('{"id": 1, "v": "a"}\n', "nope", "key column nope not found"),
    ('{"id": 1, "v": "a"}\n{"id": 2, "v": \n', "id", "bad.jsonl:2: invalid JSON"),
    ('[1, 2]\n', "id", "bad.jsonl:1"),
    (b'{"id": 1, "v": "\xff"}\n', "id", "not UTF-8"),
    (None, "id", "no such file"),
])
def test_bad_table_data_changes_nothing(run, wh, tmp_path, content, key, expected):
    source = tmp_path / "bad.jsonl"
    if isinstance(content, bytes):
        source.write_bytes(content)
    elif content is not None:
        source.write_text(content, encoding="utf-8")
    before = snapshot(wh)
    code, out, err = run("--warehouse", wh, "table", "create", "t", "--key", key, "--from", source)
    assert_one_line_error(code, out, err, expected)
    assert snapshot(wh) == before


@pytest.mark.parametrize("args", [
    ["show"],
    ["define"],
    ["explain"],
    ["show", "sf_reviews", "--format", "xml"],
    ["show", "sf_reviews", "--limit", "-1"],
])
def test_usage_errors_exit_2(run, wh, args):
    before = snapshot(wh)
    code, out, err = run("--warehouse", wh, *args)
    assert code == 2 and "Usage:" in err and "Traceback" not in err
    assert snapshot(wh) == before


# --- the console script ------------------------------------------------------------------------------

def console_script() -> list[str]:
    script = Path(sys.executable).with_name("idivm")
    found = str(script) if script.exists() else shutil.which("idivm")
    return [found] if found else [sys.executable, "-m", "idivm.cli"]


def test_console_script_reports_a_syntax_error_without_spark(wh, tmp_path):
    path = view_file(tmp_path, "CREATE VIEW v AS\nSELECT u.user_id FROM users u WHERE\n", "bad.sqlpp")
    before = snapshot(wh)
    done = subprocess.run([*console_script(), "--warehouse", str(wh), "define", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 3 and lines[0].startswith(f"error: {path}:"), done.stderr
    assert lines[1] == "  SELECT u.user_id FROM users u WHERE" and lines[2].endswith("^")
    assert snapshot(wh) == before


def test_console_script_reports_an_unknown_view_without_starting_spark(wh):
    done = subprocess.run([*console_script(), "--warehouse", str(wh), "show", "nosuch"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == "error: unknown view 'nosuch'; there are no views\n"  # no JVM start-up noise


def test_scalar_subquery_with_several_values_is_a_data_error(tmp_path, spark):
    from idivm.errors import DataError
    from idivm.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh", spark=spark)
    wh.create_table("t", "k", [{"k": 1, "g": "a"}, {"k": 2, "g": "a"}, {"k": 3, "g": "b"}])
    with pytest.raises(DataError, match="view bad: a subquery used as a scalar returned more than one value"):
        wh.define("CREATE VIEW bad AS SELECT x.k AS k FROM t AS x "
                  "WHERE x.k > (SELECT VALUE y.k FROM t AS y WHERE y.g = x.g)")
    assert wh.catalog.views == {}
    assert not (tmp_path / "wh" / "views" / "bad").exists()
