"""`python -m bench [--quick] [--out DIR] [--only NAME,...]`: run every benchmark and write the results."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.runner import BENCHMARKS, DEFAULT_OUT, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: a smoke run of about five minutes, every count still checked"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="directory for latest.json, latest.png and logs (default: %(default)s)",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated benchmark names: run only these and replace their results "
        "in the existing latest.json (of the same size)",
    )
    args = parser.parse_args(argv)
    only = tuple(name for name in args.only.split(",") if name)
    unknown = sorted(set(only) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    run(quick=args.quick, out_dir=args.out, only=only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
