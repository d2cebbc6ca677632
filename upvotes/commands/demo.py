"""`upvotes demo`: the race a newcomer sees, on one machine, checked against the publisher's ledger.
Its steps are upvotes/demo/, one module each; this module takes the flags and runs them in order.

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
from pathlib import Path

from upvotes.devtools import emulators
from upvotes.resources import Resources

HELP = "Run everything locally end to end on the emulators: the race against read-modify-write, every count checked."

RESOURCES = Resources(
    project="demo-project",
    instance="upvotes",
    database="votes",
    topic="votes",
    subscription="votes-sub",
    dead_letter_topic="votes-dead-letter",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=100_000, help="valid vote events to publish (default 100000)")
    parser.add_argument("--posts", type=int, default=1000, help="posts they are spread over (default 1000)")
    parser.add_argument("--zipf", type=float, default=1.2, help="skew: higher means fewer, hotter posts (default 1.2)")
    parser.add_argument("--invalid", type=int, default=20, help="invalid messages mixed in (default 20)")
    parser.add_argument(
        "--vote-states",
        type=int,
        default=50_000,
        help="vote-state events (one vote per user) published after the votes, with 10%% "
        "duplicates, 10%% late events and flips (default 50000; 0: none)",
    )
    parser.add_argument(
        "--real-traffic",
        type=int,
        default=10_000,
        help="single-vote messages published as an app sends them (one vote each, a viral head "
        "and a long tail over as many posts, half vote states), after the bursts (default "
        "10000; 0: none)",
    )
    parser.add_argument("--batch-size", type=int, default=500, help="events per Pub/Sub message (default 500)")
    parser.add_argument("--window-seconds", type=int, default=2, help="streaming window length (default 2)")
    parser.add_argument(
        "--rmw-seconds",
        type=float,
        default=3.0,
        help="seconds of read-modify-write per baseline configuration (default 3)",
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the counts to settle")
    parser.add_argument("--work-dir", default=".upvotes/demo", help="logs and the ledger go here")
    parser.add_argument(
        "--keep-serving",
        action="store_true",
        help="at the end, keep the pipeline and the live page up until Ctrl-C, to vote from the page",
    )


def run(args: argparse.Namespace) -> int:
    from upvotes.demo.stage import say

    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    with emulators.running_emulators(work_dir / "logs", say) as env:
        os.environ.update(env)
        return _run_on(env, args, work_dir)


def _run_on(env: dict[str, str], args: argparse.Namespace, work_dir: Path) -> int:
    """The steps in order (upvotes/demo/): 0 when every one succeeded, 1 at the first that did not
    (it has said why)."""
    from upvotes.demo import baselines, burst, fold_and_verify, real_traffic, running, viral_now, vote_states

    database = running.provisioned(RESOURCES)
    rmw = baselines.best_read_modify_write(database, args.rmw_seconds)
    with running.pipeline_running(RESOURCES, database, args, work_dir, env) as stage:
        race = burst.race_the_burst(stage, rmw)
        if race is None:
            return 1
        ledger = race.ledger
        if args.vote_states and not vote_states.race_vote_states(stage, rmw, ledger):
            return 1
        if args.real_traffic and not real_traffic.race_real_traffic(stage, rmw, race, ledger):
            return 1
        if not viral_now.show_what_is_viral_now(stage, ledger):
            return 1
        if not fold_and_verify.fold_and_verify(stage, ledger):
            return 1
        running.keep_serving(stage)
        return 0
