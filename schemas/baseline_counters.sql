-- The baselines the blind-write design is measured against (bench/ and `upvotes demo`), on
-- the same emulator as the real tables: one counter row per counter and shard, updated by a
-- read-modify-write transaction per vote. Read-modify-write is one shard (Shard = 0); sharded
-- counters spread a counter over N rows and read it as their SUM. Not part of the system's
-- schema: `upvotes.devtools.baseline_counters.create_tables` applies it where needed.
CREATE TABLE BaselineCounters (
  CounterId STRING(64) NOT NULL,
  Shard     INT64 NOT NULL,
  Upvotes   INT64 NOT NULL,
) PRIMARY KEY (CounterId, Shard);


-- The write-back cache baseline (upvotes/devtools/write_back.py): Redis takes the votes, a flusher adds
-- each window's sums to one row per post here, in the same read-write transaction as the
-- flush-log row of the Redis staging key it read them from. A flush retried after a crash finds
-- its log row and applies nothing, so no sum is ever added twice. The log only has to outlive
-- the staging keys it guards (seconds), hence its short retention.
CREATE TABLE WriteBackCounters (
  PostId  STRING(128) NOT NULL,
  Upvotes INT64 NOT NULL,
  Shares  INT64 NOT NULL,
) PRIMARY KEY (PostId);

CREATE TABLE WriteBackFlushes (
  FlushId   STRING(128) NOT NULL,
  Part      INT64 NOT NULL,
  Posts     INT64 NOT NULL,
  FlushedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (FlushId, Part),
  ROW DELETION POLICY (OLDER_THAN(FlushedAt, INTERVAL 7 DAY));
