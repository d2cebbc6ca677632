"""The change log and the fold cursor: how the fold and `upvotes status` find the posts that
changed without reading the others.

- Writing: every commit of delta rows, by every writer (the sink's `write_deltas`, which
  dead-letter replays go through too, and moderation), inserts one DeltaCommits row in the same
  commit (`delta_commit_row`): the distinct posts of the commit, its delta rows and votes. Same
  commit, so the row's CommittedAt is the deltas' own commit timestamp.
- Reading: `read_changes(snapshot, after)` seeks each shard's rows committed after `after`
  (COMMIT_SHARDS key ranges, one per shard); its cost is one row per commit since then.
- Reading one commit's posts: `posts_of_commits` (a fresh ranking that its candidate rows' bounds
  leave uncertified reads the posts of the commits that bound it: spanner_reads/fresh_side.py).
- The cursor: `fold_cursor(snapshot)` is the finished fold run with the largest ChangesThrough
  and the posts it skipped. That run vouches that every post with a delta committed at or
  before ChangesThrough is folded (its watermark covers those deltas) or in its skipped list;
  why the next fold may rely on that is in spanner_writes/folding.py. Issue 30's fresh reads use
  the skipped list to know which posts the cursor's snapshot does not cover.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import NamedTuple

from google.cloud import spanner

from spanner_store.key_sets import KeySet
from spanner_store.mutation_cost import insert_cost
from spanner_store.tables import (
    DELTA_COMMIT_COLUMNS,
    DELTA_COMMITS,
    FOLD_RUN_SKIPPED,
    FOLD_RUN_SKIPPED_COLUMNS,
    commit_shard,
    committed_after,
)

MUTATIONS_PER_DELTA_COMMIT = insert_cost(DELTA_COMMITS, DELTA_COMMIT_COLUMNS)  # spanner_store/mutation_cost.py

# FoldRuns holds one row per fold for the 30-day retention (4,320 at the default 10-minute
# schedule): a scan of it is bounded by the schedule, never by the catalogue.
CURSOR_SQL = """SELECT FoldId, ChangesThrough FROM FoldRuns
WHERE ChangesThrough IS NOT NULL ORDER BY ChangesThrough DESC LIMIT 1"""


def new_commit_id() -> str:
    """A random ID for one commit's per-commit rows (its DeltaCommits and TopCandidates rows)."""
    return str(uuid.uuid4())


def delta_commit_row(commit_id: str, post_ids: Iterable[str], delta_rows: int, events: int) -> tuple:
    """The DeltaCommits row (DELTA_COMMIT_COLUMNS) to insert in the same commit as the delta rows."""
    return (commit_shard(commit_id), spanner.COMMIT_TIMESTAMP, commit_id, sorted(set(post_ids)), delta_rows, events)


class Change(NamedTuple):
    """One commit of delta rows, as its DeltaCommits row tells it."""

    committed_at: datetime
    post_ids: list[str]
    delta_rows: int
    events: int


def read_changes(snapshot, after: datetime, shard: int | None = None) -> Iterator[Change]:
    """The commits after `after` in the snapshot, of every shard or of one (for parallel readers)."""
    for committed_at, post_ids, delta_rows, events in snapshot.read(
        DELTA_COMMITS, columns=("CommittedAt", "PostIds", "DeltaRows", "Events"), keyset=committed_after(after, shard)
    ):
        yield Change(committed_at, post_ids, delta_rows, events)


def users_of_changes(snapshot, after: datetime) -> tuple[set[str], int]:
    """The users whose vote states were applied by a commit after `after` (the vote-state sink's
    DeltaCommits rows list them; other writers' rows list none), and the commit rows read: one per
    commit since then, a seek per shard (`upvotes suspects`)."""
    users: set[str] = set()
    commits = 0
    for (user_ids,) in snapshot.read(DELTA_COMMITS, columns=("UserIds",), keyset=committed_after(after)):
        commits += 1
        users.update(user_ids or ())
    return users, commits


def posts_of_commits(snapshot, commits: Iterable[tuple[int, datetime, str]]) -> dict[str, list[str]]:
    """Every post of these commits, by commit ID: their DeltaCommits rows, keyed (Shard, CommittedAt,
    CommitId) like the commits' TopCandidates rows, in one read of point keys. A commit without its
    row (none is known) is left out."""
    keys = [list(commit) for commit in commits]
    if not keys:
        return {}
    return {
        commit_id: post_ids
        for commit_id, post_ids in snapshot.read(
            DELTA_COMMITS, columns=("CommitId", "PostIds"), keyset=KeySet(keys=keys)
        )
    }


class SkippedPost(NamedTuple):
    post_hash: int
    post_id: str
    error: str


class FoldCursor(NamedTuple):
    """The finished fold run the next fold (and `status`) starts from."""

    fold_id: str
    changes_through: datetime
    skipped: tuple[SkippedPost, ...]  # posts the run skipped: not covered by changes_through


def fold_cursor(snapshot) -> FoldCursor | None:
    """The run with the largest ChangesThrough and its skipped posts; None when no run has one
    (a fresh database, or one migrated from before ChangesThrough): then only a scan of every
    post finds the unfolded deltas."""
    rows = list(snapshot.execute_sql(CURSOR_SQL))
    if not rows:
        return None
    fold_id, changes_through = rows[0]
    skipped = tuple(
        SkippedPost(*row[1:])
        for row in snapshot.read(
            FOLD_RUN_SKIPPED,
            columns=FOLD_RUN_SKIPPED_COLUMNS,
            keyset=spanner.KeySet(ranges=[spanner.KeyRange(start_closed=[fold_id], end_closed=[fold_id])]),
        )
    )
    return FoldCursor(fold_id, changes_through, skipped)
