"""What the demo's steps share: how they speak, and the stage they run on (the database, the
running pipeline, the ledger's place)."""

from __future__ import annotations

import argparse
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from upvotes.devtools.ledger import Ledger
from upvotes.devtools.race import PipelineRace, race_pipeline
from upvotes.devtools.workload import RealTrafficWorkload, VoteStateWorkload, Workload
from upvotes.resources import Resources

if TYPE_CHECKING:  # the service needs the [serve] extra: the demo runs without it, without a live page
    from upvotes.serving.runner import RunningService

TOP_N = 5  # posts in each of the demo's top lists


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


@dataclass
class Stage:
    """The streaming pipeline the races publish to, on its provisioned database."""

    args: argparse.Namespace  # the demo's flags
    resources: Resources
    database: object  # a google.cloud.spanner Database
    stream: subprocess.Popen  # `upvotes stream`, running
    stream_log: Path
    work_dir: Path
    live_page: RunningService | None = None  # `upvotes serve`, beside the pipeline, when its extra is installed

    @property
    def topic_path(self) -> str:
        return self.resources.topic_path(self.resources.topic)

    def check_alive(self) -> None:
        """Raises if the streaming pipeline has exited: nothing would count the votes."""
        if self.stream.poll() is not None:
            raise RuntimeError(
                f"the streaming pipeline exited with code {self.stream.returncode}; see {self.stream_log}"
            )

    def race(
        self,
        workload: Workload | VoteStateWorkload | RealTrafficWorkload,
        batch_size: int,
        ledger: Ledger | None = None,
    ) -> PipelineRace | None:
        """Publishes `workload` and times it until every count is exact (upvotes/devtools/race.py),
        adding to `ledger`; None, having said so, when the counts did not settle in time."""
        raced = race_pipeline(
            self.database,
            self.topic_path,
            workload,
            batch_size,
            self.args.timeout,
            alive=self.check_alive,
            ledger=ledger,
        )
        if raced is None:
            self.failed_to_settle()
        return raced

    def failed_to_settle(self) -> None:
        say(f"FAILED: counts did not settle within {self.args.timeout:.0f} s; see {self.stream_log}")

    def save(self, ledger: Ledger) -> None:
        ledger.save(self.work_dir / "ledger.json")
