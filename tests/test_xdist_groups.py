"""The xdist groups conftest.py gives the tests of one expensive shared setup (a live run, a
guest boot) are groups xdist really reads back, so `--dist loadgroup` runs each setup once."""
import pytest

from conftest import group_name

loadgroup = pytest.importorskip("xdist.scheduler.loadgroup")


def xdist_scope(nodeid):
    """The work unit xdist's --dist loadgroup puts NODEID in (its own rule, called as is)."""
    return loadgroup.LoadGroupScheduling._split_scope(None, nodeid)


@pytest.mark.parametrize("param", [None, "5.10", ("6.12", "1400"), ("6.1", None), "a]b", "x@y[z]"])
def test_a_group_is_read_back_whole(param):
    group = group_name("tests/test_guest_wire.py::guest_run", param)
    # the node id as xdist's worker rewrites it: a parametrized test's id ends in ']'
    for test in ("test_a", "test_b[6.12-mtu1400]"):
        assert xdist_scope(f"tests/test_guest_wire.py::{test}@{group}") == group


def test_two_params_are_two_groups():
    assert group_name("m::f", ("6.1", None)) != group_name("m::f", ("6.12", "1400"))
