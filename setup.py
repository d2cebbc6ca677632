"""Install the upvotes pipelines, their transforms, the Spanner data layer, the schemas, the
local runner and the `upvotes` command.

The same file is the Dataflow workers' setup file (`--setup_file ./setup.py`), so the
workers install exactly the packages and versions tested here; in the worker image, where
only the worker packages are copied, it installs just those.
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent

# One Beam version for setup.py, the Dockerfile in templates/ and CI; a test checks they agree.
BEAM_VERSION = "2.77.0"

setup(
    name="upvotes",
    version="0.1.0",
    description="Counts upvotes and shares on viral posts with blind-write deltas in Cloud Spanner.",
    python_requires=">=3.10",
    packages=find_packages(
        include=[
            "pipeline",
            "transforms",
            "spanner_writes",
            "spanner_reads",
            "spanner_store",
            "schemas",
            "local_runner",
            "upvotes",
            "upvotes.*",
            "bench",
        ]
    ),
    package_data={"schemas": ["*.sql", "*.json"]},
    install_requires=[
        f"apache-beam[gcp]=={BEAM_VERSION}",
        "google-cloud-pubsub>=2.44,<3",
        "google-cloud-spanner>=3.71,<4",
        # Beam's own JSON parsing is the chain's largest per-element cost; orjson halves it.
        "orjson>=3.8,<4",
        # The common vote decoded and checked in one call (schemas.contract.CommonVote): the
        # parse-and-sum chain's CPU per vote about halved on batches (bench transform_cost).
        "msgspec>=0.22,<1",
        # `upvotes capacity`'s model sums over every post (also a dependency of Beam's).
        "numpy>=1.26",
        # Unique voters: Apache DataSketches' HyperLogLog, whose serialised sketches merge across
        # processes, versions and languages (schemas/voter_sketch.py).
        "datasketches>=5.1,<6",
        # Progress bars of `upvotes publish` and `upvotes demo` (rate, ETA, done).
        "tqdm>=4.66,<5",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "hypothesis>=6.100",
            "pytest-timeout>=2.3",
            "import-linter>=2.1",
            "jsonschema>=4.20",
            # `make test` and `make test-fast` run the suite on several workers (Makefile).
            "pytest-xdist>=3.6",
            # `make typecheck` (mypy.ini), part of `make test`.
            "mypy>=2.4,<2.5",  # a newer minor version may find more: move up with its fixes
            # `make lint` (ruff.toml), part of `make test`: lint and format.
            "ruff>=0.17.6,<0.18",  # the formatter's style changes only between minor versions
            # jsonschema checks "format": "date-time" only with this installed (tests/test_contract.py).
            "rfc3339-validator>=0.1.4",
            "httpx>=0.27",
            "selenium>=4.20",
            # tests/test_write_back.py: the write-back baseline on a real redis-server.
            "redis[hiredis]>=5,<9",
        ],
        # The write-back cache baseline (bench/write_back_cache.py) talks to a real redis-server
        # (Debian's redis-server package) through redis-py, with hiredis parsing the replies.
        # py-spy: where the local stream's time goes, by stage (bench/real_traffic.py; skipped without it).
        "bench": ["matplotlib>=3.8", "redis[hiredis]>=5,<9", "py-spy>=0.3.14"],
        # `upvotes serve`, the HTTP service for app servers (upvotes/serving/service.py): not in the
        # worker image, which installs only what the pipelines run.
        "serve": ["fastapi>=0.110,<1", "uvicorn>=0.29,<1"],
        # The documentation site (`make docs`, mkdocs.yml): MkDocs with the Material theme, and
        # mkdocstrings for the Python API page; tests/test_docs.py builds it.
        "docs": ["mkdocs>=1.6,<2", "mkdocs-material>=9.5,<10", "mkdocstrings[python]>=0.26,<2"],
    },
    # The worker image (templates/Dockerfile) copies only the worker packages: no command there.
    entry_points={"console_scripts": ["upvotes=upvotes.cli:main"]} if (HERE / "upvotes").is_dir() else {},
)
