"""The statements each i-diff propagation rule produces, against hand-written expectations
(pure Python: no Spark).

``tests/fixtures/rules.txt`` holds one case per block (blocks are separated by blank lines,
``#`` lines are comments): the rules it exercises (``rule:``, the beginning of a rule's text
as ``explain`` prints it), the base tables (``table: name(column type, ...; key k, ...)``),
the view (``view:``, SQL++ continued on indented lines), the base-table i-diff that starts
the propagation (``change:``, e.g. ``Δ(parts)`` or ``Δu(parts)``), and the expected
statements: those of the view's ID-based Δ-script that start from that change, printed as
``explain`` prints a Δ-script (:meth:`DeltaScript.render`), with the fresh variables of the
generator numbered from 1 in the order they appear; ``(none)`` when the change reaches no
statement.  Every rule named must be in the trail of every statement printed (a rule that
makes an update delete+insert leaves its note there, ``Select[input]: the update becomes
delete+insert``).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from idivm import rules, types as T
from idivm.algebra.builder import build_view
from idivm.generator.generate import generate
from idivm.script import DeltaScript
from idivm.provenance.ids import infer_provenance
from idivm.rules import common
from idivm.sqlpp import parse_view

FIXTURES = Path(__file__).parent / "fixtures" / "rules.txt"
SCALARS = {"int": T.INT, "double": T.DOUBLE, "string": T.STRING, "bool": T.BOOL}


def parse_type(text: str) -> T.Type:
    text = text.strip()
    if m := re.fullmatch(r"(list|bag)<(.+)>", text):
        return T.CollectionType(parse_type(m.group(2)), ordered=m.group(1) == "list")
    return SCALARS[text]


def parse_table(text: str) -> tuple[str, T.TupleType, tuple[str, ...]]:
    m = re.fullmatch(r"(\w+)\((.*); key ([\w, ]+)\)", text.strip())
    assert m, f"bad table line {text!r}"
    columns = [c.strip().split(None, 1) for c in m.group(2).split(",")]
    return m.group(1), T.TupleType(tuple((n, parse_type(t)) for n, t in columns)), \
        tuple(k.strip() for k in m.group(3).split(","))


def read_cases() -> list:
    cases = []
    blocks = re.split(r"\n\s*\n", FIXTURES.read_text(encoding="utf-8"))
    for block in blocks:
        lines = [line for line in block.splitlines() if not line.startswith("#")]
        if not lines:
            continue
        case = {"rules": [], "tables": [], "view": [], "expected": []}
        key = None
        for line in lines:
            if key == "expected":
                case["expected"].append(line)
            elif line.startswith("  ") and key == "view":
                case["view"].append(line.strip())
            else:
                key, _, value = line.partition(": ")
                if key == "change":
                    case["change"] = value.strip()
                    key = "expected"
                elif key in ("rule", "table", "view"):
                    case[f"{key}s" if key != "view" else key].append(value.strip())
                else:
                    raise ValueError(f"{FIXTURES.name}: unknown line {line!r}")
        name = f"{case['rules'][0].split(' (')[0]} from {case['change']}"
        cases.append(pytest.param(case, id=name))
    return cases


CASES = read_cases()


def renumbered(text: str) -> str:
    """``text`` with the generator's fresh variables (``__idivm_k5``, ``__idivm_dk7``)
    numbered from 1 in the order they first appear."""
    numbers: dict[str, int] = {}

    def number(m: re.Match) -> str:
        return f"{m.group(1)}{numbers.setdefault(m.group(2), len(numbers) + 1)}"

    return re.sub(r"\b(__idivm_[a-z]+)(\d+)\b", number, text)


def named_rule(text: str) -> rules.Rule:
    """The rule whose text begins with ``text``."""
    found = [r for rs in rules.RULES.values() for r in rs if r.describe().startswith(text)]
    assert len(found) == 1, f"{text!r} names {len(found)} rules"
    return found[0]


def trail_mark(rule: rules.Rule) -> str:
    """What instantiating ``rule`` leaves in the trail of the statements it leads to."""
    if rule.action is common.do_to_replace:
        return f"{rule.operator}[{rule.side}]: the {rule.diff} becomes delete+insert"
    return rule.describe()


def statements_of(case: dict) -> str:
    types, keys = {}, {}
    for line in case["tables"]:
        name, ttype, key = parse_table(line)
        types[name], keys[name] = ttype, key
    view = build_view(parse_view(" ".join(case["view"]), None), types)
    script = generate(view.name, infer_provenance(view.plan, keys, types, {}), keys, types, "id")
    chosen = tuple(s for s in script.statements
                   if any(o.split(" AS ")[0] == case["change"] for o in s.origins()))
    for s in chosen:
        for r in case["rules"]:
            mark = trail_mark(named_rule(r))
            assert any(mark in line for line in s.rules), f"rule {r!r} not in the trail of {s.describe()}"
    if not chosen:
        return "(none)"
    text = DeltaScript(script.view, script.strategy, (), chosen).render()
    return renumbered(text.split("\n", 1)[1])


@pytest.mark.parametrize("case", CASES)
def test_rule_statements(case):
    assert statements_of(case) == "\n".join(case["expected"])


def test_every_rule_named_by_a_fixture_exists():
    for param in CASES:
        for text in param.values[0]["rules"]:
            named_rule(text)


def test_every_operator_module_has_a_fixture():
    named = {named_rule(text) for param in CASES for text in param.values[0]["rules"]}
    modules = (rules.scan, rules.select, rules.project, rules.join, rules.left_join, rules.semijoin,
               rules.union, rules.group_by, rules.distinct, rules.ret, rules.nested)
    assert [m.__name__ for m in modules if not named & set(m.RULES)] == []


def test_the_import_check_rejects_a_transformation_of_the_wrong_signature():
    def do_broken(g, op, diff, rule):  # no side
        return []

    table = dict(rules.RULES)
    (first, *rest) = table[("Select", "input", "replace")]
    table[("Select", "input", "replace")] = (replace(first, action=do_broken), *rest)
    with pytest.raises(ImportError, match="transformation of Select"):
        rules._check_complete(table)
    table[("Select", "input", "replace")] = (first, *rest)
    (guarded, *rest) = table[("Select", "input", "update")]
    table[("Select", "input", "update")] = (replace(guarded, when=common.do_pass), *rest)
    with pytest.raises(ImportError, match="guard of Select"):
        rules._check_complete(table)


def test_the_import_check_rejects_an_operator_without_an_unconditional_rule():
    table = dict(rules.RULES)
    table[("Select", "input", "update")] = table[("Select", "input", "update")][:1]
    with pytest.raises(ImportError, match=r"Select\[input\] update"):
        rules._check_complete(table)
