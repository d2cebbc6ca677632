"""PerProcess (transforms/per_process.py): every copy of a DoFn's handle gets one object per process,
each handle its own, and the least recently used beyond MAX_KEPT is dropped."""

from __future__ import annotations

import pickle

from transforms import per_process
from transforms.per_process import PerProcess


def test_copies_of_a_handle_share_one_object_and_other_handles_build_their_own() -> None:
    built: list[str] = []

    def build(name: str):
        def make() -> list[str]:
            built.append(name)
            return [name]

        return make

    handle: PerProcess[list[str]] = PerProcess()
    other: PerProcess[list[str]] = PerProcess()
    first = handle.get(build("first"))
    copy = pickle.loads(pickle.dumps(handle))  # what the DirectRunner does to a DoFn for every bundle
    assert copy.get(build("again")) is first
    assert other.get(build("other")) == ["other"]
    assert built == ["first", "other"]


def test_the_least_recently_used_object_beyond_max_kept_is_dropped_and_built_again() -> None:
    handles: list[PerProcess[list[object]]] = [PerProcess() for _ in range(per_process.MAX_KEPT + 1)]
    objects = [handle.get(lambda: [i]) for i, handle in enumerate(handles)]  # get calls it at once
    assert handles[-1].get(lambda: ["rebuilt"]) is objects[-1]
    assert handles[0].get(lambda: ["rebuilt"]) == ["rebuilt"]  # the oldest was dropped
    assert handles[1].get(lambda: ["rebuilt"]) == ["rebuilt"]  # ...and then the next oldest, for the first
