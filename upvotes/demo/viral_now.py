"""What is viral now: yesterday's viral post (votes stamped 30 hours ago, more than today's
leader) ranks first of all time, but not in the hot ranking nor in the last 24 hours. The three
top lists side by side, each saying whether it is certified exact, before any fold."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from schemas.contract import batch_messages
from spanner_reads.rankings.all_time import fresh_top
from spanner_reads.rankings.hot import hot_top
from spanner_reads.rankings.last_hours import window_top
from spanner_reads.reads import exact_counts
from upvotes.demo.stage import TOP_N, Stage, say
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.publishing import publish_messages

YESTERDAYS_POST = "viral-yesterday"
YESTERDAY_HOURS_AGO = 30


def show_what_is_viral_now(stage: Stage, ledger: Ledger) -> bool:
    """Yesterday's viral post counted, then the three lists; False when it did not settle in time."""
    if not _yesterdays_viral_post(stage, ledger):
        stage.failed_to_settle()
        return False
    _show_tops(stage.database)
    return True


def _yesterdays_viral_post(stage: Stage, ledger: Ledger) -> bool:
    """Publishes twice today's leader's upvotes on one post, stamped YESTERDAY_HOURS_AGO hours ago
    (within the delta retention, so counted in that hour), and waits until its exact count is the
    ledger's. False if it did not settle in time."""
    leader = max((totals["upvotes"] for totals in ledger.totals.values()), default=0)
    votes = max(2 * leader, 100)
    stamp = (datetime.now(timezone.utc) - timedelta(hours=YESTERDAY_HOURS_AGO)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    events = [
        {
            "post_id": YESTERDAYS_POST,
            "counter": "upvotes",
            "delta": 1,
            "event_time": stamp,
            "event_id": f"yesterday-{i}",
            "user_id": f"fan-{i}",
        }
        for i in range(votes)
    ]
    say(
        f"what is viral now: {votes:,} upvotes on {YESTERDAYS_POST}, stamped {YESTERDAY_HOURS_AGO} hours ago "
        f"(today's leader has {leader:,})"
    )
    for event in events:
        ledger.add(event)
    publish_messages(stage.topic_path, batch_messages(events, stage.args.batch_size), progress=False)
    deadline = time.monotonic() + stage.args.timeout
    while time.monotonic() < deadline:
        if exact_counts(stage.database, [YESTERDAYS_POST])[0].counts.upvotes == votes:
            return True
        time.sleep(0.5)
    return False


def _show_tops(database) -> None:
    """The hot, last-24-hours and all-time top lists side by side, exact without a fold, each
    saying whether it is certified."""
    hot, last, ever = hot_top(database, TOP_N), window_top(database, TOP_N, hours=24), fresh_top(database, TOP_N)
    columns = [
        (
            f"hot (half-life {hot.half_life_hours:g} h)",
            hot.exact,
            [(p.totals.post_id, f"{p.score:,.1f}") for p in hot.posts],
        ),
        ("last 24 h (upvotes)", last.exact, [(p.totals.post_id, f"{p.score:,.0f}") for p in last.posts]),
        ("all time (upvotes)", ever.exact, [(p.post_id, f"{p.counts.upvotes:,}") for p in ever.posts]),
    ]
    say(f"top {TOP_N} posts three ways, exact without a fold (as of {hot.as_of:%H:%M:%S} UTC):")
    say("    " + "".join(f"{title:<34}" for title, _, _ in columns))
    say("    " + "".join(f"{'certified exact' if exact else 'NOT certified':<34}" for _, exact, _ in columns))
    for rank in range(TOP_N):
        cells = [
            f"{rows[rank][0]:<18}{rows[rank][1]:>12}    " if rank < len(rows) else " " * 34 for _, _, rows in columns
        ]
        say(f"  {rank + 1}. " + "".join(cells))
