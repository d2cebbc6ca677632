"""ApplyVoteStates: each pane's latest vote states applied to Spanner with the counts they move,
one read-write transaction per batch (spanner_writes/votes.py says why that is exact at every crash
point, and why no hot row is read or locked).

A bundle's states are merged to the latest per (post, user) (two panes of one key in one bundle
apply as their later one, which moves the counts as both would), then cut into batches in Votes key
order within the mutation budget. Failures are handled by the buffered sinks' one skeleton
(transforms/buffered_sink.py), as for the delta sink: a transient error is retried, each attempt
re-reading the stored states, then raised for the runner to retry the bundle, which applies
nothing twice; a database without the Votes table yet is waited for (`upvotes provision`); any
other error sends the batch's states to the `failed` output (FailedVoteStates), for the dead
letters, to be replayed through the same path.
"""

from __future__ import annotations

from apache_beam.metrics import Metrics
from google.cloud.spanner_v1.database import Database

from schemas.records import FailedVoteStates, PostUser
from schemas.vote_states import LatestVote, keep_latest
from spanner_store.database import RetryPolicy, open_database
from spanner_store.suspended_users import SuspendedUsers
from spanner_writes.known_posts import KnownPosts
from spanner_writes.sinks import VOTE_STATES
from spanner_writes.votes import VoteChanges, apply_vote_states, plan_batches
from transforms.buffered_sink import SINK_RETRY, BufferedSink, BufferedSinkFn
from transforms.parse_and_sum import ShardVotes
from transforms.per_process import PerProcess

States = dict[PostUser, LatestVote]


def _add_pane(pending: States, keyed: tuple[int, ShardVotes]) -> None:
    _, states = keyed
    for key, state in states.items():
        keep_latest(pending, key, state)


def _dead_letters(batch: States, error: str) -> list[FailedVoteStates]:
    return [FailedVoteStates(tuple(batch.items()), error)]


def _events(batch: States) -> int:
    return sum(state.events for state in batch.values())


class ApplyVoteStatesFn(BufferedSinkFn[tuple[int, ShardVotes], States, States, FailedVoteStates, VoteChanges]):
    """Merges a bundle's (shard, ShardVotes) panes and applies them in planned batches (plan_batches)."""

    def __init__(
        self, project: str, instance: str, database: str, rows_per_commit: int, retry: RetryPolicy = SINK_RETRY
    ) -> None:
        super().__init__(
            sink=VOTE_STATES,
            writer="vote-state sink",
            rows_per_commit=rows_per_commit,
            retry=retry,
            empty=dict,
            add=_add_pane,
            plan=plan_batches,
            apply=self._apply_once,
            fail=_dead_letters,
            events=_events,
        )
        self._where = (project, instance, database)
        self._applied = Metrics.counter(VOTE_STATES.step, "states_applied")
        self._superseded = Metrics.counter(VOTE_STATES.step, "states_superseded")
        self._delta_rows = Metrics.counter(VOTE_STATES.step, VOTE_STATES.metrics.delta_rows_written)
        self._per_process: PerProcess[tuple[Database, KnownPosts, SuspendedUsers]] = PerProcess()

    def setup(self) -> None:
        # One client per process, and the posts this process's transactions made sure have a Posts
        # row: their keys are not upserted again, so no transaction writes (and locks) a hot post's
        # row (spanner_writes/votes.py); and every user's active suspensions, read once per change
        # (spanner_store/suspended_users.py). Kept across bundles (transforms/per_process.py).
        self._database, self._known_posts, self._suspended = self._per_process.get(self._open)

    def _open(self) -> tuple[Database, KnownPosts, SuspendedUsers]:
        database = open_database(*self._where)
        return database, KnownPosts(), SuspendedUsers(database)

    def _apply_once(self, batch: States) -> VoteChanges:
        changes = apply_vote_states(self._database, batch, known=self._known_posts, suspended=self._suspended)
        self._applied.inc(changes.applied)
        self._superseded.inc(changes.superseded)
        self._delta_rows.inc(len(changes.deltas))
        return changes


class ApplyVoteStates(BufferedSink):
    """(shard, ShardVotes) panes (WindowAndMergeVoteStates) -> FailedVoteStates (batches that can never
    be applied; everything else is in Spanner).

    Metrics (named in its declaration, spanner_writes.sinks.VOTE_STATES, but for states_applied and
    states_superseded): ApplyVoteStates/states_applied (later than the stored state: written),
    states_superseded (no later: nothing written), delta_rows_written, commits, transient_retries,
    schema_waits, events_written (the events those states stand for, applied or superseded: all
    settled in Spanner), states_dead_lettered and events_dead_lettered.
    """

    def __init__(self, project: str, instance: str, database: str, rows_per_commit: int) -> None:
        super().__init__("Apply", ApplyVoteStatesFn(project, instance, database, rows_per_commit), main="applied")
