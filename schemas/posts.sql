-- Cloud Spanner schema for blind-write vote counting (solution 3 of
-- spanner-high-throughput-writes.txt). Statements are separated by ';' and applied
-- by `upvotes provision`, which adds only the objects that are missing.

-- Folded counters per post. PostHash (a hash of PostId, computed by the writers)
-- leads the key so that sequential post IDs ("p-1", "p-2", ...) spread over the key
-- space instead of piling onto one split. FoldedThrough is the fold watermark: every
-- delta committed at or before it is already inside Upvotes and Shares.
CREATE TABLE Posts (
  PostHash      INT64 NOT NULL,
  PostId        STRING(128) NOT NULL,
  Upvotes       INT64 NOT NULL DEFAULT (0),
  Shares        INT64 NOT NULL DEFAULT (0),
  FoldedThrough TIMESTAMP NOT NULL DEFAULT (TIMESTAMP "1970-01-01T00:00:00Z"),
) PRIMARY KEY (PostHash, PostId);

-- Insert-only deltas, one row per (post, event hour, pane) written by the streaming
-- pipeline. DeltaId is deterministic (job name, window, pane), so a retried write of
-- the same pane collides with the first instead of counting twice, and a new job
-- (new name) never collides with an old one. CommittedAt is stamped by Spanner and
-- is deliberately not in the key: a retry gets a new commit timestamp.
CREATE TABLE PostDeltas (
  PostHash    INT64 NOT NULL,
  PostId      STRING(128) NOT NULL,
  EventHour   TIMESTAMP NOT NULL,
  DeltaId     STRING(256) NOT NULL,
  Upvotes     INT64 NOT NULL,
  Shares      INT64 NOT NULL,
  Events      INT64 NOT NULL,
  CommittedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (PostHash, PostId, EventHour DESC, DeltaId),
  INTERLEAVE IN PARENT Posts ON DELETE CASCADE,
  ROW DELETION POLICY (OLDER_THAN(CommittedAt, INTERVAL 30 DAY));

-- Folds and exact reads seek to "deltas of this post committed after its
-- watermark" here, so their cost follows the unfolded deltas, not all deltas kept.
-- Interleaved, so the commit timestamp never leads a key of its own.
CREATE INDEX PostDeltasByCommit ON PostDeltas (PostHash, PostId, CommittedAt)
  STORING (Upvotes, Shares, Events),
  INTERLEAVE IN Posts;

-- "Top posts by upvotes" straight from the index: Shares and FoldedThrough are
-- stored, PostId is part of every index key, so there is no back-join.
CREATE INDEX PostsByUpvotes ON Posts (Upvotes DESC) STORING (Shares, FoldedThrough);

-- Per-hour folded counts (event time), written by the fold in the same
-- transaction as Posts; hourly reads add the unfolded deltas on top.
CREATE TABLE PostHourlyCounts (
  PostHash  INT64 NOT NULL,
  PostId    STRING(128) NOT NULL,
  EventHour TIMESTAMP NOT NULL,
  Upvotes   INT64 NOT NULL,
  Shares    INT64 NOT NULL,
) PRIMARY KEY (PostHash, PostId, EventHour DESC),
  INTERLEAVE IN PARENT Posts ON DELETE CASCADE;

-- One row per finished fold; `upvotes top` reports the newest as the ranking's age.
-- FoldId is random, so fold runs never append at one end of the key space.
CREATE TABLE FoldRuns (
  FoldId       STRING(36) NOT NULL,
  SnapshotAt   TIMESTAMP NOT NULL,
  PostsFolded  INT64 NOT NULL,
  DeltasFolded INT64 NOT NULL,
  FinishedAt   TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (FoldId),
  ROW DELETION POLICY (OLDER_THAN(FinishedAt, INTERVAL 30 DAY));
