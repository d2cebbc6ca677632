"""Counts the mutations of every commit this process makes, against Spanner's real limit.

The emulator accepts commits of any size; real Spanner rejects one of more than
SPANNER_MUTATION_LIMIT mutations (index entries included). `metering_commits()` wraps the
real client's `Batch.commit` and `Transaction.commit` (not a mock: the commit still goes to
the emulator) so every commit made in this process, by any component, is first counted
with `upvotes.devtools.mutation_count` from the schema's DDL. A commit over the limit raises
`CommitTooLarge` instead of being sent, and is recorded, so a caller that swallows the
error is still caught by whoever reads the meter. The tests wrap every test in it
(tests/conftest.py) and the benchmark reports the largest commit it saw.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, overload

from google.cloud.spanner_v1.batch import Batch
from google.cloud.spanner_v1.transaction import Transaction

import schemas
from schemas.ddl import schema_model
from spanner_store.database import SPANNER_MUTATION_LIMIT
from upvotes.devtools.mutation_count import commit_key_ranges, commit_mutation_count


class CommitTooLarge(AssertionError):
    """A commit real Spanner would reject for its size."""


class Meter(Protocol):
    """What metering_commits hands each commit's mutations to (a CommitMeter, or a test's own)."""

    def record(self, mutations) -> None: ...


M = TypeVar("M", bound=Meter)


@dataclass
class CommitMeter:
    """`extra_ddl`: tables of the caller's own beside posts.sql (the benchmark's baselines)."""

    limit: float = SPANNER_MUTATION_LIMIT
    extra_ddl: tuple[str, ...] = ()
    commits: int = 0
    largest: float = 0
    largest_tables: tuple[str, ...] = ()  # the tables the largest commit wrote
    too_large: list[str] = field(default_factory=list)  # one line per rejected commit
    # Distinct key ranges written, a proxy for splits (mutation_count.commit_key_ranges).
    key_ranges_total: int = 0
    key_ranges_largest: int = 0
    mutations_total: float = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self._model = schema_model(schemas.ddl_statements() + list(self.extra_ddl))

    def record(self, mutations) -> None:
        count = commit_mutation_count(mutations, self._model)
        ranges = commit_key_ranges(mutations, self._model)
        tables = tuple(sorted({_table_of(m) for m in mutations}))
        with self._lock:
            self.commits += 1
            self.mutations_total += count
            self.key_ranges_total += ranges
            self.key_ranges_largest = max(self.key_ranges_largest, ranges)
            if count > self.largest:
                self.largest, self.largest_tables = count, tables
            if count > self.limit:
                message = f"a commit of {count} mutations (over {self.limit}) to {', '.join(tables)}"
                self.too_large.append(message)
                raise CommitTooLarge(message)

    def reset(self) -> None:
        with self._lock:
            self.commits, self.largest, self.largest_tables, self.too_large = 0, 0, (), []
            self.key_ranges_total = self.key_ranges_largest = 0
            self.mutations_total = 0


def _table_of(mutation) -> str:
    pb = type(mutation).pb(mutation)
    return getattr(pb, pb.WhichOneof("operation")).table


@overload
def metering_commits(meter: None = None) -> contextlib.AbstractContextManager[CommitMeter]: ...
@overload
def metering_commits(meter: M) -> contextlib.AbstractContextManager[M]: ...


def metering_commits(meter: Meter | None = None) -> contextlib.AbstractContextManager[Meter]:
    """Counts (and bounds) every commit of this process while the block runs: in `meter`, any
    object with a `record(mutations)` (default: a new CommitMeter)."""
    return _metering(meter)


@contextlib.contextmanager
def _metering(meter: Meter | None) -> Iterator[Meter]:
    recording = meter or CommitMeter()
    originals = {cls: cls.commit for cls in (Batch, Transaction)}

    def metered(original):
        def commit(self, *args, **kwargs):
            recording.record(self._mutations)  # noqa: SLF001 - the mutations the commit sends
            return original(self, *args, **kwargs)

        return commit

    for cls, original in originals.items():
        setattr(cls, "commit", metered(original))  # noqa: B010  # mypy refuses assigning to a method
    try:
        yield recording
    finally:
        for cls, original in originals.items():
            setattr(cls, "commit", original)  # noqa: B010  # as above
