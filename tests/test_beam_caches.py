"""Beam's caches for the local DirectRunner (local_runner/streaming.py, install_beam_caches): each gives
Beam's answers, works each one out once, and a pipeline runs the same with them.
- dofn_specs.py: a DoFn's state and timer specs, per class (per instance for one holding a bound
  method);
- option_views.py: the options' views, per options object and class;
- signatures.py: a function's parameters and its yield-and-return lint, per function."""

from __future__ import annotations

import copy
import functools
import pickle

import apache_beam as beam
from apache_beam.transforms import core, userstate
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, is_stateful_dofn

from local_runner import dofn_specs, option_views, signatures


class Plain(beam.DoFn):
    def process(self, element):
        yield element


class Stateful(beam.DoFn):
    LAST = ReadModifyWriteStateSpec("last", beam.coders.VarIntCoder())

    def process(self, element, last=beam.DoFn.StateParam(LAST)):
        last.write(element[1])
        yield element


class Holder:
    def process(self, element, timestamp=beam.DoFn.TimestampParam):
        yield element


def test_the_cache_answers_as_beam_does_and_walks_each_class_once(monkeypatch) -> None:
    walked: list[type] = []
    beams = dofn_specs._BEAMS

    def counting(dofn):
        walked.append(type(dofn))
        return beams(dofn)

    dofn_specs.uninstall()  # the tests run with it installed (tests/conftest.py): start empty
    monkeypatch.setattr(dofn_specs, "_BEAMS", counting)
    dofn_specs.install()
    try:
        assert dofn_specs.installed()
        for _ in range(3):
            assert not is_stateful_dofn(Plain())
            assert is_stateful_dofn(Stateful())
            state_specs, _ = userstate.get_dofn_specs(Stateful())
            state_specs.clear()  # a caller changing its copy changes nothing cached
        assert {spec.name for spec in userstate.get_dofn_specs(Stateful())[0]} == {"last"}
        assert walked.count(Plain) == 1 and walked.count(Stateful) == 1
        # Built around a plain function (what beam.Map, FlatMap and Filter build, whatever they are
        # given): walked once for the class, however many instances (one per bundle processor).
        before = walked.count(core.CallableWrapperDoFn)
        for _ in range(3):
            assert not is_stateful_dofn(beam.Map(lambda x: x).dofn)
            assert not is_stateful_dofn(beam.Map(lambda x, y=beam.DoFn.TimestampParam: x).dofn)
        assert walked.count(core.CallableWrapperDoFn) - before <= 1
        # Holding a bound method: walked once per instance, then cached.
        bound = core.CallableWrapperDoFn(Holder().process)
        before = walked.count(core.CallableWrapperDoFn)
        for _ in range(3):
            userstate.get_dofn_specs(bound)
        assert walked.count(core.CallableWrapperDoFn) - before == 1
        assert userstate.get_dofn_specs(bound) == beams(bound)
        dofn_specs.uninstall()
        assert not dofn_specs.installed() and userstate.get_dofn_specs is counting
    finally:
        monkeypatch.undo()
        dofn_specs.install()


def test_a_pipeline_runs_the_same_with_the_caches() -> None:
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    assert dofn_specs.installed() and option_views.installed() and signatures.installed()  # tests/conftest.py
    with TestPipeline(runner="BundleBasedDirectRunner") as p:
        out = p | beam.Create([("k", 1), ("k", 2), ("j", 3)]) | beam.ParDo(Stateful()) | beam.ParDo(Plain())
        assert_that(out, equal_to([("k", 1), ("k", 2), ("j", 3)]))


def test_one_view_per_options_and_class_shares_the_values_of_every_view(monkeypatch) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TypeOptions

    built: list[type] = []
    beams = option_views._BEAMS

    def counting(options, cls):
        built.append(cls)
        return beams(options, cls)

    option_views.uninstall()  # installed by tests/conftest.py: start empty, counting Beam's builds
    monkeypatch.setattr(option_views, "_BEAMS", counting)
    option_views.install()
    try:
        options = PipelineOptions(["--runner", "BundleBasedDirectRunner", "--streaming"])
        standard = options.view_as(StandardOptions)
        assert standard.runner == "BundleBasedDirectRunner" and standard.streaming
        for _ in range(3):
            assert options.view_as(StandardOptions) is standard
            options.view_as(TypeOptions)
        assert built.count(StandardOptions) == 1 and built.count(TypeOptions) == 1
        # A value set through one view is seen through the options and every other view, as in Beam.
        options.view_as(TypeOptions).allow_unsafe_triggers = True
        standard.streaming = False
        assert options.view_as(TypeOptions).allow_unsafe_triggers and not options.view_as(StandardOptions).streaming
        assert options.get_all_options()["streaming"] is False
        # Other options objects, with other flags, get views of their own.
        other = PipelineOptions(["--runner", "DataflowRunner"])
        assert (
            other.view_as(StandardOptions).runner == "DataflowRunner" and not other.view_as(StandardOptions).streaming
        )
        assert pickle.loads(pickle.dumps(options)).view_as(StandardOptions).runner == "BundleBasedDirectRunner"
        assert copy.deepcopy(options).view_as(TypeOptions).allow_unsafe_triggers
    finally:
        monkeypatch.undo()
        option_views.uninstall()
        option_views.install()


class Voter:
    def process(self, element, timestamp=beam.DoFn.TimestampParam, *rest, flag: bool = True):
        yield element

    def both(self, element):
        if element:
            return [element]
        yield element


def plain(element, window=beam.DoFn.WindowParam, scale=2):
    return element * scale


def test_a_functions_parameters_are_read_once_and_answer_as_beam_does(monkeypatch) -> None:
    read: list[object] = []
    beams = signatures._BEAMS_ARGS_DEFAULTS

    def counting(f):
        read.append(f)
        return beams(f)

    signatures.uninstall()
    monkeypatch.setattr(signatures, "_BEAMS_ARGS_DEFAULTS", counting)
    signatures.install()
    try:
        cases = [
            plain,
            Voter().process,
            Voter().process,
            Voter.process,
            lambda x, y=3: x,
            len,
            functools.partial(plain, scale=3),
        ]
        expected = [beams(case) for case in cases]
        for _ in range(3):
            assert [core.get_function_args_defaults(case) for case in cases] == expected
        # Plain functions and methods once per function (bound to any instance, or not), however
        # many calls; builtins and partials are Beam's to read each time.
        assert sum(1 for f in read if f is plain) == 1
        assert sum(1 for f in read if getattr(f, "__func__", None) is Voter.process) == 1
        assert sum(1 for f in read if f is Voter.process) == 1
        assert sum(1 for f in read if f is len) == 3
        names, defaults = core.get_function_args_defaults(plain)
        names.append("changed")  # a caller changing its copy changes nothing cached
        defaults.clear()
        assert core.get_function_args_defaults(plain) == beams(plain)
        # The yield-and-return lint reads the source once per function, with Beam's answer.
        assert core._check_fn_use_yield_and_return(Voter().both) is True
        assert core._check_fn_use_yield_and_return(Voter().process) is False
        assert signatures._YIELD_AND_RETURN.get(Voter.both) is True  # type: ignore[call-overload]
        signatures.uninstall()
        assert not signatures.installed() and core.get_function_args_defaults is counting
    finally:
        monkeypatch.undo()
        signatures.install()
