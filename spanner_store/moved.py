"""Forwarding for modules that moved out of spanner_store (the read side to spanner_reads/, the
checks against a ledger to upvotes/devtools/verification.py): their documented names still
import from the old path, with a DeprecationWarning naming the new one (CHANGELOG.md). The
forwarders import their targets only when a name is asked for, so the workers, which never ask,
never load the read side."""
from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable


def forward(old: str, new: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `old`: each name in `new` is looked up in the module it maps to."""
    def __getattr__(name: str) -> Any:
        if name not in new:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(f"{old}.{name} is deprecated: import it from {new[name]}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new[name]), name)
    return __getattr__
