"""Deprecated: the hot ranking moved to spanner_reads.rankings.hot, the last N hours to
spanner_reads.rankings.last_hours, their answer to spanner_reads.rankings.trending_top and
RankedPost to spanner_reads.rankings.ranking (removed in 0.3.0, CHANGELOG.md)."""

from spanner_reads.rankings import hot, last_hours, ranking, trending_top
from spanner_store.moved import forward

__getattr__ = forward(
    __name__,
    {
        **dict.fromkeys(
            ("HotRankingUnavailable", "hot_top", "top_of_hot_index", "HOT_FLOORS_LOG2", "LOG2_MARGIN"), hot
        ),
        **dict.fromkeys(
            ("window_top", "window_hours", "read_hour_lists", "HourLists", "MAX_HOURS", "MAX_DEPTH"), last_hours
        ),
        **dict.fromkeys(("TrendingTop", "HOT", "LAST"), trending_top),
        "RankedPost": ranking,
    },
)
