"""The two tiers of the suite: `make test` runs every test, `make test-fast` those marked neither
`emulators` nor `bench_smoke`, for while editing. tests/conftest.py marks `emulators` every test
whose fixtures reach `emulator_env`, and fails one without the mark that starts an emulator or a
stream all the same (`refuse_emulators`): the fast tier starts none."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import pytest

from upvotes.devtools import emulators, local_stream

EMULATORS = "emulators"  # the mark
EMULATOR_FIXTURE = "emulator_env"  # the session's emulators (tests/conftest.py)
# What a command line that starts an emulator or a stream names: an emulator's binary, or one of
# these subcommands of `upvotes` (or of `python -m MODULE`, upvotes.cli or a wrapper of its main).
EMULATOR_BINARIES = tuple(Path(binary).name for binary in emulators.BINARIES.values())
STARTING_SUBCOMMANDS = (("emulators", "start"), ("stream",), ("demo",))


class Markable(Protocol):
    """What mark_emulator_tests reads and calls of a collected test (a pytest.Item)."""

    def add_marker(self, marker: str, /) -> None: ...


def mark_emulator_tests(items: Sequence[Markable]) -> None:
    """Marks `emulators` every item whose fixtures reach EMULATOR_FIXTURE: `fixturenames` is the
    closure, so `stack`, `database`, `streaming_stack` and the modules' own fixtures count."""
    for item in items:
        if EMULATOR_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(EMULATORS)


def starts_emulators(args: str | Sequence) -> bool:
    """Whether a command line starts an emulator (its binary, `upvotes emulators start`) or a stream
    (`upvotes stream`, `upvotes demo`)."""
    words = args.split() if isinstance(args, str) else [str(arg) for arg in args]
    if any(Path(word).name in EMULATOR_BINARIES for word in words):
        return True
    commands = [at + 1 for at, word in enumerate(words) if Path(word).name == "upvotes"]
    commands += [at + 2 for at, word in enumerate(words) if word == "-m"]
    for at in commands:
        rest = [word for word in words[at:] if not word.startswith("-")]
        if any(tuple(rest[: len(sub)]) == sub for sub in STARTING_SUBCOMMANDS):
            return True
    return False


def refuse_emulators(monkeypatch: pytest.MonkeyPatch, refuse: Callable[[str], None]) -> None:
    """Until `monkeypatch` is undone, `refuse(what)` instead of starting an emulator or a stream in
    this process (emulators.start, local_stream.start) or as a subprocess (subprocess.Popen)."""
    monkeypatch.setattr(emulators, "start", lambda name, *_, **__: refuse(f"the {name} emulator"))
    monkeypatch.setattr(local_stream, "start", lambda *_, **__: refuse("a stream"))
    real_init = subprocess.Popen.__init__

    def guarded_init(self, args, *rest, **kwargs) -> None:  # noqa: ANN001 - Popen's signature
        if starts_emulators(args):
            refuse(f"`{args if isinstance(args, str) else ' '.join(map(str, args))}`")
        real_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded_init)
