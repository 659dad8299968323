"""What every rule module shares: the i-diff kinds, the states a rule may read, and
:class:`Rule` (a row of Appendix C's tables)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

KINDS = ("replace", "update", "increment")
STATES = ("Input_pre", "Input_post", "Output")


@dataclass(frozen=True, slots=True)
class Rule:
    operator: str  # algebra operator class name
    side: str  # "input", "left" or "right"
    diff: str  # kind of the incoming i-diff
    when: str  # guard (a predicate of the generator), "always" for none
    action: str  # transformation of the generator that instantiates the rule
    output: str  # kind(s) of the outgoing i-diff(s), "none" if it is absorbed
    reads: tuple[str, ...] = ()
    blocking: bool = False
    source: str = ""  # the thesis table the rule follows (or extends)

    def __post_init__(self):
        if self.diff not in KINDS:
            raise ValueError(f"unknown i-diff kind {self.diff!r}")
        if not set(self.reads) <= set(STATES):
            raise ValueError(f"unknown states in {self.reads}")

    def describe(self) -> str:
        reads = f", reads {'+'.join(self.reads)}" if self.reads else ""
        guard = "" if self.when == "always" else f" if {self.when}"
        return f"{self.operator}[{self.side}] {self.diff}{guard} -> {self.output}{reads}  ({self.source})"

    def to_json(self) -> dict:
        return asdict(self)
