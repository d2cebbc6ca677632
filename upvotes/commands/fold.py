"""`upvotes fold`: one fold run, or one every --every seconds."""

from __future__ import annotations

import argparse
import json
import time

from pipeline.params import FOLD_PARAMS
from upvotes.flags.pipeline import add_pipeline_arguments, pipeline_inputs

HELP = "Fold committed deltas into the Posts aggregate (once, or --every N seconds)."
PASSES_BEAM_ARGS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_pipeline_arguments(parser, FOLD_PARAMS)
    parser.add_argument("--every", type=float, metavar="SECONDS", help="fold again every SECONDS until Ctrl-C")


def run(args: argparse.Namespace) -> int:
    from pipeline import fold

    argv, values = pipeline_inputs(args, FOLD_PARAMS)
    while True:
        outcome, seconds = fold.run(argv, values)
        print(
            json.dumps(
                {
                    "posts_folded": outcome.posts_folded,
                    "deltas_folded": outcome.deltas_folded,
                    "posts_refolded": outcome.posts_refolded,
                    "posts_split": outcome.posts_split,
                    "posts_skipped": outcome.posts_skipped,
                    "rows_read": outcome.rows_read,
                    "full_scan": bool(outcome.full_scans),
                    "seconds": round(seconds, 3),
                    "deltas_per_s": round(outcome.deltas_folded / seconds, 1) if seconds else None,
                }
            ),
            flush=True,
        )
        if not args.every:
            return 0
        time.sleep(max(0.0, args.every - seconds))
