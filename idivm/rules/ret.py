"""The view itself (ReturnBag): i-diffs become changes of the stored view, named by its
hidden ID columns (thesis §2.4 pass 3: resolve to full view keys, apply to the view)."""

from idivm.rules.common import Rule

RULES = (
    Rule("ReturnBag", "input", "replace", "always", "to_view", "replace", reads=("Output",),
         source="§2.4: apply to the view"),
    Rule("ReturnBag", "input", "update", "computable", "to_view", "update", reads=("Output",),
         source="§2.4: apply to the view"),
    Rule("ReturnBag", "input", "update", "always", "to_replace", "replace", reads=("Output",),
         source="§2.4: apply to the view"),
    Rule("ReturnBag", "input", "increment", "renames_only", "to_view", "increment", reads=("Output",),
         source="§2.4: apply to the view"),
    Rule("ReturnBag", "input", "increment", "always", "to_replace", "replace", reads=("Output",),
         source="§2.4: apply to the view"),
)
