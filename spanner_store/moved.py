"""Forwarding for modules that moved out of spanner_store (the read side to spanner_reads/, the
checks against a ledger to upvotes/devtools/verification.py): their documented names still
import from the old path, with a DeprecationWarning naming the new one (CHANGELOG.md). The
forwarders import their targets only when a name is asked for, so the workers, which never ask,
never load the read side.

A module that moved within its own layer (spanner_reads/trending.py and fresh_top.py, to
spanner_reads/rankings/) imports its new modules with real import statements, which the import
contracts see, and maps its names to those modules instead of to their names."""
from __future__ import annotations

import importlib
import warnings
from types import ModuleType
from typing import Any, Callable


def forward(old: str, new: dict[str, str | ModuleType]) -> Callable[[str], Any]:
    """A module `__getattr__` for `old`: each name in `new` is looked up in the module it maps to
    (a module, or its name, imported on first use)."""
    def __getattr__(name: str) -> Any:
        if name not in new:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        target = new[name]
        module = importlib.import_module(target) if isinstance(target, str) else target
        warnings.warn(f"{old}.{name} is deprecated: import it from {module.__name__}", DeprecationWarning,
                      stacklevel=2)
        return getattr(module, name)
    return __getattr__
