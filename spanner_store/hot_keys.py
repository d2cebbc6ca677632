"""Posts.HotKey from a post's hourly rows, inside the transaction that writes it: the fold
(spanner_writes/folding.py), whenever it changes a post's hourly rows, and the backfill that
`upvotes provision` runs (upvotes/operations/hot_backfill.py). Both compute it the same way, from
every hourly row of the post (schemas/hot_score.py is deterministic), and both write the hourly
watermark it was computed at (HotKeyThrough) with it, so a fenced HotKey is the score of the
post's hourly rows at its hourly watermark: the database rejects a move of that watermark by any
writer that does not move HotKeyThrough with it (schemas/posts.sql, HotKeyCurrent)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from schemas.hot_score import hot_score
from schemas.records import CounterSums
from spanner_store.ranking_settings import read_settings
from spanner_store.tables import HOURLY, HOURLY_COLUMNS, PostKey, post_rows_range
from spanner_store.unfolded import hour_sums_of

PostHours = dict[PostKey, dict[datetime, CounterSums]]


def read_post_hours(transaction, posts: Iterable[PostKey]) -> PostHours:
    """Every PostHourlyCounts row of these posts, by post and hour: one key range per post."""
    hours: PostHours = {key: {} for key in posts}
    if hours:
        for row in transaction.read(HOURLY, columns=HOURLY_COLUMNS, keyset=post_rows_range(hours)):
            hour, sums = hour_sums_of(row[2:])
            hours[(row[0], row[1])][hour] = sums
    return hours


def hot_keys_of(transaction, hours: PostHours) -> dict[PostKey, float | None]:
    """Each post's HotKey from all of its hours, with the half-life recorded in the database
    (read in the same transaction); None for every post while none is recorded."""
    half_life = read_settings(transaction).half_life_hours
    return {
        post: None
        if half_life is None
        else hot_score(((int(hour.timestamp()), sums.counts) for hour, sums in post_hours.items()), half_life).key
        for post, post_hours in hours.items()
    }
