"""`upvotes serve`: the HTTP service for app servers (upvotes/service.py) and the live page at /."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from upvotes.commands.argument_types import non_negative_float
from upvotes.commands.database_flags import add_database_arguments
from upvotes.errors import UsageError

HELP = ("HTTP service: exact counts, fresh top posts and vote publishing as JSON, OpenAPI docs at /docs, "
        "a live page at /; loopback only unless writes need a token.")
TOKEN_ENV = "UPVOTES_WRITE_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    parser.add_argument("--topic", help="votes topic (ID or projects/P/topics/T) that POST /v1/votes publishes to; "
                        "without it, POST /v1/votes answers 503")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1). Any non-loopback address needs a write "
                        f"token: --token-file or ${TOKEN_ENV}")
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    parser.add_argument("--staleness-seconds", type=non_negative_float, default=0.0,
                        help="read counts this many seconds in the past (exact staleness: any replica can "
                        "serve them); 0 reads strong (default)")
    parser.add_argument("--refresh-seconds", type=non_negative_float, default=1.0,
                        help="how long a post's count is served from this process's cache before one "
                        "Spanner read refreshes it (default 1)")
    parser.add_argument("--token-file", type=Path,
                        help=f"file holding the bearer token POST /v1/votes requires (or set ${TOKEN_ENV}); "
                        "never given as a flag value, which other users could see in the process list")
    parser.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                        help="allow browser pages from this origin (repeatable); CORS is off by default")


def write_token(args: argparse.Namespace) -> str | None:
    """The write token from --token-file or $UPVOTES_WRITE_TOKEN, or None."""
    if args.token_file is not None:
        try:
            token = args.token_file.read_text(encoding="utf-8").strip()
        except OSError as error:
            raise UsageError(f"cannot read --token-file {args.token_file}: {error.strerror}") from None
        if not token:
            raise UsageError(f"--token-file {args.token_file} is empty")
        return token
    token = os.environ.get(TOKEN_ENV, "").strip()
    return token or None


def run(args: argparse.Namespace) -> int:
    from spanner_store.database import classic_sessions_for_concurrent_reads

    try:
        from upvotes.service import ServiceSettings, is_loopback, serve_in_background
    except ModuleNotFoundError as missing:
        raise UsageError(f"upvotes serve needs {missing.name}: pip install -e '.[serve]' "
                         "(make install does)") from None

    token = write_token(args)
    if not is_loopback(args.host) and token is None:
        raise UsageError(f"refusing to listen on {args.host} with open writes: put a bearer token in a file "
                         f"(--token-file) or in ${TOKEN_ENV}, or listen on 127.0.0.1")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port number")
    classic_sessions_for_concurrent_reads()
    settings = ServiceSettings(write_token=token, cors_origins=tuple(args.cors_origin))
    running = serve_in_background(args.project, args.instance, args.database, args.topic, args.host, args.port,
                                  args.staleness_seconds, args.refresh_seconds, settings)
    print(f"upvotes serve: {running.url}/ (API docs at /docs); writes "
          f"{'need a bearer token' if token else 'are open (loopback only)'}; Ctrl-C to stop", flush=True)
    try:
        while running.thread.is_alive():
            running.thread.join(1.0)
    except KeyboardInterrupt:
        running.stop()
    return 0
