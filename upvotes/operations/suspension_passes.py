"""Moving suspended users' stored votes out of the counts, and back in (issue 46): one pass, one
read-write transaction, of `upvotes suspend-users` and `upvotes restore-users`
(upvotes/operations/suspensions.py records the requests and drives the passes).

What a stored vote contributes to the counts is `counted(vote)`, or nothing while its Votes row is
marked HeldOut (schemas/vote_states.py `contributed`). Every writer keeps that true in the
transaction that changes a row: the vote-state sink (spanner_writes/votes.py) takes out what the
stored state contributes, by its mark, and puts in what the new one does, marking it when an active
suspension of the user covers it (`held`); a pass here changes the mark alone, and moves the vote's
count in the same commit. So the counts are always the sum of what the stored states contribute,
whatever runs beside, and a suspension or a restore is exact once every row's mark agrees with the
user's active suspensions.

A pass (`reconcile`), for some stored votes of some users:

1. reads those Votes rows (point reads, in key order, the columns a move needs) and the users'
   UserSuspensions rows (one key range per user), in the transaction;
2. plans (`plan_moves`, pure): each row whose mark disagrees with the user's active suspensions is
   HELD (a counted vote now covered: its count out of its own event hour, marked) or RELEASED (a
   held vote no active suspension covers any more: its count back into its own event hour,
   unmarked, and its user a unique voter of that hour again); every other row is left alone;
3. writes the marks (4 mutations a row: the key and HeldOut), the delta rows those moves add up to,
   one per post and event hour, DeltaId "@suspension/<commit id>", through
   spanner_writes.deltas.add_delta_writes (so with the commit's DeltaCommits and TopCandidates
   rows: the fold, the exact and hourly reads and the certified tops treat them as any delta),
   and adds up what it moved in the request's audit row (Suspensions: Votes, the counters, Commits).

Why it is exact at every crash point: the mark and the count it stands for change in one commit,
so a pass killed before its commit moved nothing, and one run again (a rerun by ID, a retry after
an ambiguous commit) reads the marks the first wrote and moves nothing twice; the audit row's
tallies change in the same commit, so they count each move once too. Two passes, or a pass and the
sink, on the same rows are serialised by Spanner on the Votes rows both read and write (the
emulator aborts one, which is retried and re-reads).

Cost: only the rows named (the suspended users' votes, never the catalogue nor the other voters of
the same posts), one delta row per post and hour a pass moves (the request groups its rows by
post and hour, `plan_passes`, so a ring's votes on the same posts in the same hours share them),
and no parent Posts row unless one is missing (a vote held out by the sink since its post's first
vote: its post may have no row; the commit fails NOT_FOUND, writing nothing, and is made again
upserting its parents).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from google.api_core import exceptions

from schemas import post_hash
from schemas.counters import Counts, total
from schemas.delta_ids import suspension_delta_id
from schemas.records import CounterSums, PostDelta, PostUser
from schemas.vote_states import Hold, counted, held
from schemas.voter_sketch import sketch_of
from spanner_store import mutations
from spanner_store.commit_budget import CommitCost, Shared, cut_within_budget
from spanner_store.database import MUTATION_BUDGET, is_transient, run_transaction, schema_behind
from spanner_store.delta_commits import new_commit_id
from spanner_store.key_sets import KeySet
from spanner_store.mutation_cost import update_cost
from spanner_store.tables import (
    COUNTER_COLUMNS,
    SUSPENSION_TALLY_COLUMNS,
    SUSPENSIONS,
    VOTE_MARK_COLUMNS,
    VOTES,
    counts_at,
    vote_key,
)
from spanner_store.vote_rows import StoredVote, holds_of, votes_to_move
from spanner_writes.deltas import (
    DELTA_COMMIT_COST,
    MUTATIONS_PER_COMMIT,
    MUTATIONS_PER_DELTA,
    MUTATIONS_PER_PARENT,
    add_delta_writes,
)

# A moved vote's mark: its key and HeldOut (Votes has no index).
MUTATIONS_PER_MARK = update_cost(VOTES, VOTE_MARK_COLUMNS)
# The request's audit row, its tallies updated in every pass that moves a vote.
MUTATIONS_PER_TALLY = update_cost(SUSPENSIONS, SUSPENSION_TALLY_COLUMNS)
# The stored votes one pass reads and may move, at most: on the emulator, 2,000 a pass moved
# 15-40% more votes a second than 4,000 (50,000 votes, two rounds each, load average 6-9).
DEFAULT_ROWS_PER_PASS = 2_000


class Moves(NamedTuple):
    """What one pass does to some stored votes (plan_moves)."""

    marks: list[tuple]  # Votes updates (VOTE_MARK_COLUMNS): each moved row's new HeldOut
    deltas: list[PostDelta]  # the counts the moves add up to, one row per post and event hour
    held: int  # votes moved out of the counts
    released: int  # votes moved back in
    counts: Counts  # the change they make, summed over posts (negative for votes held)

    @property
    def votes(self) -> int:
        return self.held + self.released


def should_hold(vote: StoredVote, holds: Mapping[str, Iterable[Hold]]) -> bool:
    """Whether the user's active suspensions hold this stored vote out of the counts. Pure."""
    return vote.user_id in holds and held(vote.vote, vote.voted_at_us, holds[vote.user_id])


def needs_times(holds: Mapping[str, Iterable[Hold]]) -> bool:
    """Whether deciding which votes these suspensions hold needs the votes' times (one holds out
    the votes since a time; the others hold every vote). Pure."""
    return any(hold.since_us is not None for user_holds in holds.values() for hold in user_holds)


def needs_move(vote: StoredVote, holds: Mapping[str, Iterable[Hold]]) -> bool:
    """Whether the row's mark disagrees with the user's active suspensions. Pure."""
    return vote.held_out != should_hold(vote, holds)


def plan_moves(votes: Iterable[StoredVote], holds: Mapping[str, Iterable[Hold]], delta_id: str) -> Moves:
    """Each stored vote whose mark disagrees with its user's active suspensions (`holds`, by user)
    is held (its count out of its own event hour) or released (back in, its user a unique voter of
    that hour again: a state applied while held added none); see the module docstring. Pure."""
    marks: list[tuple] = []
    sums: dict[tuple[str, int], Counts] = {}
    voters: dict[tuple[str, int], set[str]] = {}
    held_votes = released = 0
    for vote in votes:
        hold = should_hold(vote, holds)
        if vote.held_out == hold:
            continue
        hour = (vote.post_id, vote.event_hour)
        change = counted(vote.vote).negated() if hold else counted(vote.vote)
        sums[hour] = sums.get(hour, Counts()).plus(change)
        if hold:
            held_votes += 1
        else:
            released += 1
            voters.setdefault(hour, set()).add(vote.user_id)
        marks.append(vote_key(vote.post_id, vote.user_id) + (True if hold else None,))
    deltas = [
        PostDelta(
            post_id,
            hour,
            delta_id,
            CounterSums(
                sums[(post_id, hour)], 0, sketch_of(voters[(post_id, hour)]) if (post_id, hour) in voters else None
            ),
        )
        for post_id, hour in sorted(sums)
    ]
    return Moves(marks, deltas, held_votes, released, total(sums.values()))


def moves_cost(moves: Moves, tallied: bool = True) -> int:
    """Mutations one pass's writes cost: the marks, a delta commit (parents included) and the tally."""
    return (
        len(moves.marks) * MUTATIONS_PER_MARK
        + (DELTA_COMMIT_COST.of(moves.deltas) if moves.deltas else 0)
        + (MUTATIONS_PER_TALLY if tallied else 0)
    )


def _post_hour(vote: StoredVote) -> tuple[str, int]:
    return vote.post_id, vote.event_hour


# A pass as planned: its log rows and tally, every row's mark, and a delta row per post and hour
# (no parent rows: the posts of votes that counted exist; `reconcile_votes` writes them if not).
PASS_COST: CommitCost[StoredVote] = CommitCost(
    MUTATIONS_PER_COMMIT + MUTATIONS_PER_TALLY, MUTATIONS_PER_MARK, (Shared(_post_hour, MUTATIONS_PER_DELTA),)
)


def plan_passes(
    votes: Iterable[StoredVote], max_rows: int = DEFAULT_ROWS_PER_PASS, max_mutations: int = MUTATION_BUDGET
) -> list[list[StoredVote]]:
    """The votes to move cut into passes of at most `max_rows` rows and `max_mutations` mutations
    (PASS_COST), in the order of their posts' delta rows (post hash, post, hour): the votes of many
    users on the same post and hour share one delta row, and each pass writes one contiguous range
    of posts. Pure."""
    ordered = sorted(votes, key=lambda v: (post_hash(v.post_id), v.post_id, v.event_hour, v.user_id))
    return cut_within_budget(ordered, PASS_COST, max_rows, max_mutations, "stored vote")


class Tally(NamedTuple):
    """The audit row a pass adds its moves up in (Suspensions, keyed by these two)."""

    suspension_id: str
    request: str


def _add_to_tally(transaction, tally: Tally, moves: Moves) -> None:
    key = [tally.suspension_id, tally.request]
    rows = list(transaction.read(SUSPENSIONS, columns=SUSPENSION_TALLY_COLUMNS, keyset=KeySet(keys=[key])))
    if not rows:
        raise LookupError(f"no audit row {key} to add a pass to (was it deleted?)")
    row = rows[0]
    counts = counts_at(row, 3).plus(moves.counts)
    commits = row[3 + len(COUNTER_COLUMNS)] + 1
    mutations.update(
        transaction, SUSPENSIONS, SUSPENSION_TALLY_COLUMNS, [(*key, row[2] + moves.votes, *counts, commits)]
    )


class _OverBudget(Exception):
    """A pass whose writes, once the rows are read, cost more than the budget."""


def reconcile(
    transaction,
    keys: Iterable[PostUser],
    tally: Tally | None,
    max_mutations: int = MUTATION_BUDGET,
    parents_present: bool = True,
) -> Moves:
    """One pass inside a read-write transaction: read the rows and the users' suspensions, plan the
    moves, write them with their delta rows and add them up in `tally` (see the module docstring).
    With `parents_present`, the moved posts' Posts keys are not upserted. Raises _OverBudget, having
    written nothing, when the writes would cost more than `max_mutations`."""
    ordered = sorted({vote_key(key.post_id, key.user_id) for key in keys})  # in key order: read faster
    holds = holds_of(transaction, {key[1] for key in ordered})
    stored = list(votes_to_move(transaction, KeySet(keys=[list(key) for key in ordered]), needs_times(holds)))
    moves = plan_moves(stored, holds, suspension_delta_id(new_commit_id()))
    if not moves.marks:
        return moves
    present = {delta.post_id for delta in moves.deltas} if parents_present else set()
    if moves_cost(moves, tally is not None) - len(present) * MUTATIONS_PER_PARENT > max_mutations:
        raise _OverBudget()
    mutations.update(transaction, VOTES, VOTE_MARK_COLUMNS, moves.marks)  # raw protobufs, as the sink's
    if moves.deltas:
        add_delta_writes(transaction, moves.deltas, present)
    if tally is not None:
        _add_to_tally(transaction, tally, moves)
    return moves


def reconcile_votes(
    database, keys: list[PostUser], tally: Tally | None, max_mutations: int = MUTATION_BUDGET
) -> list[Moves]:
    """One pass (of plan_passes), one read-write transaction per attempt; an abort or another
    transient error surfaces for run_with_retries, and a retry re-reads. A pass whose posts lack a
    Posts row is made again upserting them; one whose writes would then break the budget is made in
    two halves, each its own transaction (a retry of the whole finds the first half's marks). Returns
    the moves of each transaction that committed."""

    def attempt(parents_present: bool) -> list[Moves]:
        try:
            return [
                run_transaction(
                    database, lambda transaction: reconcile(transaction, keys, tally, max_mutations, parents_present)
                )
            ]
        except _OverBudget:
            if len(keys) == 1:
                raise ValueError("one stored vote cannot exceed the mutation budget") from None
            half = len(keys) // 2
            return reconcile_votes(database, keys[:half], tally, max_mutations) + reconcile_votes(
                database, keys[half:], tally, max_mutations
            )

    try:
        return attempt(parents_present=True)
    except exceptions.NotFound as error:
        if schema_behind(error) or is_transient(error):
            raise
        return attempt(parents_present=False)  # a post with no Posts row yet: upsert the parents
