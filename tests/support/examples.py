"""How many examples a property test draws: the count it names in `make test`, fewer in the
`fast` Hypothesis profile that `make test-fast` loads (`--hypothesis-profile=fast`, registered in
tests/conftest.py), which is for while editing and never replaces the full count."""

from __future__ import annotations

from hypothesis import settings

DEFAULT_MAX_EXAMPLES = 100  # Hypothesis's own default, which the default profile keeps
FAST_MAX_EXAMPLES = 10  # the `fast` profile's default: a tenth


def examples(full: int) -> int:
    """`full` under the default profile; under a profile that draws N times fewer examples by
    default (`fast`: ten times), N times fewer, at least one. Read when the test is defined, after
    the profile is loaded."""
    profile = settings.default
    default = profile.max_examples if profile is not None else DEFAULT_MAX_EXAMPLES
    return max(1, full * default // DEFAULT_MAX_EXAMPLES)
