"""KnownPosts: the posts whose Posts row a writer has seen committed, so that its next commits
need not write that row again. The streaming sink (spanner_writes/deltas.py) and the vote-state
sink (spanner_writes/votes.py) each keep one per process, shared by their DoFn's copies and a
worker's threads (transforms/per_process.py), so it is thread-safe.

Why: a delta row is interleaved in its post's Posts row, which must exist, so a commit used to
upsert the key of every post it names. For a post that votes keep reaching, window after window,
that is a write of the same row in every commit: on Cloud Spanner it locks the row the fold's
transactions write the counters of, and on the emulator it was nearly half of a sink commit's
time (docs/benchmarks.md, "Measurements behind the code"). A writer that
committed a post's parent knows the row exists: Posts rows are never deleted by this project
(moderation and `forget-user` write compensating deltas), so it skips them from then on.

A post it does not know is looked up before the commit (`present_among`: one strong read of the
keys of all such posts of a commit, which takes no lock), and a row found is not written either:
another writer's commit made it (the delta sink and the vote-state sink each create the posts they
reach first), or this writer's before a restart. On the emulator a key-only upsert of an existing
row cost several times the read and the delta row together (docs/benchmarks.md, "Measurements
behind the code"). A post the read finds no row of is upserted by its key, as before, so a row
created between the read and the commit changes nothing.

Bounded: at most `capacity` posts, the least recently written forgotten first (a forgotten post
only costs one upsert again), so memory stays flat however many posts a stream sees. Safe if the
belief is wrong (an operator deleted a Posts row by hand): the commit fails whole with NOT_FOUND,
having written nothing (`lost_a_known_parent`), and the writer commits again with every parent.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable

from google.api_core import exceptions

from spanner_store.database import is_transient, read_rows, schema_behind
from spanner_store.key_sets import KeySet
from spanner_store.tables import POSTS, post_key

# About 100 bytes a post: ten MB per writer at most, for the posts of a busy stream's last windows.
DEFAULT_CAPACITY = 100_000


class KnownPosts:
    """A bounded set of post IDs whose Posts row exists, the least recently written out first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._posts: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._posts)

    def among(self, post_ids: Iterable[str]) -> frozenset[str]:
        """Those of `post_ids` whose Posts row is known to exist."""
        with self._lock:
            return frozenset(post for post in post_ids if post in self._posts)

    def present_among(self, database, post_ids: Collection[str]) -> frozenset[str]:
        """Those of `post_ids` whose Posts row is known to exist or found in `database` (one strong
        read of the keys of those not known); the ones found are learnt, as committed."""
        known = self.among(post_ids)
        unknown = sorted(set(post_ids) - known)
        if not unknown:
            return known
        with database.snapshot() as snapshot:
            keys = KeySet(keys=[list(post_key(post)) for post in unknown])
            rows = read_rows(lambda retry: snapshot.read(POSTS, columns=("PostId",), keyset=keys, retry=retry))
            found = {row[0] for row in rows}
        self.add(found)
        return known | found

    def add(self, post_ids: Iterable[str]) -> None:
        """Records `post_ids` as committed (their Posts rows exist), the most recent last."""
        with self._lock:
            for post in post_ids:
                self._posts[post] = None
                self._posts.move_to_end(post)
            while len(self._posts) > self._capacity:
                self._posts.popitem(last=False)

    def forget(self, post_ids: Iterable[str]) -> None:
        with self._lock:
            for post in post_ids:
                self._posts.pop(post, None)


def lost_a_known_parent(error: exceptions.NotFound, present: Collection[str]) -> bool:
    """Whether a commit that skipped the Posts keys of `present` failed because one of those rows
    is gone, rather than for a lost session (transient: retried as it is) or a schema behind."""
    return bool(present) and not schema_behind(error) and not is_transient(error)
