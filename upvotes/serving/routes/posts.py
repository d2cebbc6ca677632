"""GET /v1/posts/{post_id} and GET /v1/posts?id=a&id=b: posts' exact counts, public, through the
service's CountsReader (a hot post costs at most one Spanner read per refresh interval however
many viewers ask). A post ID may hold "/": the votes router, matched first, takes the paths of a
user's vote (upvotes/serving/routes/votes.py)."""

from __future__ import annotations

from fastapi import APIRouter, Query
from starlette.exceptions import HTTPException

from spanner_reads.counts_reader import CountsReader
from upvotes.serving.routes.ids import check_post_id

MAX_IDS_PER_READ = 1_000
UNIQUE_HELP = "add unique_voters: distinct user IDs that upvoted (a HyperLogLog estimate)"


def router(reader: CountsReader) -> APIRouter:
    posts = APIRouter()

    @posts.get("/v1/posts/{post_id:path}", summary="One post's exact counts")
    def read_post(post_id: str, unique: bool = Query(False, description=UNIQUE_HELP)) -> dict:
        check_post_id(post_id)
        return reader.get(post_id, unique).to_json()

    @posts.get("/v1/posts", summary="Several posts' exact counts, in the order asked")
    def read_posts(
        id: list[str] = Query(..., description="a post ID; repeat for more"),  # noqa: A002
        unique: bool = Query(False, description=UNIQUE_HELP),
    ) -> dict:
        if len(id) > MAX_IDS_PER_READ:
            raise HTTPException(400, f"{len(id)} ids, at most {MAX_IDS_PER_READ} per request")
        for post_id in id:
            check_post_id(post_id)
        return {"posts": [count.to_json() for count in reader.get_many(id, unique)]}

    return posts
