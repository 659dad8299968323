"""δ: the IDs of DISTINCT are all its attributes, so every change recomputes the values it
touches before or after (Input_pre, Input_post)."""

from idivm.rules.common import Rule

RULES = (
    Rule("Distinct", "input", "replace", "always", "regroup", "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="δ as γ over all attributes"),
    Rule("Distinct", "input", "update", "always", "to_replace", "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="δ as γ over all attributes"),
    Rule("Distinct", "input", "increment", "always", "to_replace", "replace",
         reads=("Input_pre", "Input_post"), blocking=True, source="δ as γ over all attributes"),
)
