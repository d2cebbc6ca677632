"""`upvotes dead-letters show|replay`: look at the kept dead letters, and re-drive them."""
from __future__ import annotations

import argparse
import json
import sys
import time

from upvotes.argument_types import positive_int
from upvotes.commands.database_flags import add_project_argument, open_database_of
from upvotes.commands.errors import UsageError

HELP = "Show the kept dead letters by reason, or replay them (failed delta rows and vote states, corrected votes)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("show", "replay"),
                        help="show: group and print them, acknowledging nothing; replay: re-drive them, "
                             "acknowledging each only after its replay succeeded")
    add_project_argument(parser)
    parser.add_argument("--dead-letter-topic", required=True,
                        help="the dead-letter topic; its kept subscription is <TOPIC>-kept")
    parser.add_argument("--subscription", help="the kept subscription, if not <DEAD_LETTER_TOPIC>-kept")
    parser.add_argument("--reason", help="only dead letters of this reason (e.g. spanner_write_failed, not_json)")
    parser.add_argument("--limit", type=positive_int, default=1000, help="most dead letters to handle (default 1000)")
    parser.add_argument("--instance", help="replay: Spanner instance the failed delta rows and vote states are "
                                           "written to")
    parser.add_argument("--database", help="replay: Spanner database the failed delta rows and vote states are "
                                           "written to")
    parser.add_argument("--corrected-votes", metavar="FILE",
                        help="replay: JSON-lines file of corrected votes; each replaces the rejected vote "
                             "with the same event_id, published to --topic")
    parser.add_argument("--topic", help="replay: the votes topic corrected votes are published to")
    parser.add_argument("--dry-run", action="store_true", help="replay: say what would be done; change nothing")


def _kept_subscription(args: argparse.Namespace) -> str:
    return f"projects/{args.project}/subscriptions/{args.subscription or args.dead_letter_topic + '-kept'}"


def run(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1

    from upvotes.operations.dead_letters import backlog_by_reason, pull_dead_letters, release

    if args.action == "replay" and not (args.instance and args.database):
        raise UsageError("replay needs --instance and --database (where failed delta rows and vote states are "
                         "written)")
    if args.corrected_votes and not args.topic:
        raise UsageError("--corrected-votes needs --topic, the votes topic to publish them to")
    corrected = _read_corrected(args.corrected_votes) if args.corrected_votes else {}

    subscription = _kept_subscription(args)
    subscriber = pubsub_v1.SubscriberClient()
    held, others = [], []
    try:
        held, others = pull_dead_letters(subscriber, subscription, args.limit, args.reason)
        release(subscriber, subscription, others)
        if args.action == "show":
            print(json.dumps({"backlog_by_reason": backlog_by_reason(held), "shown": len(held)}))
            for letter in held:
                print(json.dumps(letter.summary()))
            return 0
        held, failed = _replay(args, subscriber, subscription, held, corrected)
    finally:
        release(subscriber, subscription, held)
        subscriber.close()
    if failed:
        raise RuntimeError(f"{failed} replays failed; their dead letters are kept")
    return 0


def _read_corrected(path: str) -> dict:
    from upvotes.operations.dead_letters import read_corrected_votes

    try:
        with open(path, "rb") as lines:
            return read_corrected_votes(lines, publish_time_s=time.time())
    except (OSError, ValueError) as error:
        raise UsageError(f"--corrected-votes {path}: {error}") from None


def _replay(args: argparse.Namespace, subscriber, subscription: str, held: list, corrected: dict) -> tuple[list, int]:
    """Replays the held dead letters; returns those still held (to release) and how many replays failed."""
    from google.cloud import pubsub_v1

    from spanner_store.database import run_with_retries
    from spanner_store.deltas import write_new_deltas
    from spanner_store.votes import apply_all_vote_states
    from upvotes.operations.dead_letters import acknowledge, execute_replay, plan_replay

    plan = plan_replay(held, corrected)
    if args.dry_run:
        for letter, delta in plan.deltas:
            print(json.dumps({"would": "rewrite_delta", "message_id": letter.message_id, "delta": delta.to_json()}))
        for letter, states in plan.states:
            print(json.dumps({"would": "apply_vote_states", "message_id": letter.message_id, "states": len(states)}))
        for letter, vote in plan.votes:
            print(json.dumps({"would": "publish_corrected_vote", "message_id": letter.message_id,
                              "event_id": vote.event_id, "data": vote.data.decode("utf-8")}))
        for letter in plan.left:
            print(json.dumps({"would": "leave", **letter.summary()}))
        return held, 0

    database = open_database_of(args)
    publisher = pubsub_v1.PublisherClient()
    topic = f"projects/{args.project}/topics/{args.topic}" if args.topic else ""

    def write_delta(delta):
        return tuple(run_with_retries(lambda: write_new_deltas(database, [delta])))

    def apply_states(states):
        totals = apply_all_vote_states(database, states)
        return totals.applied, totals.superseded

    def publish_vote(vote):
        publisher.publish(topic, vote.data, **vote.attributes).result(timeout=60)

    report, still_held = execute_replay(plan, write_delta, apply_states, publish_vote,
                                        lambda letters: acknowledge(subscriber, subscription, letters))
    print(json.dumps(report.__dict__))
    for failure in report.failed:
        print(f"replay failed, dead letter kept: {failure}", file=sys.stderr)
    return still_held, len(report.failed)
