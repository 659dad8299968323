"""Rewriting terms and plans: the one substitution of terms and the one replacement of
operators in a plan that provenance inference, the generator, the minimizer and cache
splitting share, and fresh names.

Terms and operators are frozen dataclasses; a rewrite rebuilds only what changes and returns
the very same objects where nothing does (callers compare by identity to tell).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields, replace
from typing import Any

from idivm.algebra import operators as O
from idivm.algebra.expressions import Term


def substitute(term: Term, mapping: Mapping[Term, Term], post: Callable[[Term], Term] | None = None) -> Term:
    """``term`` with every subterm that is a key of ``mapping`` replaced by its value (the
    outermost match wins; replacements are not rewritten again).  ``post``, when given, is
    applied to every rebuilt or kept subterm bottom-up (a local simplification)."""
    if term in mapping:
        return mapping[term]
    changes = {}
    for f in fields(term):
        if f.name == "span":
            continue
        v = getattr(term, f.name)
        new = _substitute_value(v, mapping, post)
        if new is not v:
            changes[f.name] = new
    out = replace(term, **changes) if changes else term
    return post(out) if post is not None else out


def _substitute_value(v: Any, mapping: Mapping[Term, Term], post) -> Any:
    if isinstance(v, Term):
        return substitute(v, mapping, post)
    if isinstance(v, tuple):
        new = tuple(_substitute_value(x, mapping, post) for x in v)
        return v if all(a is b for a, b in zip(new, v)) else new
    return v


def replace_nodes(plan: O.Operator, replaced: Mapping[int, O.Operator]) -> O.Operator:
    """``plan`` with the operators in ``replaced`` (by identity) swapped for their new form;
    an operator reached twice is rebuilt once."""
    memo: dict[int, O.Operator] = {}

    def go(op: O.Operator) -> O.Operator:
        if id(op) in replaced:
            return replaced[id(op)]
        if id(op) in memo:
            return memo[id(op)]
        ins = tuple(go(i) for i in op.inputs())
        new = op.with_inputs(*ins) if any(a is not b for a, b in zip(ins, op.inputs())) else op
        if op.nested():
            nest = tuple(go(n) for n in op.nested())
            if any(a is not b for a, b in zip(nest, op.nested())):
                new = new.with_nested(*nest)
        memo[id(op)] = new
        return new

    return go(plan)


def fresh_name(base: str, taken: Iterable[str]) -> str:
    """``base``, or ``base_2``, ``base_3``, ... : the first not in ``taken``."""
    taken = set(taken)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name
