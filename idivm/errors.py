"""One error hierarchy for the whole product.

User errors (``SqlppSyntaxError``, ``SemanticError``, ``UnsupportedError``,
``DataError``, ``CatalogError``) carry a one-line message that the CLI prints
without a traceback; errors tied to query text also carry a :class:`Span` and
render ``file:line:col``, the offending line and a caret.  ``InternalError``
is our bug.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A position in query text: 1-based line and column, plus end offsets."""

    line: int
    column: int
    end_line: int | None = None
    end_column: int | None = None

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


class IdivmError(Exception):
    """Base of every error idivm raises on purpose."""

    def __init__(self, message: str, span: Span | None = None, *,
                 source: str | None = None, filename: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.source = source
        self.filename = filename

    def with_source(self, source: str | None, filename: str | None = None) -> "IdivmError":
        """Attach the query text (and file name) so the error can show an excerpt."""
        if self.source is None:
            self.source = source
        if self.filename is None:
            self.filename = filename
        return self

    def location(self) -> str:
        if self.span is None:
            return self.filename or ""
        where = f"{self.span.line}:{self.span.column}"
        return f"{self.filename}:{where}" if self.filename else where

    def excerpt(self) -> str:
        """The offending source line with a caret under the column, or ''."""
        if self.span is None or self.source is None:
            return ""
        lines = self.source.splitlines()
        if not 1 <= self.span.line <= len(lines):
            return ""
        text = lines[self.span.line - 1].expandtabs(1)
        return f"  {text}\n  {' ' * (self.span.column - 1)}^"

    def one_line(self) -> str:
        """The message as the CLI prints it by default."""
        loc = self.location()
        return f"{loc}: {self.message}" if loc else self.message

    def __str__(self) -> str:
        head = self.one_line()
        ex = self.excerpt()
        return f"{head}\n{ex}" if ex else head


class SqlppSyntaxError(IdivmError):
    """Malformed SQL++ text."""


class SemanticError(IdivmError):
    """Well-formed text that names unknown tables/columns/variables or misuses them."""


class UnsupportedError(IdivmError):
    """A known construct that idivm does not support (in this position)."""


class UnknownIdsError(UnsupportedError):
    """The view's IDs cannot be inferred: it can be recomputed, not maintained by ID."""


class DataError(IdivmError):
    """Bad input data: unreadable files, key violations, type mismatches."""


class CatalogError(IdivmError):
    """Warehouse/catalog problems: unknown or duplicate names, corrupt catalog."""


class ConcurrentWriteError(CatalogError):
    """Another writer committed to a table after a run read it and before the run's commit,
    which was therefore not made."""


class SetupError(IdivmError):
    """The machine lacks something idivm needs (e.g. a Java runtime)."""


class InternalError(IdivmError):
    """A bug in idivm.  Carries whatever context (e.g. a plan) helps to debug it."""
