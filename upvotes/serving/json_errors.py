"""Every error the service answers is JSON {"error": reason}, never a traceback: the refusals the
routes return, and what `install` makes of an exception a route raises."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from google.api_core import exceptions as google_exceptions
from starlette.exceptions import HTTPException

from spanner_reads.rankings.ranking import RankingUnavailable

LOG = logging.getLogger(__name__)


def error(status: int, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": reason}, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Turns what routes raise into JSON errors: an HTTPException into its status and detail, an
    invalid request into 400 naming the parameter, an unreachable database or Pub/Sub into 503, a
    ranking the database cannot answer yet into 503 (its reason says what to run), anything else
    into 500, its traceback in the server's log only."""

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, raised: HTTPException) -> JSONResponse:
        return error(raised.status_code, str(raised.detail), getattr(raised, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, raised: RequestValidationError) -> JSONResponse:
        first = raised.errors()[0] if raised.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return error(400, f"invalid request: {where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(google_exceptions.GoogleAPICallError)
    async def backend_error(_: Request, raised: google_exceptions.GoogleAPICallError) -> JSONResponse:
        LOG.warning("backend error: %s", raised)
        return error(503, f"the database or Pub/Sub is unavailable ({type(raised).__name__}); retry later")

    @app.exception_handler(RankingUnavailable)
    async def ranking_unavailable(_: Request, raised: RankingUnavailable) -> JSONResponse:
        return error(503, str(raised))

    @app.exception_handler(Exception)
    async def internal_error(_: Request, raised: Exception) -> JSONResponse:
        LOG.exception("internal error")  # the traceback goes to the server log, never to the client
        return error(500, "internal error")
