"""Corrected dead letters, each written once by its dead letter's identity alone (`upvotes
dead-letters replay`, upvotes/operations/dead_letters.py). An operator's write, beside the replay
it serves: the pipelines never write corrections, so it stays out of the workers' packages (the
worker image holds exactly what the pipelines import, tests/test_templates.py).

A correction (the corrected line of a rejected vote) is written together with its marker, a
ReplayedCorrections row keyed by the dead letter's identity and holding the correction's canonical
text, in ONE commit:

- a corrected delta event: one blind commit of its delta row (`add_delta_writes`, with the commit's
  DeltaCommits and TopCandidates rows) and the marker, inserts all. A second write for the same
  identity fails whole with ALREADY_EXISTS on the marker, whatever the correction now says (another
  post, hour or value), and the marker is read back;
- a corrected vote state: the vote-state sink's own transaction (`apply_batch`) reads the marker
  first: found, it writes nothing; else it applies the state and writes the marker.

Both return the correction recorded under the identity before this write, None when there was none
and this one is now written; the caller compares the two. Why a marker rather than the delta row's
key: that key names the post and the event hour, so a correction edited between a killed replay
and its rerun was written a second time under a new key (counted twice), and one edited in value
only collided with the first and was taken as written (dropped in silence).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from google.api_core import exceptions
from google.cloud import spanner

from schemas.records import PostDelta, PostUser
from schemas.vote_states import LatestVote
from spanner_store.database import MUTATION_BUDGET, commit_mutations, run_transaction
from spanner_store.key_sets import KeySet
from spanner_store.mutation_cost import insert_cost
from spanner_store.tables import REPLAYED_CORRECTION_COLUMNS, REPLAYED_CORRECTIONS, replayed_correction_key
from spanner_writes.deltas import add_delta_writes
from spanner_writes.votes import apply_batch

# The marker's row: every column of ReplayedCorrections (no index on it).
MUTATIONS_PER_MARKER = insert_cost(REPLAYED_CORRECTIONS, REPLAYED_CORRECTION_COLUMNS)


class CorrectionMarker(NamedTuple):
    """What a replay records of one corrected dead letter, in the commit that counts it."""

    identity: str  # the dead letter's identity (its event_id, or "@<message ID>/<line>")
    correction: str  # the correction's canonical text, as counted


def add_marker_write(batch_or_transaction, marker: CorrectionMarker) -> None:
    """The marker's insert: a second one for the same identity fails the whole commit."""
    batch_or_transaction.insert(
        REPLAYED_CORRECTIONS,
        columns=REPLAYED_CORRECTION_COLUMNS,
        values=[replayed_correction_key(marker.identity) + (marker.correction, spanner.COMMIT_TIMESTAMP)],
    )


def recorded_correction(reader, identity: str) -> str | None:
    """The correction a replay recorded for this identity (a snapshot or a transaction reads it); None if none."""
    rows = reader.read(
        REPLAYED_CORRECTIONS, columns=("Correction",), keyset=KeySet(keys=[list(replayed_correction_key(identity))])
    )
    return next((row[0] for row in rows), None)


def write_corrected_delta(database, delta: PostDelta, marker: CorrectionMarker) -> str | None:
    """One attempt to commit a corrected delta event's row with its marker (see the module docstring):
    None when written now, else the correction recorded before, and nothing written."""

    def write(batch) -> None:
        add_delta_writes(batch, [delta])
        add_marker_write(batch, marker)

    try:
        commit_mutations(database, write)
        return None
    except exceptions.AlreadyExists:
        with database.snapshot() as snapshot:
            recorded = recorded_correction(snapshot, marker.identity)
    # No marker, so the delta row's own key collided: a row of a replay run before markers existed,
    # killed before its acknowledgement. Taken as this correction, as that version took it.
    return marker.correction if recorded is None else recorded


def apply_corrected_states(database, states: Mapping[PostUser, LatestVote], marker: CorrectionMarker) -> str | None:
    """One read-write transaction attempt applying a corrected vote state through the vote-state
    sink's path, with its marker (see the module docstring): None when applied now (its state later
    than the stored one, or superseded by it, as the sink would find it), else the correction
    recorded before, and nothing written. An abort surfaces for run_with_retries, which re-reads."""

    def apply(transaction) -> str | None:
        recorded = recorded_correction(transaction, marker.identity)
        if recorded is None:
            apply_batch(transaction, states, MUTATION_BUDGET - MUTATIONS_PER_MARKER)
            add_marker_write(transaction, marker)
        return recorded

    return run_transaction(database, apply)
