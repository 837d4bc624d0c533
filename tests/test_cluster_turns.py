"""The turns the cluster tests take when they run side by side
(tests/cluster_turns.py), between real processes as pytest-xdist's workers
are: readers share, a writer waits for the readers in flight and has the
cluster alone, and a reader that comes while a writer waits goes after it."""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster_turns import cluster_turn

fork = multiprocessing.get_context("fork")
ROOT = Path(__file__).resolve().parent.parent
# A group first (test_money's), plain tests, and the cluster_wide ones:
# test_faults' three with their group, test_admin's one alone.
ORDERED = ("tests/test_admin.py", "tests/test_faults.py", "tests/test_money.py")


def _take_turn(state, alone, hold, events, name, go=None):
    if go is not None:
        go.wait(10)
    with cluster_turn(state, alone):
        events.put((name, "in", time.monotonic()))
        time.sleep(hold)
        events.put((name, "out", time.monotonic()))


def _started(state, alone, hold, events, name, go=None):
    process = fork.Process(target=_take_turn, args=(state, alone, hold, events, name, go))
    process.start()
    return process


def _timeline(events, count):
    return sorted((events.get(timeout=20) for _ in range(count)), key=lambda event: event[2])


def test_readers_share_and_a_waiting_writer_goes_before_a_later_reader(tmp_path):
    events = fork.Queue()
    first = _started(tmp_path, False, 1.0, events, "reader-1")
    second = _started(tmp_path, False, 1.0, events, "reader-2")
    time.sleep(0.3)
    writer = _started(tmp_path, True, 0.5, events, "writer")
    time.sleep(0.3)                 # the writer waits for both readers by now
    late = _started(tmp_path, False, 0.1, events, "reader-late")
    for process in (first, second, writer, late):
        process.join(20)
        assert process.exitcode == 0
    order = [(name, what) for name, what, _ in _timeline(events, 8)]
    # Both readers in at once; the writer only once both are out, alone;
    # the late reader only after the writer, though it came while readers held it.
    assert {order[0][0], order[1][0]} == {"reader-1", "reader-2"} and order[0][1] == order[1][1] == "in"
    assert order[4:] == [("writer", "in"), ("writer", "out"), ("reader-late", "in"),
                         ("reader-late", "out")], order


def test_a_process_that_shares_the_cluster_shares_it_again_without_queueing(tmp_path):
    """A module's fixture holds a turn for its runs while its tests take
    theirs: behind a waiting writer they would wait for ever."""
    events = fork.Queue()
    go = fork.Event()

    def nested():
        with cluster_turn(tmp_path, alone=False):
            go.set()
            time.sleep(0.5)          # a writer queues meanwhile
            with cluster_turn(tmp_path, alone=False):
                events.put(("test", "in", time.monotonic()))
            events.put(("fixture", "out", time.monotonic()))

    holder = fork.Process(target=nested)
    holder.start()
    writer = _started(tmp_path, True, 0.1, events, "writer", go)
    for process in (holder, writer):
        process.join(20)
        assert process.exitcode == 0
    order = [(name, what) for name, what, _ in _timeline(events, 4)]
    assert order == [("test", "in"), ("fixture", "out"), ("writer", "in"), ("writer", "out")]


def test_a_process_that_shares_the_cluster_cannot_wait_to_have_it_alone(tmp_path):
    with cluster_turn(tmp_path, alone=False), pytest.raises(RuntimeError, match="wait on itself"):
        with cluster_turn(tmp_path, alone=True):
            pass



def _collected(*marks: str) -> list[str]:
    """The order a session would hand these modules' tests out in,
    collected in this process (no second interpreter to start)."""
    class Items:
        def pytest_collection_finish(self, session):
            self.ids = [item.nodeid for item in session.items]
    items = Items()
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
                        *[str(ROOT / module) for module in ORDERED], *marks], plugins=[items])
    assert code == 0
    return items.ids


def test_workers_are_handed_the_groups_first_and_the_tests_that_need_the_cluster_alone_last():
    """conftest's order: the tests around a module's fixture (test_money's
    billing runs, test_faults' stacks) first, the cluster_wide ones last
    (test_faults' in a group of their own)."""
    order = _collected()
    alone = set(_collected("-m", "cluster_wide"))
    first_alone = min(order.index(test) for test in alone)
    assert set(order[first_alone:]) == alone, order[first_alone:]
    assert order[0].startswith("tests/test_faults.py"), order[:3]
    billing = [order.index(test) for test in order if test.startswith("tests/test_money.py")
               and "spend_limit_stops" in test]
    assert billing and billing[0] < order.index(next(t for t in order if "::" in t and
                                                     t.startswith("tests/test_admin.py")))


CHAIN = '''
import os, time, pytest

@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(request):
    return request.param

def ran(name):
    with open(os.environ["RAN_LOG"], "a") as log:
        log.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n")
    time.sleep(0.1)

@pytest.mark.parametrize("n", range(4))
def test_chained(stack, n): ran(f"chained-{stack}")

@pytest.mark.parametrize("stack", ["postgresql"], indirect=True)
@pytest.mark.parametrize("n", range(3))
@pytest.mark.cluster_wide
def test_alone(stack, n): ran("alone")    # cluster_wide: unregistered here, a warning

@pytest.mark.parametrize("n", range(8))
def test_plain(n): ran("plain")
'''


def test_workers_keep_each_group_together(tmp_path):
    """pytest-xdist's --dist loadgroup, given conftest's groups, runs each
    module fixture's tests (and their cluster_wide ones, apart) on one
    worker: the fixture is made once, and the turns never see a chain cut
    (pytest 9.2 silently broke loadgroup: requirements-dev.txt)."""
    (tmp_path / "conftest.py").write_text(
        "from tests.turn_order import (pytest_collection_modifyitems,\n"
        "    pytest_collection_modifyitems_in_turns)\n")
    (tmp_path / "test_chain.py").write_text(CHAIN)
    log = tmp_path / "ran.log"
    # xdist alone of the plugins installed: schemathesis' would cost each
    # worker seconds to import.
    done = subprocess.run([str(ROOT / ".venv/bin/pytest"), "-q", "-p", "no:cacheprovider",
                           "-p", "xdist", "-n", "2", "--dist", "loadgroup",
                           "--no-loadscope-reorder", "--rootdir", str(tmp_path), str(tmp_path)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RAN_LOG": str(log), "PYTHONPATH": str(ROOT),
                               "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    workers: dict[str, set[str]] = {}
    for line in log.read_text().splitlines():
        name, worker = line.split()
        workers.setdefault(name, set()).add(worker)
    assert [len(workers[name]) for name in ("chained-sqlite", "chained-postgresql", "alone")] == \
        [1, 1, 1], workers
    assert len(set().union(*workers.values())) == 2, workers    # not all on one worker
