"""Beam's views of a pipeline's options (`options.view_as(StandardOptions)`), built once per options
object and class instead of on every call.

Why: each `PipelineOptions.view_as(cls)` builds a new argparse parser with every flag of `cls` and
parses the pipeline's flags again, and Beam calls it thousands of times while it builds and
translates a pipeline (every `apply`, and every type check, which looks up the pipeline's options to
see whether beartype is on): on the local DirectRunner, a third of an empty fold run's CPU once the
DoFn specs are cached (docs/benchmarks.md, "Measurements behind the code").
The answer never changes: a view holds the flags the options were made with, which never change,
and shares their values (`_all_options`) with the options and every other view, so one view per
class serves every call, and a value set through any view is seen through all of them, as before.

What: `install()` puts `cached_view_as` in place of `PipelineOptions.view_as`; `uninstall()`
restores Beam's. Installed with the other caches by local_runner/streaming.py's
`install_beam_caches`, for the local DirectRunner and the tests, never on Dataflow.
"""

from __future__ import annotations

import weakref
from typing import TypeVar

from apache_beam.options.pipeline_options import PipelineOptions

View = TypeVar("View", bound=PipelineOptions)

_BEAMS = PipelineOptions.view_as
# The views of each options object, by class; held as long as the options object lives.
_VIEWS: weakref.WeakKeyDictionary[PipelineOptions, dict[type, PipelineOptions]] = weakref.WeakKeyDictionary()


def cached_view_as(options: PipelineOptions, cls: type[View]) -> View:
    """options.view_as(cls), built once per options object and class."""
    views = _VIEWS.get(options)
    if views is None:
        views = _VIEWS[options] = {}
    view = views.get(cls)
    if view is None:
        view = views[cls] = _BEAMS(options, cls)
    return view  # type: ignore[return-value]  # built by _BEAMS as a cls


def install() -> None:
    PipelineOptions.view_as = cached_view_as  # type: ignore[method-assign, assignment]


def uninstall() -> None:
    """Undoes install()."""
    PipelineOptions.view_as = _BEAMS  # type: ignore[method-assign]
    _VIEWS.clear()


def installed() -> bool:
    return PipelineOptions.view_as is cached_view_as
