"""A local redis-server for the write-back baseline (upvotes/devtools/write_back.py, bench/write_back.py).

Started like the emulators (upvotes/devtools/emulators.py): a process group of its own, ready only once it
answers a real command, stopped on the way out. It listens on a unix socket only (no TCP port:
loopback is not a boundary) in a private temporary directory (mode 0700), which also holds its
append-only file, so that a restart after a SIGKILL reloads what the durability mode kept.

Durability modes, one per row of the benchmark:
- `none`: no AOF and no RDB snapshots, as Memorystore for Redis' basic tier by default: a crash
  loses everything not yet flushed to Spanner.
- `aof_everysec`: every write is appended to the AOF before the reply, which fsyncs once a
  second: a process crash loses nothing (the page cache survives it); a machine crash loses up
  to about one second of writes (Redis' persistence documentation). Only the first can be
  measured here.
- `aof_always`: the AOF is fsynced before the reply (group commit): nothing acknowledged is lost.

Debian's `redis-server` package installs the binary (7.0 on bookworm); it need not run as a
service.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from upvotes.devtools.emulators import EmulatorError, is_alive, terminate_group

PACKAGE = "redis-server"
NONE, AOF_EVERYSEC, AOF_ALWAYS = "none", "aof_everysec", "aof_always"
DURABILITY_ARGS = {
    NONE: ("--appendonly", "no"),
    AOF_EVERYSEC: ("--appendonly", "yes", "--appendfsync", "everysec"),
    AOF_ALWAYS: ("--appendonly", "yes", "--appendfsync", "always"),
}
DURABILITY_MODES = tuple(DURABILITY_ARGS)
READY_TIMEOUT_S = 30.0
SOCKET_NAME = "redis.sock"  # a unix socket path must stay under 108 bytes: keep the directory short


class RedisServerError(EmulatorError):
    """redis-server is missing, would not start, or would not answer."""


def redis_binary() -> str:
    """Path of redis-server; RedisServerError naming Debian's package if it is not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisServerError(
            f"redis-server is not installed (not on PATH). Install Debian's {PACKAGE} package "
            f"(apt-get install {PACKAGE}); the benchmark starts its own server, so it need not run as a service."
        )
    return binary


class LocalRedis:
    """One redis-server in a temporary directory of its own, for the duration of a `with` block.

    `kill()` sends SIGKILL and reaps it; `start()` starts it again on the same socket and
    directory, reloading its AOF if the mode keeps one.
    """

    def __init__(self, durability: str, parent_dir: Path | None = None) -> None:
        if durability not in DURABILITY_ARGS:
            raise ValueError(f"unknown durability {durability!r}; choose from {', '.join(DURABILITY_MODES)}")
        self.durability = durability
        self._parent_dir = parent_dir
        self.directory: Path | None = None
        self._process: subprocess.Popen | None = None
        self.restarts = 0

    @property
    def socket_path(self) -> str:
        return str(self.directory / SOCKET_NAME)

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    @property
    def pid(self) -> int:
        return self._process.pid

    def client(self, **kwargs):
        """A redis-py client on the socket (hiredis parses the replies where installed)."""
        import redis

        return redis.Redis(unix_socket_path=self.socket_path, **kwargs)

    def __enter__(self) -> "LocalRedis":
        self.directory = Path(tempfile.mkdtemp(prefix="redis-", dir=self._parent_dir))
        try:
            self.start()
        except BaseException:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        return self

    def __exit__(self, *_) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Starts the server and waits until it answers PING (after loading its AOF, if any)."""
        command = [redis_binary(), "--port", "0", "--unixsocket", self.socket_path, "--unixsocketperm", "700",
                   "--dir", str(self.directory), "--save", "", "--daemonize", "no", "--logfile", str(self.log_path),
                   *DURABILITY_ARGS[self.durability]]
        if self._process is not None:
            self.restarts += 1
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_until_ready(timeout_s)

    def _wait_until_ready(self, timeout_s: float) -> None:
        import redis

        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        with contextlib.closing(self.client(socket_timeout=1.0)) as probe:
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    raise RedisServerError(f"redis-server exited with code {self._process.returncode} while "
                                           f"starting; see its log {self.log_path}")
                try:
                    probe.ping()  # a server still loading its AOF answers LOADING, an error here
                    return
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as error:
                    last_error = error
                    time.sleep(0.02)
        self.stop()
        raise RedisServerError(f"redis-server did not answer on {self.socket_path} within {timeout_s:.0f} s "
                               f"(last error: {last_error}); see its log {self.log_path}")

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown, no last AOF write. Reaped before returning."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()

    def stop(self) -> None:
        if self._process is not None and is_alive(self._process.pid):
            terminate_group(self._process.pid)
        if self._process is not None:
            self._process.wait()

