"""Race, part 4: real traffic, as an app publishes it. Messages of ONE vote each, half on a viral
head, half spread over as many posts as messages, half of them vote states: the figure an app's
clicks get, shown beside the burst's so that nobody takes the burst's for it."""

from __future__ import annotations

from upvotes.demo.stage import Stage, say
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.race import BaselineRun, PipelineRace
from upvotes.devtools.workload import RealTrafficWorkload


def race_real_traffic(stage: Stage, rmw: BaselineRun, burst: PipelineRace, ledger: Ledger) -> bool:
    """The real traffic's race, added to `ledger` and saved; False when the counts did not settle."""
    messages = stage.args.real_traffic
    real = RealTrafficWorkload(events=messages, posts=messages, seed=44, post_prefix="app-")
    say(
        f"race, part 4: real traffic, as an app publishes: {messages:,} messages of ONE vote each, "
        f"half on a viral head, half spread over {real.posts:,} posts, half of them vote states"
    )
    app = stage.race(real, 1, ledger)
    if app is None:
        return False
    stage.save(ledger)
    say(
        f"real traffic: {app.votes_per_s:,.0f} votes/s, {app.votes_per_s / rmw.votes_per_s:,.1f}x "
        f"read-modify-write (the burst of part 2: {burst.votes_per_s / rmw.votes_per_s:,.1f}x). One vote per "
        "message costs the local pipeline per message and the emulator a row per post: expect this figure, "
        "not the burst's, from an app's clicks (bench/results/latest.md#real_traffic)"
    )
    return True
