"""GET /healthz, for load balancers and operators (its docstring is the API's description of it)."""

from __future__ import annotations

from collections import Counter

from fastapi import APIRouter

from spanner_reads.counts_reader import CountsReader
from upvotes.serving.serve_settings import ServiceSettings


def router(reader: CountsReader, settings: ServiceSettings, refused: Counter[str]) -> APIRouter:
    health = APIRouter()

    @health.get("/healthz")
    def healthz() -> dict:
        """Up; how many Spanner snapshots this process's reader has opened (for load tests); the
        abuse limits in force; how many requests each check refused since the start."""
        return {
            "status": "ok",
            "spanner_reads": reader.spanner_reads,
            "limits": settings.limits(),
            "refused": dict(refused),
        }

    return health
