"""The conformance outcomes of a run, and their table per group at the end of the run."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

OUTCOMES: list[dict] = []


@pytest.fixture
def record_outcome():
    """``record_outcome(query, outcome, detail)``: remember one query's outcome (``pass``,
    ``fail`` or ``excluded``) for the table printed at the end of the run."""

    def record(query, outcome: str, detail: str = "") -> None:
        OUTCOMES.append({"group": query.group, "case": query.case, "query": query.number,
                         "outcome": outcome, "detail": detail})

    return record


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not OUTCOMES:
        return
    report = config.getoption("--asterixdb-report")
    if report:
        with open(report, "w") as f:
            for o in OUTCOMES:
                f.write(json.dumps(o) + "\n")
    by_group: dict[str, Counter] = defaultdict(Counter)
    for o in OUTCOMES:
        by_group[o["group"]][o["outcome"]] += 1
    w = terminalreporter
    w.section("SQL++ conformance (AsterixDB runtime tests)")
    w.line(f"{'group':<16} {'in scope':>8} {'pass':>6} {'fail':>6} {'excluded':>8} {'pass %':>7}")
    total = Counter()
    for group in sorted(by_group):
        c = by_group[group]
        total.update(c)
        scope = c["pass"] + c["fail"]
        pct = f"{100 * c['pass'] / scope:.0f}" if scope else "-"
        w.line(f"{group:<16} {scope:>8} {c['pass']:>6} {c['fail']:>6} {c['excluded']:>8} {pct:>7}")
    scope = total["pass"] + total["fail"]
    pct = f"{100 * total['pass'] / scope:.1f}" if scope else "-"
    w.line(f"{'total':<16} {scope:>8} {total['pass']:>6} {total['fail']:>6} {total['excluded']:>8} {pct:>7}")
    reasons = Counter(o["detail"] for o in OUTCOMES if o["outcome"] == "excluded")
    w.line("excluded, by reason:")
    for reason, n in reasons.most_common():
        w.line(f"  {n:>5}  {reason}")
