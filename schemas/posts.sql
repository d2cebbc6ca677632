-- Cloud Spanner schema for blind-write vote counting (solution 3 of
-- spanner-high-throughput-writes.txt). Statements are separated by ';' and applied
-- by `upvotes provision`, which adds only the objects that are missing.

-- Folded counters per post. PostHash (a hash of PostId, computed by the writers)
-- leads the key so that sequential post IDs ("p-1", "p-2", ...) spread over the key
-- space instead of piling onto one split. FoldedThrough is the fold watermark: every
-- delta committed at or before it is already inside the counters (Upvotes, Downvotes, Shares, Views).
-- HourlyFoldedThrough is the watermark of the post's PostHourlyCounts rows: every delta
-- committed at or before it is already inside them. NULL means "the same as
-- FoldedThrough" (rows written before the column existed, and posts folded in one
-- transaction). A post with too many unfolded event hours for one commit has its hourly
-- rows folded first, in bounded steps that each move this watermark, so it runs ahead of
-- FoldedThrough until the post's counters catch up; it is never behind it.
-- Voters (here, on PostDeltas and on PostHourlyCounts): a serialised HyperLogLog sketch of
-- the user IDs that upvoted (schemas/voter_sketch.py), folded as a union in the same
-- transaction as the counts. NULL means no voter recorded (rows written before the column).
-- HotKeyThrough (issue 44): the hourly watermark HotKey was computed at, from every hourly row
-- then there (below, PostsByHot). HotKeyCurrent holds it to the post's hourly watermark in every
-- write, whatever the writer's version: a fold that moves FoldedThrough or HourlyFoldedThrough
-- without writing it (every fold older than the column, which knows nothing of it) fails that
-- post's transaction with OUT_OF_RANGE, and the fold skips the post (its reads stay exact) until
-- a fold of this version folds it. So a non-NULL HotKeyThrough means "HotKey is the score of the
-- hourly rows". NULL: unfenced, a row from before the column (or whose key could not be computed,
-- no half-life recorded yet) until `upvotes provision` backfills it; every row created later
-- takes the default, FoldedThrough's own, and is fenced from birth. Added to an existing table
-- without its default, which Spanner would otherwise write into every row already there.
CREATE TABLE Posts (
  PostHash            INT64 NOT NULL,
  PostId              STRING(128) NOT NULL,
  Upvotes             INT64 NOT NULL DEFAULT (0),
  Downvotes           INT64 NOT NULL DEFAULT (0),
  Shares              INT64 NOT NULL DEFAULT (0),
  Views               INT64 NOT NULL DEFAULT (0),
  FoldedThrough       TIMESTAMP NOT NULL DEFAULT (TIMESTAMP "1970-01-01T00:00:00Z"),
  HourlyFoldedThrough TIMESTAMP,
  Voters              BYTES(MAX),
  HotKey              FLOAT64,
  HotKeyThrough       TIMESTAMP DEFAULT (TIMESTAMP "1970-01-01T00:00:00Z"),
  CONSTRAINT HotKeyCurrent CHECK (HotKeyThrough IS NULL OR HotKeyThrough = COALESCE(HourlyFoldedThrough, FoldedThrough)),
) PRIMARY KEY (PostHash, PostId);

-- Insert-only deltas, one row per (post, event hour, pane) written by the streaming
-- pipeline. DeltaId is deterministic (job name and generation, the window's start and
-- end, the pane, the shard count), so a retried write of the same pane collides with the
-- first instead of counting twice; a new launch (new generation, see WriterGenerations)
-- never collides with an old one; and an update that changes the window length or the
-- shard count never makes two different panes share a key. CommittedAt is stamped by
-- Spanner and is deliberately not in the key: a retry gets a new commit timestamp.
CREATE TABLE PostDeltas (
  PostHash    INT64 NOT NULL,
  PostId      STRING(128) NOT NULL,
  EventHour   TIMESTAMP NOT NULL,
  DeltaId     STRING(256) NOT NULL,
  Upvotes     INT64 NOT NULL,
  Downvotes   INT64 NOT NULL DEFAULT (0),
  Shares      INT64 NOT NULL,
  Views       INT64 NOT NULL DEFAULT (0),
  Events      INT64 NOT NULL,
  Voters      BYTES(MAX),
  CommittedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (PostHash, PostId, EventHour DESC, DeltaId),
  INTERLEAVE IN PARENT Posts ON DELETE CASCADE,
  ROW DELETION POLICY (OLDER_THAN(CommittedAt, INTERVAL 30 DAY));

-- Folds and exact reads seek to "deltas of this post committed after its
-- watermark" here, so their cost follows the unfolded deltas, not all deltas kept.
-- Interleaved, so the commit timestamp never leads a key of its own.
CREATE INDEX PostDeltasByCommit ON PostDeltas (PostHash, PostId, CommittedAt)
  STORING (Upvotes, Downvotes, Shares, Views, Events, Voters),
  INTERLEAVE IN Posts;

-- "Top posts by upvotes": the index order is the ranking; the K rows read take their other
-- counters from Posts (a back-join of K rows). Until issue 36 the index stored them and
-- FoldedThrough: each stored column cost a mutation in every new post's entry (the sink) and in
-- every fold of a post, on every post of a long tail, to save K point reads on a top-K read.
-- `upvotes provision` drops them from an existing index.
CREATE INDEX PostsByUpvotes ON Posts (Upvotes DESC);

-- HotKey: the post's hot score (schemas/hot_score.py: its sign and log2 in one ordered value),
-- computed by the fold from all of the post's PostHourlyCounts rows in the transaction that
-- writes them, so it is that of the hourly rows (HourlyFoldedThrough) wherever HotKeyThrough is
-- set (the HotKeyCurrent constraint above keeps older folds from moving the rows under it). NULL:
-- no hourly row yet (a score of 0), or a row from before the column, until `upvotes provision`
-- backfills it.
-- "Hot posts" straight from this index, the folded side of spanner_reads/trending.py.
-- NULL_FILTERED: a new post's parent row (written by the sink, HotKey NULL) costs no entry.
-- Not a write hotspot although new hot posts enter at its top: entries change once per post
-- per fold run, not per vote.
CREATE NULL_FILTERED INDEX PostsByHot ON Posts (HotKey DESC);

-- Per-hour folded counts (event time), written by the fold in the same
-- transaction as Posts; hourly reads add the unfolded deltas on top.
CREATE TABLE PostHourlyCounts (
  PostHash  INT64 NOT NULL,
  PostId    STRING(128) NOT NULL,
  EventHour TIMESTAMP NOT NULL,
  Upvotes   INT64 NOT NULL,
  Downvotes INT64 NOT NULL DEFAULT (0),
  Shares    INT64 NOT NULL,
  Views     INT64 NOT NULL DEFAULT (0),
  Voters    BYTES(MAX),
  HourShard INT64 NOT NULL DEFAULT (0),
) PRIMARY KEY (PostHash, PostId, EventHour DESC),
  INTERLEAVE IN PARENT Posts ON DELETE CASCADE;

-- "Top posts of hour h by upvotes" (folded), the per-hour sorted lists the last-N-hours ranking
-- walks (spanner_reads/trending.py, a threshold algorithm). HourShard (PostHash mod
-- HOURLY_SHARDS, written by the fold) leads, so the fold's writes to the current hour spread
-- over that many key ranges instead of one; a reader merges the shards of each hour. Rows from
-- before the column read shard 0: still found, as every reader reads every shard.
CREATE INDEX PostHourlyCountsByHour ON PostHourlyCounts (HourShard, EventHour DESC, Upvotes DESC);

-- One row per finished fold; `upvotes top` reports the newest as the ranking's age.
-- PostsSkipped: posts whose fold failed with a non-transient error and were left
-- unfolded (still counted exactly by reads) so that they did not stop the others.
-- ChangesThrough: every post with a delta committed at or before it was folded through
-- SnapshotAt by this run or is listed in FoldRunSkippedPosts under it. The run with the
-- largest ChangesThrough is the next fold's cursor: that fold reads only the DeltaCommits
-- rows committed after it (spanner_store/folding.py). NULL: a run that does not vouch for
-- that (rows written before the column existed, or too many skipped posts to list).
-- FoldId is random, so fold runs never append at one end of the key space.
CREATE TABLE FoldRuns (
  FoldId         STRING(36) NOT NULL,
  SnapshotAt     TIMESTAMP NOT NULL,
  PostsFolded    INT64 NOT NULL,
  DeltasFolded   INT64 NOT NULL,
  FinishedAt     TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  PostsSkipped   INT64,
  ChangesThrough TIMESTAMP,
) PRIMARY KEY (FoldId),
  ROW DELETION POLICY (OLDER_THAN(FinishedAt, INTERVAL 30 DAY));

-- The posts one fold run skipped (their fold failed with a non-transient error), written in
-- the same commit as the run's FoldRuns row: the next fold tries them again, and readers
-- know the run's snapshot does not cover them. A handful per run at most (the run lists at
-- most MAX_SKIPPED_LISTED; beyond that it leaves ChangesThrough NULL); interleaved, so they
-- live with their run and expire with it.
CREATE TABLE FoldRunSkippedPosts (
  FoldId   STRING(36) NOT NULL,
  PostHash INT64 NOT NULL,
  PostId   STRING(128) NOT NULL,
  Error    STRING(1024) NOT NULL,
) PRIMARY KEY (FoldId, PostHash, PostId),
  INTERLEAVE IN PARENT FoldRuns ON DELETE CASCADE;

-- One row per streaming writer name (the Dataflow job name): the generation of its
-- current run, part of every delta key it writes. A fresh launch claims Generation + 1,
-- so a job drained and relaunched under the same name never rewrites an old delta key;
-- an in-place update (--update) keeps the generation, so a replayed pane still collides.
-- KeyFormat: how this generation's delta keys are spelled (spanner_store/tables.py
-- delta_key_format). A fresh launch takes the current format; an update keeps the stored one,
-- so a pane the previous job may have written keeps its key. NULL: the first format, of
-- generations claimed before the column existed.
-- Keyed by the name: a handful of rows, written once per launch.
CREATE TABLE WriterGenerations (
  WriterName  STRING(128) NOT NULL,
  Generation  INT64 NOT NULL,
  ClaimedAt   TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  KeyFormat   INT64,
) PRIMARY KEY (WriterName);

-- Moderation's audit trail: one row per `upvotes adjust` or `upvotes reset`, written in the
-- same commit as the compensating delta rows it describes (DeltaId "@adjust/<id>"). Keyed
-- by the adjustment's ID (the operator's --id, or a random UUID): a retried command
-- collides with its own row and writes nothing twice. A few rows a day; never a hotspot.
-- `upvotes forget-user` writes one too (Kind "forget_user", UserId the user, PostId empty,
-- AsOf its forget time, which its retractions are stamped with: a rerun of the same ID reuses it).
-- AsOf allows the commit timestamp because a forget time is the commit timestamp of that very
-- row (issue 44): Spanner's clock, which every writer of the user's votes is ordered by, never
-- the operator's (rows of earlier versions hold the operator's clock). A reset's AsOf is its
-- snapshot, a time in the past, which such a column takes as any timestamp.
-- SplitRows: a reset of a post with more event hours than one commit holds is written in several
-- commits of at most SplitRows hour rows each (upvotes/operations/moderation.py); that number and
-- the post's hourly counts at AsOf decide every commit's rows, so a rerun by ID writes the same
-- ones. Set by the reset's first commit, cleared to NULL by its last: NULL means nothing is left to
-- write (every other row, and rows from before the column), so a rerun then reads nothing.
CREATE TABLE Adjustments (
  AdjustmentId STRING(64) NOT NULL,
  PostId       STRING(128) NOT NULL,
  Kind         STRING(16) NOT NULL,
  Upvotes      INT64 NOT NULL,
  Downvotes    INT64 NOT NULL DEFAULT (0),
  Shares       INT64 NOT NULL,
  Views        INT64 NOT NULL DEFAULT (0),
  Reason       STRING(1024) NOT NULL,
  Actor        STRING(256) NOT NULL,
  AsOf         TIMESTAMP OPTIONS (allow_commit_timestamp = true),
  CreatedAt    TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  UserId       STRING(128),
  SplitRows    INT64,
) PRIMARY KEY (AdjustmentId);

-- Versioned top-posts views (issue 8; spanner-static-views.txt). A reader pins one
-- version and pages through it while later folds publish newer versions, so pages of a
-- version never gain duplicates or gaps. One row per view: the active version, switched
-- atomically in one short transaction after the new version's rows are all written (no
-- reader can find a version before then), the publisher's lease (one publisher per view
-- at a time, so no two publishers edit the same rows), and the expiry watermark: versions
-- <= ExpiredThrough are gone. Keyed by the view's name; a handful of rows, never a
-- hotspot, and the parent of everything below so a view's rows live together.
CREATE TABLE TopPostsActiveVersion (
  ViewName         STRING(64) NOT NULL,
  Version          INT64,
  VersionCreatedAt TIMESTAMP OPTIONS (allow_commit_timestamp = true),
  ExpiredThrough   INT64 NOT NULL DEFAULT (0),
  PendingVersion   INT64,
  PendingOwner     STRING(36),
  PendingUntil     TIMESTAMP,
) PRIMARY KEY (ViewName);

-- One row per published version: when it was published and when it stops being
-- readable (set when a newer version replaces it), with what its publication cost.
-- Version numbers grow by one per publication, but under the ViewName key, so new
-- versions do not pile onto the end of one key space.
-- Certified: whether the ranking was certified when it was ranked (the read's `exact`: these are
-- the top K by the view's score at its snapshot), and Bound: the most a post left out may score
-- (NULL when every post was considered). A version is published uncertified only when its
-- publisher asks for it (`--allow-uncertified`); pages show both. NULL: a version published
-- before the columns, whose certification was never recorded.
CREATE TABLE TopPostsVersions (
  ViewName      STRING(64) NOT NULL,
  Version       INT64 NOT NULL,
  CreatedAt     TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  ExpiresAt     TIMESTAMP,
  RankedRows    INT64 NOT NULL,
  RowsWritten   INT64 NOT NULL,
  RowsRetired   INT64 NOT NULL,
  FoldedThrough TIMESTAMP,
  Certified     BOOL,
  Bound         FLOAT64,
) PRIMARY KEY (ViewName, Version DESC),
  INTERLEAVE IN PARENT TopPostsActiveVersion ON DELETE CASCADE;

-- The ranked rows of every live version, stored once: a row is part of versions
-- ValidSince <= v < InvalidSince (NULL: still current). A new version inserts only the
-- ranks whose (post, counts) changed and sets InvalidSince on the rows they replace,
-- instead of rewriting all K. Rank right after ViewName makes a page
-- ("ranks 41..60 of version v") one short key-range seek; ValidSince DESC puts a rank's
-- newest row first, and the rows scanned per page are page_size times the versions kept.
CREATE TABLE TopPostsViewRows (
  ViewName     STRING(64) NOT NULL,
  Rank         INT64 NOT NULL,
  ValidSince   INT64 NOT NULL,
  InvalidSince INT64,
  PostId       STRING(128) NOT NULL,
  Upvotes      INT64 NOT NULL,
  Downvotes    INT64 NOT NULL DEFAULT (0),
  Shares       INT64 NOT NULL,
  Views        INT64 NOT NULL DEFAULT (0),
) PRIMARY KEY (ViewName, Rank, ValidSince DESC),
  INTERLEAVE IN PARENT TopPostsActiveVersion ON DELETE CASCADE;

-- Expiry seeks the retired rows ("InvalidSince <= first live version") here instead of
-- scanning the view. NULL_FILTERED: current rows (InvalidSince NULL) have no entry, so
-- inserting them costs no index write.
CREATE NULL_FILTERED INDEX TopPostsViewRowsByInvalidSince
  ON TopPostsViewRows (ViewName, InvalidSince),
  INTERLEAVE IN TopPostsActiveVersion;

-- Fresh top posts without a fold (issue 16). Every commit of delta rows also inserts one
-- row here, in the same commit: the posts with the largest upvote sums in that commit
-- (at most TOP_CANDIDATES_PER_COMMIT) and Threshold, the largest upvote sum of any post of
-- the commit that is NOT listed (0 when every post with a positive sum is listed).
-- `upvotes top` re-ranks the folded top K+m plus the posts of the rows committed after the
-- last fold by their exact counts; the thresholds bound what any other post can have
-- gained (see spanner_store/fresh_top.py). Shard (a hash of CandidateId) leads the key, so
-- these inserts spread over SHARDS key ranges instead of appending at one end; a reader
-- seeks each shard's rows committed after the fold.
-- RiseThreshold and NewestHour bound the trending rankings (spanner_reads/trending.py): the
-- largest rise (schemas/hot_score.py rise_of, summed over a post's delta rows, each clipped at
-- 0) of any post the row does not list, and the newest event hour of the commit's rows. NULL:
-- a row from before the columns, which a trending read cannot certify past.
CREATE TABLE TopCandidates (
  Shard       INT64 NOT NULL,
  CommittedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  CandidateId STRING(36) NOT NULL,
  PostIds     ARRAY<STRING(128)> NOT NULL,
  Threshold   INT64 NOT NULL,
  RiseThreshold FLOAT64,
  NewestHour  TIMESTAMP,
) PRIMARY KEY (Shard, CommittedAt, CandidateId),
  ROW DELETION POLICY (OLDER_THAN(CommittedAt, INTERVAL 30 DAY));


-- The change log the fold and `upvotes status` follow (issue 22): every commit of delta rows,
-- by every writer (the sink, moderation, dead-letter replays), also inserts one row here in
-- the same commit, listing the distinct posts of that commit, how many delta rows it wrote
-- and the votes (Events) they hold. A fold reads the rows committed after the previous
-- fold's ChangesThrough, a seek per shard, and so reads the posts that changed and never the
-- others: its cost follows the votes, not the catalogue. Shard (a hash of the random
-- CommitId, the same ID and shard as the commit's TopCandidates row) leads the key, so these
-- inserts spread over DELTA_COMMIT_SHARDS key ranges instead of appending at one end. About
-- 6 mutations per commit of up to 1,000 delta rows of 18 each (+0.03%); a shard-led index on
-- PostDeltas would cost about 7 per delta row instead (see docs/how-it-works.md, "The fold").
-- Kept as long as the deltas themselves.
-- UserIds (issue 46): the users whose vote states a vote-state sink commit applied, in the same
-- commit (one more column: one mutation per commit of up to 1,000 states); NULL for every other
-- writer. `upvotes suspects` finds the users who voted since a time here, so its cost follows the
-- votes since then, never the Votes table (which has no index by time: one would cost every vote
-- state a mutation per indexed column).
CREATE TABLE DeltaCommits (
  Shard       INT64 NOT NULL,
  CommittedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  CommitId    STRING(36) NOT NULL,
  PostIds     ARRAY<STRING(128)> NOT NULL,
  DeltaRows   INT64 NOT NULL,
  Events      INT64 NOT NULL,
  UserIds     ARRAY<STRING(128)>,
) PRIMARY KEY (Shard, CommittedAt, CommitId),
  ROW DELETION POLICY (OLDER_THAN(CommittedAt, INTERVAL 30 DAY));

-- What `upvotes status` watches (issue 23): the topics and subscriptions `upvotes provision`
-- created for this database, one row per role (spanner_store/watches.py), so that a plain
-- `upvotes status --instance I --database D` checks the votes backlog and the dead letters
-- without being told where they are. A handful of rows, rewritten by every provision.
CREATE TABLE StatusWatches (
  Role       STRING(64) NOT NULL,
  Resource   STRING(MAX) NOT NULL,
  RecordedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (Role);

-- Each local stream's heartbeat (issue 47): `upvotes stream` on the DirectRunner rewrites the row
-- of the subscription it reads at least once per window, idle or not, with its window length,
-- and stamps StoppedAt when a drain ends it (local_runner/heartbeat.py). `upvotes status` flags a
-- row not rewritten for 3 of its windows: a stream killed, crashed or frozen, and when it was
-- last alive (spanner_reads/liveness.py). One row per subscription, rewritten every few seconds
-- by one process: never a hotspot. A Dataflow job writes none (its job state and the backlog
-- alert say whether it runs).
CREATE TABLE StreamHeartbeats (
  Subscription  STRING(MAX) NOT NULL,
  Writer        STRING(MAX) NOT NULL,
  WindowSeconds INT64 NOT NULL,
  Host          STRING(MAX),
  Pid           INT64,
  StartedAt     TIMESTAMP OPTIONS (allow_commit_timestamp = true),
  AliveAt       TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  StoppedAt     TIMESTAMP OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (Subscription),
  ROW DELETION POLICY (OLDER_THAN(AliveAt, INTERVAL 30 DAY));

-- One vote per user (issue 29, schemas/vote_states.py): each user's latest vote-state on each
-- post. Vote is "up", "down" or "none" (taken back, or forgotten); VotedAt and EventId are the
-- order the latest is chosen by (the event time to the microsecond, then the event ID; "" when
-- the event had none); EventHour is the hour the vote is counted in (hourly counts): a change
-- takes the old vote out of the old state's hour and puts the new one in the new state's, so
-- the hourly counts, like the totals, do not depend on the order events arrive in.
-- The streaming pipeline's vote-state sink (spanner_store/votes.py) reads a batch of these rows
-- and, in the same read-write transaction, writes the newer states and the delta rows their
-- changes add up to, with the commit's DeltaCommits and TopCandidates rows: a state and the count
-- it moved become visible together, and a replayed batch finds its states applied and changes
-- nothing.
-- The key: a viral post's million voters must not share one split, so the table is not
-- interleaved in Posts (a parent row and its children stay in one split, and one post takes
-- thousands of votes a second) and the post does not lead the key. UserHash (a hash of UserId,
-- schemas.user_hash) leads, which spreads every post's voters over the whole key space ("hash the
-- key", schema best practice #1); UserId next keeps one user's votes together, so "my vote" is a
-- point read and `upvotes forget-user` one key range, whose cost follows that user's votes.
-- Kept: a "none" row is what makes an older event of that user, arriving late, lose.
-- HeldOut (issue 46): TRUE when the row's vote is held out of the counts by a suspension of its
-- user (UserSuspensions below): the row then counts nothing, and its vote's count is out of
-- every delta sum. NULL: the row counts as its Vote says, unless an Applied suspension of its
-- user covers it. Every transaction that moves a user's
-- state reads it, so it knows what the stored state contributes now: the sink (a new state
-- replaces a held one: nothing to take out), a suspension (moves a counted vote out and sets it),
-- a restore (moves it back in and clears it). Written only when it changes, so a sink commit of
-- users with no suspension writes the same columns as before. "none" rows are never held (they
-- count nothing either way).
CREATE TABLE Votes (
  UserHash  INT64 NOT NULL,
  UserId    STRING(128) NOT NULL,
  PostId    STRING(128) NOT NULL,
  Vote      STRING(8) NOT NULL,
  VotedAt   TIMESTAMP NOT NULL,
  EventId   STRING(128) NOT NULL,
  EventHour TIMESTAMP NOT NULL,
  AppliedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  HeldOut   BOOL,
) PRIMARY KEY (UserHash, UserId, PostId);

-- Erasure requests (issue 34, spanner_store/forget_user.py): one row per `upvotes forget-user`
-- request, written in the same commit as its audit row and before any retraction. It says that
-- every vote-state of the user at or before ForgottenThrough (the request's forget time) counts
-- nothing, on every post: the vote-state sink reads the user's rows in the transaction that
-- applies the user's states (one key range per user, beside the Votes rows it reads) and turns a
-- state no later than the newest of them into the request's "none" (schemas/vote_states.py
-- `erased`). So a vote in flight when the request runs (in an open window, the subscription's
-- backlog or a dead-letter batch) loses when it arrives, on a post with no stored vote too.
-- ForgottenThrough is the commit timestamp of the request's record (this row and its audit row,
-- one commit; issue 44), not the operator's clock: the transactions that apply the user's states
-- read these rows, so Spanner orders them against it, and a state applied before it is one the
-- request finds and retracts. Rows of earlier versions hold the operator's clock.
-- Keyed like Votes, a user's rows together (UserHash leads, then UserId), then the request's ID.
-- Kept: the row holds the user's ID for as long as an event of the user may still arrive; it is
-- deleted with the user's Votes rows once that can no longer happen (docs/operating.md).
CREATE TABLE UserErasures (
  UserHash         INT64 NOT NULL,
  UserId           STRING(128) NOT NULL,
  RequestId        STRING(64) NOT NULL,
  ForgottenThrough TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (UserHash, UserId, RequestId);

-- Suspensions (issue 46, upvotes/operations/suspensions.py): which users' votes are held out of
-- the counts, one row per user and suspension, keyed like Votes and UserErasures (UserHash leads,
-- then UserId: a user's rows are one key range, read by a transaction that applies the user's
-- states beside the user's erasures, unless it holds them: UserSuspensionsChanged below), then
-- the suspension's ID. Since:
-- the suspension holds out the user's votes cast at or after it (their VotedAt); NULL: every vote.
-- RestoredAt: when `upvotes restore-users` lifted it for this user (the commit timestamp of the
-- pass that moved the user's votes back in); NULL: active. A suspension's rows are written before
-- any count moves, so from their commit on every transaction applying the user's states sees them
-- and stores a covered state held out (Votes.HeldOut).
-- Applied (issue 46, upvotes/operations/suspension_passes.py): TRUE once a pass moved every vote of
-- the user this row covers out of the counts in one commit: those votes count nothing whatever
-- their HeldOut says, so a ring's history moves with one write per user, not one per vote. NULL:
-- the user's votes are in or out by their own marks. Only an active row is ever applied: the pass
-- that sets RestoredAt clears it, in the same commit that moves the votes back.
-- A few rows per suspended user; a restored row deletes itself 30 days after its restore
-- (an inactive, unapplied row changes nothing; the suspension's audit row keeps its users).
CREATE TABLE UserSuspensions (
  UserHash     INT64 NOT NULL,
  UserId       STRING(128) NOT NULL,
  SuspensionId STRING(64) NOT NULL,
  Since        TIMESTAMP,
  RestoredAt   TIMESTAMP OPTIONS (allow_commit_timestamp = true),
  Applied      BOOL,
) PRIMARY KEY (UserHash, UserId, SuspensionId),
  ROW DELETION POLICY (OLDER_THAN(RestoredAt, INTERVAL 30 DAY));

-- When the suspensions last changed (issue 46, spanner_store/suspended_users.py): one row (key 0),
-- ChangedAt the commit timestamp of the last commit that wrote UserSuspensions rows, written in
-- that commit. The vote-state sink reads it (one key) in each transaction: while it equals the
-- time of the active suspensions the sink last loaded, those are every user's suspensions, and
-- the sink needs no read of each user's UserSuspensions rows; a commit changing them serialises
-- with the sink's transactions on this row. Written a few times per suspension or restore: never
-- a hotspot; read by every vote-state transaction, a shared lock.
CREATE TABLE UserSuspensionsChanged (
  Singleton INT64 NOT NULL,
  ChangedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (Singleton);

-- The audit trail of suspensions (issue 46): one row per request, `upvotes suspend-users`
-- (Request "suspend") and its `upvotes restore-users` (Request "restore"), keyed by the
-- operator's --id then the request, so a suspension's two rows sit together and a rerun of either
-- finds its own row and moves nothing twice. Who (Actor), why (Reason), when (RequestedAt: the
-- commit timestamp of the record, written before any count moves), which users (UserIds, on the
-- suspend row: at most 50,000, well within a cell's 10 MiB) and since when (Since, NULL: every
-- vote). Votes, the counter columns and Commits add up, in the same transaction as each move, the
-- stored votes the request moved out of the counts (suspend) or back in (restore), the counts
-- that moved (negative for a suspension) and the transactions that moved them: exact whatever
-- crashes and reruns. FinishedAt: when its last pass committed (NULL: in progress, or stopped:
-- run the same --id again). Keyed by an operator's ID: a handful of rows a day, never a hotspot.
-- Kept: it is the audit.
CREATE TABLE Suspensions (
  SuspensionId STRING(64) NOT NULL,
  Request      STRING(8) NOT NULL,
  Reason       STRING(1024) NOT NULL,
  Actor        STRING(256) NOT NULL,
  Since        TIMESTAMP,
  UserIds      ARRAY<STRING(128)>,
  RequestedAt  TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
  Votes        INT64 NOT NULL DEFAULT (0),
  Upvotes      INT64 NOT NULL DEFAULT (0),
  Downvotes    INT64 NOT NULL DEFAULT (0),
  Shares       INT64 NOT NULL DEFAULT (0),
  Views        INT64 NOT NULL DEFAULT (0),
  Commits      INT64 NOT NULL DEFAULT (0),
  FinishedAt   TIMESTAMP OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (SuspensionId, Request);

-- The trending rankings' settings, recorded once per database by `upvotes provision`
-- (spanner_store/ranking_settings.py): the hot score's half-life in hours, which every HotKey
-- was computed with (changing it is a recompute, docs/reading.md), the generation of the
-- backfill run that owns the keys, and whether that run has given every post its HotKey and
-- fenced it (1) so that a hot read can certify its answer. A handful of rows.
CREATE TABLE RankingSettings (
  Name       STRING(64) NOT NULL,
  Value      FLOAT64 NOT NULL,
  RecordedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (Name);

-- Corrected dead letters a replay wrote (issue 44, upvotes/operations/replayed_corrections.py): one row per
-- dead letter's identity (`upvotes dead-letters replay`: the rejected line's event_id, or
-- "@<message ID>/<line>"), holding the correction as it was counted (its canonical text, after
-- the event-time policy). Written in the same commit as the correction's delta row, or in the
-- read-write transaction that applies its vote state (which reads it first): a rerun finds it
-- whatever the correction now says, so a replay is keyed by the identity alone. The same
-- correction again is acknowledged and writes nothing; a different one (edited between a killed
-- run and its rerun: another hour, another value) is refused with both versions, never written
-- a second time nor skipped in silence.
-- The key: IdentityHash (a hash of Identity) leads, so replayed letters spread over the key space
-- instead of piling onto one split (message IDs and event IDs are often sequential).
-- Kept 31 days: a dead letter can be delivered, and so replayed, only while Pub/Sub keeps it: 7
-- days by default (the kept subscription `upvotes provision` creates), 31 at most (Pub/Sub's
-- longest subscription or topic retention, a seek included). So a row, committed after its letter
-- was published, outlives every delivery of the letter, and the delta row written with it (30 days).
CREATE TABLE ReplayedCorrections (
  IdentityHash INT64 NOT NULL,
  Identity     STRING(128) NOT NULL,
  Correction   STRING(MAX) NOT NULL,
  ReplayedAt   TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (IdentityHash, Identity),
  ROW DELETION POLICY (OLDER_THAN(ReplayedAt, INTERVAL 31 DAY));
