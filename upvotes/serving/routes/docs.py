"""GET /docs: the OpenAPI description (/openapi.json, FastAPI's own) as Swagger UI, whose inline
bootstrap script its Content-Security-Policy allows by hash and nothing else inline."""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

SWAGGER_UI_SOURCE = "https://cdn.jsdelivr.net"


def inline_script_csp(html: str, sources: str) -> str:
    """A CSP for an HTML page with inline scripts: each allowed by its SHA-256 hash only."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"
        for script in re.findall(r"<script>(.*?)</script>", html, re.S)
    )
    return (
        f"default-src 'none'; script-src {sources} {hashes}; style-src {sources} 'unsafe-inline'; "
        "img-src https://fastapi.tiangolo.com data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


def router(openapi_url: str) -> APIRouter:
    docs_html = bytes(get_swagger_ui_html(openapi_url=openapi_url, title="upvotes API").body).decode()
    docs_csp = inline_script_csp(docs_html, SWAGGER_UI_SOURCE)
    docs = APIRouter()

    @docs.get("/docs", include_in_schema=False)
    def read_docs() -> HTMLResponse:
        return HTMLResponse(docs_html, headers={"Content-Security-Policy": docs_csp})

    return docs
