"""Time one compaction of each view of a benchmark's warehouse, forced (whatever the policy
says): the ``OPTIMIZE`` that maintenance's compaction runs on the view (``ZORDER BY`` its ID
columns, or clustering for a view with liquid clustering), with the view's files and deleted
rows before and after.  Run after ``devices.py`` or ``yelp.py``::

    python benchmarks/compact_views.py OUT

prints one JSON line per view and writes ``OUT/compaction.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from idivm.storage import compaction, delta, layout as layouts
from idivm.warehouse import Warehouse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the benchmark's --out directory")
    parser.add_argument("--storage", default="delta-spark-dv", help="the engine the benchmark used")
    args = parser.parse_args()
    results = json.loads((args.out / "results.json").read_text())
    wh = Warehouse(args.out / "warehouse", storage=args.storage)
    spark, engine = wh.spark, delta.Engine(args.storage)
    report = {}
    for name, defined in results["defined"].items():
        entry = wh.catalog.view(name)
        path = wh.catalog.path_of(entry)
        ids = [i["column"] for i in entry.extra.get("ids", ())]
        layout = layouts.view_layout(delta.schema(path).names, ids, defined["strategy"])
        keys, file_bytes = (layout.keys, layout.file_bytes) if layout else ((), layouts.FILE_BYTES)
        before = compaction.health(path, file_bytes, spark)
        started = time.monotonic()
        # as maintenance's compaction: the metadata of the view's last commit (its watermark) kept
        last = {k: v for k, v in delta.history(path, 1)[0].items() if k.startswith("idivm.")}
        delta.optimize(spark, path, keys, target_file_bytes=file_bytes,
                       commit_metadata={**last, "idivm.operation": "compact"}, engine=engine)
        seconds = time.monotonic() - started
        report[name] = {"seconds": seconds, "before": asdict(before),
                        "after": asdict(compaction.health(path, file_bytes, spark)),
                        "clustering": "clustering" in delta.features(path)["writer_features"]}
        print(name, json.dumps(report[name]), flush=True)
    (args.out / "compaction.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
