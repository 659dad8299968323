"""What the two Lark grammars share: finding the grammar file (``grammars/<name>.lark`` in a
checkout, or the copy installed beside its parser) and the parse driver that turns Lark's
exceptions into idivm's one-line errors with the source attached."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from lark import Tree
from lark.exceptions import UnexpectedInput, VisitError

from idivm.errors import IdivmError

_CHECKOUT = Path(__file__).resolve().parents[1] / "grammars"


def read_grammar(name: str, installed_beside: str) -> str:
    """The text of grammar ``name`` (``sqlpp``, ``idiff``), read from the checkout's
    ``grammars/`` or from the copy installed next to the module file ``installed_beside``."""
    candidates = (_CHECKOUT / f"{name}.lark", Path(installed_beside).parent / f"{name}.lark")
    for path in candidates:
        if path.exists():
            return path.read_text(encoding="utf-8")
    raise FileNotFoundError(f"grammar {name}.lark not found; looked in " + ", ".join(map(str, candidates)))


def parse_text(text: str, filename: str | None, parse: Callable[[str], Tree],
               syntax_error: Callable[[UnexpectedInput], IdivmError], transform: Callable[[Tree], Any]) -> Any:
    """``transform(parse(text))``; a Lark syntax error becomes ``syntax_error(e)``, an idivm
    error raised inside the transformer is unwrapped, and every idivm error carries the text
    and file name so that it prints ``file:line:col`` with the offending line."""
    try:
        try:
            tree = parse(text)
        except UnexpectedInput as e:
            raise syntax_error(e) from None
        try:
            return transform(tree)
        except VisitError as e:
            if isinstance(e.orig_exc, IdivmError):
                raise e.orig_exc from None
            raise
    except IdivmError as e:
        raise e.with_source(text, filename)


def acceptable(e: UnexpectedInput, fallback: Any = None) -> set[str]:
    """The terminals the parser could take where it stopped.  LALR merges lookaheads, so the
    error's own ``expected`` may list terminals that are not acceptable here; asking the
    interactive parser is exact.  Else ``fallback`` (default: the error's own estimate)."""
    parser = getattr(e, "interactive_parser", None)
    if parser is not None:
        try:
            return set(parser.accepts())
        except Exception:  # pragma: no cover - fall back to lark's estimate
            pass
    if fallback is None:
        fallback = getattr(e, "expected", None) or getattr(e, "allowed", None) or ()
    return set(fallback)
