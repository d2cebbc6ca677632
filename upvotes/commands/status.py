"""`upvotes status`: fold lag, unfolded deltas, write rate and dead letters; exit 3 past a threshold."""
from __future__ import annotations

import argparse
import json

from upvotes.commands.argument_types import positive_int
from upvotes.commands.database_flags import add_database_arguments, open_database_of
from upvotes.deploy_config import DeployConfig

HELP = "Health of a deployment (fold lag, unfolded deltas, rates, dead letters); exit 3 when a threshold is crossed."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("--dead-letter-topic",
                        help="dead-letter topic; its kept subscription <TOPIC>-kept is counted by reason "
                             "(without it, dead_letter_backlog is null)")
    parser.add_argument("--subscription",
                        help="the kept subscription of the dead-letter topic, if not <DEAD_LETTER_TOPIC>-kept")
    parser.add_argument("--dead-letter-limit", type=positive_int, default=1000,
                        help="most dead letters to pull and count (default 1000; they are released unacknowledged)")
    parser.add_argument("--max-fold-lag-s", type=float, default=float(DeployConfig.alert_fold_lag_s),
                        help=f"exit 3 when the last fold is older (default {DeployConfig.alert_fold_lag_s}: "
                             "3 intervals of the default 10-minute fold schedule; ALERT_FOLD_LAG_S of `upvotes deploy`)")
    parser.add_argument("--full-scan", action="store_true",
                        help="read every post's watermark instead of following the change log from the last "
                             "fold (a check of the log; costs one row per post)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def kept_subscription(args: argparse.Namespace) -> str | None:
    if args.subscription:
        return f"projects/{args.project}/subscriptions/{args.subscription}"
    if args.dead_letter_topic:
        return f"projects/{args.project}/subscriptions/{args.dead_letter_topic}-kept"
    return None


def run(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1

    from spanner_store.health import delta_health
    from upvotes.dead_letters import backlog_by_reason, pull_dead_letters, release
    from upvotes.status import EXIT_HEALTHY, EXIT_THRESHOLD_CROSSED, Thresholds, problems, status_report

    health = delta_health(open_database_of(args), full_scan=args.full_scan)
    backlog = None
    subscription = kept_subscription(args)
    if subscription:
        subscriber = pubsub_v1.SubscriberClient()
        try:
            held, _ = pull_dead_letters(subscriber, subscription, args.dead_letter_limit)
            release(subscriber, subscription, held)
        finally:
            subscriber.close()
        backlog = backlog_by_reason(held)
    report = status_report(health, backlog)
    found = problems(report, Thresholds(max_fold_lag_s=args.max_fold_lag_s))
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
