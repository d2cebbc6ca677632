"""The live page (upvotes/serving/live_page.py): GET / with its session, and its script and style."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from upvotes.serving.live_page import PAGE_CSP, PAGE_SCRIPT, PAGE_STYLE, SCRIPT_PATH, STYLE_PATH, page_html
from upvotes.serving.live_sessions import COOKIE, LiveSessions, SessionRefused


def router(sessions: LiveSessions, clock: Callable[[], float]) -> APIRouter:
    live = APIRouter()

    @live.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page(request: Request) -> HTMLResponse:
        """The live page, with a session: the one its cookie proves, or a new one when that is
        missing, invalid or past half its life (the Host was checked before this runs)."""
        now = clock()
        session = sessions.check(request.cookies.get(COOKIE), now)
        renew = isinstance(session, SessionRefused) or session.expires_s - now < sessions.lifetime_s / 2
        if renew:
            session, cookie = sessions.issue(now)
        assert not isinstance(session, SessionRefused)  # a refused one was renewed
        response = HTMLResponse(
            page_html(sessions.csrf_token(session), sessions.user_id(session)),
            headers={"Content-Security-Policy": PAGE_CSP},
        )
        if renew:
            response.set_cookie(
                COOKIE,
                cookie,
                max_age=int(sessions.lifetime_s),
                path="/",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response

    @live.get(SCRIPT_PATH, include_in_schema=False)
    def page_script() -> Response:
        return Response(PAGE_SCRIPT, media_type="text/javascript; charset=utf-8")

    @live.get(STYLE_PATH, include_in_schema=False)
    def page_style() -> Response:
        return Response(PAGE_STYLE, media_type="text/css; charset=utf-8")

    return live
