"""The publish time the contract's table and the event-time policy's tests parse at, and event
times written as a publisher writes them.

A message without an event_time, or with one the event-time policy does not trust, counts in
the hour it was published in, so a test that expects event hours parses at a fixed publish
time: PUBLISHED (PUBLISHED_AT, 2026-11-22T00:22:03Z, in PUBLISHED_HOUR). The corpus and the
hostile-input tests parse at another, tests/support/corpus.py's CORPUS_PUBLISHED.
"""

from __future__ import annotations

from datetime import datetime, timezone


def epoch(rfc3339: str) -> int:
    """An RFC 3339 time (with its offset) in whole seconds since the epoch."""
    return int(datetime.fromisoformat(rfc3339).timestamp())


def rfc3339(moment: datetime) -> str:
    """A UTC moment as a publisher writes an event_time (four-digit years, years 1 to 9999)."""
    return f"{moment.year:04d}" + moment.strftime("-%m-%dT%H:%M:%SZ")


def hour_of(moment: datetime) -> int:
    """The event hour of a moment, in seconds since the epoch."""
    return int(moment.replace(minute=0, second=0).timestamp())


PUBLISHED_AT = datetime(2026, 11, 22, 0, 22, 3, tzinfo=timezone.utc)
PUBLISHED = PUBLISHED_AT.timestamp()
PUBLISHED_HOUR = int(datetime(2026, 11, 22, tzinfo=timezone.utc).timestamp())
