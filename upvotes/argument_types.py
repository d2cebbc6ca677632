"""argparse `type=` checks shared by several subcommands: a bad value is refused with usage help."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import TypeVar

from schemas.contract import MAX_ID_CHARS

T = TypeVar("T")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {value}")
    return value


def utc_time(text: str) -> datetime:
    """RFC 3339 / ISO 8601 ("2026-11-22T00:00:00Z", "2026-11-22"); no zone means UTC."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time: {text!r} (example: 2026-11-22T00:00:00Z)") from None
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def user_id(text: str) -> str:
    """A user ID as the event contract allows it: 1 to MAX_ID_CHARS characters."""
    if not 0 < len(text) <= MAX_ID_CHARS:
        raise argparse.ArgumentTypeError(f"a user ID has 1 to {MAX_ID_CHARS} characters, not {len(text)}")
    return text


def parsed_by(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse `type=` from a parser that raises ValueError with a readable reason (a
    ranking's parameter, spanner_reads.rankings.ranking.Parameter): refused with usage help."""

    def parsed(text: str) -> T:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parsed


_DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}


def duration(text: str) -> timedelta:
    """A duration as `N` with a unit: `90s`, `15m`, `24h`, `7d` (above 0, at most 400 days)."""
    match = re.fullmatch(r"\s*([0-9]{1,9})\s*([smhdSMHD])\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"a duration is N seconds, minutes, hours or days, written like 90s, 15m, 24h or 7d, not {text[:40]!r}"
        )
    seconds = int(match[1]) * _DURATION_UNITS_S[match[2].lower()]
    if not 0 < seconds <= 400 * 86_400:
        raise argparse.ArgumentTypeError(f"a duration is above 0 and at most 400 days, not {text.strip()!r}")
    return timedelta(seconds=seconds)
