"""Streams in tests: a streaming TestPipeline, and, for `upvotes stream` itself, events published with a check, the
ledger they add up to, and the drain reports a stopped `upvotes stream` logs."""

from __future__ import annotations

import re
from pathlib import Path

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline

from schemas.contract import event_message
from tests.support.resources import STREAM_WINDOW_S
from upvotes.devtools.ledger import Ledger
from upvotes.devtools.publishing import publish_messages
from upvotes.resources import Resources

WINDOW_S = STREAM_WINDOW_S
SETTLE_TIMEOUT_S = 120  # how long a stream may take to count what was published


def publish_events(res: Resources, events: list[dict], rate: float | None = None) -> None:
    report = publish_messages(
        res.topic_path(res.topic), (event_message(e) for e in events), rate=rate, total=len(events), progress=False
    )
    assert report.failed == 0 and report.published == len(events)


def ledger_of(events: list[dict]) -> Ledger:
    ledger = Ledger()
    for event in events:
        ledger.add(event)
    return ledger


DRAIN_REPORT = re.compile(
    r"^upvotes stream: drained in [0-9.]+ s \((SIGINT|SIGTERM)\): every vote pulled is written;"
    r".* This run: ([0-9,]+) messages, ([0-9,]+) votes, [0-9,]+ delta rows, 0 dead letters\.$"
)


def drain_reports(log: Path) -> list[tuple[str, int, int]]:
    """(signal, messages, votes) of every drain the log reports."""
    return [
        (m.group(1), int(m.group(2).replace(",", "")), int(m.group(3).replace(",", "")))
        for m in map(DRAIN_REPORT.match, log.read_text(errors="replace").splitlines())
        if m
    ]


def streaming_pipeline() -> TestPipeline:
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    return TestPipeline(options=options)
