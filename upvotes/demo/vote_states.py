"""Race, part 3: one vote per user. Vote-state events (up, down, none) on the burst's posts, with
duplicates, late events and flips of recent voters, timed until every post matches the ledger of
both bursts: each user's latest vote counted once."""

from __future__ import annotations

from upvotes.demo.stage import Stage, say
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.race import BaselineRun
from upvotes.devtools.workload import VoteStateWorkload


def race_vote_states(stage: Stage, rmw: BaselineRun, ledger: Ledger) -> bool:
    """The vote states' race, added to `ledger` and saved; False when the counts did not settle."""
    args = stage.args
    states = VoteStateWorkload(
        events=args.vote_states, posts=args.posts, zipf=args.zipf, seed=43, voters=args.vote_states // 2
    )
    say(
        f"race, part 3: one vote per user: {args.vote_states:,} vote-state events (up, down, none) on the same "
        f"posts, {states.duplicate_fraction:.0%} duplicates, {states.late_fraction:.0%} late, "
        f"{states.flip_fraction:.0%} flips of recent voters"
    )
    voted = stage.race(states, args.batch_size, ledger)
    if voted is None:
        return False
    stage.save(ledger)
    say(
        f"every post matched the ledger of both bursts {voted.seconds:.1f} s after the vote states' first "
        f"publish: {voted.votes_per_s:,.0f} vote-state events/s, {voted.votes_per_s / rmw.votes_per_s:,.1f}x "
        "read-modify-write; each user's latest vote counted once"
    )
    return True
