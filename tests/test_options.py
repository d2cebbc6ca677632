"""One table of parameters: the CLI flags, the template parameters and the docs' table stay in step."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.options import FoldOptions, SpannerOptions, StreamingOptions
from pipeline.params import (
    FOLD_PARAMS,
    REPLAY_PARAMS,
    SPANNER_PARAMS,
    STREAMING_PARAMS,
    FoldSettings,
    InvalidParameter,
    ReplaySettings,
    StreamingSettings,
    parse_values,
)
from upvotes.cli import build_parser

PARAMETERS_PAGE = (Path(__file__).parent.parent / "docs" / "parameters.md").read_text()
ALL = [("streaming", p) for p in STREAMING_PARAMS] + [("fold", p) for p in FOLD_PARAMS]


def values(params, spelling) -> dict[str, str]:
    return {spelling(p): p.example for p in params}


@pytest.mark.parametrize("params,options_class", [(STREAMING_PARAMS, StreamingOptions), (FOLD_PARAMS, FoldOptions)])
@pytest.mark.parametrize("spelling", [lambda p: p.flag, lambda p: p.template_name], ids=["cli", "template"])
def test_both_spellings_set_the_same_option(params, options_class, spelling) -> None:
    argv = [f"--{name}={value}" for name, value in values(params, spelling).items()]
    options = PipelineOptions(argv)
    parsed = {**options.view_as(options_class).get_all_options(), **options.view_as(SpannerOptions).get_all_options()}
    assert {p.dest: parsed[p.dest] for p in params} == {p.dest: p.example for p in params}
    parse_values(params, parsed)


def test_every_parameter_has_a_valid_example_and_defaults_match_their_regex() -> None:
    for _, param in ALL:
        assert re.fullmatch(param.regex, param.example), param
        assert param.default is None or re.fullmatch(param.regex, param.default), param


def test_a_missing_required_parameter_is_refused_with_both_spellings_named() -> None:
    with pytest.raises(InvalidParameter, match=r"--subscription .*inputSubscription"):
        parse_values(STREAMING_PARAMS, {p.dest: p.example for p in STREAMING_PARAMS if p.flag != "subscription"})


@pytest.mark.parametrize("pipeline,param", ALL, ids=[f"{k}-{p.flag}" for k, p in ALL])
def test_the_docs_map_each_flag_to_its_template_parameter(pipeline: str, param) -> None:
    row = next(line for line in PARAMETERS_PAGE.splitlines() if line.startswith(f"| `--{param.flag}` |"))
    assert f"| `{param.template_name}` |" in row and pipeline in row


def test_the_docs_and_the_deploy_guide_carry_the_generated_parameter_table() -> None:
    from upvotes.deploy.template_metadata import stale_files

    assert stale_files() == []


@pytest.mark.parametrize(
    "command,params", [("stream", STREAMING_PARAMS), ("fold", FOLD_PARAMS), ("dead-letters", REPLAY_PARAMS)]
)
def test_cli_help_offers_every_flag(command: str, params, capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    out = capsys.readouterr().out
    for param in params:
        assert f"--{param.flag}" in out and param.template_name in out


def test_shared_spanner_parameters_are_declared_once() -> None:
    assert all(p in STREAMING_PARAMS and p in FOLD_PARAMS for p in SPANNER_PARAMS)


def test_a_dead_letter_replay_takes_the_streams_own_parameters() -> None:
    """A replay reads corrections under the stream's event-time policy: the same flags, the same defaults."""
    assert all(p in STREAMING_PARAMS for p in REPLAY_PARAMS)
    replay = ReplaySettings.parse(
        vars(build_parser().parse_args(["dead-letters", "replay", "--dead-letter-topic", "t"]))
    )
    stream = StreamingSettings.parse({p.dest: p.example for p in STREAMING_PARAMS if p not in REPLAY_PARAMS})
    assert replay.max_clock_skew_seconds == stream.max_clock_skew_seconds == 3600


def test_the_parameter_table_holds_the_only_defaults() -> None:
    """The transforms take every setting as an argument, so no second default can drift."""
    import inspect

    from transforms.fold_deltas import FoldDeltas
    from transforms.spanner_sink import WriteDeltaRows
    from transforms.windowing import WindowAndSumVotes

    for transform, name in (
        (WindowAndSumVotes, "window_seconds"),
        (WriteDeltaRows, "rows_per_commit"),
        (FoldDeltas, "posts_per_commit"),
    ):
        parameter = inspect.signature(transform.__init__).parameters[name]
        assert parameter.default is inspect.Parameter.empty, transform


@pytest.mark.parametrize(
    "params,settings_class",
    [(STREAMING_PARAMS, StreamingSettings), (FOLD_PARAMS, FoldSettings), (REPLAY_PARAMS, ReplaySettings)],
)
def test_the_typed_settings_have_one_field_per_parameter(params, settings_class) -> None:
    assert {f.name for f in dataclasses.fields(settings_class)} == {p.dest for p in params}


def test_boolean_parameters_take_a_bare_flag_and_data_boost_is_refused_on_the_emulator(monkeypatch) -> None:
    required = ["--instance=upvotes", "--database=votes"]
    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
    plain = PipelineOptions(required).view_as(FoldOptions).validated()
    assert (plain.full_scan, plain.data_boost) == (False, False)
    asked = PipelineOptions(required + ["--full-scan", "--dataBoost=true"]).view_as(FoldOptions).validated()
    assert (asked.full_scan, asked.data_boost) == (True, True)
    assert PipelineOptions(required + ["--fullScan=false"]).view_as(FoldOptions).validated().full_scan is False
    with pytest.raises(InvalidParameter, match="fullScan"):
        PipelineOptions(required + ["--full-scan=yes"]).view_as(FoldOptions).validated()
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", "localhost:9010")
    with pytest.raises(InvalidParameter, match="emulator"):
        PipelineOptions(required + ["--data-boost"]).view_as(FoldOptions).validated()


def test_both_pipelines_take_their_options_from_one_function_and_build_without_io(monkeypatch) -> None:
    """build() only wires: the writer claim is the launch's (no emulator runs here, and no
    Spanner call may happen); the options of both pipelines come from pipeline_options."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import StandardOptions

    from pipeline import fold, streaming
    from pipeline.options import LOCAL_RUNNER, pipeline_options
    from spanner_writes.writers import WriterClaim

    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
    monkeypatch.setattr(streaming, "claim_writer", lambda *a: pytest.fail("build() claimed a writer"))
    argv = ["--project=build-project"] + [f"--{p.flag}={p.example}" for p in STREAMING_PARAMS]
    options = pipeline_options(argv, streaming=True)
    assert options.view_as(StandardOptions).streaming and options.view_as(StandardOptions).runner == LOCAL_RUNNER
    pipeline = beam.Pipeline(options=options)
    streaming.build(
        pipeline,
        options.view_as(StreamingOptions).validated(),
        WriterClaim("job", 3, "job#g3", 2),
        project="build-project",
        deduplicate=False,
    )
    assert "WindowAndSumVotes" in {t.full_label for t in pipeline.transforms_stack[0].parts}

    fold_options = pipeline_options(
        ["--project=build-project"] + [f"--{p.flag}={p.example}" for p in FOLD_PARAMS], streaming=False
    )
    assert not fold_options.view_as(StandardOptions).streaming
    fold.build(
        beam.Pipeline(options=fold_options), fold_options.view_as(FoldOptions).validated(), project="build-project"
    )


def test_the_hot_half_life_is_a_provision_setting_checked_documented_and_offered(capsys) -> None:
    from pipeline.params import HOT_HALF_LIFE_HOURS

    assert HOT_HALF_LIFE_HOURS.parse(HOT_HALF_LIFE_HOURS.default) == 12.0
    assert HOT_HALF_LIFE_HOURS.parse("1.5") == 1.5
    for bad in ("0", "10000", "-3", "12h", ""):
        with pytest.raises(InvalidParameter, match="hotHalfLifeHours"):
            HOT_HALF_LIFE_HOURS.parse(bad)
    assert (
        f"`--{HOT_HALF_LIFE_HOURS.flag}`" in PARAMETERS_PAGE
        and f"`{HOT_HALF_LIFE_HOURS.template_name}`" in PARAMETERS_PAGE
    )
    with pytest.raises(SystemExit):
        build_parser().parse_args(["provision", "--help"])
    assert f"--{HOT_HALF_LIFE_HOURS.flag}" in capsys.readouterr().out
