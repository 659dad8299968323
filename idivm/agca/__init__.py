"""AGCA, DBToaster's aggregate calculus (``../shared/seeds/004_…`` §3): terms and their binding
patterns (:mod:`~idivm.agca.terms`), generalized multiset relations and the reference
interpreter (:mod:`~idivm.agca.gmr`), delta queries and simplification
(:mod:`~idivm.agca.delta`)."""

from idivm.agca.delta import delta, delta_tuple, simplify
from idivm.agca.gmr import GMR, AgcaError, Database, Relation, evaluate, tup
from idivm.agca.terms import (
    ONE, ZERO, Add, Assign, Cmp, Const, Exists, Lift, MapRef, Mul, Rel, Sum, Term, Value, Var, degree, inputs, outputs,
    relations,
)

__all__ = ["GMR", "ONE", "ZERO", "Add", "AgcaError", "Assign", "Cmp", "Const", "Database", "Exists", "Lift", "MapRef",
           "Mul", "Rel", "Relation", "Sum", "Term", "Value", "Var", "degree", "delta", "delta_tuple", "evaluate",
           "inputs", "outputs", "relations", "simplify", "tup"]
