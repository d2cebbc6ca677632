"""Reading the deltas not yet folded: each post's delta rows committed after its watermark, through
the commit-ordered index. The fold (spanner_writes/folding.py) reads them to fold them, exact reads
(spanner_reads/) to add them to the folded counts: one reading, shared.

Unfolded deltas are read as key ranges of the interleaved commit-time index, one range per
post from (post, watermark) exclusive to the end of the post: a seek, so a read touches only
unfolded deltas however many old ones are kept. (On the emulator, the same condition as SQL,
even with the watermark as a constant parameter, scanned every delta of the post:
docs/benchmarks.md, "Measurements behind the code".)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from google.cloud import spanner

from schemas.records import CounterSums
from spanner_store.key_sets import KeySet
from spanner_store.tables import DELTAS, DELTAS_BY_COMMIT, PostKey, counts_at, sketch_value

# Posts per read call; bounds the size of one request's key set.
READ_CHUNK = 1_000


def unfolded_ranges(watermarks: Mapping[PostKey, datetime], through: datetime | None = None) -> KeySet:
    """Index ranges of each post's deltas committed after its watermark (and at or before `through`)."""
    return KeySet(
        ranges=[
            spanner.KeyRange(start_open=[h, p, after], end_closed=[h, p] if through is None else [h, p, through])
            for (h, p), after in watermarks.items()
        ]
    )


def read_unfolded(
    snapshot, watermarks: Mapping[PostKey, datetime], columns: Sequence[str], through: datetime | None = None
) -> Iterable[list]:
    """Rows of `columns` (index, key or stored columns) of every unfolded delta of these posts."""
    if not watermarks:
        return []
    return snapshot.read(DELTAS, columns=columns, keyset=unfolded_ranges(watermarks, through), index=DELTAS_BY_COMMIT)


def hour_sums_of(row) -> tuple[datetime, CounterSums]:
    """A row of DELTA_SUM_COLUMNS (EventHour, the counters, Voters), of PostDeltas or
    PostHourlyCounts, as (its event hour, its sums; no events: they are not read)."""
    return row[0], CounterSums(counts_at(row, 1), voters=sketch_value(row[-1]))


def hourly_watermark(folded_through: datetime, hourly_folded_through: datetime | None) -> datetime:
    """The watermark of a post's PostHourlyCounts rows (NULL: in step with FoldedThrough)."""
    return folded_through if hourly_folded_through is None else hourly_folded_through
