"""`upvotes`: one command for the whole system. `upvotes --help` lists the subcommands.

Beam is imported only by the subcommands that run a pipeline, so help and the quick
commands start in about a second.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

DEFAULT_PROJECT = os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project")


def _err(message: str) -> None:
    print(f"upvotes: {message}", file=sys.stderr)


def _database_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", default=DEFAULT_PROJECT,
                        help="Google Cloud project (default: $GOOGLE_CLOUD_PROJECT or demo-project)")
    parser.add_argument("--instance", required=True, help="Spanner instance ID")
    parser.add_argument("--database", required=True, help="Spanner database ID")


def _open(args: argparse.Namespace):
    from upvotes.database import open_database

    return open_database(args.project, args.instance, args.database)


# --- emulators ----------------------------------------------------------------------------

def _emulators(args: argparse.Namespace) -> int:
    from upvotes import emulators

    state_dir = Path(args.state_dir)
    log = lambda line: print(line, file=sys.stderr)  # noqa: E731 - progress on stderr, exports on stdout
    if args.action == "start":
        for line in emulators.export_lines(emulators.start_all(state_dir, log)):
            print(line)
        print("# use them in this shell: eval \"$(upvotes emulators start)\"", file=sys.stderr)
    elif args.action == "stop":
        count = emulators.stop_all(state_dir, log)
        log(f"stopped {count} emulator(s)" if count else "no emulator started by `upvotes emulators start` is running")
    else:
        for name, state in emulators.status(state_dir).items():
            print(f"{name}: {state}")
    return 0


# --- provision ----------------------------------------------------------------------------

def _provision(args: argparse.Namespace) -> int:
    from upvotes.provision import Resources, provision

    resources = Resources(args.project, args.instance, args.database, args.topic, args.subscription,
                          args.dead_letter_topic, args.dead_letter_subscription or "")
    provision(resources, create_instance=args.create_instance, instance_config=args.instance_config)
    return 0


# --- stream and fold: Beam pipelines, which parse their own flags -------------------------

def _pipeline_parser(parser: argparse.ArgumentParser, params) -> None:
    from pipeline.params import add_params

    parser.add_argument("--project", default=DEFAULT_PROJECT, help="Google Cloud project of Spanner and Pub/Sub")
    add_params(parser, params)
    parser.add_argument("--runner", help="Beam runner (default: BundleBasedDirectRunner, local); DataflowRunner on Google Cloud")
    parser.epilog = "Any other Beam or Dataflow option (--region, --temp_location, ...) is passed through to Beam."


def _beam_argv(args: argparse.Namespace, params, extra: list[str]) -> list[str]:
    argv = [f"--project={args.project}"] + (["--runner", args.runner] if args.runner else [])
    argv += [f"--{p.flag}={getattr(args, p.dest)}" for p in params if getattr(args, p.dest) is not None]
    return argv + extra


def _stream(args: argparse.Namespace, extra: list[str]) -> int:
    from pipeline import streaming
    from pipeline.params import STREAMING_PARAMS, validate

    validate(STREAMING_PARAMS, vars(args))
    print("streaming pipeline running; stop it with Ctrl-C", file=sys.stderr)
    streaming.run(_beam_argv(args, STREAMING_PARAMS, extra))
    return 0


def _fold(args: argparse.Namespace, extra: list[str]) -> int:
    from pipeline import fold
    from pipeline.params import FOLD_PARAMS

    argv = _beam_argv(args, FOLD_PARAMS, extra)
    while True:
        outcome, seconds = fold.run(argv)
        print(json.dumps({
            "posts_folded": outcome.posts_folded, "deltas_folded": outcome.deltas_folded,
            "posts_refolded": outcome.posts_refolded, "seconds": round(seconds, 3),
            "deltas_per_s": round(outcome.deltas_folded / seconds, 1) if seconds else None,
        }), flush=True)
        if not args.every:
            return 0
        time.sleep(max(0.0, args.every - seconds))


# --- reads --------------------------------------------------------------------------------

def _read(args: argparse.Namespace) -> int:
    from upvotes import hourly
    from upvotes.reads import exact_counts

    if args.hourly:
        return hourly.run(args)
    for totals in exact_counts(_open(args), args.post_ids):
        print(json.dumps(totals._asdict()))
    return 0


def _top(args: argparse.Namespace) -> int:
    from upvotes import leaderboard
    from upvotes.reads import top_posts

    if args.version is not None or args.page is not None:
        return leaderboard.run_page(args)
    database = _open(args)
    while True:
        top = top_posts(database, args.n)
        age = "never folded" if top.folded_through is None else (
            f"folded through {top.folded_through.isoformat()} "
            f"({time.time() - top.folded_through.timestamp():.0f} s ago)")
        if args.watch:
            print("\x1b[2J\x1b[H", end="")
            print(f"top {args.n} posts by upvotes, {age}; Ctrl-C to stop\n")
            print(f"{'rank':>4}  {'post':<32} {'upvotes':>12} {'shares':>10}")
            for rank, post in enumerate(top.posts, 1):
                print(f"{rank:>4}  {post.post_id[:32]:<32} {post.upvotes:>12,} {post.shares:>10,}")
            sys.stdout.flush()
            time.sleep(args.interval)
            continue
        print(f"ranking as of the last fold: {age}", file=sys.stderr)
        for rank, post in enumerate(top.posts, 1):
            print(json.dumps({"rank": rank, **post._asdict()}))
        return 0


def _verify(args: argparse.Namespace) -> int:
    from upvotes.publisher import Ledger
    from upvotes.reads import verify_totals

    try:
        ledger = Ledger.load(args.ledger)
    except OSError as error:
        _err(f"cannot read the ledger {args.ledger}: {error.strerror}")
        return 2
    except (ValueError, KeyError, TypeError) as error:
        _err(f"{args.ledger} is not a ledger written by `upvotes publish --ledger`: {error}")
        return 2
    mismatches = verify_totals(_open(args), ledger.totals)
    for m in mismatches:
        print(f"MISMATCH {m.post_id} {m.counter}: expected {m.expected}, actual {m.actual}")
    posts = len(ledger.totals)
    if mismatches:
        print(f"verify: {len(mismatches)} mismatches over {posts} posts")
        return 1
    print(f"verify: all {posts} posts match the ledger ({ledger.events} events)")
    return 0


# --- the parser ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from pipeline.params import FOLD_PARAMS, STREAMING_PARAMS
    from upvotes import demo, deploy, hourly, leaderboard, lint_schema, publisher

    parser = argparse.ArgumentParser(
        prog="upvotes",
        description="Count upvotes and shares on viral posts with blind-write deltas in Cloud Spanner.",
        epilog="Start here: `upvotes demo` runs the whole system locally on the emulators.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, handler) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    p = command("emulators", "Start, stop or check the local Spanner and Pub/Sub emulators.", _emulators)
    p.add_argument("action", choices=("start", "stop", "status"),
                   help="start prints export lines: eval \"$(upvotes emulators start)\"")
    p.add_argument("--state-dir", default=".upvotes", help="where PIDs, ports and logs are kept (default: .upvotes)")

    p = command("provision", "Create the topics, subscriptions, Spanner instance (emulator) and database; idempotent.", _provision)
    _database_args(p)
    p.add_argument("--topic", required=True, help="Pub/Sub topic the publishers send votes to")
    p.add_argument("--subscription", required=True, help="subscription the streaming pipeline reads")
    p.add_argument("--dead-letter-topic", required=True, help="topic for rejected messages")
    p.add_argument("--dead-letter-subscription", help="subscription that keeps dead letters (default: <dead-letter-topic>-kept)")
    p.add_argument("--create-instance", action="store_true", help="on a real project, create the Spanner instance if missing")
    p.add_argument("--instance-config", default="regional-us-central1", help="instance configuration for --create-instance")

    p = command("publish", publisher.DESCRIPTION, publisher.run)
    publisher.add_arguments(p)

    p = command("stream", "Run the streaming pipeline: Pub/Sub votes to Spanner delta rows.", _stream)
    _pipeline_parser(p, STREAMING_PARAMS)

    p = command("fold", "Fold committed deltas into the Posts aggregate (once, or --every N seconds).", _fold)
    _pipeline_parser(p, FOLD_PARAMS)
    p.add_argument("--every", type=float, metavar="SECONDS", help="fold again every SECONDS until Ctrl-C")

    p = command("read", "Exact counts of posts (folded aggregate plus unfolded deltas, one snapshot); "
                        "--hourly for exact counts per event hour.", _read)
    _database_args(p)
    p.add_argument("post_ids", nargs="+", metavar="POST_ID")
    hourly.add_arguments(p)

    p = command("top", "Top posts by folded upvotes, from the index, with the ranking's age; "
                       "--version/--page page through a published, versioned view.", _top)
    _database_args(p)
    p.add_argument("-n", type=int, default=10, help="how many posts (default 10)")
    p.add_argument("--watch", action="store_true", help="redraw a table every --interval seconds")
    p.add_argument("--interval", type=float, default=3.0, help="seconds between redraws with --watch")
    leaderboard.add_page_arguments(p)

    p = command("publish-top-view", "Publish the top K posts as a new, incrementally written view version.",
                leaderboard.run_publish_view)
    leaderboard.add_view_arguments(p)

    p = command("verify", "Compare every post's exact count with a publisher ledger; exit 1 on any mismatch.", _verify)
    _database_args(p)
    p.add_argument("--ledger", required=True, help="ledger file written by `upvotes publish --ledger`")

    p = command("demo", "Run everything locally end to end on the emulators and check every count.", demo.run)
    demo.add_arguments(p)

    p = command("lint-schema", "Check Spanner DDL files for write hotspots.", lint_schema.run)
    lint_schema.add_arguments(p)

    p = command("deploy", "Dataflow flex templates, launch commands, scheduler job and IAM for Google Cloud.", deploy.run)
    deploy.add_arguments(p)
    return parser


PIPELINE_COMMANDS = {"stream": _stream, "fold": _fold}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in PIPELINE_COMMANDS:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command in PIPELINE_COMMANDS:
            return PIPELINE_COMMANDS[args.command](args, extra)
        return args.handler(args)
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except Exception as error:  # noqa: BLE001 - one readable line instead of a traceback
        from upvotes.errors import explain

        _err(explain(error))
        if os.environ.get("UPVOTES_DEBUG"):
            raise
        return 1


if __name__ == "__main__":
    sys.exit(main())
