"""The server runner: the service's app on uvicorn, as `upvotes serve`, the demo and the tests run
it. A request head must arrive within `head_timeout_s` (uvicorn alone resets its idle timer on
every byte, so a client sending one byte a second could hold a connection forever);
X-Forwarded-For/-Proto are believed only from the trusted proxies."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from upvotes.serving.serve_settings import ServiceSettings

STARTUP_TIMEOUT_S = 30.0


def protocol_with_head_timeout(head_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose next request head has not arrived
    `head_timeout_s` after the connection opened or the previous response ended (slow loris)."""

    class HeadTimeoutH11Protocol(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # noqa: ANN001
            super().connection_made(transport)
            self._arm_head_deadline()

        def on_response_complete(self) -> None:
            self._arm_head_deadline()  # before the base class handles a pipelined next request
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            super().connection_lost(exc)

        def _arm_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            waiting_since = self.cycle
            self._head_deadline = self.loop.call_later(head_timeout_s, self._head_overdue, waiting_since)

        def _head_overdue(self, waiting_since) -> None:  # noqa: ANN001
            # A new request cycle since arming means its head arrived in time; its body is
            # bounded by the app's body timeout.
            if self.cycle is waiting_since and not self.transport.is_closing():
                self.transport.close()

    return HeadTimeoutH11Protocol


def uvicorn_config(app: ASGIApp, host: str, port: int, settings: ServiceSettings) -> uvicorn.Config:
    """uvicorn as the service runs it. X-Forwarded-For/-Proto are believed only from
    `settings.trusted_proxies` (uvicorn alone believes them from 127.0.0.1 and ::1, so any
    local client could pick its own address for the rate limits)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_with_head_timeout(settings.head_timeout_s),
        timeout_keep_alive=5,
        limit_concurrency=1_000,
        server_header=False,
        access_log=False,
        log_level="warning",
        lifespan="off",
        proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=list(settings.trusted_proxies),
    )


@dataclass
class RunningService:
    """A service started by `start_in_background`; `stop()` shuts it down and waits."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)


def start_in_background(
    app: ASGIApp, settings: ServiceSettings, host: str = "127.0.0.1", port: int = 0
) -> RunningService:
    """Runs `app` on uvicorn in a daemon thread (port 0: a free port); returns once it listens."""
    server = uvicorn.Server(uvicorn_config(app, host, port, settings))
    thread = threading.Thread(target=server.run, name="upvotes-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the service did not start on {host}:{port}")
        time.sleep(0.01)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return RunningService(f"http://{shown}:{bound_port}", server, thread)
