"""The README's tutorial, executed: its files are written, its commands run in order (in
process, through the CLI's entry point), each must succeed, and the rows the last ``show``
before an ``output`` block printed must be the ones that block says (hand-written in the README,
compared as bags)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from test_cli_views import canonical

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```(?P<lang>\w*)(?P<info>[^\n]*)\n(?P<body>.*?)^```", re.S | re.M)


def tutorial_blocks() -> list[tuple[str, str, str]]:
    """(language, info, body) of every code block of the README's Tutorial section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Tutorial\n", 1)[1].split("\n## ", 1)[0]
    return [(m["lang"], m["info"].strip(), m["body"]) for m in BLOCK.finditer(section)]


def test_the_tutorial_runs_as_written(tmp_path, monkeypatch, run):
    monkeypatch.chdir(tmp_path)
    blocks = tutorial_blocks()
    assert sum(lang == "sh" for lang, _, _ in blocks) >= 3
    last_output = shown_output = None
    for lang, info, body in blocks:
        if info.startswith("file="):
            Path(info[len("file="):]).write_text(body, encoding="utf-8")
        elif info == "output":
            expected = [json.loads(line) for line in body.splitlines() if line.strip()]
            shown = [json.loads(line) for line in shown_output.splitlines() if line.strip()]
            assert canonical(shown) == canonical(expected)
        elif lang == "sh":
            for line in body.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                args = shlex.split(line)
                assert args[0] == "idivm", line
                code, out, err = run(*args[1:])
                assert code == 0, f"{line}\n{out}\n{err}"
                last_output = out
                if args[3] == "show":
                    shown_output = out
    assert last_output is not None and "sf_businesses" in last_output  # view list, at the end
