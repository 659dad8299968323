"""What every rule module shares: the i-diff kinds, the states a rule may read,
:class:`Rule` (a row of Appendix C's tables), and the guards and transformations several
operators' rows use.

A guard is a function ``when_<name>(g, op, side, diff) -> bool`` and a transformation a
function ``do_<name>(g, op, side, diff, rule) -> list[Statement]`` (see
:mod:`idivm.rules.context` for their arguments); a rule's text names them without the
prefix (``Select[input] update if touches_terms -> replace``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

from idivm.algebra import operators as O
from idivm.algebra.expressions import NULL, Term, Var
from idivm.rules.context import Context, Diff, at_state, condition_terms, mentions, restricted, restriction
from idivm.script import POST, PRE, Statement

KINDS = ("replace", "update", "increment")
STATES = ("Input_pre", "Input_post", "Output")

#: the parameters of a guard and of a transformation, in order
GUARD_PARAMETERS = ("g", "op", "side", "diff")
ACTION_PARAMETERS = ("g", "op", "side", "diff", "rule")


@dataclass(frozen=True, slots=True)
class Rule:
    operator: str  # algebra operator class name
    side: str  # "input", "left", "right" or "nested"
    diff: str  # kind of the incoming i-diff
    when: Callable[..., bool]  # guard: when(g, op, side, diff); when_always for none
    action: Callable[..., list]  # transformation: action(g, op, side, diff, rule) -> statements
    output: str  # kind(s) of the outgoing i-diff(s), "none" if it is absorbed
    reads: tuple[str, ...] = ()
    blocking: bool = False
    source: str = ""  # the thesis table the rule follows (or extends)

    def __post_init__(self):
        if self.diff not in KINDS:
            raise ValueError(f"unknown i-diff kind {self.diff!r}")
        if not set(self.reads) <= set(STATES):
            raise ValueError(f"unknown states in {self.reads}")

    @property
    def guard(self) -> str:
        """The guard's name (``touches_terms``; ``always`` for none)."""
        return self.when.__name__.removeprefix("when_")

    @property
    def transformation(self) -> str:
        """The transformation's name (``to_replace``)."""
        return self.action.__name__.removeprefix("do_")

    def describe(self) -> str:
        reads = f", reads {'+'.join(self.reads)}" if self.reads else ""
        guard = "" if self.when is when_always else f" if {self.guard}"
        return f"{self.operator}[{self.side}] {self.diff}{guard} -> {self.output}{reads}  ({self.source})"

    def to_json(self) -> dict:
        return asdict(self) | {"when": self.guard, "action": self.transformation}


# ---------------------------------------------------------------------- guards

def when_always(g: Context, op, side, diff) -> bool:
    """No guard: the rule applies to every i-diff of its kind."""
    return True


def when_touches_terms(g: Context, op, side, diff) -> bool:
    """The update (increment) changes a term the operator computes with beyond renaming: its
    condition (σ, joins: Tables C.3, C.5, C.6, C.9 row 3), its assigned or computed term
    (LET, Tables C.4, E.2, E.5, E.10), or the nested plan's (Tables E.3, E.4, E.6)."""
    return any(mentions(t, diff.changed) for t in condition_terms(op))


def when_computable(g: Context, op, side, diff) -> bool:
    """Table C.4 row 3 (π), §2.4 (the view): every output the update changes is computable from
    the i-diff itself (the terms it reads are all in the update's plan), and so are its IDs."""
    avail = set(diff.plan.output_variables())
    outs = op.outputs if isinstance(op, O.Project) else g.element_fields()
    return all(t.variables() <= avail for _, t in outs if mentions(t, diff.changed)) and \
        all(i.variables() <= avail for i in diff.ids)


def when_renames_only(g: Context, op, side, diff) -> bool:
    """Table C.8 (an aggregate passed through π or to the view): every output reading an
    incremented value is that value itself, renamed, so the increment passes as one."""
    outs = op.outputs if isinstance(op, O.Project) else g.element_fields()
    changed = {c for c, _ in diff.changed}
    return all(t in changed for _, t in outs if mentions(t, diff.changed))


# ---------------------------------------------------------------------- transformations

def do_absorb(g: Context, op, side, diff, rule) -> list[Statement]:
    """Table C.6 row 8: an update of the right side of ⋉/▷ outside the condition changes no
    output tuple (R ⋉_c S depends on S only through c): Δ(R ⋉ S) = ∅."""
    return []


def do_pass(g: Context, op, side, diff, rule) -> list[Statement]:
    """Tables C.2-C.6, C.9, E.1-E.6, E.10 (the i-diff passes by ID): the operator keeps the
    IDs of its input (or extends them, partial IDs), so the output tuples the i-diff names are
    those holding the named input tuples: Δ(op R) = op(ΔR) by the same IDs.  A replace's post
    state is the view plan restricted to its keys (the filter of σ and the join with the other
    side's post state are in that plan); an update carries its new values unchanged."""
    return g.next(op, diff, rule)


def do_to_replace(g: Context, op, side, diff, rule) -> list[Statement]:
    """Tables C.3-C.6, C.9 row 3, C.7, E.1-E.6 (an update or increment the operator cannot pass):
    the tuples of the input it names are replaced, Δu(R) -> delete(I) + insert(R_post ⋉_I π_I(Δu R)),
    and the replace is propagated from the input instead (its trail says so)."""
    kv = g.fresh_vars(len(diff.ids))
    keys = O.Project(diff.plan, tuple(zip(kv, diff.ids)))
    child = diff.op
    rep = Diff("replace", child, diff.ids, diff.starts, keys=keys, key_vars=kv,
               restriction=restriction(child, diff.ids, keys, kv),
               trail=diff.trail + (f"{rule.operator}[{rule.side}]: the {diff.kind} becomes delete+insert",))
    return g.propagate(rep)


def do_to_matching_left(g: Context, op: O._Join, side, diff, rule) -> list[Statement]:
    """Tables C.6 rows 5-7, C.9 completed: a right-side change names the left tuples it matches
    in the pre or the post state, Δ(R ⋉ S) from ΔS replaces R ⋉_I (π_I(R ⋈ ΔS)@pre ∪ π_I(R ⋈ ΔS)@post).

    Of a left join maintained by ID (Table C.9 completed), only the output tuples that
    change are named: those holding a changed right tuple, by (left IDs, right IDs) pairs
    -- the pairs a changed right tuple forms with the left tuples it matches before or
    after -- and the padded tuples of those left tuples, whose matches may appear or
    disappear, by (left IDs, NULLs) (NULL-safely).  The post state under those keys holds
    the new pairs, and the padded tuple of a left tuple left without matches.  The left
    tuples themselves stay: a GROUP AS over them (Table E.11) replaces the members named,
    not the groups (:func:`idivm.rules.navigation.member_replace`)."""
    pairs = isinstance(op, O.LeftJoin) and g.strategy == "id" and bool(diff.ids) and diff.keys is not None
    left_ids, right_ids = g.canonical_ids(op.left), (diff.ids if pairs else ())
    kl, kr = g.fresh_vars(len(left_ids)), g.fresh_vars(len(right_ids))
    matches = O.Project(O.InnerJoin(op.left, restricted(op.right, diff.restriction), op.condition),
                        tuple(zip(kl, left_ids)) + tuple(zip(kr, right_ids)))

    def matched() -> O.Operator:  # new scan objects on every call: each read is restricted on its own
        return O.UnionAll(at_state(matches, PRE), at_state(matches, POST))

    keys = matched()
    if pairs:
        keys = O.UnionAll(keys, O.Project(matched(), tuple((v, Var(v)) for v in kl) + tuple((v, NULL) for v in kr)))
    ids, kv = left_ids + right_ids, kl + kr
    new = Diff("replace", op, ids, diff.starts, keys=keys, key_vars=kv,
               restriction=restriction(op, ids, keys, kv), trail=diff.trail + (rule.describe(),),
               pairs_of=op if pairs else None)
    return g.propagate(new) if op is not g.plan else []


def do_regroup(g: Context, op: O.GroupBy | O.Distinct, side, diff, rule) -> list[Statement]:
    """Table C.7 (γ general), δ as γ over all its attributes, π dropping IDs below δ: the groups
    (distinct values) the change touches before or after are recomputed: Δγ(R) from ΔR
    replaces the groups G = π_keys(R ⋉ ΔR)@pre ∪ π_keys(R ⋉ ΔR)@post by γ(R_post ⋉_keys G)
    (no state is read when the i-diff's keys hold the group keys); a global aggregate
    recomputes its single tuple."""
    if diff.kind != "replace":
        return do_to_replace(g, op, side, diff, rule)
    if isinstance(op, O.GroupBy):
        pairs = tuple((Var(k), t) for k, t in op.keys)
    elif isinstance(op, O.Project):
        pairs = tuple((Var(v), t) for v, t in op.outputs)
    else:
        pairs = tuple((Var(v), Var(v)) for v in op.output_variables())
    trail = diff.trail + (rule.describe(),)
    if not pairs:  # a global aggregate: its single tuple is recomputed
        return g.next(op, diff, rule, ids=(), keys=None, key_vars=(), restriction=None)
    kv = g.fresh_vars(len(pairs))
    named = naming_groups(g, op, diff) if isinstance(op, O.GroupBy) and diff.keys is not None else None
    if named is not None:
        # the i-diff's keys give the groups' keys: a tuple it names belongs, before and
        # after, to the group of its own key values (a key naming no tuple names a group
        # whose recomputation finds it as it is, or absent); no state is read for them
        keys = O.Project(diff.keys, tuple((v, Var(named[k])) for v, (k, _) in zip(kv, pairs)))
        trail = diff.trail + (rule.describe() + ": the groups are named by the i-diff's own keys",)
    else:
        touched = O.Project(restricted(op.input, diff.restriction),
                            tuple((v, t) for v, (_, t) in zip(kv, pairs)))
        keys = O.UnionAll(at_state(touched, PRE), at_state(touched, POST))
    at, terms = (op, tuple(o for o, _ in pairs)) if isinstance(op, O.Project) else \
        (op.input, tuple(t for _, t in pairs))
    new = Diff("replace", op, tuple(o for o, _ in pairs), diff.starts, keys=keys, key_vars=kv,
               restriction=restriction(at, terms, keys, kv), trail=trail)
    return g.propagate(new) if op is not g.plan else []


# ---------------------------------------------------------------------- the rows of tuple-keeping sides

def by_id_rows(op: str, side: str, sources: tuple[str, ...], *, replace_reads: tuple[str, ...] = (),
               touched_reads: tuple[str, ...] = ("Input_post",), increment_replaces: bool = False
               ) -> tuple[Rule, ...]:
    """The rows of an operator side whose output tuples keep the IDs of its input tuples (σ and
    LET, Tables C.3-C.4; the joins' sides, C.5, C.6, C.9; the per-tuple and nested operators of
    Appendix E): a replace passes by ID; an update that touches a term the operator computes
    with replaces the tuples it names (reading ``touched_reads``), any other update passes; an
    increment does the same as an update, or always replaces (``increment_replaces``: a join
    over an aggregate).  ``sources`` cites the thesis row of each rule in that order."""
    kinds = [("replace", when_always, do_pass, "replace", replace_reads),
             ("update", when_touches_terms, do_to_replace, "replace", touched_reads),
             ("update", when_always, do_pass, "update", ())]
    kinds += ([("increment", when_always, do_to_replace, "replace", touched_reads)] if increment_replaces else
              [("increment", when_touches_terms, do_to_replace, "replace", touched_reads),
               ("increment", when_always, do_pass, "increment", ())])
    if len(sources) != len(kinds):
        raise ValueError(f"{op}[{side}]: {len(kinds)} rows need {len(kinds)} sources, not {len(sources)}")
    return tuple(Rule(op, side, diff, when, action, output, reads=reads, source=source)
                 for (diff, when, action, output, reads), source in zip(kinds, sources))


# ---------------------------------------------------------------------- γ's keys in an i-diff


def naming_groups(g: Context, op: O.GroupBy, diff: Diff, n: int | None = None) -> dict[Var, str] | None:
    """For each key of γ, the key variable of the replace i-diff ``diff`` of its input whose
    value is the key's (:func:`group_key_ids`, among the first ``n`` IDs); None if a key
    has none."""
    found = group_key_ids(g, op, diff.ids[:n])
    return None if found is None else {k: diff.key_vars[j] for k, j in found.items()}


def group_key_ids(g: Context, op: O.GroupBy, ids: tuple[Term, ...]) -> dict[Var, int] | None:
    """For each key of γ, the position in ``ids`` (terms over γ's input) of the key term or
    of a term equal to it in γ's input; None if a key has none."""
    out = {}
    for k, t in op.keys:
        equal = g.equivalents(op.input, t) + (t,)
        j = next((j for j, i in enumerate(ids) if i in equal), None)
        if j is None:
            return None
        out[Var(k)] = j
    return out
