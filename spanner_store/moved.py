"""Forwarding for modules that moved (CHANGELOG.md, "Deprecated interfaces"): their documented
names still import from the old path, the same objects, with a DeprecationWarning naming the new
module. Each forwarder imports its new modules with real import statements, so the import
contracts see them: those that reach up from spanner_store to the read side or the tools are
named in .importlinter as the deprecated forwarders they are, and nothing a worker runs imports
them."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any


def forward(old: str, new: dict[str, ModuleType]) -> Callable[[str], Any]:
    """A module `__getattr__` for `old`: each name in `new` is looked up in the module it maps to."""

    def __getattr__(name: str) -> Any:
        if name not in new:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        module = new[name]
        warnings.warn(f"{old}.{name} is deprecated: import it from {module.__name__}", DeprecationWarning, stacklevel=2)
        return getattr(module, name)

    return __getattr__
