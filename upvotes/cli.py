"""`upvotes`: one command for the whole system. `upvotes --help` lists the subcommands.

Each subcommand is a module of upvotes.commands with HELP, `add_arguments(parser)` and
`run(args) -> int`. Errors take one path: a subcommand raises, `main` prints one line
(upvotes.command_errors) and returns its exit status. Beam is imported only by the subcommands that
run a pipeline, so help and the quick commands start in about a second.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from upvotes.commands import COMMANDS, module_name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="upvotes",
        description="Count upvotes and shares on viral posts with blind-write deltas in Cloud Spanner.",
        epilog="Start here: `upvotes demo` runs the whole system locally on the emulators.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(module_name(name))
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(run=module.run, passes_beam_args=getattr(module, "PASSES_BEAM_ARGS", False))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if extra and not args.passes_beam_args:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.beam_args = extra
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("upvotes: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - one readable line instead of a traceback
        from upvotes.command_errors import debugging, exit_status, explain

        print(f"upvotes: {explain(error)}", file=sys.stderr)
        if debugging():
            raise
        return exit_status(error)


if __name__ == "__main__":
    sys.exit(main())
