"""`python -m bench [--quick] [--out DIR]`: run every benchmark and write the results."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.runner import DEFAULT_OUT, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of about two minutes")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="directory for latest.json, latest.png and logs (default: %(default)s)")
    args = parser.parse_args(argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
