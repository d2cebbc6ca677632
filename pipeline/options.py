"""One Beam options class per pipeline, built from the parameter table in pipeline/params.py.

Beam registers every options class's flags in one parser, so the Spanner flags both
pipelines share are declared once, in SpannerOptions.
"""
from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from pipeline.params import FOLD_PARAMS, SPANNER_PARAMS, STREAMING_PARAMS, InvalidParameter, add_params, validate


def spanner_project(options: PipelineOptions) -> str:
    """The Google Cloud project of Spanner and Pub/Sub: Beam's own --project."""
    project = options.view_as(GoogleCloudOptions).project
    if not project:
        raise InvalidParameter("--project is required: the Google Cloud project of Spanner and Pub/Sub.")
    return project


class SpannerOptions(PipelineOptions):
    """The database both pipelines use."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_params(parser, SPANNER_PARAMS)


class StreamingOptions(PipelineOptions):
    """Options of pipeline/streaming.py: STREAMING_PARAMS (the Spanner ones via SpannerOptions)."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_params(parser, tuple(p for p in STREAMING_PARAMS if p not in SPANNER_PARAMS))

    def validated(self) -> "StreamingOptions":
        validate(STREAMING_PARAMS, self.get_all_options())
        return self

    def pubsub_path(self, kind: str, name: str) -> str:
        """A full Pub/Sub resource path; bare names are taken to be in --project."""
        return name if name.startswith("projects/") else f"projects/{spanner_project(self)}/{kind}/{name}"


class FoldOptions(PipelineOptions):
    """Options of pipeline/fold.py: FOLD_PARAMS (the Spanner ones via SpannerOptions)."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_params(parser, tuple(p for p in FOLD_PARAMS if p not in SPANNER_PARAMS))

    def validated(self) -> "FoldOptions":
        validate(FOLD_PARAMS, self.get_all_options())
        return self
