"""γ (thesis Tables C.7–C.10): an update of aggregated attributes becomes increments of
SUM and COUNT per group, the groups found through Input_post (C.8, C.10); any other change
recomputes the groups it touches before or after (C.7 "γ general"), which also creates and
deletes groups (beyond the thesis, which leaves them out).  MIN, MAX and DISTINCT
aggregates recompute their groups; an increment whose pre or post value is NULL does too
(SUM of all NULLs is NULL).  AVG is maintained through its operator cache (Appendix C,
Cache_sum and Cache_count): ID-based scripts rewrite γ with AVG into a projection over a
γ of SUM and COUNT (:mod:`idivm.generator.operator_caches`), whose increments these rules
make; where no operator cache applies, AVG recomputes its groups.  An update the members of a
stored GROUP AS bag only carry is a nested update of those members (Table E.11; its rule is
with the other nested updates in :mod:`idivm.rules.nested`, tried before these)."""

from idivm.rules.common import Rule

RULES = (
    Rule("GroupBy", "input", "replace", "always", "regroup", "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="Table C.7 (γ general)"),
    Rule("GroupBy", "input", "update", "increments_apply", "aggregate_increment", "increment+replace",
         reads=("Input_post",), blocking=True, source="Tables C.8 (SUM), C.10 (COUNT)"),
    Rule("GroupBy", "input", "update", "always", "to_replace", "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="Table C.7 (γ general)"),
    Rule("GroupBy", "input", "increment", "always", "to_replace", "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="aggregate of aggregates, Table C.7"),
)
