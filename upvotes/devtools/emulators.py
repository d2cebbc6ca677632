"""Start, check and stop the Google Cloud CLI's Spanner and Pub/Sub emulators on loopback.

Both come with the Google Cloud CLI (Debian packages `google-cloud-cli-spanner-emulator`
and `google-cloud-cli-pubsub-emulator`). Each is started on a free loopback port in a
process group of its own, and counts as ready only once it answers a real API request.
`upvotes emulators start` records what it started in a state file so that `stop` ends
exactly those processes; the test fixtures and `upvotes demo` use `running_emulators`.

An emulator whose address is already in SPANNER_EMULATOR_HOST / PUBSUB_EMULATOR_HOST is
used as it is and never started or stopped here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc

SPANNER = "spanner"
PUBSUB = "pubsub"
ENV_VARS = {SPANNER: "SPANNER_EMULATOR_HOST", PUBSUB: "PUBSUB_EMULATOR_HOST"}
# Set for emulators started here, so benchmarks can read their CPU time.
PID_ENV_VARS = {SPANNER: "UPVOTES_SPANNER_EMULATOR_PID", PUBSUB: "UPVOTES_PUBSUB_EMULATOR_PID"}
PACKAGES = {SPANNER: "google-cloud-cli-spanner-emulator", PUBSUB: "google-cloud-cli-pubsub-emulator"}
BINARIES = {
    SPANNER: "bin/cloud_spanner_emulator/emulator_main",
    PUBSUB: "platform/pubsub-emulator/bin/cloud-pubsub-emulator",
}
STANDARD_SDK_ROOTS = ("/usr/lib/google-cloud-sdk", "/usr/share/google-cloud-sdk", "~/google-cloud-sdk")
STATE_FILE = "emulators.json"
DEFAULT_STATE_DIR = ".upvotes"
READY_TIMEOUT_S = 60.0


class EmulatorError(RuntimeError):
    """An emulator is missing, would not start, or would not answer."""


@dataclass(frozen=True)
class Emulator:
    """One emulator process started here."""

    name: str
    host: str
    port: int
    pid: int
    log_path: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def env_var(self) -> str:
        return ENV_VARS[self.name]


def find_sdk_root() -> Path | None:
    """The Google Cloud CLI's install root, from `gcloud info` or a standard path."""
    if shutil.which("gcloud"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                ["gcloud", "info", "--format=value(installation.sdk_root)"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout.strip()
            if out and Path(out).is_dir():
                return Path(out)
    for root in STANDARD_SDK_ROOTS:
        path = Path(root).expanduser()
        if path.is_dir():
            return path
    return None


def emulator_binary(name: str, sdk_root: Path | None = None) -> Path:
    """Path of an emulator's executable; EmulatorError naming the package if it is missing."""
    root = sdk_root if sdk_root is not None else find_sdk_root()
    binary = root / BINARIES[name] if root else None
    if binary is None or not os.access(binary, os.X_OK):
        where = f"under {root}" if root else "(no Google Cloud CLI found)"
        raise EmulatorError(
            f"The {name} emulator is not installed {where}. Install the Debian package "
            f"{PACKAGES[name]} (apt-get install {PACKAGES[name]}), "
            f"or run `gcloud components install {'cloud-spanner-emulator' if name == SPANNER else 'pubsub-emulator'}`."
        )
    return binary


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(name: str, binary: Path, port: int) -> list[str]:
    if name == SPANNER:
        return [str(binary), "--host_port", f"127.0.0.1:{port}"]
    return [str(binary), "--host=127.0.0.1", f"--port={port}"]


def check_ready(name: str, address: str, timeout_s: float = 5.0) -> None:
    """Makes one real API call against the emulator; raises if it does not answer."""
    with grpc.insecure_channel(address) as channel:
        if name == SPANNER:
            from google.cloud.spanner_admin_instance_v1.services.instance_admin import InstanceAdminClient
            from google.cloud.spanner_admin_instance_v1.services.instance_admin.transports import (
                InstanceAdminGrpcTransport,
            )

            instances = InstanceAdminClient(transport=InstanceAdminGrpcTransport(channel=channel))
            list(instances.list_instance_configs(parent="projects/readiness-probe", timeout=timeout_s))
        else:
            from google.pubsub_v1.services.publisher import PublisherClient
            from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

            publisher = PublisherClient(transport=PublisherGrpcTransport(channel=channel))
            list(publisher.list_topics(project="projects/readiness-probe", timeout=timeout_s))


def _wait_until_ready(emulator: Emulator, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EmulatorError(
                f"The {emulator.name} emulator exited with code {process.returncode} while starting; "
                f"see its log {emulator.log_path}."
            )
        try:
            check_ready(emulator.name, emulator.address)
            return
        except Exception as error:  # noqa: BLE001 - any failure means "not ready yet"
            last_error = error
            time.sleep(0.25)
    terminate_group(emulator.pid)
    raise EmulatorError(
        f"The {emulator.name} emulator did not answer on {emulator.address} within {timeout_s:.0f} s "
        f"(last error: {last_error}); see its log {emulator.log_path}."
    )


def start(name: str, log_dir: Path, sdk_root: Path | None = None, timeout_s: float = READY_TIMEOUT_S) -> Emulator:
    """Starts one emulator on a free loopback port and waits until it answers."""
    binary = emulator_binary(name, sdk_root)
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = log_dir / f"{name}-emulator-{port}.log"
    with open(log_path, "wb") as log:
        # A process group of its own: stop() ends the Java child of the Pub/Sub wrapper too.
        process = subprocess.Popen(
            _command(name, binary, port),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    emulator = Emulator(name=name, host="127.0.0.1", port=port, pid=process.pid, log_path=str(log_path))
    _wait_until_ready(emulator, process, timeout_s)
    return emulator


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def terminate_group(pid: int, grace_s: float = 10.0) -> None:
    """Ends the process group led by `pid`: SIGTERM, then SIGKILL after a grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not is_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def stop(emulator: Emulator) -> None:
    terminate_group(emulator.pid)


# --- the state file behind `upvotes emulators start|stop|status` -----------------------


def _state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def load_state(state_dir: Path) -> list[Emulator]:
    path = _state_path(state_dir)
    if not path.exists():
        return []
    return [Emulator(**entry) for entry in json.loads(path.read_text())]


def save_state(state_dir: Path, emulators: list[Emulator]) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    _state_path(state_dir).write_text(json.dumps([asdict(e) for e in emulators], indent=2))


def export_lines(emulators: list[Emulator]) -> list[str]:
    return [f"export {e.env_var}={e.address}" for e in emulators]


def start_all(state_dir: Path, log: Callable[[str], None] = lambda _: None) -> list[Emulator]:
    """Starts every emulator not already reachable through its environment variable or state file."""
    running = {e.name: e for e in load_state(state_dir) if is_alive(e.pid)}
    started: list[Emulator] = []
    try:
        for name in (SPANNER, PUBSUB):
            if os.environ.get(ENV_VARS[name]):
                log(f"{name}: using {os.environ[ENV_VARS[name]]} from {ENV_VARS[name]}")
                continue
            if name in running:
                log(f"{name}: already running on {running[name].address} (pid {running[name].pid})")
                continue
            log(f"{name}: starting ...")
            emulator = start(name, state_dir / "logs")
            started.append(emulator)
            log(f"{name}: ready on {emulator.address} (pid {emulator.pid})")
    except BaseException:
        for emulator in started:
            stop(emulator)
        raise
    everything = list(running.values()) + started
    save_state(state_dir, everything)
    return everything


def stop_all(state_dir: Path, log: Callable[[str], None] = lambda _: None) -> int:
    """Stops the emulators recorded in the state file; returns how many were running."""
    stopped = 0
    for emulator in load_state(state_dir):
        if is_alive(emulator.pid):
            stop(emulator)
            stopped += 1
            log(f"{emulator.name}: stopped (pid {emulator.pid})")
    _state_path(state_dir).unlink(missing_ok=True)
    return stopped


def status(state_dir: Path) -> dict[str, str]:
    """A one-line state per emulator: external, running and answering, not answering, or stopped."""
    result: dict[str, str] = {}
    recorded = {e.name: e for e in load_state(state_dir)}
    for name in (SPANNER, PUBSUB):
        address = os.environ.get(ENV_VARS[name]) or (recorded[name].address if name in recorded else None)
        source = (
            f"from {ENV_VARS[name]}"
            if os.environ.get(ENV_VARS[name])
            else (f"pid {recorded[name].pid}" if name in recorded else "")
        )
        if address is None:
            result[name] = "stopped"
            continue
        try:
            check_ready(name, address, timeout_s=3.0)
            result[name] = f"running on {address} ({source})"
        except Exception as error:  # noqa: BLE001 - reported, not raised
            result[name] = f"not answering on {address} ({source}): {type(error).__name__}"
    return result


@contextlib.contextmanager
def running_emulators(log_dir: Path, log: Callable[[str], None] = lambda _: None) -> Iterator[dict[str, str]]:
    """Both emulators for the duration of a block; yields the environment variables to use.

    Emulators named by the environment are reused and left running; the ones started
    here are stopped on the way out, whatever happens inside the block.
    """
    started: list[Emulator] = []
    env: dict[str, str] = {}
    try:
        for name in (SPANNER, PUBSUB):
            existing = os.environ.get(ENV_VARS[name])
            if existing:
                env[ENV_VARS[name]] = existing
                continue
            log(f"starting the {name} emulator ...")
            emulator = start(name, log_dir)
            started.append(emulator)
            env[emulator.env_var] = emulator.address
            env[PID_ENV_VARS[name]] = str(emulator.pid)  # its CPU is a proxy for database load
        yield env
    finally:
        for emulator in started:
            stop(emulator)
