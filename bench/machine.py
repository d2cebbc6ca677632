"""The date and the machine a run happened on."""

from __future__ import annotations

import os
import platform
from datetime import datetime, timezone
from importlib import metadata


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown" elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_info() -> dict:
    """Date (UTC), CPUs usable by this process, CPU model, load, and the software versions."""
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "apache_beam": _version("apache-beam"),
        "google_cloud_spanner": _version("google-cloud-spanner"),
        "google_cloud_pubsub": _version("google-cloud-pubsub"),
        "platform": platform.platform(),
    }
