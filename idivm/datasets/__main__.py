"""``python -m idivm.datasets {devices,yelp} --scale N --out DIR [knobs]``: write a dataset to files.

One file per table, ``DIR/<table>.jsonl`` or ``DIR/<table>.parquet``; ``--sample`` writes the
shipped sample's spec instead of the knobs given.  For ``devices``, ``--price-updates D`` also
writes ``DIR/price_updates.jsonl``: D rows ``{"pid", "price_pre", "price_post"}`` (Fig. 2.11c).
For ``yelp``, ``--changes B --batch-size n`` also writes B consecutive batches of n changes as
Debezium events, ``DIR/changes/batch-0001/<table>.jsonl`` .. (:mod:`idivm.datasets.yelp_changes`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from idivm.datasets import (
    DEFAULT_CHUNK_ROWS,
    FORMATS,
    devices,
    write_dataset,
    write_jsonl,
    yelp,
    yelp_changes,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m idivm.datasets",
        description="Write a deterministic idivm dataset (devices/parts or Yelp-like) to files.",
    )
    sub = parser.add_subparsers(dest="dataset", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--out", required=True, type=Path, help="output directory (created if missing)")
        p.add_argument("--format", choices=FORMATS, default="jsonl", help="file format (default jsonl)")
        p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
        p.add_argument("--chunk-rows", type=int, default=DEFAULT_CHUNK_ROWS,
                       help=f"rows per Parquet row group (default {DEFAULT_CHUNK_ROWS})")
        p.add_argument("--sample", action="store_true",
                       help="use the spec of the shipped sample (ignores --scale, --seed and the knobs)")

    d = devices.DevicesSpec()
    p = sub.add_parser("devices", help="devices/parts/devices_parts (thesis Fig. 2.1a, Fig. 2.11)")
    common(p)
    p.add_argument("--scale", type=int, default=d.devices,
                   help=f"number of devices; also of parts unless --parts (default {d.devices}; the thesis "
                        f"uses {devices.THESIS_DEVICES})")
    p.add_argument("--parts", type=int, default=None, help="number of parts (default: --scale)")
    p.add_argument("--fanout", "-f", type=int, default=d.fanout,
                   help=f"parts per device (default {d.fanout})")
    p.add_argument("--selectivity", "-s", type=float, default=d.selectivity,
                   help=f"fraction of devices that are phones (default {d.selectivity})")
    p.add_argument("--extra-joins", type=int, default=d.extra_joins,
                   help="extra tables joined 1-to-1 with devices_parts on (did, pid), i.e. j - 2 (default 0)")
    p.add_argument("--price-updates", "-d", type=int, default=None, metavar="D",
                   help="also write D price updates to price_updates.jsonl")

    y = yelp.YelpSpec()
    p = sub.add_parser("yelp", help="businesses/reviews/users, nested (thesis §2.9)")
    common(p)
    p.add_argument("--scale", type=int, default=y.businesses,
                   help=f"number of businesses (default {y.businesses})")
    p.add_argument("--reviews-per-business", type=float, default=y.reviews_per_business,
                   help=f"mean reviews per business (default {y.reviews_per_business})")
    p.add_argument("--users-per-business", type=float, default=y.users_per_business,
                   help=f"users per business (default {y.users_per_business})")
    p.add_argument("--sf-fraction", type=float, default=y.sf_fraction,
                   help=f"fraction of businesses in San Francisco (default {y.sf_fraction})")
    p.add_argument("--unreviewed-fraction", type=float, default=y.unreviewed_fraction,
                   help=f"probability that a business has no reviews (default {y.unreviewed_fraction})")
    p.add_argument("--repeat-fraction", type=float, default=y.repeat_fraction,
                   help=f"probability that a review repeats an earlier reviewer of the business "
                        f"(default {y.repeat_fraction})")
    p.add_argument("--friends-per-user", type=float, default=y.friends_per_user,
                   help=f"mean friends per user (default {y.friends_per_user})")
    p.add_argument("--elite-fraction", type=float, default=y.elite_fraction,
                   help=f"fraction of users with elite years (default {y.elite_fraction})")
    p.add_argument("--changes", type=int, default=0, metavar="B",
                   help="also write B batches of change events (Debezium JSON Lines) to "
                        "OUT/changes/batch-NNNN/<table>.jsonl (default 0)")
    p.add_argument("--batch-size", type=int, default=100, metavar="N",
                   help="changes per batch (default 100); a business delete also deletes its reviews")
    p.add_argument("--mix", default=None, metavar="KIND=W,...",
                   help="weights of the kinds of change; kinds not named weigh 0 (default: every kind: "
                        + ",".join(f"{k}={w:g}" for k, w in yelp_changes.DEFAULT_MIX.items()) + ")")
    p.add_argument("--changes-seed", type=int, default=None,
                   help="seed of the change stream (default: the data's seed)")
    return parser


def _spec(args: argparse.Namespace):
    if args.dataset == "devices":
        if args.sample:
            return devices.SAMPLE
        return devices.DevicesSpec(
            devices=args.scale,
            parts=args.scale if args.parts is None else args.parts,
            fanout=args.fanout,
            selectivity=args.selectivity,
            extra_joins=args.extra_joins,
            seed=args.seed,
        )
    if args.sample:
        return yelp.SAMPLE
    return yelp.YelpSpec(
        businesses=args.scale,
        reviews_per_business=args.reviews_per_business,
        users_per_business=args.users_per_business,
        sf_fraction=args.sf_fraction,
        unreviewed_fraction=args.unreviewed_fraction,
        repeat_fraction=args.repeat_fraction,
        friends_per_user=args.friends_per_user,
        elite_fraction=args.elite_fraction,
        seed=args.seed,
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    module = devices if args.dataset == "devices" else yelp
    try:
        spec = _spec(args)
        if args.chunk_rows < 1:
            raise ValueError("--chunk-rows must be >= 1")
        if args.dataset == "devices" and args.price_updates is not None:
            updates = devices.price_updates(spec, args.price_updates)
        else:
            updates = None
        batches = args.changes if args.dataset == "yelp" else 0
        if batches < 0:
            raise ValueError("--changes must be >= 0")
        if batches and args.batch_size < 0:
            raise ValueError("--batch-size must be >= 0")
        mix = yelp_changes.parse_mix(args.mix) if batches and args.mix is not None else None
        if batches and any((args.out / "changes").glob("batch-*")):
            raise ValueError(f"{args.out / 'changes'} already holds batches of another run: remove it first")
    except ValueError as e:
        parser.error(str(e))
    start = time.perf_counter()
    tables = module.tables(spec)
    if batches:  # load the change stream's state from the rows as they are written
        state = yelp_changes.YelpState()
        tables = {name: state.recording(name, rows) for name, rows in tables.items()}
    written = write_dataset(tables, module.schemas(spec), args.out, args.format, args.chunk_rows)
    if updates is not None:
        path = args.out / "price_updates.jsonl"
        rows = ({"pid": pid, "price_pre": pre, "price_post": post} for pid, pre, post in updates)
        written["price_updates"] = (path, write_jsonl(rows, path))
    print(spec)
    for name, (path, count) in written.items():
        print(f"{count:>12,} rows  {path}")
    if batches:
        state.check_references()
        stream = yelp_changes.YelpChanges(spec, mix, args.changes_seed, state)
        events = 0
        for _ in range(batches):
            try:
                batch = stream.next_batch(args.batch_size)
            except ValueError as e:
                print(f"error: {e} (the {stream.batches} batches before it are written)", file=sys.stderr)
                return 1
            written_batch = yelp_changes.write_batch(batch, args.out / "changes")
            events += sum(count for _, count in written_batch.values())
        first, last = (yelp_changes.batch_dir(args.out / "changes", k) for k in (1, batches))
        print(f"{events:>12,} events {first}{f' .. {last.name}' if batches > 1 else ''} "
              f"({batches} batches of {args.batch_size} changes)")
    print(f"done in {time.perf_counter() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
