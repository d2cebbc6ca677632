"""Every user's active suspensions, held by the vote-state sink and kept exact by one row.

Why: the sink must know, in each transaction that applies vote states, which of the batch's users
an active suspension holds out (spanner_writes/votes.py). Reading each user's UserSuspensions rows
(one key range per user, beside the user's erasures) in every transaction, nearly always to find
nothing, put the sink over its time budget (docs/benchmarks.md, "Suspending a ring: two sizes").

How: every commit that writes UserSuspensions rows (upvotes/operations/suspensions.py: a
suspension's records; the passes of a suspension and a restore, which mark rows applied or
restored: upvotes/operations/suspension_passes.py) also writes the UserSuspensionsChanged row's ChangedAt, its
commit timestamp (`mark_changed`). `SuspendedUsers` keeps every active suspension of every user in
memory, applied or not (a stored vote an applied one covers counts nothing), loaded from a
snapshot together with that row's ChangedAt. In each transaction the sink
reads only the row (one key): when it equals the loaded one, nothing changed the suspensions
between the load and this read, and the row's shared lock keeps any change from committing
before this transaction does, so the loaded holds are the users' holds for this transaction, as
exact as their own rows read in it. When it differs, this transaction reads its users' rows
itself (`holds_of`, as without the cache) and the next one loads again.

Bounded: a load reads every UserSuspensions row (restored ones delete themselves 30 days after
their restore); past `max_rows` (about 100 bytes a user) nothing is kept for that ChangedAt and
every transaction reads its users' rows until the suspensions change again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from google.cloud import spanner

from schemas.vote_states import Hold
from spanner_store.database import read_rows
from spanner_store.mutation_cost import insert_cost
from spanner_store.tables import (
    USER_SUSPENSION_COLUMNS,
    USER_SUSPENSIONS,
    USER_SUSPENSIONS_CHANGED,
    USER_SUSPENSIONS_CHANGED_COLUMNS,
)
from spanner_store.vote_rows import UserSuspension, holds_of

_KEY = spanner.KeySet(keys=[[0]])
# Active suspension rows held at most: a few MB.
DEFAULT_MAX_ROWS = 50_000
# What `mark_changed` adds to a commit.
MARK_CHANGED_COST = insert_cost(USER_SUSPENSIONS_CHANGED, USER_SUSPENSIONS_CHANGED_COLUMNS)


def mark_changed(batch) -> None:
    """Adds the write of the UserSuspensionsChanged row to `batch` (a Batch or a transaction) of a
    commit that writes UserSuspensions rows (MARK_CHANGED_COST mutations)."""
    batch.insert_or_update(
        USER_SUSPENSIONS_CHANGED, columns=USER_SUSPENSIONS_CHANGED_COLUMNS, values=[(0, spanner.COMMIT_TIMESTAMP)]
    )


def changed_at(reader) -> datetime | None:
    """When the suspensions last changed (None: never since the row was added), read by `reader`."""
    rows = read_rows(
        lambda retry: reader.read(USER_SUSPENSIONS_CHANGED, columns=("ChangedAt",), keyset=_KEY, retry=retry)
    )
    return rows[0][0] if rows else None


class _Loaded(NamedTuple):
    """The active holds of every user as of `changed_at`."""

    changed_at: datetime | None
    holds: dict[str, tuple[Hold, ...]] | None  # None: more than max_rows rows, none held


class SuspendedUsers:
    """The active suspensions of every user, per process (thread-safe), for the vote-state sink."""

    def __init__(self, database, max_rows: int = DEFAULT_MAX_ROWS) -> None:
        self._database = database
        self._max_rows = max_rows
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()
        self.loads = 0  # snapshots read: one per change of the suspensions a transaction saw

    def holds_of(self, transaction, user_ids: Iterable[str]) -> dict[str, tuple[Hold, ...]]:
        """The active suspensions of each of these users that has one, exact in `transaction` (a
        read-write transaction, which this reads the UserSuspensionsChanged row in)."""
        user_ids = set(user_ids)
        loaded = self._loaded
        if loaded is not None and loaded.changed_at == changed_at(transaction):
            if loaded.holds is None:  # too many rows to hold: read the users' own
                return holds_of(transaction, user_ids)
            return {user: loaded.holds[user] for user in user_ids if user in loaded.holds}
        holds = holds_of(transaction, user_ids)  # as without held suspensions
        self._load()
        return holds

    def _load(self) -> None:
        """Every active suspension, with the ChangedAt they are as of, from one strong snapshot."""
        with self._lock:
            with self._database.snapshot(multi_use=True) as snapshot:
                changed = changed_at(snapshot)
                if self._loaded is not None and self._loaded.changed_at == changed:
                    return  # another thread loaded these already
                holds: dict[str, list[Hold]] = {}
                rows = snapshot.read(
                    USER_SUSPENSIONS, columns=USER_SUSPENSION_COLUMNS, keyset=spanner.KeySet(all_=True)
                )
                too_many = False
                for count, (_, user_id, suspension_id, since, restored_at, applied) in enumerate(rows, start=1):
                    if count > self._max_rows:
                        too_many = True
                        break
                    if restored_at is None:
                        row = UserSuspension(user_id, suspension_id, since, None, bool(applied))
                        holds.setdefault(user_id, []).append(row.hold)
            self.loads += 1
            self._loaded = _Loaded(changed, None if too_many else {user: tuple(h) for user, h in holds.items()})
