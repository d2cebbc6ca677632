"""`upvotes status`: fold lag, unfolded deltas, write rate, dead letters, whether the stream
runs (each local stream's heartbeat, last delta commit, votes backlog) and the votes that arrived
late; exit 3 past a threshold (a local stream that missed 3 of its windows among them), or when a
check cannot be made."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TypeVar

from upvotes.argument_types import non_negative_float, positive_int
from upvotes.deploy.deploy_config import DeployConfig
from upvotes.flags.database import add_database_arguments, open_database_of
from upvotes.operations.late_votes import DEFAULT_MAX_LATE_VOTES, JOB_NAME, LOOKBACK_S, valid_job_name

T = TypeVar("T")
HELP = (
    "Health of a deployment (fold lag, unfolded deltas, rates, dead letters, local streams' heartbeats, last "
    "delta commit, votes backlog, late votes); exit 3 when a threshold is crossed (a local stream that missed 3 "
    "of its windows is dead) or a check cannot be made."
)


def job_name(text: str) -> str:
    if not valid_job_name(text):
        raise argparse.ArgumentTypeError(f"not a Dataflow job name ({JOB_NAME}): {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument(
        "--dead-letter-topic",
        help="dead-letter topic whose kept subscription <TOPIC>-kept is counted by reason "
        "(default: the one `upvotes provision` recorded)",
    )
    parser.add_argument(
        "--subscription", help="the kept subscription of the dead-letter topic, if not <DEAD_LETTER_TOPIC>-kept"
    )
    parser.add_argument(
        "--votes-subscription", help="the subscription the stream reads (default: the one `upvotes provision` recorded)"
    )
    parser.add_argument(
        "--dead-letter-limit",
        type=positive_int,
        default=1000,
        help="most dead letters to pull and count (default 1000; they are released unacknowledged)",
    )
    parser.add_argument(
        "--max-fold-lag-s",
        type=float,
        default=float(DeployConfig.alert_fold_lag_s),
        help=f"exit 3 when the last fold is older (default {DeployConfig.alert_fold_lag_s}: "
        "3 intervals of the default 10-minute fold schedule; ALERT_FOLD_LAG_S of `upvotes deploy`)",
    )
    parser.add_argument(
        "--full-scan",
        action="store_true",
        help="read every post's watermark instead of following the change log from the last "
        "fold (a check of the log; costs one row per post)",
    )
    parser.add_argument(
        "--max-backlog-age-s",
        type=float,
        default=float(DeployConfig.alert_data_freshness_s),
        help="exit 3 when the votes subscription's oldest unacknowledged message is older "
        f"(default {DeployConfig.alert_data_freshness_s}: ALERT_DATA_FRESHNESS_S of `upvotes deploy`)",
    )
    parser.add_argument(
        "--streaming-job",
        type=job_name,
        default=DeployConfig.streaming_job,
        help="the streaming Dataflow job whose late votes are counted, on Google Cloud "
        f"(default {DeployConfig.streaming_job}: STREAMING_JOB of `upvotes deploy`)",
    )
    parser.add_argument(
        "--max-late-votes",
        type=non_negative_float,
        default=float(DEFAULT_MAX_LATE_VOTES),
        help=f"exit 3 when more votes arrived late in the last {LOOKBACK_S} s (counters "
        "WindowAndSumVotes/late_events and ParseVotes/stamped_ahead_of_worker_clock; default "
        f"{DEFAULT_MAX_LATE_VOTES}: ALERT_LATE_VOTES_PER_MIN of `upvotes deploy` over "
        f"{LOOKBACK_S // 60} minutes); not applicable on the emulators",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _path(project: str, name: str) -> str:
    return name if name.startswith("projects/") else f"projects/{project}/subscriptions/{name}"


def kept_subscription(args: argparse.Namespace, watched: dict[str, str]) -> str | None:
    from upvotes.operations.watches import DEAD_LETTER_SUBSCRIPTION

    if args.subscription:
        return _path(args.project, args.subscription)
    if args.dead_letter_topic:
        return _path(args.project, f"{args.dead_letter_topic}-kept")
    return watched.get(DEAD_LETTER_SUBSCRIPTION)


def votes_subscription(args: argparse.Namespace, watched: dict[str, str]) -> str | None:
    from upvotes.operations.watches import VOTES_SUBSCRIPTION

    return _path(args.project, args.votes_subscription) if args.votes_subscription else watched.get(VOTES_SUBSCRIPTION)


def _recorded(database) -> tuple[dict[str, str], str | None]:
    """What provision recorded, or why it cannot be known."""
    from google.api_core import exceptions

    from upvotes.operations import watches

    try:
        return watches.recorded(database), None
    except exceptions.NotFound:  # a database provisioned before StatusWatches existed
        return {}, "this database has no StatusWatches table: run `upvotes provision` again (it adds it)"


def _heartbeats(database, not_checked: list[str]):
    """Every local stream's heartbeat, or None with why not."""
    from google.api_core import exceptions

    from spanner_reads.liveness import read_stream_heartbeats
    from spanner_store.database import schema_behind

    try:
        return read_stream_heartbeats(database)[1]
    except exceptions.NotFound as error:
        if not schema_behind(error):
            raise
        not_checked.append(
            "this database has no StreamHeartbeats table, so a dead local stream cannot be seen: run "
            "`upvotes provision` again (it adds it)"
        )
        return None


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


def _checked(what: str, flag: str, name: str | None, read: Callable[[str], T], not_checked: list[str]) -> T | None:
    """`read(name)`, or None with the reason added to `not_checked`."""
    from google.api_core import exceptions

    from upvotes.operations.backlog import BacklogUnknown
    from upvotes.operations.late_votes import LateVotesUnknown

    if name is None:
        not_checked.append(f"no {what} to check: `upvotes provision` records it (or pass {flag})")
        return None
    try:
        return read(name)
    except (exceptions.GoogleAPICallError, BacklogUnknown, LateVotesUnknown) as error:
        not_checked.append(f"the {what} {name} could not be read: {error}")
        return None


def run(args: argparse.Namespace) -> int:
    from spanner_reads.health import delta_health
    from spanner_reads.liveness import read_last_delta_commit
    from upvotes.operations.backlog import read_backlog
    from upvotes.operations.late_votes import read_late_votes
    from upvotes.operations.status import (
        EXIT_HEALTHY,
        EXIT_THRESHOLD_CROSSED,
        Thresholds,
        heartbeat_problems,
        late_votes_problems,
        late_votes_report,
        liveness_problems,
        liveness_report,
        problems,
        status_report,
    )

    database = open_database_of(args)
    health = delta_health(database, full_scan=args.full_scan)
    read_at, last_commit = read_last_delta_commit(database)
    watched, unknown = _recorded(database)
    not_checked = [unknown] if unknown else []
    heartbeats = _heartbeats(database, not_checked)

    dead_letters = _checked(
        "dead-letter subscription",
        "--dead-letter-topic",
        kept_subscription(args, watched),
        lambda kept: dead_letter_backlog(kept, args.dead_letter_limit),
        not_checked,
    )
    backlog = _checked(
        "votes subscription", "--votes-subscription", votes_subscription(args, watched), read_backlog, not_checked
    )
    late_votes = _checked(
        "lateness counters of the streaming job",
        "--streaming-job",
        args.streaming_job,
        lambda job: read_late_votes(args.project, job),
        not_checked,
    )

    report = {
        **status_report(health, dead_letters),
        **liveness_report(read_at, last_commit, backlog, watched, heartbeats),
        **late_votes_report(late_votes),
    }
    thresholds = Thresholds(
        max_fold_lag_s=args.max_fold_lag_s, max_backlog_age_s=args.max_backlog_age_s, max_late_votes=args.max_late_votes
    )
    found = (
        problems(report, thresholds)
        + heartbeat_problems(report)
        + liveness_problems(report, thresholds)
        + (late_votes_problems(report, thresholds))
        + [f"not checked: {what}" for what in not_checked]
    )
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
