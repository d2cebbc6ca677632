"""The names this code uses from schemas/posts.sql, each defined once, and the key builders.

Every table, index and column name, and every key a row is addressed by, comes from here,
so a schema change is one edit here plus the DDL.
"""
from __future__ import annotations

from datetime import datetime, timezone

from schemas import post_hash
from schemas.records import PostDelta

POSTS = "Posts"
POSTS_BY_UPVOTES = "PostsByUpvotes"
POST_KEY_COLUMNS = ("PostHash", "PostId")
POST_COLUMNS = ("PostHash", "PostId", "Upvotes", "Shares", "FoldedThrough")
WATERMARK_COLUMNS = ("PostHash", "PostId", "FoldedThrough")

DELTAS = "PostDeltas"
# The interleaved commit-time index: a post's deltas committed after its watermark are one
# key range of it (PostHash, PostId, CommittedAt), storing Upvotes, Shares and Events.
DELTAS_BY_COMMIT = "PostDeltasByCommit"
DELTA_KEY_COLUMNS = ("PostHash", "PostId", "EventHour", "DeltaId")
DELTA_COLUMNS = DELTA_KEY_COLUMNS + ("Upvotes", "Shares", "Events", "CommittedAt")
# What the fold and the hourly reads take from each unfolded delta.
DELTA_SUM_COLUMNS = ("EventHour", "Upvotes", "Shares")

HOURLY = "PostHourlyCounts"
HOURLY_COLUMNS = ("PostHash", "PostId", "EventHour", "Upvotes", "Shares")

FOLD_RUNS = "FoldRuns"
FOLD_RUN_COLUMNS = ("FoldId", "SnapshotAt", "PostsFolded", "DeltasFolded", "FinishedAt")

# One row per commit of delta rows: that commit's biggest risers (spanner_store/fresh_top.py).
TOP_CANDIDATES = "TopCandidates"
TOP_CANDIDATE_COLUMNS = ("Shard", "CommittedAt", "CandidateId", "PostIds", "Threshold")
TOP_CANDIDATE_SHARDS = 16

VIEW_ACTIVE = "TopPostsActiveVersion"
VIEW_VERSIONS = "TopPostsVersions"
VIEW_ROWS = "TopPostsViewRows"
VIEW_ROWS_BY_INVALID_SINCE = "TopPostsViewRowsByInvalidSince"
VIEW_ACTIVE_COLUMNS = ("ViewName", "Version", "ExpiredThrough", "PendingVersion", "PendingOwner", "PendingUntil")
VIEW_LEASE_COLUMNS = ("ViewName", "PendingVersion", "PendingOwner", "PendingUntil")
VIEW_VERSION_COLUMNS = ("ViewName", "Version", "CreatedAt", "ExpiresAt", "RankedRows", "RowsWritten",
                        "RowsRetired", "FoldedThrough")
VIEW_ROW_COLUMNS = ("ViewName", "Rank", "ValidSince", "InvalidSince", "PostId", "Upvotes", "Shares")
VIEW_RETIRE_COLUMNS = ("ViewName", "Rank", "ValidSince", "InvalidSince")

PostKey = tuple[int, str]  # (PostHash, PostId): a Posts row's primary key


def post_key(post_id: str) -> PostKey:
    return (post_hash(post_id), post_id)


def hour_timestamp(epoch_s: int) -> datetime:
    """An event hour (epoch seconds) as the TIMESTAMP Spanner stores."""
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc)


def delta_key(delta: PostDelta) -> tuple:
    """The PostDeltas primary key of a delta: deterministic, so a retried pane collides."""
    return post_key(delta.post_id) + (hour_timestamp(delta.event_hour), delta.delta_id)
