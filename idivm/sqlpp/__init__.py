"""SQL++: the typed AST (:mod:`idivm.sqlpp.ast`) and its parser (:mod:`idivm.sqlpp.parser`)."""

from idivm.sqlpp.parser import parse_query, parse_view

__all__ = ["parse_query", "parse_view"]
