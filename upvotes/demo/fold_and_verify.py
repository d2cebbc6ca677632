"""The last step: what the votes cost in delta rows, the fold, the folded top, then every post
checked against the ledger after the fold, the dead letters counted, and every post's unique
voters held to the ledger's exact distinct count."""

from __future__ import annotations

import time

from pipeline import fold
from spanner_reads.reads import TopPosts, exact_counts, top_posts
from upvotes.demo.stage import TOP_N, Stage, say
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.verification import delta_row_counts, verify_totals, verify_unique_voters
from upvotes.resources import Resources

# unique voters are an estimate (schemas/voter_sketch.py): about 0.8% standard error above 1,000 voters
UNIQUE_TOLERANCE = 0.03


def fold_and_verify(stage: Stage, ledger: Ledger) -> bool:
    """False, having said FAILED and the first mismatches, when a count, the dead letters or a
    post's unique voters do not match the ledger."""
    database, resources = stage.database, stage.resources
    rows, _ = delta_row_counts(database)
    say(
        f"{rows:,} delta rows for {ledger.events:,} votes: {1000 * rows / ledger.events:.1f} per 1,000 "
        f"votes (one per post, event hour and window), against 1,000 commits per 1,000 votes for read-modify-write"
    )
    outcome, fold_s = fold.run(
        [], {"project": resources.project, "instance": resources.instance, "database": resources.database}
    )
    say(f"fold: {outcome.deltas_folded:,} deltas into {outcome.posts_folded} posts in {fold_s:.1f} s")
    top = _show_folded_top(database)
    return _every_count_matches(stage, ledger) and _unique_voters_match(database, ledger, top)


def _show_folded_top(database) -> TopPosts:
    top = top_posts(database, TOP_N)
    say(f"top {TOP_N} posts by upvotes (folded):")
    for rank, post in enumerate(top.posts, 1):
        counts = " ".join(f"{value:>8,} {name}" for name, value in post.counts._asdict().items())
        say(f"  {rank}. {post.post_id:<16} {counts}")
    return top


def _every_count_matches(stage: Stage, ledger: Ledger) -> bool:
    mismatches = verify_totals(stage.database, ledger.totals)
    dead = _count_dead_letters(stage.resources, ledger.invalid)
    say(f"dead-letter topic holds {dead} of the {ledger.invalid} invalid messages published")
    if mismatches or dead != ledger.invalid:
        for m in mismatches[:20]:
            say(f"MISMATCH {m.post_id} {m.counter}: expected {m.expected}, actual {m.actual}")
        say("FAILED")
        return False
    say(f"verified: all {len(ledger.totals)} posts match the ledger exactly after the fold")
    return True


def _unique_voters_match(database, ledger: Ledger, top: TopPosts) -> bool:
    """Every post's estimate within UNIQUE_TOLERANCE, the folded leader's shown beside the exact."""
    unique = verify_unique_voters(database, ledger.unique_voters, UNIQUE_TOLERANCE)
    hottest = top.posts[0].post_id if top.posts else None
    if hottest is not None:
        (voters,) = exact_counts(database, [hottest], unique=True)
        say(
            f"unique voters of {hottest}: {voters.unique_voters:,} estimated, "
            f"{ledger.unique_voters[hottest]:,} exact (a HyperLogLog sketch, folded with the counts)"
        )
    if unique:
        for m in unique[:20]:
            say(f"MISMATCH {m.post_id} unique voters: exact {m.expected}, estimated {m.actual}")
        say("FAILED")
        return False
    say(f"unique voters of every post within {UNIQUE_TOLERANCE:.0%} of the ledger's exact distinct count")
    return True


def _count_dead_letters(resources: Resources, expected: int, timeout_s: float = 60) -> int:
    """The distinct messages on the dead-letter subscription, pulled (and acknowledged) until
    `expected` are seen or `timeout_s` has passed."""
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    path = resources.subscription_path(resources.dead_letter_subscription_id)
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
