"""ApplyVoteStates: each pane's latest vote states applied to Spanner with the counts they move,
one read-write transaction per batch (spanner_store/votes.py says why that is exact at every crash
point, and why no hot row is read or locked).

A bundle's states are merged to the latest per (post, user) (two panes of one key in one bundle
apply as their later one, which moves the counts as both would), then cut into batches in Votes key
order within the mutation budget. Failures are handled as the delta sink handles its own
(transforms/spanner_sink.py):

- transient errors (`is_transient`) are retried with jittered backoff, re-reading the stored
  states each time; after the last attempt or the deadline the error is raised so the runner
  retries the bundle, which applies nothing twice;
- a database whose schema is behind this code (no Votes table yet) makes the sink wait for
  `upvotes provision`, as the delta sink does;
- any other error sends the batch's states to the `failed` output (FailedVoteStates), for the dead
  letters, to be replayed through the same path.
"""
from __future__ import annotations

from typing import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from google.api_core import exceptions

from schemas.records import FailedVoteStates, PostUser
from schemas.vote_states import LatestVote, keep_latest
from spanner_store.database import RetryPolicy, is_transient, open_database, run_with_retries, wait_for_schema
from spanner_store.votes import KnownPosts, VoteChanges, apply_vote_states, plan_batches
from transforms.spanner_sink import SINK_RETRY


class ApplyVoteStatesFn(beam.DoFn):
    """Merges a bundle's (shard, ShardVotes) panes and applies them in planned batches."""

    FAILED = "failed"

    def __init__(self, project: str, instance: str, database: str, rows_per_commit: int,
                 retry: RetryPolicy = SINK_RETRY) -> None:
        self._where = (project, instance, database)
        self._rows_per_commit = rows_per_commit
        self._retry = retry
        self._applied = Metrics.counter("ApplyVoteStates", "states_applied")
        self._superseded = Metrics.counter("ApplyVoteStates", "states_superseded")
        self._delta_rows = Metrics.counter("ApplyVoteStates", "delta_rows_written")
        self._commits = Metrics.counter("ApplyVoteStates", "commits")
        self._retries = Metrics.counter("ApplyVoteStates", "transient_retries")
        self._schema_waits = Metrics.counter("ApplyVoteStates", "schema_waits")
        self._events_written = Metrics.counter("ApplyVoteStates", "events_written")
        self._failed = Metrics.counter("ApplyVoteStates", "states_dead_lettered")
        self._events_failed = Metrics.counter("ApplyVoteStates", "events_dead_lettered")
        self._pending: dict[PostUser, LatestVote] = {}

    def setup(self) -> None:
        self._database = open_database(*self._where)
        # The posts this worker's transactions made sure have a Posts row: their keys are not
        # upserted again, so no transaction writes (and locks) a hot post's row (spanner_store/votes.py).
        self._known_posts = KnownPosts()

    def start_bundle(self) -> None:
        self._pending = {}

    def process(self, keyed) -> Iterator:
        _, states = keyed
        for key, state in states.items():
            keep_latest(self._pending, key, state)
        if len(self._pending) >= self._rows_per_commit:
            yield from self._flush()

    def finish_bundle(self) -> Iterator:
        for failed in self._flush():
            yield beam.pvalue.TaggedOutput(failed.tag, GlobalWindows.windowed_value(failed.value))

    def _flush(self) -> Iterator[beam.pvalue.TaggedOutput]:
        pending, self._pending = self._pending, {}
        for batch in plan_batches(pending, self._rows_per_commit):
            try:
                changes = run_with_retries(lambda b=batch: self._apply_once(b), self._retry,
                                           lambda _: self._retries.inc())
            except exceptions.GoogleAPICallError as error:
                if is_transient(error):
                    raise  # the runner retries the bundle; a batch applied twice applies once
                self._failed.inc(len(batch))
                self._events_failed.inc(sum(state.events for state in batch.values()))
                yield beam.pvalue.TaggedOutput(self.FAILED, FailedVoteStates(
                    tuple(batch.items()), f"spanner_apply_failed: {error}"[:1000]))
                continue
            self._applied.inc(changes.applied)
            self._superseded.inc(changes.superseded)
            self._delta_rows.inc(len(changes.deltas))
            self._events_written.inc(changes.events)
            self._commits.inc()

    def _apply_once(self, batch: dict[PostUser, LatestVote]) -> VoteChanges:
        return wait_for_schema(lambda: apply_vote_states(self._database, batch, known=self._known_posts),
                               "vote-state sink", self._schema_waits.inc)


class ApplyVoteStates(beam.PTransform):
    """(shard, ShardVotes) panes (WindowAndMergeVoteStates) -> FailedVoteStates (batches that can never
    be applied; everything else is in Spanner).

    Metrics: ApplyVoteStates/states_applied (later than the stored state: written),
    states_superseded (no later: nothing written), delta_rows_written, commits, transient_retries,
    schema_waits, events_written (the events those states stand for, applied or superseded: all
    settled in Spanner), states_dead_lettered and events_dead_lettered.
    """

    def __init__(self, project: str, instance: str, database: str, rows_per_commit: int) -> None:
        super().__init__()
        self._fn = ApplyVoteStatesFn(project, instance, database, rows_per_commit)

    def expand(self, panes: beam.PCollection) -> beam.PCollection:
        results = panes | "Apply" >> beam.ParDo(self._fn).with_outputs(ApplyVoteStatesFn.FAILED, main="applied")
        return results[ApplyVoteStatesFn.FAILED]
