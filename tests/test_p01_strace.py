"""p01-strace end to end on this kernel, from the shared run of the quick p01 units
(conftest.p01_quick_out)."""
import os

import pytest

from unit_live import load

pytestmark = pytest.mark.netns


def test_strace_capture_shows_the_handshake(p01_quick_out):
    j = load(p01_quick_out, "p01-strace")
    assert j["capture"]["dropped"] == 0
    for part in ("block", "cc"):
        assert j["parts"][part]["packets"]["flags"][:3] == ["S", "SA", "A"], part
    assert os.path.isfile(os.path.join(p01_quick_out, "p01-strace-ladder.svg"))
