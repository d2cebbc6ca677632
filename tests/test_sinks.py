"""spanner_writes/sinks.py: every sink declared once, and what reads the declarations: each test
iterates the registry, so that a sink added to it is held to the same checks. No emulator."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import apache_beam as beam
import pytest

from local_runner import drain
from schemas.records import FailedDelta, FailedVoteStates, PostDelta, PostUser
from schemas.vote_states import LatestVote
from schemas.voter_sketch import sketch_of
from spanner_writes.sinks import DELTA_ROWS, SINKS, VOTE_STATES, FailedRecord, SinkDeclaration, sink_of, sink_of_kind
from transforms.buffered_sink import SinkCounters
from transforms.dead_letter import to_dead_letter
from upvotes.operations.dead_letters import REJECTED_VOTE, DeadLetter, execute_replay, plan_replay

REPO = Path(__file__).resolve().parents[1]
# The modules that handle every sink: they read the registry and name none.
READERS = (
    "local_runner/drain.py",
    "transforms/dead_letter.py",
    "pipeline/streaming.py",
    "upvotes/operations/dead_letters.py",
    "upvotes/commands/dead_letters.py",
)
HOUR = 1_795_312_800
# Failed records of every declared sink, as its `failed` output holds them: a sink added to the
# registry without its samples here fails test_every_declared_sink_has_samples.
DELTA_SAMPLES = [
    FailedDelta(PostDelta.of("p-1", HOUR, "w:1:0", upvotes=3, shares=-1, events=4), "spanner_write_failed: x"),
    FailedDelta(
        PostDelta.of("p-é", HOUR, "w:2:0", downvotes=1, events=1, voters=sketch_of(["u", "v"])),
        "spanner_write_failed: key conflict: é",
    ),
]
STATES_SAMPLES = [
    FailedVoteStates(
        (
            (PostUser("p-1", "a"), LatestVote("up", 1, "e1", HOUR, 2, True)),
            (PostUser("p-1", "b"), LatestVote("none", 7, "", HOUR, 1, False)),
        ),
        "spanner_apply_failed: 400 injected",
    ),
]
SAMPLES: dict[type[FailedRecord], Sequence[FailedRecord]] = {
    FailedDelta: DELTA_SAMPLES,
    FailedVoteStates: STATES_SAMPLES,
}


def test_the_declared_names_are_the_documented_ones() -> None:
    """Step and counter names are an interface (docs/contract.md, templates/README.md, the alerts):
    a Dataflow update matches steps by name."""
    assert [(sink.step, sink.reason, sink.codec.kind) for sink in SINKS] == [
        ("WriteDeltaRows", "spanner_write_failed", "delta_row"),
        ("ApplyVoteStates", "spanner_apply_failed", "vote_states"),
    ]
    assert (DELTA_ROWS.metrics.dead_lettered, DELTA_ROWS.metrics.delta_rows_written) == (
        "rows_dead_lettered",
        "rows_written",
    )
    assert (VOTE_STATES.metrics.dead_lettered, VOTE_STATES.metrics.delta_rows_written) == (
        "states_dead_lettered",
        "delta_rows_written",
    )


@pytest.mark.parametrize("sink", SINKS, ids=lambda sink: sink.step)
def test_a_sinks_counters_are_named_as_it_declares_in_its_steps_namespace(sink) -> None:
    counters = SinkCounters.of(sink)
    names = sink.metrics
    assert {
        field: (counter.metric_name.namespace, counter.metric_name.name)
        for field, counter in counters._asdict().items()
    } == {
        "commits": (sink.step, names.commits),
        "transient_retries": (sink.step, names.transient_retries),
        "schema_waits": (sink.step, names.schema_waits),
        "dead_lettered": (sink.step, names.dead_lettered),
        "events_written": (sink.step, names.events_written),
        "events_dead_lettered": (sink.step, names.events_dead_lettered),
    }


def test_the_drain_report_sums_each_counter_over_every_declared_sink() -> None:
    counters = {("ParseVotes", "rejected_not_json"): 1}
    for weight, sink in enumerate(SINKS, 1):
        names = sink.metrics
        counters |= {
            (sink.step, names.events_written): 1000 * weight,
            (sink.step, names.events_dead_lettered): 100 * weight,
            (sink.step, names.delta_rows_written): 10 * weight,
            (sink.step, names.dead_lettered): weight,
        }
    total = sum(range(1, len(SINKS) + 1))
    progress = drain.progress_of(SimpleNamespace(counters=lambda: counters, messages=0), None)
    assert (progress.votes_written, progress.votes_dead_lettered, progress.delta_rows, progress.dead_letters) == (
        1000 * total,
        100 * total,
        10 * total,
        total + 1,
    )


@pytest.mark.parametrize("reader", READERS)
def test_the_modules_that_handle_every_sink_name_none(reader: str) -> None:
    source = (REPO / reader).read_text(encoding="utf-8")
    for sink in SINKS:
        for name in (
            f'"{sink.step}"',
            f'"{sink.metrics.dead_lettered}"',
            f'"{sink.codec.kind}"',
            sink.failed.__name__,
            f'"{sink.replay.action}"',
            *(f'"{n}"' for n in sink.replay.counted_as),
        ):
            assert name not in source, f"{reader} names {name}: read it from spanner_writes.sinks"


def test_every_declared_sink_has_samples() -> None:
    assert set(SAMPLES) == {sink.failed for sink in SINKS}


@pytest.mark.parametrize("sink", SINKS, ids=lambda sink: sink.step)
def test_a_failed_record_round_trips_through_its_sinks_codec_and_the_dead_letter_topic(sink: SinkDeclaration) -> None:
    assert sink_of_kind(sink.codec.kind) is sink and sink.codec.kind != REJECTED_VOTE
    for failed in SAMPLES[sink.failed]:
        assert sink_of(failed) is sink
        data, attributes = sink.codec.encode(failed)
        assert sink.codec.decode(data, attributes) == failed
        message = to_dead_letter(failed)
        assert (message.data, message.attributes) == (data, attributes)
        letter = DeadLetter("ack", "message", message.data, dict(message.attributes))
        assert (letter.sink, letter.kind, letter.reason) == (sink, sink.codec.kind, sink.reason)
        assert letter.failed() == failed


def test_the_dead_letters_are_the_messages_earlier_versions_published() -> None:
    """Dead letters already on the topic must still be read, and scripts read the new ones."""
    delta, states = DELTA_SAMPLES[0], STATES_SAMPLES[0]
    message = to_dead_letter(delta)
    assert message.data == json.dumps(
        {
            "post_id": "p-1",
            "event_hour": HOUR,
            "delta_id": "w:1:0",
            "upvotes": 3,
            "downvotes": 0,
            "shares": -1,
            "views": 0,
            "events": 4,
            "voters": None,
        }
    ).encode("utf-8")
    assert message.attributes == {"kind": "delta_row", "error": "spanner_write_failed: x"}
    message = to_dead_letter(states)
    assert json.loads(message.data) == [
        {
            "post_id": "p-1",
            "user_id": "a",
            "vote": "up",
            "at_us": 1,
            "event_id": "e1",
            "event_hour": HOUR,
            "events": 2,
            "voted": True,
        },
        {
            "post_id": "p-1",
            "user_id": "b",
            "vote": "none",
            "at_us": 7,
            "event_id": "",
            "event_hour": HOUR,
            "events": 1,
            "voted": False,
        },
    ]
    assert message.attributes == {"kind": "vote_states", "error": "spanner_apply_failed: 400 injected"}


def test_the_streaming_pipeline_wires_every_declared_sink_to_the_dead_letters(monkeypatch) -> None:
    from pipeline import streaming
    from pipeline.options import StreamingOptions, pipeline_options
    from pipeline.params import STREAMING_PARAMS
    from spanner_writes.writers import WriterClaim

    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
    options = pipeline_options(
        ["--project=build-project"] + [f"--{p.flag}={p.example}" for p in STREAMING_PARAMS], streaming=True
    )
    pipeline = beam.Pipeline(options=options)
    streaming.build(
        pipeline,
        options.view_as(StreamingOptions).validated(),
        WriterClaim("job", 3, "job#g3", 2),
        project="build-project",
        deduplicate=False,
    )
    steps = {part.full_label: part for part in pipeline.transforms_stack[0].parts}
    assert {sink.step for sink in SINKS} <= set(steps)
    # The rejected messages first, then each sink's failed records in the registry's order.
    assert [step_of(pcoll) for pcoll in steps["PublishDeadLetters"].main_inputs.values()] == [
        "ParseVotes",
        *(sink.step for sink in SINKS),
    ]


def step_of(pcoll: beam.pvalue.PValue) -> str:
    """The top-level step that produced the collection."""
    assert pcoll.producer is not None
    return pcoll.producer.full_label.split("/")[0]


def letters_of_every_sink() -> list[DeadLetter]:
    """A dead letter of each sample, the rejected vote among them, as `dead-letters replay` pulls them."""
    messages = [to_dead_letter(sample) for sink in reversed(SINKS) for sample in SAMPLES[sink.failed]]
    letters = [
        DeadLetter(f"ack-{i}", f"m-{i}", message.data, dict(message.attributes)) for i, message in enumerate(messages)
    ]
    return [DeadLetter("ack-r", "m-r", b"not json", {"error": "not_json: x"}), *letters]


def test_a_replay_rewrites_every_sinks_failed_records_sink_by_sink_and_reports_as_before() -> None:
    plan = plan_replay(letters_of_every_sink(), {})
    assert [held.sink for held in plan.failed] == [sink for sink in SINKS for _ in SAMPLES[sink.failed]]
    assert [held.failed for held in plan.failed] == [sample for sink in SINKS for sample in SAMPLES[sink.failed]]
    assert [letter.kind for letter in plan.left] == [REJECTED_VOTE]
    replayed: list[tuple[SinkDeclaration, FailedRecord]] = []
    acked: list[DeadLetter] = []

    def replay_failed(sink, failed) -> tuple[int, int]:
        replayed.append((sink, failed))
        return 2, 1  # written now, found written before

    report, still_held = execute_replay(plan, replay_failed, lambda correction: None, acked.extend)
    assert replayed == [(held.sink, held.failed) for held in plan.failed] and still_held == plan.left
    assert acked == [held.letter for held in plan.failed]
    per_sink = {name: 0 for sink in SINKS for name in sink.replay.counted_as}
    for sink in SINKS:
        now, before = sink.replay.counted_as
        per_sink[now], per_sink[before] = 2 * len(SAMPLES[sink.failed]), len(SAMPLES[sink.failed])
    # What scripts read: the same fields, in the same order, as before the sinks were declared.
    assert list(report.to_json()) == [
        "deltas_written",
        "deltas_already_written",
        "states_applied",
        "states_already_applied",
        "corrections_written",
        "corrections_already_written",
        "acknowledged",
        "left",
        "failed",
        "corrections_refused",
        "votes_published",
    ]
    assert report.to_json() == {
        **per_sink,
        "corrections_written": 0,
        "corrections_already_written": 0,
        "acknowledged": len(plan.failed),
        "left": 1,
        "failed": [],
        "corrections_refused": [],
        "votes_published": 0,
    }


def test_what_a_dry_run_says_of_each_sinks_dead_letters_is_unchanged() -> None:
    delta, states = DELTA_SAMPLES[0], STATES_SAMPLES[0]
    assert (DELTA_ROWS.replay.action, DELTA_ROWS.replay.described(delta)) == (
        "rewrite_delta",
        {"delta": delta.delta.to_json()},
    )
    assert (VOTE_STATES.replay.action, VOTE_STATES.replay.described(states)) == ("apply_vote_states", {"states": 2})
