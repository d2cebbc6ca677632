"""Writing delta rows: blind, insert-only, idempotent commits within a mutation budget.

- Blind writes: `insert` of delta rows stamped with the commit timestamp, plus a key-only
  `insert_or_update` of each parent Posts row (creates it when missing, touches no
  counter), all in one commit, with no read in it. A writer that keeps `KnownPosts` (the
  streaming sinks) skips the parents it has committed before or finds in a read of their keys
  before the commit (a snapshot, which locks nothing; spanner_writes/known_posts.py says why,
  and why that is safe).
- Idempotent: a delta's key is deterministic (post, hour, writer, window, pane). A retry
  after an unseen success, or a duplicate execution of the same bundle, fails with
  ALREADY_EXISTS; `write_new_deltas` then reads the rows stored under its keys and writes only
  the missing ones. A stored row with the same content is "already written"; one with other
  content is a key conflict, never taken for it (the caller dead-letters it).
- Bounded: `plan_commits` splits rows into commits under a mutation budget far below
  Spanner's per-commit limit, counting index entries (`DELTA_COMMIT_COST`, cut by
  spanner_store/commit_budget.py; the emulator does not enforce the limit, so the planner is
  tested directly).
- Logged: each commit also inserts its DeltaCommits row (spanner_store/delta_commits.py), the
  change log the fold follows, and its TopCandidates row, under one random commit ID.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from operator import attrgetter
from typing import NamedTuple

from google.api_core import exceptions
from google.cloud import spanner

from schemas.records import CounterSums, PostDelta
from schemas.voter_sketch import same_voters
from spanner_store import mutations
from spanner_store.commit_budget import CommitCost, Shared, cut_within_budget
from spanner_store.database import MUTATION_BUDGET, commit_mutations, read_rows
from spanner_store.delta_commits import MUTATIONS_PER_DELTA_COMMIT, delta_commit_row, new_commit_id
from spanner_store.key_sets import KeySet
from spanner_store.mutation_cost import insert_cost, new_row_cost
from spanner_store.tables import (
    COUNTER_COLUMNS,
    DELTA_COLUMNS,
    DELTA_COMMIT_COLUMNS,
    DELTA_COMMIT_USER_COLUMNS,
    DELTA_COMMITS,
    DELTA_KEY_COLUMNS,
    DELTAS,
    POST_KEY_COLUMNS,
    POSTS,
    TOP_CANDIDATE_COLUMNS,
    TOP_CANDIDATES,
    VOTERS,
    counts_at,
    delta_key,
    post_key,
    sketch_column,
    sketch_value,
)
from spanner_store.top_candidates import candidate_mutation_row
from spanner_writes.known_posts import KnownPosts, lost_a_known_parent

# What each row of a commit costs against Spanner's mutation limit, from the DDL
# (spanner_store/mutation_cost.py): a delta row and its PostDeltasByCommit entry; a parent
# Posts row that may be new (every column, and its PostsByUpvotes entry).
MUTATIONS_PER_DELTA = insert_cost(DELTAS, DELTA_COLUMNS)
MUTATIONS_PER_PARENT = new_row_cost(POSTS)
# Each commit also inserts its TopCandidates row (spanner_store/top_candidates.py) and its
# DeltaCommits row (spanner_store/delta_commits.py).
MUTATIONS_PER_COMMIT = insert_cost(TOP_CANDIDATES, TOP_CANDIDATE_COLUMNS) + MUTATIONS_PER_DELTA_COMMIT
# A commit of deltas: its log rows, each delta row, and each post's parent row once.
DELTA_COMMIT_COST: CommitCost[PostDelta] = CommitCost(
    MUTATIONS_PER_COMMIT, MUTATIONS_PER_DELTA, (Shared(attrgetter("post_id"), MUTATIONS_PER_PARENT),)
)


def mutations_for(deltas: list[PostDelta]) -> int:
    """Mutations one commit of these deltas costs, parent rows and index entries included."""
    return DELTA_COMMIT_COST.of(deltas)


def plan_commits(
    deltas: Iterable[PostDelta], max_rows: int, max_mutations: int = MUTATION_BUDGET
) -> list[list[PostDelta]]:
    """Splits deltas into commits of at most `max_rows` rows and `max_mutations` mutations,
    in key order: each commit writes one contiguous range of posts, so on real Spanner it
    touches the few splits of that range instead of up to one per row (PostHash spreads the
    posts of a window over the whole key space; bench/commit_sizes.py counts the ranges)."""
    return cut_commits(sorted(deltas, key=delta_key), max_rows, max_mutations)


def cut_commits(
    deltas: Iterable[PostDelta], max_rows: int, max_mutations: int = MUTATION_BUDGET
) -> list[list[PostDelta]]:
    """Cuts deltas, in the order given, into commits within both limits."""
    return cut_within_budget(deltas, DELTA_COMMIT_COST, max_rows, max_mutations, "delta")


def add_delta_writes(
    batch, deltas: list[PostDelta], parents_present: Collection[str] = (), user_ids: list[str] | None = None
) -> None:
    """One commit's mutations: the delta rows (insert), their parents' keys (insert_or_update;
    not those of `parents_present`, posts whose row the caller knows exists), the commit's
    DeltaCommits row and its TopCandidates row (inserts), so every delta commit carries its
    change-log entry and its candidates. `user_ids`: the users whose vote states the commit
    applies (the vote-state sink's), listed in its DeltaCommits row (one more column). Built as raw
    protobufs (spanner_store/mutations.py): the client's own builders cost more CPU than the rest
    of the row's work (docs/benchmarks.md)."""
    parents = sorted({post_key(d.post_id) for d in deltas if d.post_id not in parents_present})
    rows = [
        delta_key(d) + tuple(d.sums.counts) + (d.sums.events, sketch_column(d.sums.voters), spanner.COMMIT_TIMESTAMP)
        for d in deltas
    ]
    commit_id = new_commit_id()
    logged = delta_commit_row(commit_id, (d.post_id for d in deltas), len(deltas), sum(d.sums.events for d in deltas))
    if parents:
        mutations.insert_or_update(batch, POSTS, POST_KEY_COLUMNS, parents)
    mutations.insert(batch, DELTAS, DELTA_COLUMNS, rows)
    if user_ids is None:
        mutations.insert(batch, DELTA_COMMITS, DELTA_COMMIT_COLUMNS, [logged])
    else:
        mutations.insert(batch, DELTA_COMMITS, DELTA_COMMIT_USER_COLUMNS, [logged + (list(user_ids),)])
    mutations.insert(batch, TOP_CANDIDATES, TOP_CANDIDATE_COLUMNS, [candidate_mutation_row(deltas, commit_id)])


def write_deltas(database, deltas: list[PostDelta], known: KnownPosts | None = None) -> None:
    """One blind commit of `add_delta_writes`; with `known`, without the parents it holds or finds
    (`KnownPosts.present_among`), and recording this commit's posts in it. If a parent taken as
    present is gone (NOT_FOUND: nothing was written), the commit is made again with every parent."""
    present = known.present_among(database, {d.post_id for d in deltas}) if known is not None else frozenset()
    try:
        commit_mutations(database, lambda batch: add_delta_writes(batch, deltas, present))
    except exceptions.NotFound as error:
        if not lost_a_known_parent(error, present):
            raise
        assert known is not None  # present is empty without it: not lost_a_known_parent
        known.forget(present)
        commit_mutations(database, lambda batch: add_delta_writes(batch, deltas))
    if known is not None:
        known.add(d.post_id for d in deltas)


# What a stored delta row holds besides its key and commit time: what "the same row" compares.
_CONTENT_COLUMNS = COUNTER_COLUMNS + ("Events", VOTERS)
# Why a row under a key that holds a different row is not written (a dead letter's reason).
KEY_CONFLICT = (
    "key conflict: a different delta row (other counts, events or voters) is stored under this "
    "row's key; this row was not written"
)


def stored_delta_sums(database, deltas: list[PostDelta]) -> dict[tuple, CounterSums]:
    """The rows stored under these deltas' keys (strong read), by key, with what they hold."""
    keyset = KeySet(keys=[list(delta_key(d)) for d in deltas])
    with database.snapshot() as snapshot:
        rows = read_rows(
            lambda retry: snapshot.read(
                DELTAS, columns=DELTA_KEY_COLUMNS + _CONTENT_COLUMNS, keyset=keyset, retry=retry
            )
        )
        events = len(DELTA_KEY_COLUMNS) + len(COUNTER_COLUMNS)
        return {
            tuple(row[: len(DELTA_KEY_COLUMNS)]): CounterSums(
                counts_at(row, len(DELTA_KEY_COLUMNS)), row[events], sketch_value(row[events + 1])
            )
            for row in rows
        }


class WriteResult(NamedTuple):
    written: int
    already_written: int  # found stored with the same content: an unseen success's, a duplicate execution's


class KeyConflict(exceptions.AlreadyExists):
    """Rows whose key holds a different row, so not written, raised by write_new_deltas once every
    other row of the call is written or found written (`result`). An ALREADY_EXISTS: a caller that
    does not look (a dead-letter replay) treats it as a write that failed, and keeps the row."""

    def __init__(self, conflicting: tuple[PostDelta, ...], result: WriteResult) -> None:
        first = conflicting[0]
        super().__init__(
            f"{KEY_CONFLICT} ({len(conflicting)} rows, the first {first.delta_id!r} of post {first.post_id!r})"
        )
        self.conflicting = conflicting
        self.result = result


def same_sums(stored: CounterSums, sums: CounterSums) -> bool:
    """Whether a stored delta row holds these sums: the same counts and events, the same voters
    (by content: a pane recomputed in another process has the same voters in other bytes,
    schemas/voter_sketch.py `same_voters`)."""
    return stored.counts == sums.counts and stored.events == sums.events and same_voters(stored.voters, sums.voters)


def write_new_deltas(database, deltas: list[PostDelta], known: KnownPosts | None = None) -> WriteResult:
    """One attempt to commit `deltas`, idempotently: a row whose key holds the same row is already
    written, and is not written again. `known`: as write_deltas'.

    A retry after an unseen success, a replayed bundle or a duplicate execution of it (a runner may
    run one bundle twice at once) fails with ALREADY_EXISTS; then the rows stored under its keys are
    read and only the missing ones are written. A duplicate execution may commit between that read
    and that write, which then fails too: the read and the write are made again for what is still
    missing, until nothing is (each round finds at least one more row stored, so it ends). A row
    stored under one of the keys with other content is no copy of this one: once the others are
    written, KeyConflict names it, unwritten, for the caller's dead letters.
    """
    try:
        write_deltas(database, deltas, known)
        return WriteResult(len(deltas), 0)
    except exceptions.AlreadyExists as error:
        collision = error
    pending, already, conflicting = deltas, 0, []
    while True:
        stored = stored_delta_sums(database, pending)
        if not stored:
            raise collision  # no row of ours collided (gone since?): not a duplicate to settle here
        missing = [d for d in pending if delta_key(d) not in stored]
        for delta in pending:
            found = stored.get(delta_key(delta))
            if found is not None and same_sums(found, delta.sums):
                already += 1
            elif found is not None:
                conflicting.append(delta)
        try:
            if missing:
                write_deltas(database, missing, known)
        except exceptions.AlreadyExists as error:
            collision, pending = error, missing  # a duplicate execution committed some of them just now
            continue
        result = WriteResult(len(missing), already)
        if conflicting:
            raise KeyConflict(tuple(conflicting), result)
        return result
