"""Deprecated: the all-time ranking moved to spanner_reads.rankings.all_time, DEFAULT_EXTRA and
EPOCH to spanner_reads.fresh_side (removed in 0.3.0, CHANGELOG.md)."""

from spanner_reads import fresh_side
from spanner_reads.rankings import all_time
from spanner_store.moved import forward

__getattr__ = forward(
    __name__, {"fresh_top": all_time, "FreshTop": all_time, "DEFAULT_EXTRA": fresh_side, "EPOCH": fresh_side}
)
