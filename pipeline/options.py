"""One Beam options class per pipeline, built from the parameter table in pipeline/params.py,
and the typed settings each pipeline reads from it.

Beam registers every options class's flags in one parser, so the Spanner flags both
pipelines share are declared once, in SpannerOptions. Values arrive as text, either as flags
(a flex-template launch) or as keyword values the CLI collected; `validated()` checks and
converts them once, into the settings the pipeline is built from.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, SetupOptions, StandardOptions

from pipeline.params import FOLD_PARAMS, SPANNER_PARAMS, STREAMING_PARAMS, InvalidParameter, Param, add_params, parse_values

# The local runner both pipelines run on unless told otherwise.
LOCAL_RUNNER = "BundleBasedDirectRunner"


def spanner_project(options: PipelineOptions) -> str:
    """The Google Cloud project of Spanner and Pub/Sub: Beam's own --project."""
    project = options.view_as(GoogleCloudOptions).project
    if not project:
        raise InvalidParameter("--project is required: the Google Cloud project of Spanner and Pub/Sub.")
    return project


@dataclass(frozen=True)
class StreamingSettings:
    """STREAMING_PARAMS, checked and converted (a test keeps the fields and the table in step)."""

    subscription: str
    dead_letter_topic: str
    instance: str
    database: str
    window_seconds: int
    rows_per_commit: int
    max_clock_skew_seconds: int


@dataclass(frozen=True)
class FoldSettings:
    """FOLD_PARAMS, checked and converted."""

    instance: str
    database: str
    posts_per_commit: int
    max_delta_rows_per_run: int
    full_scan: bool
    data_boost: bool


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
        return StreamingSettings(**parse_values(STREAMING_PARAMS, self.get_all_options()))


class FoldOptions(PipelineOptions):
    """Options of pipeline/fold.py: FOLD_PARAMS (the Spanner ones via SpannerOptions)."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_params(parser, _own(FOLD_PARAMS))

    def validated(self) -> FoldSettings:
        settings = FoldSettings(**parse_values(FOLD_PARAMS, self.get_all_options()))
        if settings.data_boost and os.environ.get("SPANNER_EMULATOR_HOST"):
            raise InvalidParameter("--data-boost=true (template parameter dataBoost) is for Cloud Spanner: the "
                                   "emulator (SPANNER_EMULATOR_HOST is set) has no Data Boost. Leave it off locally.")
        return settings


def pipeline_options(argv: Sequence[str] | None, values: Mapping[str, object] | None = None, *,
                     streaming: bool) -> PipelineOptions:
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
