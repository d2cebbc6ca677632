"""The names this code uses from schemas/posts.sql, each defined once, and the key builders.

Every table, index and column name, and every key a row is addressed by, comes from here,
so a schema change is one edit here plus the DDL. The counter columns come from the counters'
declaration (schemas/counters.py COLUMNS), in its order, in every table that keeps counts.
"""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

from google.cloud import spanner

from schemas import delta_retention_days, post_hash, user_hash
from schemas.counters import COLUMNS as COUNTER_COLUMNS
from schemas.counters import Counts
from schemas.records import PostDelta
from spanner_store.key_sets import KeySet

POSTS = "Posts"
POSTS_BY_UPVOTES = "PostsByUpvotes"
# The post's hot score as one ordered value (schemas/hot_score.py HotScore.key), and its index.
HOT_KEY = "HotKey"
# The hourly watermark HotKey was computed at; the HotKeyCurrent constraint holds it to the
# post's hourly watermark (NULL: unfenced, not yet backfilled; schemas/posts.sql).
HOT_KEY_THROUGH = "HotKeyThrough"
POSTS_BY_HOT = "PostsByHot"
POST_KEY_COLUMNS = ("PostHash", "PostId")
POST_COLUMNS = ("PostHash", "PostId") + COUNTER_COLUMNS + ("FoldedThrough",)
WATERMARK_COLUMNS = ("PostHash", "PostId", "FoldedThrough")
# The watermark of a post's PostHourlyCounts rows; NULL: the same as FoldedThrough.
HOURLY_WATERMARK = "HourlyFoldedThrough"
# The union of the voter sketches of every delta folded (schemas/voter_sketch.py); on
# Posts, PostDeltas and PostHourlyCounts alike. NULL: no voter recorded.
VOTERS = "Voters"
POST_FOLD_COLUMNS = POST_COLUMNS + (HOURLY_WATERMARK, VOTERS, HOT_KEY, HOT_KEY_THROUGH)
# What a step of a split fold writes: the hourly watermark and the score of the hourly rows at it.
HOURLY_WATERMARK_COLUMNS = ("PostHash", "PostId", HOURLY_WATERMARK, HOT_KEY, HOT_KEY_THROUGH)

DELTAS = "PostDeltas"
# The interleaved commit-time index: a post's deltas committed after its watermark are one
# key range of it (PostHash, PostId, CommittedAt), storing the counters, Events and Voters.
DELTAS_BY_COMMIT = "PostDeltasByCommit"
DELTA_KEY_COLUMNS = ("PostHash", "PostId", "EventHour", "DeltaId")
DELTA_COLUMNS = DELTA_KEY_COLUMNS + COUNTER_COLUMNS + ("Events", VOTERS, "CommittedAt")
# The ROW DELETION POLICY of PostDeltas (read from posts.sql): a delta not folded by then is lost.
DELTA_RETENTION_DAYS = delta_retention_days()
# What the fold and the hourly reads take from each unfolded delta (and from PostHourlyCounts):
# EventHour, the counters, Voters (`hour_sums_of` reads such a row).
DELTA_SUM_COLUMNS = ("EventHour",) + COUNTER_COLUMNS + (VOTERS,)
# The same with its commit timestamp, for folds that split a post by commit time.
DELTA_COMMIT_SUM_COLUMNS = ("CommittedAt",) + DELTA_SUM_COLUMNS

HOURLY = "PostHourlyCounts"
HOURLY_COLUMNS = ("PostHash", "PostId", "EventHour") + COUNTER_COLUMNS + (VOTERS,)
# The fold writes the row's shard of the by-hour index too (`hour_shard`).
HOURLY_WRITE_COLUMNS = HOURLY_COLUMNS + ("HourShard",)
HOURLY_BY_HOUR = "PostHourlyCountsByHour"
HOURLY_SHARDS = 4

FOLD_RUNS = "FoldRuns"
FOLD_RUN_COLUMNS = (
    "FoldId",
    "SnapshotAt",
    "PostsFolded",
    "DeltasFolded",
    "FinishedAt",
    "PostsSkipped",
    "ChangesThrough",
)
# The posts a fold run skipped, under its FoldRuns row (spanner_store/delta_commits.py reads them).
FOLD_RUN_SKIPPED = "FoldRunSkippedPosts"
FOLD_RUN_SKIPPED_COLUMNS = ("FoldId", "PostHash", "PostId", "Error")

WRITER_GENERATIONS = "WriterGenerations"
WRITER_GENERATION_COLUMNS = ("WriterName", "Generation", "ClaimedAt", "KeyFormat")
STATUS_WATCHES = "StatusWatches"
STATUS_WATCH_COLUMNS = ("Role", "Resource", "RecordedAt")
# Each local stream's heartbeat (local_runner/heartbeat.py writes it, spanner_reads/liveness.py reads it).
STREAM_HEARTBEATS = "StreamHeartbeats"
STREAM_HEARTBEAT_COLUMNS = (
    "Subscription",
    "Writer",
    "WindowSeconds",
    "Host",
    "Pid",
    "StartedAt",
    "AliveAt",
    "StoppedAt",
)

ADJUSTMENTS = "Adjustments"
ADJUSTMENT_COLUMNS = (
    ("AdjustmentId", "PostId", "Kind")
    + COUNTER_COLUMNS
    + ("Reason", "Actor", "AsOf", "CreatedAt", "UserId", "SplitRows")
)
# What the last commit of a reset split in several commits updates: its audit row's split, cleared.
ADJUSTMENT_SPLIT_COLUMNS = ("AdjustmentId", "SplitRows")

# Each user's latest vote state per post (spanner_writes/votes.py), keyed (UserHash, UserId, PostId).
VOTES = "Votes"
VOTE_KEY_COLUMNS = ("UserHash", "UserId", "PostId")
VOTE_COLUMNS = VOTE_KEY_COLUMNS + ("Vote", "VotedAt", "EventId", "EventHour", "AppliedAt")
# TRUE: the row's vote is held out of the counts by a suspension (issue 46); NULL: it counts.
# Written only when it changes (spanner_writes/votes.py, upvotes/operations/suspension_passes.py).
HELD_OUT = "HeldOut"
VOTE_HELD_COLUMNS = VOTE_COLUMNS + (HELD_OUT,)
# What a suspension or a restore writes to a stored vote it moves: the mark alone.
VOTE_MARK_COLUMNS = VOTE_KEY_COLUMNS + (HELD_OUT,)

# Erasure requests (upvotes/operations/forget_user.py): a user's forget times, keyed like Votes, then the request.
USER_ERASURES = "UserErasures"
USER_ERASURE_COLUMNS = ("UserHash", "UserId", "RequestId", "ForgottenThrough")

# Suspensions (upvotes/operations/suspensions.py): per user, keyed like Votes, then the suspension;
# and one audit row per request (suspend, restore), keyed by the suspension's ID, then the request.
USER_SUSPENSIONS = "UserSuspensions"
USER_SUSPENSION_KEY_COLUMNS = ("UserHash", "UserId", "SuspensionId")
USER_SUSPENSION_COLUMNS = USER_SUSPENSION_KEY_COLUMNS + ("Since", "RestoredAt", "Applied")
# What a suspension's record writes per user (RestoredAt and Applied are left as they are: NULL when new).
USER_SUSPENSION_RECORD_COLUMNS = USER_SUSPENSION_KEY_COLUMNS + ("Since",)
# What a pass writes to a user's row of an active suspension it applies (Applied TRUE).
USER_SUSPENSION_APPLY_COLUMNS = USER_SUSPENSION_KEY_COLUMNS + ("Applied",)
# What a restore writes per user, in the pass that moves the user's votes back (Applied NULL).
USER_SUSPENSION_RESTORE_COLUMNS = USER_SUSPENSION_KEY_COLUMNS + ("RestoredAt", "Applied")
# One row (key 0): the commit timestamp of the last commit that wrote UserSuspensions rows
# (spanner_store/suspended_users.py).
USER_SUSPENSIONS_CHANGED = "UserSuspensionsChanged"
USER_SUSPENSIONS_CHANGED_COLUMNS = ("Singleton", "ChangedAt")
SUSPENSIONS = "Suspensions"
SUSPENSION_COLUMNS = (
    ("SuspensionId", "Request", "Reason", "Actor", "Since", "UserIds", "RequestedAt", "Votes")
    + COUNTER_COLUMNS
    + ("Commits", "FinishedAt")
)
# What each pass of a request adds up in its audit row, in the transaction that moves the votes.
SUSPENSION_TALLY_COLUMNS = ("SuspensionId", "Request", "Votes") + COUNTER_COLUMNS + ("Commits",)
SUSPENSION_FINISH_COLUMNS = ("SuspensionId", "Request", "FinishedAt")

# Each corrected dead letter a replay wrote (upvotes/operations/replayed_corrections.py), keyed by a hash of its
# identity, then the identity (`replayed_correction_key`).
REPLAYED_CORRECTIONS = "ReplayedCorrections"
REPLAYED_CORRECTION_COLUMNS = ("IdentityHash", "Identity", "Correction", "ReplayedAt")

# Rows written once per commit of delta rows are keyed (Shard, CommittedAt, ID) with the shard
# a hash of a random ID (`commit_shard`): COMMIT_SHARDS key ranges share the appends, and a
# reader of "committed after T" seeks each.
COMMIT_SHARDS = 16
# One row per commit of delta rows: that commit's biggest risers (spanner_store/top_candidates.py).
TOP_CANDIDATES = "TopCandidates"
TOP_CANDIDATE_COLUMNS = ("Shard", "CommittedAt", "CandidateId", "PostIds", "Threshold", "RiseThreshold", "NewestHour")
# One row per commit of delta rows: its posts, the change log the fold follows (spanner_store/delta_commits.py).
DELTA_COMMITS = "DeltaCommits"
DELTA_COMMIT_COLUMNS = ("Shard", "CommittedAt", "CommitId", "PostIds", "DeltaRows", "Events")
# A vote-state sink commit's row also lists the users whose states it applied (`upvotes suspects`).
DELTA_COMMIT_USER_COLUMNS = DELTA_COMMIT_COLUMNS + ("UserIds",)

# The trending rankings' settings per database (spanner_store/ranking_settings.py).
RANKING_SETTINGS = "RankingSettings"
RANKING_SETTING_COLUMNS = ("Name", "Value", "RecordedAt")

VIEW_ACTIVE = "TopPostsActiveVersion"
VIEW_VERSIONS = "TopPostsVersions"
VIEW_ROWS = "TopPostsViewRows"
VIEW_ROWS_BY_INVALID_SINCE = "TopPostsViewRowsByInvalidSince"
VIEW_ACTIVE_COLUMNS = ("ViewName", "Version", "ExpiredThrough", "PendingVersion", "PendingOwner", "PendingUntil")
VIEW_LEASE_COLUMNS = ("ViewName", "PendingVersion", "PendingOwner", "PendingUntil")
VIEW_VERSION_COLUMNS = (
    "ViewName",
    "Version",
    "CreatedAt",
    "ExpiresAt",
    "RankedRows",
    "RowsWritten",
    "RowsRetired",
    "FoldedThrough",
    "Certified",
    "Bound",
)
VIEW_ROW_COLUMNS = ("ViewName", "Rank", "ValidSince", "InvalidSince", "PostId") + COUNTER_COLUMNS
VIEW_RETIRE_COLUMNS = ("ViewName", "Rank", "ValidSince", "InvalidSince")

PostKey = tuple[int, str]  # (PostHash, PostId): a Posts row's primary key


def counts_at(row, start: int) -> Counts:
    """The Counts in a row read with COUNTER_COLUMNS at `start` (their declared order)."""
    return Counts(*row[start : start + len(COUNTER_COLUMNS)])


def post_key(post_id: str) -> PostKey:
    return (post_hash(post_id), post_id)


def post_rows_range(posts) -> spanner.KeySet:
    """Every row of these posts (PostKeys) in a table keyed (PostHash, PostId, ...): one key range each."""
    return KeySet(ranges=[spanner.KeyRange(start_closed=list(key), end_closed=list(key)) for key in posts])


def vote_key(post_id: str, user_id: str) -> tuple[int, str, str]:
    """The Votes primary key of one user's vote on one post."""
    return (user_hash(user_id), user_id, post_id)


def replayed_correction_key(identity: str) -> tuple[int, str]:
    """The ReplayedCorrections primary key of a dead letter's identity: the identity's hash (the
    posts' hash, of another string) leads, spreading sequential message and event IDs."""
    return (post_hash(identity), identity)


def user_rows_range(*user_ids: str) -> spanner.KeySet:
    """Every row of these users in a table keyed (UserHash, UserId, ...), Votes, UserErasures or
    UserSuspensions:
    one key range per user."""
    prefixes = ([user_hash(user_id), user_id] for user_id in user_ids)
    return KeySet(ranges=[spanner.KeyRange(start_closed=prefix, end_closed=prefix) for prefix in prefixes])


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros_timestamp(epoch_us: int) -> datetime:
    """A time in microseconds since the epoch as the TIMESTAMP Spanner stores (years 1 to 9999)."""
    return _EPOCH + timedelta(microseconds=epoch_us)


def timestamp_micros(value: datetime) -> int:
    """micros_timestamp's inverse, for a TIMESTAMP read back (sub-microsecond digits dropped)."""
    return (value - _EPOCH) // timedelta(microseconds=1)


# Ranges of the PostHash key space (schemas.post_hash: 63 bits), each 1/KEY_RANGES of it: the
# fold groups a transaction's posts by range, and the commit meter counts the ranges a commit
# writes, a proxy for the splits it touches on real Spanner (upvotes/devtools/mutation_count.py).
KEY_RANGES = 64


def key_range(post_hash_value: int) -> int:
    """The range of the PostHash key space a post's rows (and its interleaved children) live in."""
    return post_hash_value * KEY_RANGES >> 63


def committed_after(after: datetime, shard: int | None = None) -> spanner.KeySet:
    """The rows of a per-commit table (TopCandidates, DeltaCommits) committed after `after`: one
    key range per shard, of every shard or of one (for parallel readers)."""
    shards = range(COMMIT_SHARDS) if shard is None else (shard,)
    return KeySet(ranges=[spanner.KeyRange(start_open=[s, after], end_closed=[s]) for s in shards])


def hour_shard(post_hash_value: int) -> int:
    """The shard of a post's PostHourlyCounts rows in the by-hour index."""
    return post_hash_value % HOURLY_SHARDS


def commit_shard(commit_id: str) -> int:
    """The shard of a per-commit row (TopCandidates, DeltaCommits): its random ID's hash, mod COMMIT_SHARDS."""
    return post_hash(commit_id) % COMMIT_SHARDS


def hour_timestamp(epoch_s: int) -> datetime:
    """An event hour (epoch seconds) as the TIMESTAMP Spanner stores."""
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc)


def delta_key(delta: PostDelta) -> tuple:
    """The PostDeltas primary key of a delta: deterministic, so a retried pane collides."""
    return post_key(delta.post_id) + (hour_timestamp(delta.event_hour), delta.delta_id)


def sketch_column(sketch: bytes | None) -> bytes | None:
    """A voter sketch as the client takes a BYTES value: base64 (it sends bytes as text)."""
    return None if sketch is None else base64.b64encode(sketch)


def sketch_value(column: bytes | None) -> bytes | None:
    """A BYTES value as the client reads it (still base64) back to the sketch."""
    return None if column is None else base64.b64decode(column)
