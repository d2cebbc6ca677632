"""Exact per-hour counts of one post: the folded hourly rollup plus the unfolded deltas.

The fold adds every delta it folds to PostHourlyCounts (by event hour) in the same
transaction that moves the post's hourly watermark (HourlyFoldedThrough, or FoldedThrough
while that is NULL) past the delta's commit. So, in any one snapshot, a delta is either
inside PostHourlyCounts (committed at or before the hourly watermark) or among the post's
deltas committed after it, never both and never neither. `hourly_counts` reads both sides
in one read-only snapshot and sums them per event hour, which is exact even while a fold
commits, and also while a post too large for one commit is folded in several (its hourly
watermark then runs ahead of FoldedThrough; the totals of spanner_reads.reads use
FoldedThrough and are exact on their own).

The event hour is the one the vote claims (its event_time), unless that is older than the
delta retention (30 days) or further ahead than the pipeline's --max-clock-skew-seconds:
such a vote is counted in the hour it was ingested (see schemas.contract.event_hour).

Both sides are key-range reads within the post's rows: PostHourlyCounts is keyed by
(PostHash, PostId, EventHour DESC) (one row per hour the post was voted in), and the
unfolded deltas come from the interleaved PostDeltasByCommit index as spanner_reads.reads reads
them, so old, folded deltas are never touched.

Hours are the event-time buckets of the pipeline: an hour is reported when it overlaps
[since, until), i.e. `since` is rounded down to its hour and an hour starting before
`until` is included. Hours without any vote row are left out; an hour whose votes cancel
out (an upvote and an un-vote) is reported with its net zero, like the publisher's ledger.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import NamedTuple

from google.cloud import spanner

from schemas.counters import Counts
from schemas.voter_sketch import estimate, union_of
from spanner_store.key_sets import KeySet
from spanner_store.tables import (
    COUNTER_COLUMNS,
    DELTA_SUM_COLUMNS,
    HOURLY,
    HOURLY_WATERMARK,
    POSTS,
    counts_at,
    hour_timestamp,
    post_key,
)
from spanner_store.unfolded import READ_CHUNK, hour_sums_of, hourly_watermark, read_unfolded


class HourCount(NamedTuple):
    hour: datetime  # start of the event hour, UTC
    counts: Counts
    unique_voters: int | None = None  # the hour's distinct upvoters, when asked for


def _utc(moment: datetime) -> datetime:
    """Aware UTC; a naive datetime is taken to be UTC already."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def hour_floor(moment: datetime) -> datetime:
    moment = _utc(moment)
    return moment.replace(minute=0, second=0, microsecond=0)


def hourly_counts(
    database, post_id: str, since: datetime, until: datetime | None = None, unique: bool = False
) -> list[HourCount]:
    """Exact counts of `post_id` per event hour overlapping [since, until), oldest first; with
    `unique`, each hour's unique voters too."""
    first, end = hour_floor(since), None if until is None else _utc(until)
    with database.snapshot(multi_use=True) as snapshot:
        every_hour = hourly_counts_in(snapshot, post_id, unique)
    return [h for h in every_hour if h.hour >= first and (end is None or h.hour < end)]


def hourly_counts_in(snapshot, post_id: str, unique: bool = False) -> list[HourCount]:
    """Exact counts of `post_id` in every event hour it has, oldest first, read in `snapshot`
    (a multi-use read-only snapshot: both sides must be read at the same timestamp)."""
    key = post_key(post_id)
    counts: dict[datetime, Counts] = {}
    voters: dict[datetime, list[bytes | None]] = {}

    def add(rows) -> None:
        for row in rows:
            hour, sums = hour_sums_of(row)
            hour = _plain(hour)
            counts[hour] = counts.get(hour, Counts()).plus(sums.counts)
            voters.setdefault(hour, []).append(sums.voters)

    posts = list(
        snapshot.read(POSTS, columns=("FoldedThrough", HOURLY_WATERMARK), keyset=spanner.KeySet(keys=[list(key)]))
    )
    if not posts:
        return []
    add(
        snapshot.read(
            HOURLY,
            columns=DELTA_SUM_COLUMNS,
            keyset=spanner.KeySet(ranges=[spanner.KeyRange(start_closed=list(key), end_closed=list(key))]),
        )
    )
    add(read_unfolded(snapshot, {key: hourly_watermark(*posts[0])}, DELTA_SUM_COLUMNS))
    return [
        HourCount(hour, counts[hour], estimate(union_of(voters[hour])) if unique else None) for hour in sorted(counts)
    ]


def hours_of_posts(
    snapshot, post_ids: Iterable[str], first_hour: int | None = None, last_hour: int | None = None
) -> dict[str, dict[int, Counts]]:
    """Exact counts per event hour (epoch seconds) of many posts, in the hours [first_hour,
    last_hour] when given, read in `snapshot` (multi-use): the folded hourly rows plus the
    deltas committed after each post's hourly watermark, READ_CHUNK posts per read. A post
    without any row maps to {}. What the trending rankings score (spanner_reads/rankings/)."""
    wanted = list(dict.fromkeys(post_ids))
    hours: dict[str, dict[int, Counts]] = {post_id: {} for post_id in wanted}
    newest = None if last_hour is None else hour_timestamp(last_hour)
    oldest = None if first_hour is None else hour_timestamp(first_hour)

    def add(rows) -> None:
        for post_id, hour, *counts in rows:
            at = int(_utc(hour).timestamp())
            if (first_hour is None or at >= first_hour) and (last_hour is None or at <= last_hour):
                hours[post_id][at] = hours[post_id].get(at, Counts()).plus(counts_at(counts, 0))

    for start in range(0, len(wanted), READ_CHUNK):
        keys = [post_key(p) for p in wanted[start : start + READ_CHUNK]]
        watermarks = {
            (h, p): hourly_watermark(folded, hourly)
            for h, p, folded, hourly in snapshot.read(
                POSTS,
                columns=("PostHash", "PostId", "FoldedThrough", HOURLY_WATERMARK),
                keyset=KeySet(keys=[list(key) for key in keys]),
            )
        }
        # EventHour is DESC in the key: a post's window runs from its newest hour to its oldest.
        ranges = [
            spanner.KeyRange(
                start_closed=[h, p] + ([newest] if newest else []), end_closed=[h, p] + ([oldest] if oldest else [])
            )
            for h, p in watermarks
        ]
        if ranges:
            add(snapshot.read(HOURLY, columns=("PostId", "EventHour") + COUNTER_COLUMNS, keyset=KeySet(ranges=ranges)))
        add(read_unfolded(snapshot, watermarks, ("PostId", "EventHour") + COUNTER_COLUMNS))
    return hours


def _plain(hour: datetime) -> datetime:
    """The client's nanosecond datetime subclass as a plain UTC datetime (hours are whole)."""
    hour = _utc(hour)
    return datetime(hour.year, hour.month, hour.day, hour.hour, tzinfo=timezone.utc)


def hour_text(hour: datetime) -> str:
    """ "2026-11-22T01:00:00Z", the form the publisher's ledger uses."""
    return _utc(hour).strftime("%Y-%m-%dT%H:%M:%SZ")
