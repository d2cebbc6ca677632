"""`upvotes dead-letters show|replay`: look at the kept dead letters, and re-drive them."""

from __future__ import annotations

import argparse
import json
import sys
import time

from pipeline.params import REPLAY_PARAMS, ReplaySettings, add_params
from upvotes.argument_types import positive_int
from upvotes.command_errors import UsageError
from upvotes.flags.database import add_project_argument, open_database_of

HELP = "Show the kept dead letters by reason, or replay them (failed delta rows and vote states, corrected votes)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("show", "replay"),
        help="show: group and print them, acknowledging nothing; replay: re-drive them, "
        "acknowledging each only after its replay succeeded",
    )
    add_project_argument(parser)
    parser.add_argument(
        "--dead-letter-topic", required=True, help="the dead-letter topic; its kept subscription is <TOPIC>-kept"
    )
    parser.add_argument("--subscription", help="the kept subscription, if not <DEAD_LETTER_TOPIC>-kept")
    parser.add_argument("--reason", help="only dead letters of this reason (e.g. spanner_write_failed, not_json)")
    parser.add_argument("--limit", type=positive_int, default=1000, help="most dead letters to handle (default 1000)")
    parser.add_argument(
        "--instance", help="replay: Spanner instance the failed delta rows and vote states are written to"
    )
    parser.add_argument(
        "--database", help="replay: Spanner database the failed delta rows and vote states are written to"
    )
    parser.add_argument(
        "--corrected-votes",
        metavar="FILE",
        help="replay: JSON-lines file of corrected votes; each replaces the rejected vote whose "
        "identity (its event_id, or the identity `show` prints) is its event_id, and is "
        "written to the database through the pipeline's own idempotent path",
    )
    parser.add_argument(
        "--topic", help="deprecated, ignored: corrected votes are written to the database, no longer published"
    )
    parser.add_argument("--dry-run", action="store_true", help="replay: say what would be done; change nothing")
    # The stream's own flags (pipeline/params.py): a correction is read under the stream's event-time
    # policy, at its dead letter's publish time.
    add_params(parser, REPLAY_PARAMS)


def _kept_subscription(args: argparse.Namespace) -> str:
    return f"projects/{args.project}/subscriptions/{args.subscription or args.dead_letter_topic + '-kept'}"


def run(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1

    from upvotes.operations.dead_letters import DeadLetter, HeldLetters, backlog_by_reason, pull_dead_letters, release

    if args.action == "replay" and not (args.instance and args.database):
        raise UsageError("replay needs --instance and --database (where failed delta rows and vote states are written)")
    if args.topic:
        print(
            "upvotes dead-letters: --topic is deprecated and ignored: corrected votes are written to the "
            "database through the pipeline's own path, no longer published",
            file=sys.stderr,
        )
    policy = _event_time_policy(args)
    corrected = _read_corrected(args.corrected_votes, policy) if args.corrected_votes else {}

    subscription = _kept_subscription(args)
    subscriber = pubsub_v1.SubscriberClient()
    held: list[DeadLetter] = []
    others: list[DeadLetter] = []
    try:
        with HeldLetters(subscriber, subscription) as leases:  # a long replay keeps what it holds
            held, others = pull_dead_letters(subscriber, subscription, args.limit, args.reason, held=leases)
            release(subscriber, subscription, others)
            leases.let_go(others)
            if args.action == "show":
                print(json.dumps({"backlog_by_reason": backlog_by_reason(held), "shown": len(held)}))
                for letter in held:
                    print(json.dumps(letter.summary()))
                return 0
            held, unreplayed = _replay(args, subscriber, subscription, held, corrected, policy, leases)
    finally:
        release(subscriber, subscription, held)
        subscriber.close()
    if unreplayed:
        raise RuntimeError(f"{unreplayed} dead letters not replayed (failed or refused, see above); they are kept")
    return 0


def _event_time_policy(args: argparse.Namespace):
    """The stream's event-time policy, from the same flags and defaults (pipeline/params.py)."""
    from schemas.contract import EventTimePolicy

    settings = ReplaySettings.parse({param.dest: getattr(args, param.dest) for param in REPLAY_PARAMS})
    return EventTimePolicy(max_clock_skew_s=settings.max_clock_skew_seconds)


def _read_corrected(path: str, policy) -> dict:
    from upvotes.operations.dead_letters import read_corrected_votes

    try:
        with open(path, "rb") as lines:
            return read_corrected_votes(lines, publish_time_s=time.time(), policy=policy)
    except (OSError, ValueError) as error:
        raise UsageError(f"--corrected-votes {path}: {error}") from None


def _replay(
    args: argparse.Namespace, subscriber, subscription: str, held: list, corrected: dict, policy, leases
) -> tuple[list, int]:
    """Replays the held dead letters; returns those still held (to release) and how many replays
    failed or were refused."""
    from schemas.records import PostDelta
    from spanner_store.database import run_with_retries
    from upvotes.operations.dead_letters import acknowledge, execute_replay, plan_replay, write_corrected

    plan = plan_replay(held, corrected, policy)
    if args.dry_run:
        for letter, sink, failed in plan.failed:
            print(
                json.dumps(
                    {"would": sink.replay.action, "message_id": letter.message_id, **sink.replay.described(failed)}
                )
            )
        for letter, correction in plan.corrections:
            write = correction.write()
            written = {"delta": write.to_json()} if isinstance(write, PostDelta) else {"states": len(write)}
            print(
                json.dumps(
                    {
                        "would": "write_correction",
                        "message_id": letter.message_id,
                        "identity": letter.identity(),
                        **written,
                        "line": correction.line.number,
                        "correction": correction.text,
                    }
                )
            )
        for letter in plan.left:
            print(json.dumps({"would": "leave", **letter.summary()}))
        return held, 0

    database = open_database_of(args)

    def replay_failed(sink, failed):
        return sink.replay.write(database, failed)

    def write_correction(correction):
        return run_with_retries(lambda: write_corrected(database, correction))

    def ack(letters):
        acknowledge(subscriber, subscription, letters)
        leases.let_go(letters)

    report, still_held = execute_replay(plan, replay_failed, write_correction, ack)
    print(json.dumps(report.to_json()))
    for failure in report.failed:
        print(f"replay failed, dead letter kept: {failure}", file=sys.stderr)
    for refusal in report.corrections_refused:
        print(f"replay refused: {refusal}", file=sys.stderr)
    return still_held, len(report.failed) + len(report.corrections_refused)
