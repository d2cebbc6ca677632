"""What the races run on: the demo's database on the emulators, then the streaming pipeline and
the live page, up until the last step is done and drained after it, whatever happened."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from schemas.contract import event_message
from spanner_reads.reads import exact_counts
from spanner_store.database import open_database
from upvotes.demo.stage import Stage, say
from upvotes.devtools import baseline_counters, local_stream
from upvotes.devtools.publishing import publish_messages
from upvotes.operations.provision import provision
from upvotes.resources import Resources

WARM_UP_POST = "demo-warm-up"
READY_TIMEOUT_S = 120.0


def provisioned(resources: Resources):
    """The demo's database, topics and subscriptions, and the baselines' counter tables."""
    say(f"provisioning {resources.instance}/{resources.database} and topic {resources.topic} on the emulators")
    provision(resources, log=lambda line: None)
    database = open_database(resources.project, resources.instance, resources.database)
    baseline_counters.create_tables(database)
    return database


@contextmanager
def pipeline_running(
    resources: Resources, database, args: argparse.Namespace, work_dir: Path, env: Mapping[str, str]
) -> Iterator[Stage]:
    """`upvotes stream` started and counting, with the live page beside it (when its extra is
    installed); on the way out, the live page stopped and the stream drained (every open window
    written), its summary said."""
    stream_log = work_dir / "stream.log"
    say(f"starting the streaming pipeline (DirectRunner, {args.window_seconds} s windows; log: {stream_log})")
    stream = local_stream.start(resources, args.window_seconds, stream_log, env)
    stage = Stage(args, resources, database, stream, stream_log, work_dir)
    try:
        _wait_until_ready(stage)
        stage.live_page = _start_live_page(resources, work_dir)
        yield stage
    finally:
        if stage.live_page is not None:
            stage.live_page.stop()
        say("draining the streaming pipeline (every open window is written) ...")
        code = local_stream.stop(stream)
        say(
            local_stream.drain_summary(stream_log)
            or f"the streaming pipeline exited with code {code}; see {stream_log}"
        )


def keep_serving(stage: Stage) -> None:
    """With --keep-serving, after every step succeeded: the pipeline and the live page stay up
    until Ctrl-C, to vote from the page."""
    if stage.args.keep_serving and stage.live_page is not None:
        say(f"the pipeline and the live page at {stage.live_page.url} stay up: vote there; Ctrl-C to stop")
        while stage.stream.poll() is None:
            time.sleep(1)


def _wait_until_ready(stage: Stage) -> None:
    """Publishes one vote and waits until it is counted: the pipeline is up and reading."""
    publish_messages(
        stage.topic_path, [event_message({"post_id": WARM_UP_POST, "counter": "upvotes", "delta": 1})], progress=False
    )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while exact_counts(stage.database, [WARM_UP_POST])[0].counts.upvotes < 1:
        stage.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the streaming pipeline counted nothing within {READY_TIMEOUT_S:.0f} s; see {stage.stream_log}"
            )
        time.sleep(0.5)


def _start_live_page(resources: Resources, work_dir: Path):
    """`upvotes serve` in this process, or None (with a note) where its extra is not installed.
    Writes need a credential as with `upvotes serve`: $UPVOTES_WRITE_TOKEN, or a token generated
    into the work directory (mode 0600); the page's own button uses its session."""
    try:
        from upvotes.serving.service import serve_in_background
    except ModuleNotFoundError as missing:
        say(f"no live page: {missing.name} is not installed (pip install -e '.[serve]')")
        return None
    from upvotes.serving.serve_settings import ServiceSettings
    from upvotes.serving.write_credentials import resolve_write_credential

    credential = resolve_write_credential(None, os.environ, work_dir / "serve-token")
    service = serve_in_background(
        resources.project,
        resources.instance,
        resources.database,
        resources.topic,
        ServiceSettings(write_tokens=credential.tokens),
    )
    say(
        f"live page: {service.url} (top posts, exact counts, an upvote toggle each; up while the demo runs); "
        f"API writes need the bearer token ({credential.source})"
    )
    return service
