"""WriteDeltaRows: blind, insert-only, idempotent writes of PostDelta rows to Spanner.

Our own DoFn over google-cloud-spanner, because Beam's native spannerio is deprecated and
fails the whole pipeline on any write error, and the cross-language one needs Java.

- Blind writes: `insert` of delta rows stamped with the commit timestamp, plus a key-only
  `insert_or_update` of each parent Posts row (creates it when missing, touches no
  counter), all in one commit. No reads on the normal path.
- Idempotent: a delta's key is deterministic (post, hour, writer, window, pane). A retry
  after an unseen success fails with ALREADY_EXISTS; the sink then reads which of its keys
  exist and writes only the others. Such rows count as `rows_already_written`, not errors.
- Batched per bundle within a mutation budget far below Spanner's per-commit limit,
  counting index entries (the emulator does not enforce the limit; `plan_commits` is
  tested directly).
- Transient errors (ABORTED, UNAVAILABLE, DEADLINE_EXCEEDED) are retried with short
  jittered backoff; after the last attempt the error is raised so the runner retries the
  bundle (Dataflow does, indefinitely, and the keys make that safe). Rows that can never be
  written (any other error) go to the `failed` output with the reason.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterable, Iterator, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from google.api_core import exceptions
from google.cloud import spanner

from schemas import post_hash
from transforms.records import PostDelta
from upvotes.database import TRANSIENT_ERRORS, RetryPolicy, commit_mutations, open_database, run_with_retries

DELTA_TABLE = "PostDeltas"
PARENT_TABLE = "Posts"
DELTA_COLUMNS = ("PostHash", "PostId", "EventHour", "DeltaId", "Upvotes", "Shares", "Events", "CommittedAt")
DELTA_KEY = ("PostHash", "PostId", "EventHour", "DeltaId")
PARENT_KEY = ("PostHash", "PostId")

# Spanner counts a mutation per column written, plus one per column of each index entry
# it changes. PostDeltasByCommit holds the 4 key parts, CommittedAt and 3 stored columns;
# a new Posts row adds its 5 columns to the base table and PostsByUpvotes holds 5.
MUTATIONS_PER_DELTA = len(DELTA_COLUMNS) + 8
MUTATIONS_PER_PARENT = len(PARENT_KEY) + 5 + 5
SPANNER_MUTATION_LIMIT = 80_000
DEFAULT_MAX_MUTATIONS = 20_000  # a quarter of the limit: headroom for schema growth
DEFAULT_ROWS_PER_COMMIT = 1_000
# Long enough to ride out a brief outage or a burst of aborts from a concurrent fold, and
# bounded: after the last attempt the error is raised (see the module docstring).
SINK_RETRY = RetryPolicy(attempts=25, first_delay_s=0.005, max_delay_s=2.0)


class FailedDelta(NamedTuple):
    delta: PostDelta
    error: str


def mutations_for(deltas: list[PostDelta]) -> int:
    """Mutations one commit of these deltas costs, parent rows and index entries included."""
    parents = {d.post_id for d in deltas}
    return len(deltas) * MUTATIONS_PER_DELTA + len(parents) * MUTATIONS_PER_PARENT


def plan_commits(
    deltas: Iterable[PostDelta],
    max_rows: int = DEFAULT_ROWS_PER_COMMIT,
    max_mutations: int = DEFAULT_MAX_MUTATIONS,
) -> list[list[PostDelta]]:
    """Splits deltas into commits of at most `max_rows` rows and `max_mutations` mutations."""
    if MUTATIONS_PER_DELTA + MUTATIONS_PER_PARENT > max_mutations:
        raise ValueError(f"max_mutations {max_mutations} cannot fit even one delta")
    commits: list[list[PostDelta]] = []
    current: list[PostDelta] = []
    parents: set[str] = set()
    cost = 0
    for delta in deltas:
        extra = MUTATIONS_PER_DELTA + (0 if delta.post_id in parents else MUTATIONS_PER_PARENT)
        if current and (len(current) >= max_rows or cost + extra > max_mutations):
            commits.append(current)
            current, parents, cost = [], set(), 0
            extra = MUTATIONS_PER_DELTA + MUTATIONS_PER_PARENT
        current.append(delta)
        parents.add(delta.post_id)
        cost += extra
    if current:
        commits.append(current)
    return commits


def _hour(epoch_s: int) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc)


def delta_key(delta: PostDelta) -> tuple:
    return (post_hash(delta.post_id), delta.post_id, _hour(delta.event_hour), delta.delta_id)


def write_deltas(database, deltas: list[PostDelta]) -> None:
    """One commit: the delta rows (insert) and their parents' keys (insert_or_update)."""
    parents = sorted({(post_hash(d.post_id), d.post_id) for d in deltas})
    rows = [delta_key(d) + (d.upvotes, d.shares, d.events, spanner.COMMIT_TIMESTAMP) for d in deltas]

    def write(batch) -> None:
        batch.insert_or_update(PARENT_TABLE, columns=PARENT_KEY, values=parents)
        batch.insert(DELTA_TABLE, columns=DELTA_COLUMNS, values=rows)

    commit_mutations(database, write)


def existing_delta_keys(database, deltas: list[PostDelta]) -> set[tuple]:
    """The keys among these deltas' that are already in Spanner (strong read)."""
    keyset = spanner.KeySet(keys=[list(delta_key(d)) for d in deltas])
    with database.snapshot() as snapshot:
        rows = snapshot.read(DELTA_TABLE, columns=DELTA_KEY, keyset=keyset)
        return {(r[0], r[1], r[2], r[3]) for r in rows}


class WriteDeltasFn(beam.DoFn):
    """Buffers a bundle's PostDeltas and commits them in planned batches."""

    FAILED = "failed"

    def __init__(
        self,
        project: str,
        instance: str,
        database: str,
        rows_per_commit: int = DEFAULT_ROWS_PER_COMMIT,
        max_mutations: int = DEFAULT_MAX_MUTATIONS,
        retry: RetryPolicy = SINK_RETRY,
    ) -> None:
        self._where = (project, instance, database)
        self._rows_per_commit = rows_per_commit
        self._max_mutations = max_mutations
        self._retry = retry
        self._rows_written = Metrics.counter("WriteDeltaRows", "rows_written")
        self._rows_already = Metrics.counter("WriteDeltaRows", "rows_already_written")
        self._commits = Metrics.counter("WriteDeltaRows", "commits")
        self._retries = Metrics.counter("WriteDeltaRows", "transient_retries")
        self._failed = Metrics.counter("WriteDeltaRows", "rows_dead_lettered")
        self._buffer: list[PostDelta] = []

    def setup(self) -> None:
        self._database = open_database(*self._where)

    def start_bundle(self) -> None:
        self._buffer = []

    def process(self, delta: PostDelta) -> Iterator:
        self._buffer.append(delta)
        if len(self._buffer) >= self._rows_per_commit:
            yield from self._flush()

    def finish_bundle(self) -> Iterator:
        for failed in self._flush():
            yield beam.pvalue.TaggedOutput(failed.tag, GlobalWindows.windowed_value(failed.value))

    def _flush(self) -> Iterator[beam.pvalue.TaggedOutput]:
        pending, self._buffer = self._buffer, []
        for batch in plan_commits(pending, self._rows_per_commit, self._max_mutations):
            try:
                run_with_retries(lambda b=batch: self._commit_once(b), self._retry, lambda _: self._retries.inc())
            except TRANSIENT_ERRORS:
                raise  # the runner retries the bundle; deterministic keys make that safe
            except exceptions.GoogleAPICallError as error:
                self._failed.inc(len(batch))
                for delta in batch:
                    yield beam.pvalue.TaggedOutput(self.FAILED, FailedDelta(delta, f"spanner_write_failed: {error}"[:1000]))

    def _commit_once(self, batch: list[PostDelta]) -> None:
        try:
            write_deltas(self._database, batch)
            self._rows_written.inc(len(batch))
        except exceptions.AlreadyExists:
            # A retry after an unseen success, or a replayed bundle: keep only the new rows.
            existing = existing_delta_keys(self._database, batch)
            new = [d for d in batch if delta_key(d) not in existing]
            self._rows_already.inc(len(batch) - len(new))
            if new:
                write_deltas(self._database, new)
                self._rows_written.inc(len(new))
        self._commits.inc()


class WriteDeltaRows(beam.PTransform):
    """PostDelta -> FailedDelta (rows that can never be written; everything else is in Spanner).

    Metrics: WriteDeltaRows/rows_written, rows_already_written, commits,
    transient_retries, rows_dead_lettered.
    """

    def __init__(self, project: str, instance: str, database: str, rows_per_commit: int = DEFAULT_ROWS_PER_COMMIT) -> None:
        super().__init__()
        self._fn = WriteDeltasFn(project, instance, database, rows_per_commit)

    def expand(self, deltas: beam.PCollection) -> beam.PCollection:
        results = deltas | "Commit" >> beam.ParDo(self._fn).with_outputs(WriteDeltasFn.FAILED, main="written")
        return results[WriteDeltasFn.FAILED]
