"""GET /v1/top: the top posts of any ranking of the registry (spanner_reads/rankings/), through
the service's CountsReader. `by` names a ranking without a parameter (all time, the default, or
hot); a ranking with one is asked for by it (`last=24h`), with `by` its own or absent. Each post
has its exact counts and, when its ranking scores by anything but upvotes, its score ("hot",
"window_upvotes"); the answer adds the ranking's header (its to_json). A bad `by`, a bad
parameter or two that no one ranking answers is 400 with the reason; a ranking the database
cannot answer yet is 503 (upvotes/serving/json_errors.py).

The route's query parameters come from the registry: `asked_ranking`'s signature, which FastAPI
reads for their validation and for the API's description, is built from it.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query
from starlette.exceptions import HTTPException

from spanner_reads.counts_reader import CountsReader
from spanner_reads.rankings import BY_CHOICES, DEFAULT, PARAMETERS, RANKINGS, NotBoth, choose
from spanner_reads.rankings.ranking import RankedPage, Ranking

MAX_TOP_N = 1_000
MAX_PARAMETER_CHARS = 16
SUMMARY = (
    "Top posts by exact counts, fresh without a fold, certified when they can be: by="
    + "|".join(BY_CHOICES)
    + "".join(f" or {parameter.name}={parameter.metavar}" for parameter in PARAMETERS)
)
BY_HELP = "; ".join(f"{by}: {RANKINGS[by].help}" + (" (the default)" if by == DEFAULT else "") for by in BY_CHOICES)


def asked_ranking(by: str, **given: str | None) -> tuple[Ranking, dict[str, Any]]:
    """The ranking a request asks for and its read's parameters, parsed: 400 with the reason for
    a parameter with another `by` or a bad parameter."""
    try:
        ranking, texts = choose(by, given)
    except NotBoth as refused:
        name, value = refused.other
        other = f"by={value}" if name == "by" else name
        raise HTTPException(
            400,
            f"{refused.parameter.name} ranks by {refused.parameter.ranks}: ask for {other} or "
            f"{refused.parameter.name}, not both",
        ) from None
    if ranking.parameter is None:
        return ranking, {}
    try:
        return ranking, {key: ranking.parameter.parse(text) for key, text in texts.items()}
    except ValueError as error:
        raise HTTPException(400, f"{ranking.parameter.name}: {error}") from None


asked_ranking.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # FastAPI reads it
    [
        inspect.Parameter(
            "by",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Literal[BY_CHOICES],
            default=Query(DEFAULT, description=BY_HELP),
        ),
        *(
            inspect.Parameter(
                parameter.name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=str | None,
                default=Query(
                    None,
                    max_length=MAX_PARAMETER_CHARS,
                    description=f"{parameter.help} ({parameter.metavar}); not with by="
                    + " or ".join(by for by in BY_CHOICES if by != parameter.by),
                ),
            )
            for parameter in PARAMETERS
        ),
    ],
    return_annotation=tuple,
)


def page_json(ranking: Ranking, page: RankedPage) -> dict:
    """{"posts": [{"post_id", a field per counter[, its score]}...], and the page's header}."""
    field = ranking.score_field
    return {
        "posts": [{**post.totals.to_json(), **({field: ranking.score(post)} if field else {})} for post in page.ranked],
        **page.to_json(),
    }


def router(reader: CountsReader) -> APIRouter:
    top = APIRouter()

    @top.get("/v1/top", summary=SUMMARY)
    def read_top(
        n: int = Query(10, ge=1, le=MAX_TOP_N), asked: tuple[Ranking, dict[str, Any]] = Depends(asked_ranking)
    ) -> dict:
        ranking, parameters = asked
        return page_json(ranking, reader.ranked(ranking, n, **parameters))

    return top
