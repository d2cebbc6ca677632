"""The post and user IDs a path or a query carries, held to the event contract's limits: a route
answers 400 for an ID no event could carry."""

from __future__ import annotations

from starlette.exceptions import HTTPException

from schemas.contract import MAX_ID_CHARS, MAX_POST_ID_CHARS


def check_post_id(post_id: str) -> None:
    if not post_id:
        raise HTTPException(400, "post_id is empty")
    if len(post_id) > MAX_POST_ID_CHARS:
        raise HTTPException(400, f"post_id has {len(post_id)} characters, at most {MAX_POST_ID_CHARS}")


def check_user_id(user_id: str) -> None:
    if not user_id:
        raise HTTPException(400, "user_id is empty")
    if len(user_id) > MAX_ID_CHARS:
        raise HTTPException(400, f"user_id has {len(user_id)} characters, at most {MAX_ID_CHARS}")
