"""One Beam options class per pipeline, built from the parameter table in pipeline/params.py.

Beam registers every options class's flags in one parser, so the Spanner flags both
pipelines share are declared once, in SpannerOptions. Values arrive as text, either as flags
(a flex-template launch) or as keyword values the CLI collected; `validated()` checks and
converts them (pipeline/params.py), once per launch, into the typed settings the pipeline is
built from (StreamingSettings, FoldSettings).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, SetupOptions, StandardOptions

from pipeline.params import (
    FOLD_PARAMS,
    SPANNER_PARAMS,
    STREAMING_PARAMS,
    FoldSettings,
    InvalidParameter,
    Param,
    StreamingSettings,
    add_params,
)

# The local runner both pipelines run on unless told otherwise.
LOCAL_RUNNER = "BundleBasedDirectRunner"


def spanner_project(options: PipelineOptions) -> str:
    """The Google Cloud project of Spanner and Pub/Sub: Beam's own --project."""
    project = options.view_as(GoogleCloudOptions).project
    if not project:
        raise InvalidParameter("--project is required: the Google Cloud project of Spanner and Pub/Sub.")
    return project


def _own(params: tuple[Param, ...]) -> tuple[Param, ...]:
    return tuple(p for p in params if p not in SPANNER_PARAMS)


class SpannerOptions(PipelineOptions):
    """The database both pipelines use."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_params(parser, SPANNER_PARAMS)


class StreamingOptions(PipelineOptions):
    """Options of pipeline/streaming.py: STREAMING_PARAMS (the Spanner ones via SpannerOptions)."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_params(parser, _own(STREAMING_PARAMS))

    def validated(self) -> StreamingSettings:
        """The settings, checked and converted: once per launch."""
        return StreamingSettings.parse(self.get_all_options())


class FoldOptions(PipelineOptions):
    """Options of pipeline/fold.py: FOLD_PARAMS (the Spanner ones via SpannerOptions)."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_params(parser, _own(FOLD_PARAMS))

    def validated(self) -> FoldSettings:
        """The settings, checked and converted: once per launch."""
        return FoldSettings.parse(self.get_all_options())


def pipeline_options(
    argv: Sequence[str] | None, values: Mapping[str, object] | None = None, *, streaming: bool
) -> PipelineOptions:
    """Beam's options for either pipeline from `argv`, with `values` (settings a caller already
    holds, by dest) on top; the main session saved for the workers, the runner LOCAL_RUNNER
    unless one is named (the DirectRunner would first try to download the Prism runner)."""
    options = PipelineOptions(argv, **(values or {}))
    if streaming:
        options.view_as(StandardOptions).streaming = True
    options.view_as(SetupOptions).save_main_session = True
    if not options.view_as(StandardOptions).runner:
        options.view_as(StandardOptions).runner = LOCAL_RUNNER
    return options
