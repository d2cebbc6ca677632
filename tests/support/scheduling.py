"""The order in which pytest-xdist hands out the test modules. `make test` runs `--dist loadfile
--no-loadscope-reorder`: each worker takes whole modules, in collection order, as it becomes free
(without the flag xdist hands out the modules with the most tests first), so a long module taken
last keeps one worker busy while the others sit idle. Modules marked `long_module` (each about 45 s
or more on a worker of `make test`; `pytest --durations` names them) are collected first, the
longest-first rule of greedy scheduling; the rest fill the gaps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

LONG_MODULE = "long_module"  # the mark, set per module (`pytestmark`)


class Schedulable(Protocol):
    """What long_modules_first reads of a collected test (a pytest.Item)."""

    def get_closest_marker(self, name: str, /) -> object | None: ...


Item = TypeVar("Item", bound=Schedulable)


def long_modules_first(items: Sequence[Item]) -> list[Item]:
    """`items` with every test of a module marked LONG_MODULE first; each part keeps its order,
    which is the same on every worker (xdist checks that the workers collected alike)."""
    return sorted(items, key=lambda item: item.get_closest_marker(LONG_MODULE) is None)
