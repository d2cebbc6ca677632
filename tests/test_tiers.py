"""The suite's tiers (tests/support/tiers.py): every test that needs the emulators is marked
`emulators` before `-m` deselects, so `make test-fast` selects none of them; and a test without
the mark that starts an emulator or a stream fails before anything starts. Cheap: nothing here
starts a process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import scheduling, tiers
from tests.support.resources import new_resources
from upvotes.devtools import emulators, local_stream


def test_no_test_of_this_run_reaches_the_emulators_unmarked(request: pytest.FixtureRequest) -> None:
    """Over the tests this run selected: in `make test-fast`, this proves that none of them needs
    the emulators (the mark was set before `-m "not emulators"` deselected)."""
    items = request.session.items
    assert request.node in items
    unmarked = [
        item.nodeid
        for item in items
        if tiers.EMULATOR_FIXTURE in getattr(item, "fixturenames", ()) and not item.get_closest_marker(tiers.EMULATORS)
    ]
    assert unmarked == []


class Item:
    """What mark_emulator_tests reads and calls of a collected test."""

    def __init__(self, *fixtures: str) -> None:
        self.fixturenames = fixtures
        self.marks: list[str] = []

    def add_marker(self, name: str) -> None:
        self.marks.append(name)


def test_a_test_is_marked_when_its_fixtures_reach_the_emulators() -> None:
    through_stack, own, none = Item("request", "stack", "emulator_env", "database"), Item("tmp_path"), Item()
    tiers.mark_emulator_tests([through_stack, own, none])
    assert (through_stack.marks, own.marks, none.marks) == (["emulators"], [], [])


@pytest.mark.parametrize(
    "command",
    [
        ["/usr/lib/google-cloud-sdk/bin/cloud_spanner_emulator/emulator_main", "--host_port", "127.0.0.1:1"],
        ["/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator", "--port=1"],
        [sys.executable, "-m", "upvotes.cli", "stream", "--project=p", "--window-seconds=2"],
        [sys.executable, "-m", "tests.support.crashing_stream", "stream", "--project=p"],
        ["/venv/bin/upvotes", "emulators", "start"],
        "upvotes demo --votes 10",
    ],
)
def test_a_command_that_starts_an_emulator_or_a_stream_is_recognised(command) -> None:
    assert tiers.starts_emulators(command)


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-m", "upvotes.cli", "--help"],
        [sys.executable, "-m", "upvotes.cli", "fold", "--project=p"],
        ["/venv/bin/upvotes", "emulators", "stop"],
        ["/venv/bin/upvotes", "emulators", "status"],
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        ["git", "archive", "--format=tar", "HEAD", "stream"],
    ],
)
def test_a_command_that_starts_neither_is_let_through(command) -> None:
    assert not tiers.starts_emulators(command)


def test_an_unmarked_test_that_starts_an_emulator_or_a_stream_fails_before_it_starts(tmp_path) -> None:
    """This test is unmarked: tests/conftest.py's guard is on. Each attempt fails the test
    (pytest.fail) before any process exists; pytest.raises catches that here."""
    attempts = [
        lambda: emulators.start(emulators.SPANNER, tmp_path),
        lambda: local_stream.start(new_resources(), 2, tmp_path / "stream.log"),
        lambda: subprocess.Popen([sys.executable, "-m", "upvotes.cli", "emulators", "start"]),
        lambda: subprocess.run(["upvotes", "stream", "--project=p"], check=False),
    ]
    for attempt in attempts:
        with pytest.raises(pytest.fail.Exception, match="is not marked `emulators`"):
            attempt()
    assert not (tmp_path / "stream.log").exists()
    # Anything else still runs.
    assert subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True, text=True).stdout == "ran\n"


class _Item:
    def __init__(self, name: str, long: bool) -> None:
        self.name, self.long = name, long

    def get_closest_marker(self, name: str, /) -> object | None:
        return object() if name == scheduling.LONG_MODULE and self.long else None


def test_the_long_modules_are_handed_out_first_each_part_in_its_order() -> None:
    items = [_Item("a1", False), _Item("b1", True), _Item("a2", False), _Item("b2", True), _Item("c1", True)]
    assert [item.name for item in scheduling.long_modules_first(items)] == ["b1", "b2", "c1", "a1", "a2"]


def test_the_suites_long_modules_are_collected_first(request: pytest.FixtureRequest) -> None:
    """tests/conftest.py puts them first (whichever tests `-m` or `-k` leave)."""
    long = [item.get_closest_marker(scheduling.LONG_MODULE) is not None for item in request.session.items]
    assert long == sorted(long, reverse=True)
