"""δ: the IDs of DISTINCT are all its attributes, so every change recomputes the values it
touches before or after (Input_pre, Input_post)."""

from idivm.rules.common import Rule, do_regroup, do_to_replace, when_always

RULES = (
    Rule("Distinct", "input", "replace", when_always, do_regroup, "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="δ as γ over all attributes"),
    Rule("Distinct", "input", "update", when_always, do_to_replace, "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="δ as γ over all attributes"),
    Rule("Distinct", "input", "increment", when_always, do_to_replace, "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="δ as γ over all attributes"),
)
