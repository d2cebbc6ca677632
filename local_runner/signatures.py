"""What Beam reads off a Python function while it builds and runs a pipeline, read once per function
instead of on every call: its parameters and their defaults, and whether its body both yields and
returns.

Why: Beam builds a pipeline's DoFns again and again (for every `apply`, for the round trip through
the runner API that the local runner makes, and for every bundle), and each time it reads the
parameters of every method of the DoFn with `inspect.signature`
(`core.get_function_args_defaults`: about 3,000 calls for one fold pipeline) and reads the source
of `process` back from its file to warn about a `yield` beside a `return`
(`core._check_fn_use_yield_and_return`): on the local DirectRunner, a quarter of an empty fold run's
CPU once the DoFn specs and the options' views are cached (docs/benchmarks.md, "Measurements behind
the code").
The answer never changes: both are read from the function's code and defaults, which a function
keeps for its life. A bound method answers as its function does, less the bound first parameter,
so the answer is kept per function (weakly held) for plain functions and for methods bound to any
instance; other callables (builtins, classes, partials) go to Beam every time.

What: `install()` puts `cached_args_defaults` and `cached_yield_and_return` in place of Beam's
functions in `apache_beam.transforms.core`, whose callers look them up there by name;
`uninstall()` restores Beam's. Installed with the other caches by local_runner/streaming.py's
`install_beam_caches`, for the local DirectRunner and the tests, never on Dataflow.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable
from typing import Any

from apache_beam.transforms import core

ArgsDefaults = tuple[list[str], list[Any]]  # (names of the positional parameters, their defaults)

_BEAMS_ARGS_DEFAULTS = core.get_function_args_defaults
_BEAMS_YIELD_AND_RETURN = core._check_fn_use_yield_and_return
_ARGS_OF_FUNCTION: weakref.WeakKeyDictionary[types.FunctionType, ArgsDefaults] = weakref.WeakKeyDictionary()
_ARGS_OF_BOUND: weakref.WeakKeyDictionary[types.FunctionType, ArgsDefaults] = weakref.WeakKeyDictionary()
_YIELD_AND_RETURN: weakref.WeakKeyDictionary[types.FunctionType, bool] = weakref.WeakKeyDictionary()


def _function_of(f: Callable[..., Any]) -> types.FunctionType | None:
    """The plain function `f` is or is bound from; None for any other callable."""
    function = f.__func__ if type(f) is types.MethodType else f
    return function if type(function) is types.FunctionType else None


def cached_args_defaults(f: Callable[..., Any]) -> ArgsDefaults:
    """core.get_function_args_defaults(f), read once per function (bound or not)."""
    function = _function_of(f)
    if function is None:
        return _BEAMS_ARGS_DEFAULTS(f)
    cache = _ARGS_OF_BOUND if type(f) is types.MethodType else _ARGS_OF_FUNCTION
    answer = cache.get(function)
    if answer is None:
        answer = cache[function] = _BEAMS_ARGS_DEFAULTS(f)
    names, defaults = answer
    return list(names), list(defaults)  # callers may change the lists they are given


def cached_yield_and_return(f: Callable[..., Any]) -> bool:
    """core._check_fn_use_yield_and_return(f), read once per function (bound or not)."""
    function = _function_of(f)
    if function is None:
        return _BEAMS_YIELD_AND_RETURN(f)
    answer = _YIELD_AND_RETURN.get(function)
    if answer is None:
        answer = _YIELD_AND_RETURN[function] = _BEAMS_YIELD_AND_RETURN(f)
    return answer


def install() -> None:
    core.get_function_args_defaults = cached_args_defaults
    core._check_fn_use_yield_and_return = cached_yield_and_return


def uninstall() -> None:
    """Undoes install()."""
    core.get_function_args_defaults = _BEAMS_ARGS_DEFAULTS
    core._check_fn_use_yield_and_return = _BEAMS_YIELD_AND_RETURN
    for cache in (_ARGS_OF_FUNCTION, _ARGS_OF_BOUND, _YIELD_AND_RETURN):
        cache.clear()


def installed() -> bool:
    return core.get_function_args_defaults is cached_args_defaults
