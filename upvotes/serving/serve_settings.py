"""`upvotes serve`'s settings in one place: every flag with its default and help, the
`ServiceSettings` the app runs with, and the table of them in docs/reading.md (generated from here,
`tests/test_serve_security.py` keeps it in step). No FastAPI imported here, so the CLI can
build its help without the `serve` extra.

The limits are the service's abuse limits (docs/security.md): writes per second per
credential and per client address (token buckets holding BURST_SECONDS of the rate), and
the largest |delta| a bearer token may send (a live-page session sends no delta events: it
votes once per post, with vote-state events). The event contract's MAX_ABS_DELTA stays the
hard ceiling whatever `--max-delta` says.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from schemas.contract import MAX_ABS_DELTA
from spanner_reads.counts_reader import DEFAULT_REFRESH_S
from upvotes.argument_types import non_negative_float, positive_float

# Loopback names a browser on this machine may use; the bind address and --allowed-host add to them.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
UNSPECIFIED_ADDRESSES = ("0.0.0.0", "::")  # listening on every address names no host
BURST_SECONDS = 2.0  # a token bucket holds this many seconds of its rate
DEFAULT_TOKEN_WRITES_PER_S = 500.0
DEFAULT_SESSION_WRITES_PER_S = 5.0
DEFAULT_CLIENT_WRITES_PER_S = 20.0
DEFAULT_SESSION_HOURS = 12.0
DEFAULT_HEAD_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 10.0
MIN_TOKEN_CHARS = 16
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*)")


class InvalidServeSetting(ValueError):
    """A serve setting that would weaken or break the service; the message says what to do."""


def normal_host(name: str) -> str:
    """A host name as a Host header carries it: lower case, IPv6 literals in brackets."""
    name = name.strip().lower()
    try:
        if ipaddress.ip_address(name.strip("[]")).version == 6:
            return f"[{name.strip('[]')}]"
    except ValueError:
        pass
    return name


def allowed_hosts_for(bind_host: str, extra: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    """The Host allowlist: the loopback names, the bind address (unless it is 0.0.0.0 or ::)
    and every --allowed-host, each once."""
    hosts = list(LOOPBACK_HOSTS)
    if bind_host not in UNSPECIFIED_ADDRESSES:
        hosts.append(bind_host)
    hosts += list(extra)
    return tuple(dict.fromkeys(normal_host(h) for h in hosts))


def exact_origin(origin: str) -> str:
    """`scheme://host[:port]`, checked: a CORS origin is an exact origin, never a pattern."""
    parts = urlsplit(origin.strip())
    if (
        "*" in origin
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username
        or parts.password
    ):
        raise InvalidServeSetting(
            f"--cors-origin {origin!r} is not an exact origin such as https://app.example.com "
            "(no wildcard, path or credentials)"
        )
    return origin.strip().rstrip("/").lower()


@dataclass(frozen=True)
class ServiceSettings:
    """What the app enforces. `write_tokens`: the bearer tokens POST /v1/votes accepts (at least
    one; several during a rotation); the live page's session is signed with a key derived
    from the first."""

    write_tokens: tuple[str, ...]
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    cors_origins: tuple[str, ...] = ()
    trusted_proxies: tuple[str, ...] = ()
    max_delta: int = MAX_ABS_DELTA
    token_writes_per_s: float = DEFAULT_TOKEN_WRITES_PER_S
    session_writes_per_s: float = DEFAULT_SESSION_WRITES_PER_S
    client_writes_per_s: float = DEFAULT_CLIENT_WRITES_PER_S
    session_s: float = DEFAULT_SESSION_HOURS * 3600
    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S

    def __post_init__(self) -> None:
        if not self.write_tokens:
            raise InvalidServeSetting("writes always need a credential: give at least one write token")
        for token in self.write_tokens:
            if len(token.strip()) < MIN_TOKEN_CHARS:
                raise InvalidServeSetting(
                    f"a write token must be at least {MIN_TOKEN_CHARS} characters; make one with "
                    "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
                )
        for host in self.allowed_hosts:
            if host != normal_host(host) or not _HOST.fullmatch(host):
                raise InvalidServeSetting(
                    f"--allowed-host {host!r} is not a host name or address (no port, no wildcard; lower case)"
                )
        object.__setattr__(self, "cors_origins", tuple(exact_origin(o) for o in self.cors_origins))
        if not 1 <= self.max_delta <= MAX_ABS_DELTA:
            raise InvalidServeSetting(
                f"--max-delta {self.max_delta} must be between 1 and the event contract's limit {MAX_ABS_DELTA}"
            )
        for name in ("token_writes_per_s", "session_writes_per_s", "client_writes_per_s", "session_s"):
            if not getattr(self, name) > 0:
                raise InvalidServeSetting(f"{name} must be above 0")

    def limits(self) -> dict:
        """The abuse limits, as /healthz shows them."""
        return {
            "max_delta": {"token": self.max_delta},
            "writes_per_second": {
                "token": self.token_writes_per_s,
                "live_page_session": self.session_writes_per_s,
                "client_address": self.client_writes_per_s,
            },
            "burst_seconds": BURST_SECONDS,
            "session_seconds": self.session_s,
        }


# --- the flags ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeFlag:
    flag: str  # without the leading dashes
    help: str
    default: object = None
    type: Callable[[str], object] = str
    repeatable: bool = False
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.flag.replace("-", "_")

    @property
    def shown_default(self) -> str:
        if self.repeatable:
            return "none"
        return (
            "none"
            if self.default is None
            else f"`{self.default:g}`"
            if isinstance(self.default, float)
            else f"`{self.default}`"
        )


def max_delta(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_ABS_DELTA:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_ABS_DELTA} (the event contract's limit)")
    return value


TOKEN_ENV = "UPVOTES_WRITE_TOKEN"
SERVE_FLAGS: tuple[ServeFlag, ...] = (
    ServeFlag(
        "topic",
        "Votes topic (ID or projects/P/topics/T) that POST /v1/votes publishes to; without it, "
        "POST /v1/votes answers 503.",
    ),
    ServeFlag("host", "Address to listen on. It joins the Host allowlist (unless 0.0.0.0 or ::).", "127.0.0.1"),
    ServeFlag("port", "Port; 0 picks a free one.", 8080, int),
    ServeFlag(
        "staleness-seconds",
        "Read counts this many seconds in the past (exact staleness: any replica can serve them); 0 reads strong.",
        0.0,
        non_negative_float,
    ),
    ServeFlag(
        "refresh-seconds",
        "How long a post's count is served from this process's cache before one Spanner read refreshes it.",
        DEFAULT_REFRESH_S,
        non_negative_float,
    ),
    ServeFlag(
        "token-file",
        f"File holding the bearer token(s) writes need, one a line (or set ${TOKEN_ENV}); "
        "without either, a token is generated at start, printed once and written to "
        ".upvotes/serve-token (mode 0600).",
        None,
        Path,
    ),
    ServeFlag(
        "allowed-host",
        "Host name (or address) requests may name in their Host header, besides localhost, "
        "127.0.0.1, [::1] and --host; repeatable. Others get 421.",
        repeatable=True,
        metavar="HOST",
    ),
    ServeFlag(
        "cors-origin",
        "Exact origin (https://app.example.com) whose pages may call the API with a bearer "
        "token; repeatable. CORS is off without it; never a wildcard.",
        repeatable=True,
        metavar="ORIGIN",
    ),
    ServeFlag(
        "trusted-proxy",
        "Address of a reverse proxy whose X-Forwarded-For and X-Forwarded-Proto are "
        "believed (client address for rate limits, https for Secure cookies); repeatable.",
        repeatable=True,
        metavar="ADDRESS",
    ),
    ServeFlag(
        "max-delta",
        f"Largest |delta| a bearer-token write may carry (1 to {MAX_ABS_DELTA:,}, the event "
        "contract's limit); a live-page vote is always +1 or -1.",
        MAX_ABS_DELTA,
        max_delta,
    ),
    ServeFlag(
        "token-writes-per-second",
        "Write requests per second per bearer token (a token bucket holding "
        f"{BURST_SECONDS:g} s of it); more get 429 with Retry-After.",
        DEFAULT_TOKEN_WRITES_PER_S,
        positive_float,
    ),
    ServeFlag(
        "session-writes-per-second",
        "Votes per second per live-page session (bucket as above).",
        DEFAULT_SESSION_WRITES_PER_S,
        positive_float,
    ),
    ServeFlag(
        "client-writes-per-second",
        "Write requests per second per client address that do not carry a "
        "valid bearer token: live-page votes and refused attempts (bucket as above).",
        DEFAULT_CLIENT_WRITES_PER_S,
        positive_float,
    ),
    ServeFlag(
        "session-hours",
        "How long a live-page session (its cookie and anti-CSRF token) lasts; then the page must be reloaded.",
        DEFAULT_SESSION_HOURS,
        positive_float,
    ),
)


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    for flag in SERVE_FLAGS:
        if flag.repeatable:
            parser.add_argument(
                f"--{flag.flag}", action="append", default=[], type=flag.type, metavar=flag.metavar, help=flag.help
            )
        else:
            shown = "" if flag.default is None else f" (default {flag.shown_default.strip('`')})"
            parser.add_argument(
                f"--{flag.flag}", default=flag.default, type=flag.type, metavar=flag.metavar, help=flag.help + shown
            )


TABLE_START = "<!-- serve-flags:start (generated from upvotes/serving/serve_settings.py; do not edit) -->"
TABLE_END = "<!-- serve-flags:end -->"


def flags_table_markdown() -> str:
    rows = ["| Flag | Default | What it sets |", "| --- | --- | --- |"]
    rows += [f"| `--{f.flag}` | {f.shown_default} | {f.help.replace('|', chr(92) + '|')} |" for f in SERVE_FLAGS]
    return "\n".join(rows) + "\n"


def readme_table(readme: str) -> str | None:
    """The text between a page's serve-flags markers, or None without them."""
    start, end = readme.find(TABLE_START), readme.find(TABLE_END)
    if start < 0 or end < start:
        return None
    return readme[start + len(TABLE_START) : end].lstrip("\n")
