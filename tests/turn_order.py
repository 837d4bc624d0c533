"""Which pytest-xdist worker runs which test, and in what order they are
handed out (`make test`: --dist loadgroup --no-loadscope-reorder): hooks
that tests/conftest.py takes in. The turns themselves are
tests/cluster_turns.py."""
from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)     # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        if {"slurm_cluster", "s3_server"} & set(item.fixturenames):
            item.add_marker(pytest.mark.cluster)
        # A module's fixture (its own stack, runs started early) is made
        # once when the tests that use it run in one worker (--dist loadgroup);
        # those of them that need the cluster alone make it once more, so
        # that the rest need not wait for the end with them.
        if any(definition.scope == "module" for definitions in
               item._fixtureinfo.name2fixturedefs.values() for definition in definitions):
            alone = "-alone" if item.get_closest_marker("cluster_wide") else ""
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ + alone))


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_in_turns(items):
    """The order workers are handed tests in (--no-loadscope-reorder), after
    pytest's own ordering by fixture: first the groups (a module's chain of
    tests, often around runs that wait minutes for Slurm), so that they
    overlap the rest; last the tests that have the cluster alone, with
    their groups, so that none waits mid-run for the others to drain."""
    alone = {_group(item) for item in items if item.get_closest_marker("cluster_wide")}

    def turn(item) -> int:
        if _group(item) in alone:
            return 2
        return 0 if item.get_closest_marker("xdist_group") else 1
    items.sort(key=turn)


def _group(item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return marker.args[0] if marker else item.nodeid
