"""`upvotes provision` migrating a database of the previous schema (tests/fixtures/
posts_before_issue_22.sql: no change log, no fold cursor) while the streaming pipeline of this
version writes to it: no vote lost or counted twice, the first fold scans every post, the later
ones follow the change log, and a second provision changes nothing. And a database of issue 34's
schema, whose forget-time columns provision makes commit-timestamp columns; and one of issue 44's,
to which provision adds the suspensions of issue 46."""

from __future__ import annotations

import re
import signal
from datetime import datetime, timezone
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1, spanner

import schemas
import spanner_store.database
from schemas import statements_of
from schemas.counters import Counts
from schemas.ddl import table_columns
from schemas.records import PostDelta, PostUser
from schemas.vote_states import UP, LatestVote
from spanner_reads.reads import exact_counts
from spanner_store.database import commit_mutations, open_database, run_with_retries, schema_behind
from spanner_store.tables import (
    COUNTER_COLUMNS,
    DELTAS,
    POST_KEY_COLUMNS,
    POSTS,
    VOTE_COLUMNS,
    counts_at,
    delta_key,
    hour_timestamp,
    micros_timestamp,
    post_key,
    vote_key,
)
from spanner_writes.deltas import add_delta_writes
from spanner_writes.votes import apply_vote_states
from tests.support.fold_runs import run_fold
from tests.support.polling import wait_until
from tests.support.resources import new_resources
from tests.support.streams import SETTLE_TIMEOUT_S, WINDOW_S, ledger_of, publish_events
from upvotes.devtools import local_stream
from upvotes.devtools.verification import verify_totals
from upvotes.devtools.workload import VoteStateWorkload, Workload, generate_events, generate_vote_states
from upvotes.operations.dead_letters import pull_dead_letters, release
from upvotes.operations.forget_user import forget_user
from upvotes.operations.provision import (
    missing_columns,
    missing_constraints,
    missing_defaults,
    provision_pubsub,
    provision_spanner,
)
from upvotes.operations.suspensions import restore_users, suspend_users

BEFORE = Path(__file__).parent / "fixtures" / "posts_before_issue_22.sql"
HOUR = 1_795_312_800


def statements(path: Path) -> list[str]:
    """A DDL file's statements, as schemas.ddl_statements reads posts.sql."""
    return statements_of(path.read_text(encoding="utf-8"))


# The PostDeltas columns of that schema (tests/fixtures/posts_before_issue_22.sql), as its writers wrote them.
BEFORE_DELTA_COLUMNS = (
    "PostHash",
    "PostId",
    "EventHour",
    "DeltaId",
    "Upvotes",
    "Shares",
    "Events",
    "Voters",
    "CommittedAt",
)


def folded(database, post_ids) -> dict[str, dict[str, int]]:
    keyset = spanner.KeySet(keys=[list(post_key(p)) for p in post_ids])
    with database.snapshot() as snapshot:
        return {
            row[0]: counts_at(row, 1)._asdict()
            for row in snapshot.read(POSTS, columns=("PostId",) + COUNTER_COLUMNS, keyset=keyset)
        }


def test_a_nullable_column_is_added_without_its_default_and_a_check_constraint_by_name() -> None:
    """What `upvotes provision` adds to an existing table, from the DDL alone: a NOT NULL column
    with its DEFAULT (the existing rows need a value), a nullable one without it (its NULL tells the
    existing rows apart; the default is set afterwards, for the rows written from then on), and
    each missing CHECK constraint. Spanner gives its DDL back in its own spelling (`CHECK(`,
    `PRIMARY KEY(`): the same table then misses nothing."""
    wanted = [
        "CREATE TABLE T ( K INT64 NOT NULL, N INT64 NOT NULL DEFAULT (0), "
        'B TIMESTAMP DEFAULT (TIMESTAMP "1970-01-01T00:00:00Z"), '
        "CONSTRAINT BAfterN CHECK (B IS NULL OR N >= 0), ) PRIMARY KEY (K)"
    ]
    existing = ["CREATE TABLE T (\n  K INT64 NOT NULL,\n) PRIMARY KEY(K)"]
    assert missing_columns(existing, wanted) == [("T", "N INT64 NOT NULL DEFAULT (0)"), ("T", "B TIMESTAMP")]
    assert missing_defaults(existing, wanted) == [("T", "B", '(TIMESTAMP "1970-01-01T00:00:00Z")')]
    assert missing_constraints(existing, wanted) == [("T", "CONSTRAINT BAfterN CHECK (B IS NULL OR N >= 0)")]
    half_done = [
        "CREATE TABLE T (\n  K INT64 NOT NULL,\n  N INT64 NOT NULL DEFAULT (0),\n  B TIMESTAMP,\n"
        "  CONSTRAINT BAfterN CHECK(B IS NULL OR N >= 0),\n) PRIMARY KEY(K)"
    ]
    assert (missing_columns(half_done, wanted), missing_constraints(half_done, wanted)) == ([], [])
    assert missing_defaults(half_done, wanted) == [("T", "B", '(TIMESTAMP "1970-01-01T00:00:00Z")')]
    migrated = [half_done[0].replace("B TIMESTAMP,", 'B TIMESTAMP DEFAULT (TIMESTAMP "1970-01-01T00:00:00Z"),')]
    assert (
        missing_columns(migrated, wanted),
        missing_defaults(migrated, wanted),
        missing_constraints(migrated, wanted),
    ) == ([], [], [])


def test_provision_migrates_under_a_running_stream_and_every_vote_counts_once(stack, emulator_env, tmp_path) -> None:
    """`stack` only creates the instance; this test makes its own database of the previous schema."""
    res = new_resources("mig")
    provision_pubsub(res, lambda _: None)
    client = spanner.Client(project=res.project)
    client.instance(res.instance).database(res.database, ddl_statements=statements(BEFORE)).create().result(300)
    database = open_database(res.project, res.instance, res.database)
    # What the previous version left: deltas without a change-log row, and a fold run without a cursor.
    old = {f"old-{i}": Counts(upvotes=3, shares=1)._asdict() for i in range(5)}

    def write_old(batch) -> None:
        batch.insert(POSTS, columns=POST_KEY_COLUMNS, values=[post_key(p) for p in old])
        batch.insert(
            DELTAS,
            columns=BEFORE_DELTA_COLUMNS,
            values=[
                delta_key(PostDelta.of(p, HOUR, "old-writer:0:0", upvotes=3, shares=1, events=4))
                + (3, 1, 4, None, spanner.COMMIT_TIMESTAMP)
                for p in old
            ],
        )
        batch.insert(
            "FoldRuns",
            columns=("FoldId", "SnapshotAt", "PostsFolded", "DeltasFolded", "FinishedAt"),
            values=[("before", datetime(2026, 11, 1, tzinfo=timezone.utc), 0, 0, spanner.COMMIT_TIMESTAMP)],
        )

    commit_mutations(database, write_old)

    # Every third event a vote-state event: their sink waits for the new Votes table as the delta sink
    # waits for DeltaCommits.
    deltas = generate_events(Workload(events=600, posts=30, seed=22))
    states = generate_vote_states(VoteStateWorkload(events=300, posts=5, voters=100, seed=22))
    events = [event for pair in zip(deltas, deltas, states) for event in pair]
    log = tmp_path / "stream.log"
    stream = local_stream.start(res, WINDOW_S, log, emulator_env)
    try:
        publish_events(res, events[:300])
        # The new sink finds no DeltaCommits table: it waits and retries instead of failing or
        # dead-lettering (transforms/spanner_sink.py). Migrate while it does.
        wait_until(
            lambda: "run `upvotes provision`" in log.read_text(errors="replace"),
            SETTLE_TIMEOUT_S,
            "the sink to wait for the migration",
            stream,
            log,
        )
        logged: list[str] = []
        provision_spanner(res, False, "unused", logged.append)
        assert {
            "created TABLE DeltaCommits",
            "created TABLE FoldRunSkippedPosts",
            "created TABLE Votes",
            "added   column FoldRuns.ChangesThrough TIMESTAMP",
            "added   column Adjustments.UserId STRING(128)",
            "set     options Adjustments.AsOf (allow_commit_timestamp = true)",
            "added   column Adjustments.SplitRows INT64",
        } <= set(logged)
        # Every counter declared since (schemas/counters.py) is added where counts are kept.
        before = dict(filter(None, map(table_columns, statements(BEFORE))))
        newer = [column for column in COUNTER_COLUMNS if column not in before["Posts"]]
        for table in ("Posts", "PostDeltas", "PostHourlyCounts", "Adjustments", "TopPostsViewRows"):
            assert {f"added   column {table}.{column} INT64 NOT NULL DEFAULT (0)" for column in newer} <= set(logged)
        assert {f"added   stored column PostDeltasByCommit.{column}" for column in newer} <= set(logged)
        # What an index no longer stores is dropped (each entry written cost a mutation per column).
        assert {
            f"dropped stored column PostsByUpvotes.{column} (no longer read from the index)"
            for column in ("Shares", "FoldedThrough")
        } <= set(logged)
        publish_events(res, events[300:600])
        first = {**ledger_of(events[:600]).totals, **old}
        wait_until(lambda: verify_totals(database, first) == [], SETTLE_TIMEOUT_S, "600 votes counted", stream, log)

        # No cursor yet (the old run has none): the first fold scans every post, old deltas included.
        outcome = run_fold(res)
        assert outcome.full_scans == 1
        assert folded(database, first) == first and verify_totals(database, first) == []

        publish_events(res, events[600:])
        everything = {**ledger_of(events).totals, **old}
        wait_until(
            lambda: verify_totals(database, everything) == [], SETTLE_TIMEOUT_S, "900 votes counted", stream, log
        )
    finally:
        local_stream.stop(stream, signal.SIGTERM)
    # From then on the fold follows the change log, and still folds everything exactly once.
    outcome = run_fold(res)
    assert outcome.full_scans == 0 and outcome.deltas_folded > 0
    assert folded(database, everything) == everything and verify_totals(database, everything) == []
    assert run_fold(res).deltas_folded == 0

    subscriber = pubsub_v1.SubscriberClient()
    try:
        held, _ = pull_dead_letters(subscriber, res.subscription_path(res.dead_letter_subscription_id), 10)
        release(subscriber, res.subscription_path(res.dead_letter_subscription_id), held)
    finally:
        subscriber.close()
    assert held == []  # the wait dead-lettered nothing
    again: list[str] = []
    provision_spanner(res, False, "unused", again.append)
    assert not [line for line in again if line.startswith(("added", "created", "dropped"))]


def test_provision_makes_the_forget_time_columns_take_the_commit_timestamp(stack) -> None:
    """A database of issue 34's schema, where UserErasures.ForgottenThrough and Adjustments.AsOf do
    not allow the commit timestamp: this version's `upvotes forget-user` cannot record a request
    there (its forget time is that commit's timestamp). `upvotes provision` sets the option on both
    columns of the existing tables; then it can, and a second provision changes nothing."""
    res = new_resources("options")
    before_issue_44 = [
        re.sub(
            r"(ForgottenThrough\s+TIMESTAMP NOT NULL|AsOf\s+TIMESTAMP) OPTIONS \(allow_commit_timestamp = true\)",
            r"\1",
            statement,
        )
        for statement in schemas.ddl_statements()
    ]
    client = spanner.Client(project=res.project)
    client.instance(res.instance).database(res.database, ddl_statements=before_issue_44).create().result(300)
    database = open_database(res.project, res.instance, res.database)
    with pytest.raises(exceptions.GoogleAPICallError, match="commit timestamp|allow_commit_timestamp"):
        forget_user(database, "req-before", "gone", "erasure", "dpo")

    logged: list[str] = []
    provision_spanner(res, False, "unused", logged.append)
    assert {
        "set     options UserErasures.ForgottenThrough (allow_commit_timestamp = true)",
        "set     options Adjustments.AsOf (allow_commit_timestamp = true)",
    } <= set(logged)
    request = forget_user(database, "req-after", "gone", "erasure", "dpo").request
    assert request.as_of == request.created_at
    again: list[str] = []
    provision_spanner(res, False, "unused", again.append)
    assert not [line for line in again if line.startswith(("added", "created", "dropped", "set"))]


def before_issue_46() -> list[str]:
    """posts.sql without what issue 46 added: Votes.HeldOut, DeltaCommits.UserIds, UserSuspensions,
    UserSuspensionsChanged, Suspensions."""
    kept = [
        statement
        for statement in schemas.ddl_statements()
        if not re.match(r"CREATE TABLE (UserSuspensions|UserSuspensionsChanged|Suspensions) ", statement)
    ]
    return [re.sub(r" (HeldOut BOOL|UserIds ARRAY<STRING\(128\)>),", "", statement) for statement in kept]


def test_provision_adds_the_suspensions_to_a_database_with_votes_and_the_sink_waits_for_it(stack) -> None:
    """A database of issue 44's schema holding votes: this version's vote-state sink reads the HeldOut
    mark, so it waits for the migration (a schema behind, as for any new table or column: the
    stream retries); `upvotes provision` adds the column, the change log's UserIds and both
    suspension tables; the stored votes (HeldOut NULL: counted) are then suspended and restored
    exactly, and a second provision changes nothing."""
    res = new_resources("susp-mig")
    client = spanner.Client(project=res.project)
    client.instance(res.instance).database(res.database, ddl_statements=before_issue_46()).create().result(300)
    database = open_database(res.project, res.instance, res.database)
    old_states = {
        PostUser("mig-1", user): LatestVote(UP, HOUR * 1_000_000, "e", HOUR, 1, True) for user in ("ring-m", "honest-m")
    }
    with pytest.raises(exceptions.NotFound) as waited:
        apply_vote_states(database, old_states)
    assert schema_behind(waited.value)  # the sink waits for `upvotes provision` (transforms/buffered_sink.py)

    # What the previous version wrote: the Votes rows, and the delta row they moved with its log rows.
    def write_as_before(batch) -> None:
        batch.insert(
            "Votes",
            columns=VOTE_COLUMNS,
            values=[
                vote_key(key.post_id, key.user_id)
                + (UP, micros_timestamp(HOUR * 1_000_000), "e", hour_timestamp(HOUR), spanner.COMMIT_TIMESTAMP)
                for key in old_states
            ],
        )
        add_delta_writes(batch, [PostDelta.of("mig-1", HOUR, "@vote/old", upvotes=2, events=2)])

    run_with_retries(lambda: commit_mutations(database, write_as_before))

    logged: list[str] = []
    provision_spanner(res, False, "unused", logged.append)
    assert {
        "added   column Votes.HeldOut BOOL",
        "added   column DeltaCommits.UserIds ARRAY<STRING(128)>",
        "created TABLE UserSuspensions",
        "created TABLE UserSuspensionsChanged",
        "created TABLE Suspensions",
    } <= set(logged)
    assert suspend_users(database, "ring-m", ["ring-m"], "ring", "t&s").votes == 1
    assert [t.counts for t in exact_counts(database, ["mig-1"])] == [Counts(upvotes=1)]
    assert restore_users(database, "ring-m", "cleared", "t&s").votes == 1
    assert [t.counts for t in exact_counts(database, ["mig-1"])] == [Counts(upvotes=2)]
    again: list[str] = []
    provision_spanner(res, False, "unused", again.append)
    assert not [line for line in again if line.startswith(("added", "created", "dropped", "set"))]


def test_a_sink_that_waited_its_whole_patience_dead_letters_its_rows_naming_the_fix(stack, monkeypatch) -> None:
    """The other side of the wait: a database never migrated. After SCHEMA_WAIT_S (an hour; here
    none) the rows go to the dead-letter output with what is missing in the reason, to be
    replayed once `upvotes provision` has run; nothing is half-written."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that

    from transforms import spanner_sink

    res = new_resources("unmigrated")
    client = spanner.Client(project=res.project)
    client.instance(res.instance).database(res.database, ddl_statements=statements(BEFORE)).create().result(300)
    monkeypatch.setattr(spanner_store.database, "SCHEMA_WAIT_S", 0.0)
    rows = [PostDelta.of(f"unmigrated-{i}", HOUR, f"u:{i}:0", upvotes=1, events=1) for i in range(3)]

    def failed_for_the_missing_table(failed) -> None:
        assert sorted(f.delta.post_id for f in failed) == [d.post_id for d in rows]
        # The first thing missing (a column of a newer counter, or the DeltaCommits table) is named.
        assert all(
            ("DeltaCommits" in f.error or "Column not found" in f.error) and f.error.startswith("spanner_write_failed")
            for f in failed
        )

    with TestPipeline() as pipeline:
        failed = (
            pipeline
            | beam.Create(rows)
            | spanner_sink.WriteDeltaRows(res.project, res.instance, res.database, rows_per_commit=10)
        )
        assert_that(failed, failed_for_the_missing_table)
    database = open_database(res.project, res.instance, res.database)
    with database.snapshot() as snapshot:
        assert list(snapshot.execute_sql("SELECT COUNT(*) FROM PostDeltas")) == [[0]]
