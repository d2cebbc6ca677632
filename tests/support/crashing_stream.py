"""`upvotes stream` that SIGKILLs itself at one chosen step, for tests/test_exactly_once.py:

    python -m tests.support.crashing_stream <point> <tag> stream --project ... (upvotes stream's flags)

The kill is deterministic: at the first time the step handles something of the messages whose data
holds `tag` (the test's events of one stage name posts starting with it). Nothing is mocked: the
process is the real command on the real emulators, with one function wrapped to kill it there.

| point               | killed                                                                     |
|---------------------|----------------------------------------------------------------------------|
| pulled              | after a pull returned the tagged messages, before the log records them     |
| logged              | after the log recorded them, before they go into the pipeline              |
| before_commit       | at the window's first delta commit of a tagged post, before it is sent     |
| between_commits     | after that first delta commit, before the window's next ones               |
| between_vote_states | after the window's first vote-state transaction of a tagged post           |
| before_ack          | every tagged message's window written, before the acknowledgement that     |
|                     | completes them is sent                                                     |
| after_ack           | after it is sent, before the log marks the windows finished                |

At the last two, everything derived from the tagged messages is committed (that is when the
stream acknowledges): the test checks it with the process dead, before any restart.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

POINTS = ("pulled", "logged", "before_commit", "between_commits", "between_vote_states", "before_ack", "after_ack")
KILLED_AT = "crashing_stream: SIGKILL at"


def _kill(point: str) -> None:
    os.write(2, f"{KILLED_AT} {point}\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str, tag: str) -> None:
    """Wraps the function of `point` (see the module docstring) in this process."""
    from local_runner import exactly_once, message_log, pubsub_reader
    from spanner_writes import deltas
    from transforms import vote_state_sink

    tagged: set[str] = set()  # delivery keys of the tagged messages pulled
    raw = tag.encode()

    def wrap(owner, name: str, around: Callable) -> None:
        original = getattr(owner, name)
        setattr(owner, name, lambda *args, **kwargs: around(original, *args, **kwargs))

    def pull(original, subscription, acknowledge=True):
        received, calls = original(subscription, acknowledge)
        mine = [exactly_once.delivery_key(m) for m in received if raw in m.message.data]
        tagged.update(mine)
        if mine and point == "pulled":
            _kill(point)
        return received, calls

    wrap(pubsub_reader, "pull_bundle", pull)

    if point == "logged":

        def record(original, self, stamp_us, end, payload):
            original(self, stamp_us, end, payload)
            if raw in payload:
                _kill(point)

        wrap(message_log.MessageLog, "record_pull", record)
    elif point in ("before_commit", "between_commits"):

        def commit(original, database, rows, *args, **kwargs):
            mine = any(row.post_id.startswith(tag) for row in rows)
            if mine and point == "before_commit":
                _kill(point)
            result = original(database, rows, *args, **kwargs)
            if mine:
                _kill(point)
            return result

        wrap(deltas, "write_deltas", commit)
    elif point == "between_vote_states":

        def apply(original, database, states, *args, **kwargs):
            result = original(database, states, *args, **kwargs)
            if any(key.post_id.startswith(tag) for key in states):
                _kill(point)
            return result

        wrap(vote_state_sink, "apply_vote_states", apply)
    elif point == "before_ack":
        acknowledged: set[str] = set()

        def acknowledge(original, self, ack_ids):
            acknowledged.update(key for key, _ in ack_ids if key in tagged)
            if tagged and acknowledged == tagged:  # the last of them
                _kill(point)
            return original(self, ack_ids)

        wrap(exactly_once.ExactlyOnce, "_acknowledge", acknowledge)
    elif point == "after_ack":
        finished: set[str] = set()

        def finish(original, self, through_us, acked, unacked, now):
            acked = list(acked)
            finished.update(key for key in acked if key in tagged)
            if tagged and finished == tagged:
                _kill(point)
            return original(self, through_us, acked, unacked, now)

        wrap(message_log.MessageLog, "finish_windows", finish)
    elif point != "pulled":
        raise SystemExit(f"unknown point {point!r}: one of {', '.join(POINTS)}")


if __name__ == "__main__":
    point, tag, *command = sys.argv[1:]
    arm(point, tag)
    from upvotes.cli import main

    sys.exit(main(command))
