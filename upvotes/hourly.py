"""Exact per-hour counts of one post: the folded hourly rollup plus the unfolded deltas.

The fold adds every delta it folds to PostHourlyCounts (by event hour) in the same
transaction that adds it to Posts and moves the post's FoldedThrough watermark. So, in any
one snapshot, a delta is either inside PostHourlyCounts (committed at or before the
watermark) or among the post's deltas committed after the watermark, never both and never
neither. `hourly_counts` reads both sides in one read-only snapshot and
sums them per event hour, which is exact even while a fold commits.

Both sides are key-range reads within the post's rows: PostHourlyCounts is keyed by
(PostHash, PostId, EventHour DESC) (one row per hour the post was voted in), and the
unfolded deltas come from the interleaved PostDeltasByCommit index as upvotes.reads reads
them, so old, folded deltas are never touched.

Hours are the event-time buckets of the pipeline: an hour is reported when it overlaps
[since, until), i.e. `since` is rounded down to its hour and an hour starting before
`until` is included. Hours without any vote row are left out; an hour whose votes cancel
out (an upvote and an un-vote) is reported with its net zero, like the publisher's ledger.
"""
from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from google.cloud import spanner

from schemas import post_hash
from upvotes.database import open_database
from upvotes.reads import read_unfolded

class HourCount(NamedTuple):
    hour: datetime  # start of the event hour, UTC
    upvotes: int
    shares: int


def _utc(moment: datetime) -> datetime:
    """Aware UTC; a naive datetime is taken to be UTC already."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def hour_floor(moment: datetime) -> datetime:
    moment = _utc(moment)
    return moment.replace(minute=0, second=0, microsecond=0)


def hourly_counts(database, post_id: str, since: datetime, until: datetime | None = None) -> list[HourCount]:
    """Exact upvotes and shares of `post_id` per event hour overlapping [since, until), oldest first."""
    key = (post_hash(post_id), post_id)
    first, end = hour_floor(since), None if until is None else _utc(until)
    sums: dict[datetime, list[int]] = {}

    def add(rows) -> None:
        for hour, upvotes, shares in rows:
            if hour >= first and (end is None or hour < end):
                acc = sums.setdefault(_plain(hour), [0, 0])
                acc[0] += upvotes
                acc[1] += shares

    with database.snapshot(multi_use=True) as snapshot:
        posts = list(snapshot.read("Posts", columns=("FoldedThrough",), keyset=spanner.KeySet(keys=[list(key)])))
        if not posts:
            return []
        add(snapshot.read("PostHourlyCounts", columns=("EventHour", "Upvotes", "Shares"),
                          keyset=spanner.KeySet(ranges=[spanner.KeyRange(start_closed=list(key), end_closed=list(key))])))
        add(read_unfolded(snapshot, {key: posts[0][0]}, ("EventHour", "Upvotes", "Shares")))
    return [HourCount(hour, *sums[hour]) for hour in sorted(sums)]


def _plain(hour: datetime) -> datetime:
    """The client's nanosecond datetime subclass as a plain UTC datetime (hours are whole)."""
    hour = _utc(hour)
    return datetime(hour.year, hour.month, hour.day, hour.hour, tzinfo=timezone.utc)


def hour_text(hour: datetime) -> str:
    """"2026-11-22T01:00:00Z", the form the publisher's ledger uses."""
    return _utc(hour).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """RFC 3339 / ISO 8601 ("2026-11-22T00:00:00Z", "2026-11-22"); no zone means UTC."""
    try:
        return _utc(datetime.fromisoformat(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time: {text!r} (example: 2026-11-22T00:00:00Z)") from None


# --- CLI hooks ----------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags `upvotes read` adds for hourly counts (it already has the database flags and POST_IDs)."""
    parser.add_argument("--hourly", action="store_true",
                        help="print exact counts per event hour instead of totals")
    parser.add_argument("--since", type=parse_time, metavar="TIME",
                        help="with --hourly: first hour, RFC 3339, rounded down to its hour "
                        "(default: 24 hours ago)")
    parser.add_argument("--until", type=parse_time, metavar="TIME",
                        help="with --hourly: hours starting before this time (default: no limit)")


def run(args: argparse.Namespace) -> int:
    """JSON lines {"post_id", "hour", "upvotes", "shares"}, per post in the order given, hours ascending."""
    database = open_database(args.project, args.instance, args.database)
    since = args.since or datetime.now(timezone.utc) - timedelta(hours=24)
    for post_id in args.post_ids:
        for count in hourly_counts(database, post_id, since, args.until):
            print(json.dumps({"post_id": post_id, "hour": hour_text(count.hour),
                              "upvotes": count.upvotes, "shares": count.shares}))
    return 0
