"""`upvotes serve`: the HTTP service for app servers (upvotes/serving/service.py) and the live page at /.

Its flags, defaults and limits live in upvotes/serving/serve_settings.py; its write credential
comes from upvotes/serving/write_credentials.py (docs/security.md)."""

from __future__ import annotations

import argparse
import os

from upvotes.command_errors import UsageError
from upvotes.flags.database import add_database_arguments
from upvotes.serving.serve_settings import (
    InvalidServeSetting,
    ServiceSettings,
    add_serve_flags,
    allowed_hosts_for,
)

HELP = (
    "HTTP service: exact counts, fresh top posts and vote publishing as JSON, OpenAPI docs at /docs, "
    "a live page at /; writes always need a credential (a bearer token, generated if none is given)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_arguments(parser)
    add_serve_flags(parser)


def settings_of(args: argparse.Namespace, tokens: tuple[str, ...]) -> ServiceSettings:
    """The service's settings from serve's flags; InvalidServeSetting says which one is wrong."""
    return ServiceSettings(
        write_tokens=tokens,
        allowed_hosts=allowed_hosts_for(args.host, args.allowed_host),
        cors_origins=tuple(args.cors_origin),
        trusted_proxies=tuple(args.trusted_proxy),
        max_delta=args.max_delta,
        token_writes_per_s=args.token_writes_per_second,
        session_writes_per_s=args.session_writes_per_second,
        client_writes_per_s=args.client_writes_per_second,
        session_s=args.session_hours * 3600,
    )


def run(args: argparse.Namespace) -> int:
    from spanner_store.database import classic_sessions_for_concurrent_reads
    from upvotes.serving.write_credentials import CredentialError, resolve_write_credential

    try:
        from upvotes.serving.service import serve_in_background
    except ModuleNotFoundError as missing:
        raise UsageError(f"upvotes serve needs {missing.name}: pip install -e '.[serve]' (make install does)") from None

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port number")
    try:
        credential = resolve_write_credential(args.token_file, os.environ)
        settings = settings_of(args, credential.tokens)
    except (CredentialError, InvalidServeSetting) as error:
        raise UsageError(str(error)) from None
    classic_sessions_for_concurrent_reads()
    running = serve_in_background(
        args.project,
        args.instance,
        args.database,
        args.topic,
        settings,
        args.host,
        args.port,
        args.staleness_seconds,
        args.refresh_seconds,
    )
    print(
        f"upvotes serve: {running.url}/ (API docs at /docs); writes need a bearer token "
        f"({credential.source}) or the live page's session; Ctrl-C to stop",
        flush=True,
    )
    if credential.generated_file is not None:
        print(f"write token (shown once; new at every start): {credential.tokens[0]}", flush=True)
    try:
        while running.thread.is_alive():
            running.thread.join(1.0)
    except KeyboardInterrupt:
        running.stop()
    return 0
