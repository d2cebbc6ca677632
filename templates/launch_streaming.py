"""Flex-template entry point of the streaming pipeline (FLEX_TEMPLATE_PYTHON_PY_FILE).

The template launcher runs this file with the template parameters as flags
(--inputSubscription=..., --windowSeconds=..., see templates/streaming/metadata.json) and
Dataflow's own (--runner, --project, --region, --temp_location, ...). It builds the graph with
the same code as `upvotes stream` and returns once the job is submitted: Dataflow asks a
flex-template program not to call wait_until_finish, which `upvotes stream`
(local_runner.streaming.run, never in this image) does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pipeline.streaming import launch


def main(argv: Sequence[str] | None = None) -> None:
    launch(argv)


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    main()
