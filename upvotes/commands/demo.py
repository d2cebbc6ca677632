"""`upvotes demo`: the race a newcomer sees, on one machine, checked against the publisher's ledger.

Starts the emulators (unless the environment names running ones) and provisions. Then the
race: a few seconds of read-modify-write on one hot counter (the approach this design
replaces, in its best configurations on this emulator), and a viral burst of 100,000 votes
published through Pub/Sub in batches to the streaming pipeline, timed until every post's
exact count equals the ledger. Then one vote per user: a burst of vote-state events on the
same posts (up, down, none, with duplicates, flips and late events), timed the same way
against the ledger of both bursts. Then real traffic: single-vote messages as an app publishes them
(a viral head and a long tail, half vote states), the figure an app should expect. Then what is viral now: yesterday's viral post (votes
stamped 30 hours ago, more than today's leader) ranks first of all time but not in the hot
ranking nor in the last 24 hours; the three top lists are shown side by side, each saying
whether it is certified exact, before any fold. Prints the rates and the ratios, folds,
verifies every post again after the fold, counts the dead letters, and stops everything it
started.
"""
from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path

from schemas.counters import COUNTERS, RANKING
from upvotes.devtools import emulators, local_stream
from upvotes.operations.provision import provision
from upvotes.resources import Resources

HELP = "Run everything locally end to end on the emulators: the race against read-modify-write, every count checked."

RESOURCES = Resources(
    project="demo-project", instance="upvotes", database="votes", topic="votes",
    subscription="votes-sub", dead_letter_topic="votes-dead-letter",
)
WARM_UP_POST = "demo-warm-up"
READY_TIMEOUT_S = 120.0
# unique voters are an estimate (schemas/voter_sketch.py): about 0.8% standard error above 1,000 voters
UNIQUE_TOLERANCE = 0.03
YESTERDAYS_POST = "viral-yesterday"
YESTERDAY_HOURS_AGO = 30
TOP_N = 5
# The race's votes give each counter besides upvotes (schemas/counters.py) a fifth of the
# events, so every counter shows in the demo, even one `upvotes publish` sends none of unless asked;
# a counter of vote states (downvotes) shows through part 3's vote-state events instead.
DEMO_FRACTIONS = {counter.name: 0.2 for counter in COUNTERS if counter is not RANKING and counter.vote is None}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=100_000, help="valid vote events to publish (default 100000)")
    parser.add_argument("--posts", type=int, default=1000, help="posts they are spread over (default 1000)")
    parser.add_argument("--zipf", type=float, default=1.2, help="skew: higher means fewer, hotter posts (default 1.2)")
    parser.add_argument("--invalid", type=int, default=20, help="invalid messages mixed in (default 20)")
    parser.add_argument("--vote-states", type=int, default=50_000,
                        help="vote-state events (one vote per user) published after the votes, with 10%% "
                             "duplicates, 10%% late events and flips (default 50000; 0: none)")
    parser.add_argument("--real-traffic", type=int, default=10_000,
                        help="single-vote messages published as an app sends them (one vote each, a viral head "
                             "and a long tail over as many posts, half vote states), after the bursts (default "
                             "10000; 0: none)")
    parser.add_argument("--batch-size", type=int, default=500, help="events per Pub/Sub message (default 500)")
    parser.add_argument("--window-seconds", type=int, default=2, help="streaming window length (default 2)")
    parser.add_argument("--rmw-seconds", type=float, default=3.0,
                        help="seconds of read-modify-write per baseline configuration (default 3)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the counts to settle")
    parser.add_argument("--work-dir", default=".upvotes/demo", help="logs and the ledger go here")
    parser.add_argument("--keep-serving", action="store_true",
                        help="at the end, keep the pipeline and the live page up until Ctrl-C, to vote from the page")


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def run(args: argparse.Namespace) -> int:
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    with emulators.running_emulators(work_dir / "logs", say) as env:
        os.environ.update(env)
        return _run_on(env, args, work_dir)


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


def _best_read_modify_write(database, seconds: float):
    """The best of read-modify-write's two best configurations on this emulator (see bench/README.md)."""
    from upvotes.devtools.race import CLIENT_RETRY, JITTERED_RETRY, BaselineConfig, run_baseline

    runs = []
    for config in (BaselineConfig(1, 1, CLIENT_RETRY), BaselineConfig(1, 2, JITTERED_RETRY)):
        result = run_baseline(database, f"demo-{uuid.uuid4().hex[:8]}", config, seconds)
        if not result.exact:
            raise RuntimeError(f"read-modify-write ({config.label}) lost an increment")
        say(f"  {config.label}: {result.votes:,} votes in {result.seconds:.1f} s = {result.votes_per_s:,.0f} votes/s "
            f"({result.aborts:,} aborted attempts)")
        runs.append(result)
    return max(runs, key=lambda r: r.votes_per_s)


def _wait_until_ready(database, topic_path: str, stream, log_path: Path) -> None:
    """Publishes one vote and waits until it is counted: the pipeline is up and reading."""
    from schemas.contract import event_message
    from spanner_reads.reads import exact_counts
    from upvotes.devtools.publishing import publish_messages

    publish_messages(topic_path, [event_message({"post_id": WARM_UP_POST, "counter": "upvotes", "delta": 1})],
                     progress=False)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while exact_counts(database, [WARM_UP_POST])[0].counts.upvotes < 1:
        _check_alive(stream, log_path)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the streaming pipeline counted nothing within {READY_TIMEOUT_S:.0f} s; see {log_path}")
        time.sleep(0.5)


def _start_live_page(res: Resources, work_dir: Path):
    """`upvotes serve` in this process, or None (with a note) where its extra is not installed.
    Writes need a credential as with `upvotes serve`: $UPVOTES_WRITE_TOKEN, or a token generated
    into the work directory (mode 0600); the page's own button uses its session."""
    try:
        from upvotes.serving.service import serve_in_background
    except ModuleNotFoundError as missing:
        say(f"no live page: {missing.name} is not installed (pip install -e '.[serve]')")
        return None
    from upvotes.serving.serve_settings import ServiceSettings
    from upvotes.serving.write_credentials import resolve_write_credential

    credential = resolve_write_credential(None, os.environ, work_dir / "serve-token")
    service = serve_in_background(res.project, res.instance, res.database, res.topic,
                                  ServiceSettings(write_tokens=credential.tokens))
    say(f"live page: {service.url} (top posts, exact counts, an upvote toggle each; up while the demo runs); "
        f"API writes need the bearer token ({credential.source})")
    return service


def _yesterdays_viral_post(database, topic_path: str, ledger, args: argparse.Namespace) -> bool:
    """Publishes twice today's leader's upvotes on one post, stamped YESTERDAY_HOURS_AGO hours ago
    (within the delta retention, so counted in that hour), and waits until its exact count is the
    ledger's. False if it did not settle in time."""
    from datetime import datetime, timedelta, timezone

    from schemas.contract import batch_messages
    from spanner_reads.reads import exact_counts
    from upvotes.devtools.publishing import publish_messages

    leader = max((totals["upvotes"] for totals in ledger.totals.values()), default=0)
    votes = max(2 * leader, 100)
    stamp = (datetime.now(timezone.utc) - timedelta(hours=YESTERDAY_HOURS_AGO)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    events = [{"post_id": YESTERDAYS_POST, "counter": "upvotes", "delta": 1, "event_time": stamp,
               "event_id": f"yesterday-{i}", "user_id": f"fan-{i}"} for i in range(votes)]
    say(f"what is viral now: {votes:,} upvotes on {YESTERDAYS_POST}, stamped {YESTERDAY_HOURS_AGO} hours ago "
        f"(today's leader has {leader:,})")
    for event in events:
        ledger.add(event)
    publish_messages(topic_path, batch_messages(events, args.batch_size), progress=False)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if exact_counts(database, [YESTERDAYS_POST])[0].counts.upvotes == votes:
            return True
        time.sleep(0.5)
    return False


def _show_tops(database) -> None:
    """The hot, last-24-hours and all-time top lists side by side, exact without a fold, each
    saying whether it is certified."""
    from spanner_reads.rankings.all_time import fresh_top
    from spanner_reads.rankings.hot import hot_top
    from spanner_reads.rankings.last_hours import window_top

    hot, last, ever = hot_top(database, TOP_N), window_top(database, TOP_N, hours=24), fresh_top(database, TOP_N)
    columns = [
        (f"hot (half-life {hot.half_life_hours:g} h)", hot.exact, [(p.totals.post_id, f"{p.score:,.1f}") for p in hot.posts]),
        ("last 24 h (upvotes)", last.exact, [(p.totals.post_id, f"{p.score:,.0f}") for p in last.posts]),
        ("all time (upvotes)", ever.exact, [(p.post_id, f"{p.counts.upvotes:,}") for p in ever.posts]),
    ]
    say(f"top {TOP_N} posts three ways, exact without a fold (as of {hot.as_of:%H:%M:%S} UTC):")
    say("    " + "".join(f"{title:<34}" for title, _, _ in columns))
    say("    " + "".join(f"{'certified exact' if exact else 'NOT certified':<34}" for _, exact, _ in columns))
    for rank in range(TOP_N):
        cells = [f"{rows[rank][0]:<18}{rows[rank][1]:>12}    " if rank < len(rows) else " " * 34
                 for _, _, rows in columns]
        say(f"  {rank + 1}. " + "".join(cells))


def _check_alive(stream, log_path: Path) -> None:
    if stream.poll() is not None:
        raise RuntimeError(f"the streaming pipeline exited with code {stream.returncode}; see {log_path}")


def _run_on(env: dict[str, str], args: argparse.Namespace, work_dir: Path) -> int:
    from pipeline import fold
    from spanner_reads.reads import exact_counts, top_posts
    from spanner_store.database import open_database
    from upvotes.devtools import baseline_counters
    from upvotes.devtools.race import race_pipeline
    from upvotes.devtools.verification import delta_row_counts, verify_totals, verify_unique_voters
    from upvotes.devtools.workload import RealTrafficWorkload, VoteStateWorkload, Workload

    res = RESOURCES
    say(f"provisioning {res.instance}/{res.database} and topic {res.topic} on the emulators")
    provision(res, log=lambda line: None)
    database = open_database(res.project, res.instance, res.database)
    baseline_counters.create_tables(database)

    say(f"race, part 1: read-modify-write, one transaction per vote on one hot counter, {args.rmw_seconds:g} s each")
    rmw = _best_read_modify_write(database, args.rmw_seconds)

    stream_log = work_dir / "stream.log"
    topic_path = res.topic_path(res.topic)
    say(f"starting the streaming pipeline (DirectRunner, {args.window_seconds} s windows; log: {stream_log})")
    stream = local_stream.start(res, args.window_seconds, stream_log, env)
    service = None
    try:
        _wait_until_ready(database, topic_path, stream, stream_log)
        service = _start_live_page(res, work_dir)
        workload = Workload(events=args.events, posts=args.posts, zipf=args.zipf, invalid=args.invalid, seed=42,
                            fractions=DEMO_FRACTIONS)
        say(f"race, part 2: {args.events:,} votes over {args.posts:,} posts (Zipf {args.zipf}), {args.batch_size} "
            f"per message, and {args.invalid} invalid messages, through Pub/Sub and the pipeline")
        race = race_pipeline(database, topic_path, workload, args.batch_size, args.timeout,
                             alive=lambda: _check_alive(stream, stream_log))
        if race is None:
            say(f"FAILED: counts did not settle within {args.timeout:.0f} s; see {stream_log}")
            return 1
        race.ledger.save(work_dir / "ledger.json")
        say(f"published {race.report.published:,} events in {race.report.messages:,} messages in "
            f"{race.report.seconds:.1f} s; every exact count matched the ledger {race.seconds:.1f} s after publishing began")
        say(f"read-modify-write: {rmw.votes_per_s:>9,.0f} votes/s ({rmw.config.label})")
        say(f"this pipeline:     {race.votes_per_s:>9,.0f} votes/s, publish -> exact read")
        say(f"ratio: {race.votes_per_s / rmw.votes_per_s:,.1f}x read-modify-write, on the same emulator")

        ledger = race.ledger
        if args.vote_states:
            states = VoteStateWorkload(events=args.vote_states, posts=args.posts, zipf=args.zipf, seed=43,
                                       voters=args.vote_states // 2)
            say(f"race, part 3: one vote per user: {args.vote_states:,} vote-state events (up, down, none) on the same "
                f"posts, {states.duplicate_fraction:.0%} duplicates, {states.late_fraction:.0%} late, "
                f"{states.flip_fraction:.0%} flips of recent voters")
            voted = race_pipeline(database, topic_path, states, args.batch_size, args.timeout,
                                  alive=lambda: _check_alive(stream, stream_log), ledger=ledger)
            if voted is None:
                say(f"FAILED: counts did not settle within {args.timeout:.0f} s; see {stream_log}")
                return 1
            ledger.save(work_dir / "ledger.json")
            say(f"every post matched the ledger of both bursts {voted.seconds:.1f} s after the vote states' first "
                f"publish: {voted.votes_per_s:,.0f} vote-state events/s, {voted.votes_per_s / rmw.votes_per_s:,.1f}x "
                "read-modify-write; each user's latest vote counted once")

        if args.real_traffic:
            real = RealTrafficWorkload(events=args.real_traffic, posts=args.real_traffic, seed=44, post_prefix="app-")
            say(f"race, part 4: real traffic, as an app publishes: {args.real_traffic:,} messages of ONE vote each, "
                f"half on a viral head, half spread over {real.posts:,} posts, half of them vote states")
            app = race_pipeline(database, topic_path, real, 1, args.timeout, alive=lambda: _check_alive(stream, stream_log),
                                ledger=ledger)
            if app is None:
                say(f"FAILED: counts did not settle within {args.timeout:.0f} s; see {stream_log}")
                return 1
            ledger.save(work_dir / "ledger.json")
            say(f"real traffic: {app.votes_per_s:,.0f} votes/s, {app.votes_per_s / rmw.votes_per_s:,.1f}x "
                f"read-modify-write (the burst of part 2: {race.votes_per_s / rmw.votes_per_s:,.1f}x). One vote per "
                "message costs the local pipeline per message and the emulator a row per post: expect this figure, "
                "not the burst's, from an app's clicks (bench/results/latest.md#real_traffic)")

        if not _yesterdays_viral_post(database, topic_path, ledger, args):
            say(f"FAILED: counts did not settle within {args.timeout:.0f} s; see {stream_log}")
            return 1
        _show_tops(database)

        rows, groups = delta_row_counts(database)
        say(f"{rows:,} delta rows for {ledger.events:,} votes: {1000 * rows / ledger.events:.1f} per 1,000 "
            f"votes (one per post, event hour and window), against 1,000 commits per 1,000 votes for read-modify-write")

        outcome, fold_s = fold.run([], {"project": res.project, "instance": res.instance, "database": res.database})
        say(f"fold: {outcome.deltas_folded:,} deltas into {outcome.posts_folded} posts in {fold_s:.1f} s")

        top = top_posts(database, TOP_N)
        say(f"top {TOP_N} posts by upvotes (folded):")
        for rank, post in enumerate(top.posts, 1):
            counts = " ".join(f"{value:>8,} {name}" for name, value in post.counts._asdict().items())
            say(f"  {rank}. {post.post_id:<16} {counts}")

        mismatches = verify_totals(database, ledger.totals)
        dead = _count_dead_letters(res, ledger.invalid)
        say(f"dead-letter topic holds {dead} of the {ledger.invalid} invalid messages published")
        if mismatches or dead != ledger.invalid:
            for m in mismatches[:20]:
                say(f"MISMATCH {m.post_id} {m.counter}: expected {m.expected}, actual {m.actual}")
            say("FAILED")
            return 1
        say(f"verified: all {len(ledger.totals)} posts match the ledger exactly after the fold")
        unique = verify_unique_voters(database, ledger.unique_voters, UNIQUE_TOLERANCE)
        hottest = top.posts[0].post_id if top.posts else None
        if hottest is not None:
            (voters,) = exact_counts(database, [hottest], unique=True)
            say(f"unique voters of {hottest}: {voters.unique_voters:,} estimated, "
                f"{ledger.unique_voters[hottest]:,} exact (a HyperLogLog sketch, folded with the counts)")
        if unique:
            for m in unique[:20]:
                say(f"MISMATCH {m.post_id} unique voters: exact {m.expected}, estimated {m.actual}")
            say("FAILED")
            return 1
        say(f"unique voters of every post within {UNIQUE_TOLERANCE:.0%} of the ledger's exact distinct count")
        if args.keep_serving and service is not None:
            say(f"the pipeline and the live page at {service.url} stay up: vote there; Ctrl-C to stop")
            while stream.poll() is None:
                time.sleep(1)
        return 0
    finally:
        if service is not None:
            service.stop()
        say("draining the streaming pipeline (every open window is written) ...")
        code = local_stream.stop(stream)
        say(local_stream.drain_summary(stream_log) or f"the streaming pipeline exited with code {code}; see {stream_log}")
