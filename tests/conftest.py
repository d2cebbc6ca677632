"""Shared fixtures: the real Spanner and Pub/Sub emulators, started once per test session.

Each test module gets a fresh database and fresh topics (`stack`), so modules never see
each other's rows. Emulators already named by SPANNER_EMULATOR_HOST / PUBSUB_EMULATOR_HOST
are reused as they are.

Every commit any test makes in this process (the sink and the fold run in-process under
the DirectRunner) goes through the real client wrapped by `upvotes.devtools.commit_meter`, which
counts its mutations as real Spanner does and fails any commit over Spanner's limit, which
the emulator does not enforce.

Two tiers (tests/support/tiers.py): every test that needs the emulators is marked `emulators` at
collection (any test whose fixtures reach `emulator_env`; the few that start emulators or streams
themselves are marked by hand), so `make test-fast` runs the rest (`-m "not emulators and not
bench_smoke"`) without starting one; `no_unmarked_emulators` fails a test that starts an emulator
or a stream without the mark, in either tier.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from hypothesis import settings as hypothesis_settings

import schemas
from local_runner.streaming import install_beam_caches
from pipeline.options import LOCAL_RUNNER
from spanner_store.database import open_database
from tests.support import faults, scheduling, tiers
from tests.support.examples import FAST_MAX_EXAMPLES
from tests.support.resources import STREAM_WINDOW_S, new_resources
from transforms import spanner_sink
from upvotes.devtools import emulators, local_stream
from upvotes.devtools.commit_meter import CommitMeter, metering_commits
from upvotes.operations.provision import provision
from upvotes.resources import Resources

# What Beam works out again for every pipeline, worked out once, as in the local stream: the many
# small pipelines the tests run cost half the CPU they did with the DoFn specs alone (docs/benchmarks.md).
install_beam_caches()
# A TestPipeline that names no runner runs on the one the jobs run on locally (pipeline/options.py),
# as the fold job does: the plain DirectRunner would first try to download Prism, on every run.
TestPipeline.pytest_test_pipeline_options = f"--runner={LOCAL_RUNNER}"  # type: ignore[assignment]  # None in Beam

# `make test-fast` loads it (--hypothesis-profile=fast): each property test draws a tenth of its
# examples (tests/support/examples.py). Registered here, before the option loads it.
hypothesis_settings.register_profile("fast", max_examples=FAST_MAX_EXAMPLES)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks `emulators` every test whose fixtures reach emulator_env, before `-m` deselects; puts
    the modules marked `long_module` first, for the workers to take first (tests/support/scheduling.py)."""
    tiers.mark_emulator_tests(items)
    items[:] = scheduling.long_modules_first(items)


@pytest.fixture(autouse=True)
def no_unmarked_emulators(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails a test not marked `emulators` that starts an emulator or a stream, in this process or as
    a subprocess: the fast tier never starts one, and the mark stays true in the full suite."""
    if request.node.get_closest_marker(tiers.EMULATORS):
        return

    def refuse(what: str) -> None:
        pytest.fail(
            f"{request.node.nodeid} starts {what} but is not marked `{tiers.EMULATORS}`: mark it "
            f"(pytest.mark.{tiers.EMULATORS}) or have it use the emulator_env fixture",
            pytrace=False,
        )

    tiers.refuse_emulators(monkeypatch, refuse)


@pytest.fixture(scope="session")
def emulator_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Starts both emulators (unless the environment names them) and exports their addresses."""
    log_dir = tmp_path_factory.mktemp("emulator-logs")
    with emulators.running_emulators(Path(log_dir)) as env:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        os.environ.setdefault("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_FOR_RW", "false")
        try:
            yield env
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@pytest.fixture(scope="session")
def _metered_commits() -> Iterator[CommitMeter]:
    # The baselines' tables too (schemas/baseline_counters.sql): the write-back flusher's tests commit to them.
    with metering_commits(CommitMeter(extra_ddl=tuple(schemas.ddl_statements(schemas.BASELINE_DDL_FILE)))) as meter:
        yield meter


@pytest.fixture(autouse=True)
def commit_meter(_metered_commits: CommitMeter) -> Iterator[CommitMeter]:
    """The meter of this test's commits; the test fails if any was over Spanner's limit,
    even one whose error the code under test caught."""
    _metered_commits.reset()
    yield _metered_commits
    assert not _metered_commits.too_large, _metered_commits.too_large


@pytest.fixture(scope="module")
def stack(emulator_env: dict[str, str]) -> Resources:
    """A freshly provisioned database, topic, subscription and dead-letter topic for one module."""
    resources = new_resources("db")
    provision(resources, log=lambda _: None)
    return resources


@pytest.fixture(scope="module")
def database(stack: Resources):
    return open_database(stack.project, stack.instance, stack.database)


@pytest.fixture
def flaky_sink(monkeypatch):
    """Makes the sink open FlakyDatabase(real database) in setup(); yields a factory to configure it.

    The DirectRunner runs DoFns in this process. The DoFn is pickled, but its module is
    imported by reference, so the module-global `open_database` that setup() calls is the
    patched one; the test asserts the injected counts to prove it.
    """
    created: list[faults.FlakyDatabase] = []
    settings: dict = {}
    real_open = spanner_sink.open_database

    def flaky_open(project, instance, database):
        flaky = faults.FlakyDatabase(real_open(project, instance, database), seed=len(created) + 1, **settings)
        created.append(flaky)
        return flaky

    monkeypatch.setattr(spanner_sink, "open_database", flaky_open)

    def configure(**kwargs) -> list[faults.FlakyDatabase]:
        settings.clear()
        settings.update(kwargs)
        created.clear()
        return created

    return configure


@pytest.fixture
def streaming_stack(emulator_env, tmp_path):
    """Resources of their own (no other test's messages or rows); every stream started is
    stopped at the end (drained)."""
    res = new_resources("stream")
    provision(res, log=lambda _: None)
    processes: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        process = local_stream.start(res, STREAM_WINDOW_S, tmp_path / "stream.log", emulator_env, append=True)
        processes.append(process)
        return process

    yield res, open_database(res.project, res.instance, res.database), start, tmp_path / "stream.log"
    for process in processes:
        local_stream.stop(process, signal.SIGTERM)
