"""local_runner/dofn_specs.py: the DirectRunner's per-bundle look at a DoFn's state and timer specs,
cached per class, gives Beam's answers (stateful or not), and leaves DoFns built around a callable
to Beam."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.transforms import core, userstate
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, is_stateful_dofn

from local_runner import dofn_specs


class Plain(beam.DoFn):
    def process(self, element):
        yield element


class Stateful(beam.DoFn):
    LAST = ReadModifyWriteStateSpec("last", beam.coders.VarIntCoder())

    def process(self, element, last=beam.DoFn.StateParam(LAST)):
        last.write(element[1])
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
        mapped, other = beam.Map(lambda x: x).dofn, beam.Map(lambda x, y=beam.DoFn.TimestampParam: x).dofn
        before = walked.count(core.CallableWrapperDoFn)
        for _ in range(3):
            userstate.get_dofn_specs(mapped)
            userstate.get_dofn_specs(other)
        # Built around a callable: walked once per instance (when Map built it), then cached.
        assert walked.count(core.CallableWrapperDoFn) == before >= 2
        dofn_specs.uninstall()
        assert not dofn_specs.installed() and userstate.get_dofn_specs is counting
    finally:
        monkeypatch.undo()
        dofn_specs.install()


def test_a_pipeline_runs_the_same_with_the_cache() -> None:
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    assert dofn_specs.installed()  # by tests/conftest.py
    with TestPipeline(runner="BundleBasedDirectRunner") as p:
        out = p | beam.Create([("k", 1), ("k", 2), ("j", 3)]) | beam.ParDo(Stateful()) | beam.ParDo(Plain())
        assert_that(out, equal_to([("k", 1), ("k", 2), ("j", 3)]))
