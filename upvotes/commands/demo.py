"""`upvotes demo`: the whole system, locally, end to end, checked against the publisher's ledger.

Starts the emulators (unless the environment names running ones), provisions, starts the
streaming pipeline as a subprocess, publishes a viral workload with some invalid messages,
waits until every post's exact count matches the ledger, folds, shows the top posts,
verifies again after the fold, counts the dead letters, and stops everything it started.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

from upvotes import emulators, local_stream
from upvotes.progress import Progress
from upvotes.provision import Resources, provision

HELP = "Run everything locally end to end on the emulators and check every count."

RESOURCES = Resources(
    project="demo-project", instance="upvotes", database="votes", topic="votes",
    subscription="votes-sub", dead_letter_topic="votes-dead-letter",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=4000, help="valid vote events to publish (default 4000)")
    parser.add_argument("--posts", type=int, default=100, help="posts they are spread over (default 100)")
    parser.add_argument("--zipf", type=float, default=1.2, help="skew: higher means fewer, hotter posts (default 1.2)")
    parser.add_argument("--invalid", type=int, default=20, help="invalid messages mixed in (default 20)")
    parser.add_argument("--window-seconds", type=int, default=2, help="streaming window length (default 2)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the counts to settle")
    parser.add_argument("--work-dir", default=".upvotes/demo", help="logs and the ledger go here")


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def run(args: argparse.Namespace) -> int:
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    with emulators.running_emulators(work_dir / "logs", say) as env:
        os.environ.update(env)
        return _run_on(env, args, work_dir)


def _wait_until_counted(database, ledger, stream: subprocess.Popen, timeout_s: float) -> bool:
    from spanner_store.reads import verify_totals

    posts = len(ledger.totals)
    deadline = time.monotonic() + timeout_s
    with Progress(posts, "posts whose exact count matches the ledger") as progress:
        matched = 0
        while time.monotonic() < deadline:
            if stream.poll() is not None:
                raise RuntimeError(f"the streaming pipeline exited with code {stream.returncode}; see its log")
            mismatched = {m.post_id for m in verify_totals(database, ledger.totals)}
            progress.advance(posts - len(mismatched) - matched)
            matched = posts - len(mismatched)
            if not mismatched:
                return True
            time.sleep(2)
    return False


def _count_dead_letters(res: Resources, expected: int, timeout_s: float = 60) -> int:
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    path = res.subscription_path(res.dead_letter_subscription_id)
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            response = subscriber.pull(subscription=path, max_messages=1000, timeout=5)
            seen.update(m.message.message_id for m in response.received_messages)
            if response.received_messages:
                subscriber.acknowledge(subscription=path, ack_ids=[m.ack_id for m in response.received_messages])
    finally:
        subscriber.close()
    return len(seen)


def _run_on(env: dict[str, str], args: argparse.Namespace, work_dir: Path) -> int:
    from pipeline import fold
    from spanner_store.database import open_database
    from spanner_store.reads import delta_row_counts, top_posts, verify_totals
    from upvotes.publishing import publish_workload
    from upvotes.workload import Workload

    res = RESOURCES
    say(f"provisioning {res.instance}/{res.database} and topic {res.topic} on the emulators")
    provision(res, log=lambda line: None)
    database = open_database(res.project, res.instance, res.database)

    stream_log = work_dir / "stream.log"
    say(f"starting the streaming pipeline (DirectRunner, {args.window_seconds} s windows; log: {stream_log})")
    stream = local_stream.start(res, args.window_seconds, stream_log, env)
    try:
        workload = Workload(events=args.events, posts=args.posts, zipf=args.zipf, invalid=args.invalid, seed=42)
        ledger_path = work_dir / "ledger.json"
        say(f"publishing {args.events:,} votes over {args.posts} posts (Zipf {args.zipf}) and {args.invalid} invalid messages")
        started = time.monotonic()
        report, ledger = publish_workload(res.topic_path(res.topic), workload, str(ledger_path))
        say(f"published in {report.seconds:.1f} s ({report.events_per_s:,.0f} events/s); ledger: {ledger_path}")

        say("waiting for the pipeline to count every vote (the DirectRunner pulls 10 messages at a time)")
        if not _wait_until_counted(database, ledger, stream, args.timeout):
            say(f"FAILED: counts did not settle within {args.timeout:.0f} s; see {stream_log}")
            return 1
        seconds = time.monotonic() - started
        say(f"all {ledger.events:,} votes counted {seconds:.1f} s after publishing began "
            f"({ledger.events / seconds:,.0f} events/s end to end)")

        rows, groups = delta_row_counts(database)
        say(f"{rows:,} delta rows for {ledger.events:,} votes: {1000 * rows / ledger.events:.0f} per 1,000 votes "
            f"(one per post, event hour and window; one row per post, counter and pane would be {groups:,})")

        outcome, fold_s = fold.run([f"--project={res.project}", f"--instance={res.instance}", f"--database={res.database}"])
        say(f"fold: {outcome.deltas_folded:,} deltas into {outcome.posts_folded} posts in {fold_s:.1f} s")

        top = top_posts(database, 5)
        say("top 5 posts by upvotes (folded):")
        for rank, post in enumerate(top.posts, 1):
            say(f"  {rank}. {post.post_id:<8} {post.upvotes:>6,} upvotes {post.shares:>6,} shares")

        mismatches = verify_totals(database, ledger.totals)
        dead = _count_dead_letters(res, ledger.invalid)
        say(f"dead-letter topic holds {dead} of the {ledger.invalid} invalid messages published")
        if mismatches or dead != ledger.invalid:
            for m in mismatches[:20]:
                say(f"MISMATCH {m.post_id} {m.counter}: expected {m.expected}, actual {m.actual}")
            say("FAILED")
            return 1
        say(f"verified: all {len(ledger.totals)} posts match the ledger exactly after the fold")
        return 0
    finally:
        local_stream.stop(stream)
        say("stopped the streaming pipeline")
