"""GET /v1/top: the top posts by exact upvotes, fresh without a fold, through the service's
CountsReader; with by=hot or last=24h, what is viral now (spanner_reads/rankings/): the top
posts by hot score, or by upvotes in the last N event hours. A bad `by`, a bad or too long window,
or by=hot with last is 400 with the reason; a database without a recorded half-life is 503
(upvotes/serving/json_errors.py)."""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query
from starlette.exceptions import HTTPException

from spanner_reads.counts_reader import CountsReader
from spanner_reads.rankings.hot import HOT
from spanner_reads.rankings.last_hours import MAX_HOURS
from spanner_reads.rankings.trending_top import TrendingTop
from upvotes.argument_types import hours_of

MAX_TOP_N = 1_000
BY_HELP = ("upvotes: all-time exact upvotes (the default); hot: hot score, upvotes minus downvotes each weighing "
           "half as much every half-life, each post with \"hot\", its score at the snapshot")
LAST_HELP = ("rank by upvotes in the last N event hours instead, written Nh or Nd (24h, 7d; at most "
             f"{MAX_HOURS}h), each post with \"window_upvotes\"; not with by=hot")
HOT_SCORE = "hot"  # the per-post score field of each trending answer
WINDOW_SCORE = "window_upvotes"


def trending_json(top: TrendingTop, score_field: str) -> dict:
    """A trending answer: {"posts": [{"post_id", a field per counter, score_field}...]} and the
    ranking's header (TrendingTop.to_json: "by", "as_of", "exact", "bound", "folded_through", ...)."""
    score = int if score_field == WINDOW_SCORE else float
    return {"posts": [{**post.totals.to_json(), score_field: score(post.score)} for post in top.posts],
            **top.to_json()}


def router(reader: CountsReader) -> APIRouter:
    top = APIRouter()

    @top.get("/v1/top", summary="Top posts by exact upvotes, fresh without a fold; by hot score (by=hot) or by "
                                "upvotes in the last N hours (last=24h): what is viral now")
    def read_top(n: int = Query(10, ge=1, le=MAX_TOP_N),
                 by: Literal["upvotes", "hot"] = Query("upvotes", description=BY_HELP),
                 last: str | None = Query(None, max_length=16, description=LAST_HELP)) -> dict:
        if last is not None:
            if by == HOT:
                raise HTTPException(400, "last ranks by upvotes in the window: ask for by=hot or last, not both")
            try:
                hours = hours_of(last)
            except ValueError as error:
                raise HTTPException(400, f"last: {error}") from None
            return trending_json(reader.window_top(n, hours), WINDOW_SCORE)
        if by == HOT:
            return trending_json(reader.hot_top(n), HOT_SCORE)
        page = reader.top(n)
        return {
            "posts": [post.to_json() for post in page.posts],
            "as_of": page.as_of.isoformat(), "exact": page.exact, "bound": page.bound,
            "folded_through": None if page.folded_through is None else page.folded_through.isoformat(),
        }

    return top
