"""Warm sandboxes (``verifiers.sandbox.warm``): the attacks of test_attacks.py on a warm sandbox,
plus what is particular to reuse: whatever a job does, the next job on the same sandbox sees a
clean state, and nothing of a pool is left running once it is closed."""

from __future__ import annotations

import pytest

from verifiers.sandbox import Sandbox

from .test_attacks import *  # noqa: F403  (every attack again, on a warm sandbox)

pytestmark = pytest.mark.sandbox


@pytest.fixture
def sandbox() -> Sandbox:
    sb = Sandbox("bwrap", timeout=10, warm=True, warm_size=2)
    yield sb
    sb.close()
