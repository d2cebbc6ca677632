"""The README's hand-run blocks, pasted the way a newcomer pastes them, against fresh emulators.

Each block marked `<!-- hand-run: NAME -->` is run line by line in a bash of its own terminal (one
shell per terminal, like two terminal windows in one directory): the `terminal 1` block, whose last
command (the stream) keeps running, then the `terminal 2` block, then Ctrl-C to terminal 1, then the
`when done` block in terminal 2. Every command must exit 0 and print each `# ` comment line written
directly under it in the README (`...` stands for any text on that line).

The shells start in a directory of their own (with a link to the project's .venv), so the
emulators' state file and the ledger never touch the checkout, and with no emulator address in
their environment: the second terminal must find the first one's emulators by itself.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.long_module  # about 45 s or more: handed out first (tests/support/scheduling.py)

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BLOCK = re.compile(r"<!-- hand-run: (?P<name>[^>]+?) -->\s*```sh\n(?P<body>.*?)```", re.S)
COMMAND_TIMEOUT_S = 180
# Variables a newcomer's shell would not have: the test session's emulators and settings.
NOT_INHERITED = (
    "SPANNER_EMULATOR_HOST",
    "PUBSUB_EMULATOR_HOST",
    "GOOGLE_CLOUD_PROJECT",
    "VIRTUAL_ENV",
    "UPVOTES_SPANNER_EMULATOR_PID",
    "UPVOTES_PUBSUB_EMULATOR_PID",
    "PYTHONPATH",
)


@dataclass(frozen=True)
class Step:
    """One command as pasted (continuation lines joined) and the output lines the README shows for it."""

    command: str
    expected: tuple[str, ...]

    def missing(self, output: str) -> list[str]:
        """The expected lines the output does not contain (`...` matches any text within a line)."""
        patterns = {line: ".*".join(map(re.escape, line.split("..."))) for line in self.expected}
        return [line for line, pattern in patterns.items() if not re.search(pattern, output)]


def parse_steps(body: str) -> list[Step]:
    """A block's commands, each with the `# ` comment lines directly under it."""
    steps: list[tuple[str, list[str]]] = []
    pending = ""
    for line in body.splitlines():
        if pending:
            pending += "\n" + line
        elif line.startswith("# "):
            assert steps, f"an output line before any command: {line!r}"
            steps[-1][1].append(line[2:])
            continue
        elif line.strip():
            pending = line
        if pending and not pending.endswith("\\"):
            steps.append((pending, []))
            pending = ""
    return [Step(command, tuple(expected)) for command, expected in steps]


def readme_blocks(text: str) -> dict[str, list[Step]]:
    return {match["name"]: parse_steps(match["body"]) for match in BLOCK.finditer(text)}


class Terminal:
    """A bash fed pasted lines through a pipe, its output (stderr included) read line by line."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            ["bash"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None  # both pipes
        self._stdin, self._stdout = self.process.stdin, self.process.stdout
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self._stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, command: str) -> str:
        """Pastes the command; returns the marker the shell prints with its exit status once it ends."""
        marker = f"@@{uuid.uuid4().hex}"
        self._stdin.write(f'{command}\necho "{marker}:$?"\n')
        self._stdin.flush()
        return marker

    def finish(self, marker: str, timeout_s: float = COMMAND_TIMEOUT_S) -> tuple[int, str]:
        """The exit status and output of the command pasted with this marker."""
        output: list[str] = []
        while True:
            try:
                line = self.lines.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(f"no end within {timeout_s} s; output so far:\n{''.join(output)}") from None
            if line is None:
                raise AssertionError(f"the shell exited; output:\n{''.join(output)}")
            if line.startswith(f"{marker}:"):
                return int(line.split(":", 1)[1]), "".join(output)
            output.append(line)

    def run(self, step: Step) -> None:
        status, output = self.finish(self.send(step.command))
        check(step, status, output)

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the foreground process group (the shell and the command it waits on)."""
        os.killpg(self.process.pid, signal.SIGINT)

    def close(self) -> None:
        if self.process.poll() is None:
            self._stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def check(step: Step, status: int, output: str) -> None:
    assert status == 0, f"{step.command!r} exited {status}:\n{output}"
    missing = step.missing(output)
    assert not missing, f"{step.command!r} did not print {missing}; it printed:\n{output}"


def test_the_readme_marks_its_hand_run_blocks() -> None:
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    assert list(blocks) == ["terminal 1", "terminal 2", "when done"]
    first, second = blocks["terminal 1"], blocks["terminal 2"]
    assert first[-1].command.startswith("upvotes stream ")
    assert (
        'eval "$(upvotes emulators start)"' in first[1].command
        and 'eval "$(upvotes emulators start)"' in second[1].command
    )
    assert any("--dead-letter-topic" in step.command for step in second if step.command.startswith("upvotes status"))
    assert all(step.expected for step in first + second if step.command.startswith("upvotes "))


def test_output_lines_match_with_ellipses() -> None:
    step = Step("x", ("published ... events (10 invalid) in ... s", "exit 3"))
    assert step.missing("published 10,010 events (10 invalid) in 1.0 s: fast\nexit 3\n") == []
    assert step.missing("published 10,010 events (9 invalid) in 1.0 s\nexit 0\n") == list(step.expected)
    assert parse_steps("a \\\n  b   # why\n# out 1\n# out 2\nc\n") == [
        Step("a \\\n  b   # why", ("out 1", "out 2")),
        Step("c", ()),
    ]


@pytest.mark.emulators  # the pasted blocks start their own
def test_the_hand_run_blocks_work_when_pasted_into_two_terminals(tmp_path: Path) -> None:
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    first, second = Terminal(tmp_path, env), Terminal(tmp_path, env)
    try:
        *setup, stream = blocks["terminal 1"]
        for step in setup:
            first.run(step)
        streaming = first.send(stream.command)
        for step in blocks["terminal 2"]:
            second.run(step)
        first.interrupt()
        status, output = first.finish(streaming)
        check(stream, status, output)
        for step in blocks["when done"]:
            second.run(step)
    finally:
        first.close()
        second.close()
        # Whatever failed, no emulator outlives the test.
        subprocess.run(
            [str(tmp_path / ".venv" / "bin" / "upvotes"), "emulators", "stop"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=60,
        )
