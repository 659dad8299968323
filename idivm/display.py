"""Values as people read them: the one formatting of values that ``show``, ``demo`` and the
command line's tables use.

* a float is printed with at most 15 significant digits — every decimal a user writes with 15
  digits or fewer comes back as written, and the binary noise of arithmetic on doubles goes
  (``99.85 + 9.69 + 97.07`` is ``206.61``, not ``206.60999999999999``); a float that needs more
  digits keeps its shortest round-trip form (``repr``);
* a :class:`~decimal.Decimal` is printed as its own string (``1.10`` stays ``1.10``);
* dates and timestamps in ISO 8601; nested tuples and collections as JSON text, with their
  numbers formatted as above.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
from collections.abc import Mapping
from typing import Any

#: the significant digits a double holds for every decimal written with that many digits or fewer
FLOAT_DIGITS = 15


def format_float(value: float) -> str:
    """``value`` without binary noise: its 15-significant-digit form when that is shorter than its
    shortest round-trip form, else the latter (``0.1``, ``206.61``, ``3.0``, ``1e-07``)."""
    if not math.isfinite(value):
        return repr(value)
    exact = repr(value)
    short = format(value, f".{FLOAT_DIGITS}g")
    if "e" not in short and "." not in short:
        short += ".0"  # still a float: 3.0, not 3
    return short if len(short) < len(exact) else exact


def json_text(value: Any) -> str:
    """``value`` as JSON text, numbers formatted as :func:`format_float` and decimals as their own
    string, dates and timestamps as ISO 8601 strings, anything else as its ``str``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value) if math.isfinite(value) else json.dumps(str(value))
    if isinstance(value, decimal.Decimal):
        return str(value) if value.is_finite() else json.dumps(str(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return json.dumps(value.isoformat())
    if hasattr(value, "asDict"):  # a Spark Row
        value = value.asDict(recursive=False)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {json_text(v)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(json_text(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def format_value(value: Any) -> str:
    """One cell of a table: a string as it is, a date or timestamp in ISO 8601, anything else as
    :func:`json_text`."""
    if isinstance(value, str):
        return value
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return json_text(value)
