"""``idivm demo``: the thesis' running examples on the shipped sample data.

Loads the devices/parts sample (thesis Fig. 2.1a) and the Yelp-like sample
(§2.9) into the warehouse, defines the views of Fig. 2.1b, Fig. 2.5b and the
§2.9 view V, and prints them.  Tables and views that already exist are reused,
so the demo can be run again on the same warehouse.
"""

from __future__ import annotations

import json
from typing import Callable

from idivm.datasets import DATASETS, sample_path, view_path

DEMO_VIEWS = ("devices_v", "devices_cost", "sf_reviews")


def run_demo(wh, echo: Callable[[str], None] = print) -> None:
    from idivm.sqlpp import parse_view

    for dataset, module in DATASETS.items():
        for table, key in module.KEYS.items():
            if table in wh.catalog.tables:
                echo(f"table {table}: exists")
                continue
            info = wh.create_table(table, key, sample_path(dataset, table))
            echo(f"table {table} (key {', '.join(info.key)}): {info.rows} rows")
    for file in DEMO_VIEWS:
        path = view_path(file)
        text = path.read_text(encoding="utf-8")
        name = parse_view(text, str(path)).name
        if name not in wh.catalog.views:
            wh.define(path)
        echo("")
        echo(text.strip())
        echo("")
        for row in wh.rows(name):
            echo("  " + json.dumps(row, ensure_ascii=False, default=str))
