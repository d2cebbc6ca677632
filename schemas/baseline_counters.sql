-- The baselines the blind-write design is measured against (bench/ and `upvotes demo`), on
-- the same emulator as the real tables: one counter row per counter and shard, updated by a
-- read-modify-write transaction per vote. Read-modify-write is one shard (Shard = 0); sharded
-- counters spread a counter over N rows and read it as their SUM. Not part of the system's
-- schema: `spanner_store.baseline_counters.create_tables` applies it where needed.
CREATE TABLE BaselineCounters (
  CounterId STRING(64) NOT NULL,
  Shard     INT64 NOT NULL,
  Upvotes   INT64 NOT NULL,
) PRIMARY KEY (CounterId, Shard);
