"""WindowAndMergeVoteStates: vote-state events merged to each user's latest state per post, once
per window.

ParseVotes (transforms/parse_and_sum.py) has already merged each bundle's vote-state events to
the latest per (post, user), one element per shard of users, stamped with ingestion time. Here
they are windowed exactly as the sums are (transforms/windowing.py `ingestion_windows`: fixed
windows over ingestion time, one DISCARDING pane per window, and a late pane of its own for what
arrives behind the watermark within the allowed lateness) and merged across bundles with `later` (schemas/vote_states.py): one element per shard and pane,
holding each (post, user)'s latest state in the window and how many events it stands for.

Merging is exact whatever the grouping: `later` is associative and commutative and picks the same
state in every order, so two bundles (or two workers) carrying the same user's events end at the
same merged state, and applying the merged state moves the counts as applying every event would
(transforms/vote_state_sink.py applies it against the stored state). The window's merge is the only
state the pipeline keeps per (post, user), and only while the window is open: a restarted stream
or a new Dataflow job loses nothing by starting without it, since the stored state in Spanner is
what every state is applied against.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam

from schemas.vote_states import keep_latest
from transforms.parse_and_sum import ShardVotes
from transforms.windowing import ingestion_windows


class MergeLatestVotes(beam.CombineFn):
    """Merges ShardVotes to the latest state per (post, user); runners combine within each bundle
    before the shuffle."""

    def create_accumulator(self) -> ShardVotes:
        return {}

    def add_input(self, acc: ShardVotes, states: ShardVotes) -> ShardVotes:
        for key, state in states.items():
            keep_latest(acc, key, state)
        return acc

    def merge_accumulators(self, accumulators: Iterable[ShardVotes]) -> ShardVotes:
        accumulators = iter(accumulators)
        merged = next(accumulators, {})  # Beam lets the first be changed; the others are read only
        for acc in accumulators:
            self.add_input(merged, acc)
        return merged

    def extract_output(self, acc: ShardVotes) -> ShardVotes:
        return acc


class WindowAndMergeVoteStates(beam.PTransform):
    """(shard, ShardVotes) stamped with their ingestion time (ParseVotes' states) -> (shard, ShardVotes),
    one per shard of users and pane of fixed windows: each (post, user)'s latest state in the pane."""

    def __init__(self, window_seconds: int) -> None:
        super().__init__()
        self._window_seconds = window_seconds

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        return (
            keyed
            | "FixedWindows" >> ingestion_windows(self._window_seconds)
            | "LatestPerUser" >> beam.CombinePerKey(MergeLatestVotes())
        )
