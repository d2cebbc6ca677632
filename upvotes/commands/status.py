"""`upvotes status`: fold lag, unfolded deltas, write rate, dead letters and whether the stream
runs (last delta commit, votes backlog); exit 3 past a threshold, or when a check cannot be made."""
from __future__ import annotations

import argparse
import json
from typing import Callable, TypeVar

from upvotes.argument_types import positive_int
from upvotes.commands.database_flags import add_database_arguments, open_database_of
from upvotes.deploy.deploy_config import DeployConfig

T = TypeVar("T")
HELP = ("Health of a deployment (fold lag, unfolded deltas, rates, dead letters, last delta commit, votes "
        "backlog); exit 3 when a threshold is crossed or a check cannot be made.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("--dead-letter-topic",
                        help="dead-letter topic whose kept subscription <TOPIC>-kept is counted by reason "
                             "(default: the one `upvotes provision` recorded)")
    parser.add_argument("--subscription",
                        help="the kept subscription of the dead-letter topic, if not <DEAD_LETTER_TOPIC>-kept")
    parser.add_argument("--votes-subscription",
                        help="the subscription the stream reads (default: the one `upvotes provision` recorded)")
    parser.add_argument("--dead-letter-limit", type=positive_int, default=1000,
                        help="most dead letters to pull and count (default 1000; they are released unacknowledged)")
    parser.add_argument("--max-fold-lag-s", type=float, default=float(DeployConfig.alert_fold_lag_s),
                        help=f"exit 3 when the last fold is older (default {DeployConfig.alert_fold_lag_s}: "
                             "3 intervals of the default 10-minute fold schedule; ALERT_FOLD_LAG_S of `upvotes deploy`)")
    parser.add_argument("--full-scan", action="store_true",
                        help="read every post's watermark instead of following the change log from the last "
                             "fold (a check of the log; costs one row per post)")
    parser.add_argument("--max-backlog-age-s", type=float, default=float(DeployConfig.alert_data_freshness_s),
                        help="exit 3 when the votes subscription's oldest unacknowledged message is older "
                             f"(default {DeployConfig.alert_data_freshness_s}: ALERT_DATA_FRESHNESS_S of `upvotes deploy`)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _path(project: str, name: str) -> str:
    return name if name.startswith("projects/") else f"projects/{project}/subscriptions/{name}"


def kept_subscription(args: argparse.Namespace, watched: dict[str, str]) -> str | None:
    from spanner_store.watches import DEAD_LETTER_SUBSCRIPTION

    if args.subscription:
        return _path(args.project, args.subscription)
    if args.dead_letter_topic:
        return _path(args.project, f"{args.dead_letter_topic}-kept")
    return watched.get(DEAD_LETTER_SUBSCRIPTION)


def votes_subscription(args: argparse.Namespace, watched: dict[str, str]) -> str | None:
    from spanner_store.watches import VOTES_SUBSCRIPTION

    return _path(args.project, args.votes_subscription) if args.votes_subscription else watched.get(VOTES_SUBSCRIPTION)


def _recorded(database) -> tuple[dict[str, str], str | None]:
    """What provision recorded, or why it cannot be known."""
    from google.api_core import exceptions

    from spanner_store import watches

    try:
        return watches.recorded(database), None
    except exceptions.NotFound:  # a database provisioned before StatusWatches existed
        return {}, "this database has no StatusWatches table: run `upvotes provision` again (it adds it)"


def dead_letter_backlog(subscription: str, limit: int) -> dict[str, int]:
    from google.cloud import pubsub_v1

    from upvotes.operations.dead_letters import backlog_by_reason, pull_dead_letters, release

    subscriber = pubsub_v1.SubscriberClient()
    try:
        held, _ = pull_dead_letters(subscriber, subscription, limit)
        release(subscriber, subscription, held)
    finally:
        subscriber.close()
    return backlog_by_reason(held)


def _checked(what: str, flag: str, subscription: str | None, read: Callable[[str], T],
             not_checked: list[str]) -> T | None:
    """`read(subscription)`, or None with the reason added to `not_checked`."""
    from google.api_core import exceptions

    from upvotes.operations.backlog import BacklogUnknown

    if subscription is None:
        not_checked.append(f"no {what} to check: `upvotes provision` records it (or pass {flag})")
        return None
    try:
        return read(subscription)
    except (exceptions.GoogleAPICallError, BacklogUnknown) as error:
        not_checked.append(f"the {what} {subscription} could not be read: {error}")
        return None


def run(args: argparse.Namespace) -> int:
    from spanner_store.health import delta_health
    from spanner_store.liveness import read_last_delta_commit
    from upvotes.operations.backlog import read_backlog
    from upvotes.operations.status import (
        EXIT_HEALTHY, EXIT_THRESHOLD_CROSSED, Thresholds, liveness_problems, liveness_report, problems, status_report,
    )

    database = open_database_of(args)
    health = delta_health(database, full_scan=args.full_scan)
    read_at, last_commit = read_last_delta_commit(database)
    watched, unknown = _recorded(database)
    not_checked = [unknown] if unknown else []

    dead_letters = _checked("dead-letter subscription", "--dead-letter-topic", kept_subscription(args, watched),
                            lambda kept: dead_letter_backlog(kept, args.dead_letter_limit), not_checked)
    backlog = _checked("votes subscription", "--votes-subscription", votes_subscription(args, watched),
                       read_backlog, not_checked)

    report = {**status_report(health, dead_letters), **liveness_report(read_at, last_commit, backlog, watched)}
    thresholds = Thresholds(max_fold_lag_s=args.max_fold_lag_s, max_backlog_age_s=args.max_backlog_age_s)
    found = problems(report, thresholds) + liveness_problems(report, thresholds) + [
        f"not checked: {what}" for what in not_checked]
    report["healthy"], report["problems"] = not found, found
    if args.json:
        print(json.dumps(report))
    else:
        for name, value in report.items():
            if name != "problems":
                print(f"{name:<24} {json.dumps(value)}")
        for problem in found:
            print(f"PROBLEM: {problem}")
    return EXIT_THRESHOLD_CROSSED if found else EXIT_HEALTHY
