"""`upvotes emulators start|stop|status`: the local Spanner and Pub/Sub emulators."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from upvotes.devtools import emulators

HELP = "Start, stop or check the local Spanner and Pub/Sub emulators."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("start", "stop", "status"),
        help='start prints export lines: eval "$(upvotes emulators start)"',
    )
    parser.add_argument(
        "--state-dir",
        default=emulators.DEFAULT_STATE_DIR,
        help=f"where PIDs, ports and logs are kept (default: {emulators.DEFAULT_STATE_DIR})",
    )


def run(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir)
    log = lambda line: print(line, file=sys.stderr)  # noqa: E731 - progress on stderr, exports on stdout
    if args.action == "start":
        for line in emulators.export_lines(emulators.start_all(state_dir, log)):
            print(line)
        print('# use them in this shell: eval "$(upvotes emulators start)"', file=sys.stderr)
    elif args.action == "stop":
        count = emulators.stop_all(state_dir, log)
        log(f"stopped {count} emulator(s)" if count else "no emulator started by `upvotes emulators start` is running")
    else:
        for name, state in emulators.status(state_dir).items():
            print(f"{name}: {state}")
    return 0
