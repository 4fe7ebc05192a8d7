"""p01-machine end to end on this kernel, from the shared run of the quick p01 units
(conftest.p01_quick_out)."""
import os

import pytest

from unit_live import load

pytestmark = pytest.mark.netns


def test_machine_reports_the_sysctls(p01_quick_out):
    j = load(p01_quick_out, "p01-machine")
    assert j["kernel"] == os.uname().release
    assert j["sysctls"]["net.ipv4.tcp_syn_retries"] == 6   # a fresh namespace's default
    assert os.path.isdir(os.path.join(p01_quick_out, "raw", "p01-machine"))
