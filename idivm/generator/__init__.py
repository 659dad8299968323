"""The Δ-script generator (thesis §2.4) and the Δ-script it produces."""

from idivm.generator.generate import STRATEGIES, check_supported, generate
from idivm.generator.script import DeltaScript, Statement, TableDiffs

__all__ = ["STRATEGIES", "DeltaScript", "Statement", "TableDiffs", "check_supported", "generate"]
