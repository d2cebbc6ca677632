"""The Votes table: each user's latest vote state per post, and the counts those states move.

Applying (`apply_vote_states`: the one path of the vote-state sink, `upvotes forget-user` and
dead-letter replays): incoming states are cut, in Votes key order, into batches within the
mutation budget (`plan_batches`, by spanner_store/commit_budget.py), and each batch is ONE
read-write transaction that

1. reads the stored state of each of its (post, user) keys;
2. keeps the incoming states later than the stored ones (`plan_vote_changes`, pure: the rules
   are schemas/vote_states.py);
3. writes those states, and, in the same commit, the delta rows their changes add up to (one per
   post and event hour, DeltaId "@vote/<commit id>") with the commit's DeltaCommits and
   TopCandidates rows (spanner_writes.deltas.add_delta_writes), so the fold, the exact reads and
   the fresh top treat them as any delta. The DeltaCommits row lists the batch's users
   (`upvotes suspects` follows them).

A change moves what the stored state contributes and what the new one does: a state is held out of
the counts (issue 46) when an active suspension of its user covers it, known in the same
transaction: the sink's held suspensions while current (spanner_store/suspended_users.py), or the
user's rows read beside the user's erasures (spanner_store/vote_rows.py `holds_of`); the row's
HeldOut mark says so, written only when it changes, and a stored state also counts nothing while
an applied hold of its user covers it (upvotes/operations/suspension_passes.py moves stored votes
in and out).

Why this is exact at every crash point (tests/test_vote_state_sink.py injects each):

- before the commit (a crash, a kill, an abort, an error): nothing of the batch is visible; the
  batch is applied again from its source (Pub/Sub redelivery, a bundle retry, a replay);
- after the commit but before the caller learns of it (an ambiguous commit: DEADLINE_EXCEEDED,
  UNAVAILABLE, a lost reply), or a batch applied again after a success: the retry reads the
  states the first attempt wrote, finds nothing later, and writes nothing;
- two writers with the same user's states at once (two bundles, two workers, a forget-user
  beside the stream): Spanner serialises the two transactions on the Votes rows both read, so
  the second reads what the first wrote; the emulator aborts one, and it is retried.

So the delta rows need no deterministic key: the stored state, read in the transaction that
moves it, is what makes a state count once. No hot row is read or written: the Votes rows of a
batch are one per user (a viral post's voters are spread over the key space, see posts.sql),
and the delta rows are inserts, one per post and hour per batch. Their parent Posts rows must
exist, and upserting a hot post's key in every transaction would lock that row in every one of
them: `KnownPosts` (spanner_writes/known_posts.py) remembers the posts whose row a committed transaction of this process made
sure of, and their keys are not written again (Posts rows are never deleted; if an operator
deletes one, the insert fails NOT_FOUND and the transaction runs again upserting every parent).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple

from google.api_core import exceptions
from google.cloud import spanner

from schemas.counters import Counts
from schemas.delta_ids import vote_delta_id
from schemas.records import CounterSums, PostDelta, PostUser
from schemas.vote_states import NONE, Hold, LatestVote, contributed, covered, erased, held
from schemas.voter_sketch import sketch_of
from spanner_store import mutations
from spanner_store.commit_budget import CommitCost, Shared, cut_within_budget
from spanner_store.database import DEFAULT_RETRY, MUTATION_BUDGET, RetryPolicy, run_transaction, run_with_retries
from spanner_store.delta_commits import new_commit_id
from spanner_store.mutation_cost import insert_cost
from spanner_store.suspended_users import SuspendedUsers
from spanner_store.tables import VOTE_COLUMNS, VOTE_HELD_COLUMNS, VOTES, hour_timestamp, micros_timestamp, vote_key
from spanner_store.vote_rows import StoredVote, erasures_of, holds_of, stored_votes
from spanner_writes.deltas import (
    DELTA_COMMIT_COST,
    MUTATIONS_PER_COMMIT,
    MUTATIONS_PER_DELTA,
    MUTATIONS_PER_PARENT,
    add_delta_writes,
)
from spanner_writes.known_posts import KnownPosts, lost_a_known_parent

# A vote state's row: every column of Votes (no index on it).
MUTATIONS_PER_VOTE = insert_cost(VOTES, VOTE_COLUMNS)
# One written with its HeldOut mark (held out by a suspension, or no longer): one more column.
MUTATIONS_PER_MARKED_VOTE = insert_cost(VOTES, VOTE_HELD_COLUMNS)


class VoteChanges(NamedTuple):
    """What one batch of incoming states does, given the stored states (plan_vote_changes)."""

    rows: list[tuple]  # Votes rows to write (VOTE_COLUMNS): the states later than the stored ones
    deltas: list[PostDelta]  # the counts their changes move, one row per post and event hour
    applied: int  # states later than the stored ones
    superseded: int  # states no later than the stored ones: their events change nothing
    events: int  # the events the batch stands for, applied or not
    # Votes rows written with their HeldOut mark (VOTE_HELD_COLUMNS): a state a suspension holds out
    # (TRUE), or one replacing a held state (NULL again). Every other row leaves the mark alone.
    marked_rows: list[tuple]


def plan_vote_changes(
    stored: Mapping[PostUser, StoredVote],
    incoming: Mapping[PostUser, LatestVote],
    delta_id: str,
    holds: Mapping[str, Iterable[Hold]] | None = None,
) -> VoteChanges:
    """The writes of one batch: each incoming state later than the stored one (or the first for
    its key) is written, and moves the counts: what the stored state contributes out of the stored
    state's event hour, what the new one contributes into the new state's. A state contributes its
    vote (`counted`), or nothing when held out of the counts (issue 46): the stored state's HeldOut
    mark, or an applied hold of its user, says whether it is (StoredVote.contribution), and the
    user's active suspensions (`holds`, by user) whether the new one is (schemas/vote_states.py
    `held`): a vote cast while its user is suspended is stored marked, and counts nothing until a
    restore moves it in.

    Unique voters (schemas/voter_sketch.py) are the users with any up or down event on the post: a
    user is added when a state standing for such an event is applied, or when it loses to a stored
    "none" (an older vote arriving after its retraction, which may never have been applied); never
    for a forgotten user's state at or before the forget time (`erased` made it stand for no vote),
    nor for a state held out by a suspension (a restore adds its user back). Pure."""
    holds = holds or {}
    rows: list[tuple] = []
    marked: list[tuple] = []
    counts: dict[tuple[str, int], Counts] = {}
    events: dict[tuple[str, int], int] = {}
    voters: dict[tuple[str, int], set[str]] = {}
    applied = superseded = 0
    for key, new in incoming.items():
        old = stored.get(key)
        hour = (key.post_id, new.event_hour)
        new_held = key.user_id in holds and held(new.vote, new.at_us, holds[key.user_id])
        if old is not None and old.order >= new.order:
            superseded += 1
            if new.voted and old.vote == NONE and not covered(new.at_us, holds.get(key.user_id, ())):
                voters.setdefault(hour, set()).add(key.user_id)
            continue
        applied += 1
        row = vote_key(key.post_id, key.user_id) + (
            new.vote,
            micros_timestamp(new.at_us),
            new.event_id,
            hour_timestamp(new.event_hour),
            spanner.COMMIT_TIMESTAMP,
        )
        if new_held or (old is not None and old.held_out):
            marked.append(row + (True if new_held else None,))
        else:
            rows.append(row)
        if old is not None:
            old_hour = (key.post_id, old.event_hour)
            counts[old_hour] = counts.get(old_hour, Counts()).plus(
                old.contribution(holds.get(key.user_id, ())).negated()
            )
        counts[hour] = counts.get(hour, Counts()).plus(contributed(new.vote, new_held))
        events[hour] = events.get(hour, 0) + new.events
        if new.voted and not new_held:
            voters.setdefault(hour, set()).add(key.user_id)
    deltas = []
    for hour in sorted(counts.keys() | voters.keys()):
        moved = counts.get(hour, Counts())
        if moved.is_zero() and hour not in voters:
            continue  # a state that moves no count (up again, later) writes its row and no delta
        sketch = sketch_of(voters[hour]) if hour in voters else None
        deltas.append(PostDelta(hour[0], hour[1], delta_id, CounterSums(moved, events.get(hour, 0), sketch)))
    return VoteChanges(rows, deltas, applied, superseded, sum(state.events for state in incoming.values()), marked)


def _post_hour(item: tuple[PostUser, LatestVote]) -> tuple[str, int]:
    return item[0].post_id, item[1].event_hour


def _post(item: tuple[PostUser, LatestVote]) -> str:
    return item[0].post_id


# A transaction of vote states, when no stored state is in an hour the batch does not name (the
# common case): its log rows, every state's row, and a delta row for every post and hour among
# them, each post with its parent Posts row. The transaction checks the real cost once it has
# read the stored states (apply_vote_states).
# (+1: the change-log row's UserIds.)
VOTE_BATCH_COST: CommitCost[tuple[PostUser, LatestVote]] = CommitCost(
    MUTATIONS_PER_COMMIT + 1,
    MUTATIONS_PER_VOTE,
    (Shared(_post_hour, MUTATIONS_PER_DELTA), Shared(_post, MUTATIONS_PER_PARENT)),
)


def batch_cost(states: Iterable[tuple[PostUser, LatestVote]]) -> int:
    """Mutations one transaction of these states costs, as planned (VOTE_BATCH_COST)."""
    return VOTE_BATCH_COST.of(states)


def changes_cost(changes: VoteChanges) -> int:
    """Mutations the writes of one transaction cost: its Votes rows (a marked one writes one more
    column) and a delta commit whose change-log row lists its users."""
    return (
        len(changes.rows) * MUTATIONS_PER_VOTE
        + len(changes.marked_rows) * MUTATIONS_PER_MARKED_VOTE
        + DELTA_COMMIT_COST.of(changes.deltas)
        + (1 if changes.deltas else 0)
    )


def plan_batches(
    states: Mapping[PostUser, LatestVote], max_rows: int, max_mutations: int = MUTATION_BUDGET
) -> list[dict[PostUser, LatestVote]]:
    """The states cut into transactions of at most `max_rows` states and `max_mutations` mutations
    (VOTE_BATCH_COST), in Votes key order: each transaction reads and writes one contiguous range of
    Votes rows, so on real Spanner it touches the few splits of that range."""
    ordered = sorted(states.items(), key=lambda item: vote_key(item[0].post_id, item[0].user_id))
    return [dict(batch) for batch in cut_within_budget(ordered, VOTE_BATCH_COST, max_rows, max_mutations, "vote state")]


class _OverBudget(Exception):
    """A batch whose writes, once the stored states are read, cost more than the budget."""


def apply_batch(
    transaction,
    states: Mapping[PostUser, LatestVote],
    max_mutations: int = MUTATION_BUDGET,
    parents_present: Collection[str] = (),
    *,
    suspended: SuspendedUsers | None = None,
    as_before_issue_46: bool = False,
) -> VoteChanges:
    """One batch, inside a read-write transaction: read, plan, write (see the module docstring).
    The users' erasures and suspensions are read in the same transaction (one key range per user
    each; with `suspended`, the sink's held suspensions, one key while they are current:
    spanner_store/suspended_users.py), so a state no later than its user's erasure becomes the
    erasure's "none" whenever it arrives (schemas/vote_states.py `erased`), a state a suspension of
    its user covers is stored held out of the counts (`held`), and an erasure or a suspension
    recorded while this transaction runs serialises with it on the rows read. The commit's
    change-log row lists the batch's users (`upvotes suspects` reads them). Raises _OverBudget,
    having written nothing, when the writes would cost more than `max_mutations`. The Posts keys of
    `parents_present` are not upserted. `as_before_issue_46=True` applies as the sink did before
    suspensions existed (no suspensions read, no users in the change-log row): only the
    benchmark's same-run "before" sets it (bench/suspensions.py)."""
    users = {key.user_id for key in states}
    erasures = erasures_of(transaction, users)
    if erasures:
        states = {key: erased(state, erasures.get(key.user_id)) for key, state in states.items()}
    if as_before_issue_46:
        holds = {}
    else:
        holds = holds_of(transaction, users) if suspended is None else suspended.holds_of(transaction, users)
    changes = plan_vote_changes(stored_votes(transaction, states), states, vote_delta_id(new_commit_id()), holds)
    if changes_cost(changes) > max_mutations:
        raise _OverBudget()
    if changes.rows:
        mutations.insert_or_update(transaction, VOTES, VOTE_COLUMNS, changes.rows)
    if changes.marked_rows:
        mutations.insert_or_update(transaction, VOTES, VOTE_HELD_COLUMNS, changes.marked_rows)
    if changes.deltas:
        add_delta_writes(
            transaction,
            changes.deltas,
            parents_present,
            user_ids=None if as_before_issue_46 else sorted({row[1] for row in changes.rows + changes.marked_rows}),
        )
    return changes


def apply_vote_states(
    database,
    states: Mapping[PostUser, LatestVote],
    max_mutations: int = MUTATION_BUDGET,
    known: KnownPosts | None = None,
    *,
    suspended: SuspendedUsers | None = None,
    as_before_issue_46: bool = False,
) -> VoteChanges:
    """Applies one batch (of plan_batches), one read-write transaction per attempt; an abort or
    another transient error surfaces for run_with_retries, and a retry re-reads (see the module
    docstring). A batch whose stored states lie in so many other event hours that its writes would
    break the budget (batch_cost cannot know them before reading) is applied in two halves, each
    its own transaction: a retry of the whole after the first half committed finds that half applied.
    With `known`, the Posts keys of the posts it knows or finds (`KnownPosts.present_among`) are not
    upserted, and it learns this batch's;
    with `suspended`, the users' suspensions are its loaded ones while they are current (apply_batch)."""
    present = known.present_among(database, {key.post_id for key in states}) if known is not None else frozenset()
    try:
        changes = run_transaction(
            database,
            lambda transaction: apply_batch(
                transaction, states, max_mutations, present, suspended=suspended, as_before_issue_46=as_before_issue_46
            ),
        )
    except _OverBudget:
        if len(states) == 1:
            raise ValueError("one vote state cannot exceed the mutation budget") from None
        keys = list(states)
        halves = [
            apply_vote_states(
                database,
                {key: states[key] for key in part},
                max_mutations,
                known,
                suspended=suspended,
                as_before_issue_46=as_before_issue_46,
            )
            for part in (keys[: len(keys) // 2], keys[len(keys) // 2 :])
        ]
        return VoteChanges(*(a + b for a, b in zip(*halves)))
    except exceptions.NotFound as error:
        if not lost_a_known_parent(error, present):
            raise
        assert known is not None  # present is empty without it: not lost_a_known_parent
        known.forget(present)  # a Posts row taken as present is gone (deleted by an operator): upsert them all
        return apply_vote_states(
            database, states, max_mutations, known, suspended=suspended, as_before_issue_46=as_before_issue_46
        )
    if known is not None:
        known.add(delta.post_id for delta in changes.deltas)
    return changes


class AppliedTotals(NamedTuple):
    applied: int  # states later than the stored ones: written, with the counts they moved
    superseded: int  # states no later than the stored ones: nothing written
    commits: int


def apply_all_vote_states(
    database, states: Mapping[PostUser, LatestVote], rows_per_commit: int = 1_000, retry: RetryPolicy = DEFAULT_RETRY
) -> AppliedTotals:
    """Every state, in planned batches, each retried on transient errors: what an operator's tool
    (`upvotes forget-user`, a dead-letter replay) applies through the sink's own path."""
    applied = superseded = commits = 0
    for batch in plan_batches(states, rows_per_commit):
        changes = run_with_retries(lambda: apply_vote_states(database, batch), retry)  # called at once
        applied, superseded, commits = applied + changes.applied, superseded + changes.superseded, commits + 1
    return AppliedTotals(applied, superseded, commits)
