"""Flex-template entry point of the fold pipeline (FLEX_TEMPLATE_PYTHON_PY_FILE).

The template launcher runs this file with the template parameters as flags
(--spannerInstanceId=..., see templates/fold/metadata.json) and Dataflow's own (--runner,
--project, --region, --temp_location, ...). It builds the graph with the same code as
`upvotes fold` and returns once the job is submitted: Dataflow asks a flex-template program not
to call wait_until_finish, and pipeline.fold.run() also reads the finished job's metrics, which
a launch does not have.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pipeline.fold import launch


def main(argv: Sequence[str] | None = None) -> None:
    launch(argv)


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    main()
