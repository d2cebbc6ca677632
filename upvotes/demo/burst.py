"""Race, part 2: a viral burst (100,000 votes over 1,000 posts, Zipf 1.2, by default), published
through Pub/Sub in batches with invalid messages mixed in, timed from the first publish until
every post's exact count equals the publisher's ledger; its rate beside read-modify-write's."""

from __future__ import annotations

from schemas.counters import COUNTERS, RANKING
from upvotes.demo.stage import Stage, say
from upvotes.devtools.race import BaselineRun, PipelineRace
from upvotes.devtools.workload import Workload

# The race's votes give each counter besides upvotes (schemas/counters.py) a fifth of the
# events, so every counter shows in the demo, even one `upvotes publish` sends none of unless asked;
# a counter of vote states (downvotes) shows through part 3's vote-state events instead.
DEMO_FRACTIONS = {counter.name: 0.2 for counter in COUNTERS if counter is not RANKING and counter.vote is None}


def race_the_burst(stage: Stage, rmw: BaselineRun) -> PipelineRace | None:
    """The burst's race, its ledger saved; None when the counts did not settle in time."""
    args = stage.args
    workload = Workload(
        events=args.events, posts=args.posts, zipf=args.zipf, invalid=args.invalid, seed=42, fractions=DEMO_FRACTIONS
    )
    say(
        f"race, part 2: {args.events:,} votes over {args.posts:,} posts (Zipf {args.zipf}), {args.batch_size} "
        f"per message, and {args.invalid} invalid messages, through Pub/Sub and the pipeline"
    )
    race = stage.race(workload, args.batch_size)
    if race is None:
        return None
    stage.save(race.ledger)
    say(
        f"published {race.report.published:,} events in {race.report.messages:,} messages in "
        f"{race.report.seconds:.1f} s; every exact count matched the ledger {race.seconds:.1f} s after publishing began"
    )
    say(f"read-modify-write: {rmw.votes_per_s:>9,.0f} votes/s ({rmw.config.label})")
    say(f"this pipeline:     {race.votes_per_s:>9,.0f} votes/s, publish -> exact read")
    say(f"ratio: {race.votes_per_s / rmw.votes_per_s:,.1f}x read-modify-write, on the same emulator")
    return race
