"""`tj-data` command line: import JSON chunks, show and verify stores."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from tj_data.backends import HDF5Options
from tj_data.errors import StoreError
from tj_data.json_import import import_json_chunks
from tj_data.schema import Schema
from tj_data.store import GraphStore

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tj-data", description="tj-data graph store tools")
    sub = p.add_subparsers(dest="cmd", required=True)
    imp = sub.add_parser(
        "import-json", help="convert phase*/chunks/chunk_NNN.json into a graph store"
    )
    imp.add_argument("src")
    imp.add_argument("dst")
    imp.add_argument("--backend", choices=("npy", "hdf5"), default="npy")
    imp.add_argument("--shard-size", type=int, default=4096)
    imp.add_argument(
        "--schema", help="schema JSON file ({'fields': [...]}, as in a manifest); default: inferred"
    )
    imp.add_argument(
        "--episode-key",
        default="episode",
        help="record key whose change ends an episode ('' = none)",
    )
    imp.add_argument("--compression", choices=("lzf", "gzip"), default=None, help="hdf5 only")
    imp.add_argument("--overwrite", action="store_true")
    imp.add_argument("--verify", action="store_true", help="check sha256 of the result")
    info = sub.add_parser("info", help="print a store's manifest summary")
    info.add_argument("path")
    ver = sub.add_parser("verify", help="check every array's sha256")
    ver.add_argument("path")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.cmd == "import-json":
            schema = (
                Schema.from_json(json.loads(Path(args.schema).read_text())) if args.schema else None
            )
            hdf5 = HDF5Options(compression=args.compression) if args.compression else None
            dst = import_json_chunks(
                args.src,
                args.dst,
                schema=schema,
                backend=args.backend,
                shard_size=args.shard_size,
                episode_key=args.episode_key or None,
                overwrite=args.overwrite,
                hdf5=hdf5,
            )
            store = GraphStore.open(dst, verify=args.verify)
            print(store)
        elif args.cmd == "info":
            store = GraphStore.open(args.path)
            m = store.manifest
            print(store)
            print(
                json.dumps(
                    {
                        "schema": m.schema.to_json()["fields"],
                        "episodes": len(m.episode_ends),
                        "size_index": store.size_index().summary(),
                        "metadata": m.metadata,
                    },
                    indent=1,
                )
            )
        elif args.cmd == "verify":
            GraphStore.open(args.path).verify(progress=True)
            print(f"{args.path}: ok")
    except StoreError as exc:
        print(f"tj-data: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
