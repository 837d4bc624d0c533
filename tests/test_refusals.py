"""Slurm's size refusals told apart by the cluster's nodes (app/services/runs/
refusals.py), on nodes as sinfo reports them: the real cluster's case
(more GPUs than it has) is tests/test_faults.py's; these are the states a
test cannot hold the dev cluster in for long (every node not responding
after a controller restart)."""
from __future__ import annotations

from divergent.app.services.errors import Refused, Unavailable
from divergent.app.services.runs.refusals import refused_by_slurm
from divergent.app.services.site.slurm_access import standing_in
from divergent.slurm.client import SubmitRefused
from divergent.slurm.records import NodeRecord

NOT_AVAILABLE = SubmitRefused("Slurm refused the job: Requested node configuration is not available")


class Nodes:
    """A Slurm client whose sinfo shows these nodes."""

    def __init__(self, state: str, count: int = 4):
        self.records = {f"node{i}": NodeRecord(f"node{i}", state, 0, 64, ["h100", "cpu"],
                                               {"h100": 8}, {}) for i in range(1, count + 1)}

    def nodes(self):
        return self.records


def test_nodes_not_back_yet_are_a_moment_not_a_bad_request(app_context):
    with standing_in(Nodes("idle*")):
        judged = refused_by_slurm(NOT_AVAILABLE, "h100", 16)
    assert isinstance(judged, Unavailable) and judged.status == 503
    assert str(judged) == ("Slurm cannot place the run now: some of the 32 H100 on 4 nodes are "
                           "down or not responding (a controller restart?); nothing was "
                           "started, try again in a minute")


def test_more_than_the_cluster_has_says_what_it_has(app_context):
    with standing_in(Nodes("idle", count=2)):
        judged = refused_by_slurm(NOT_AVAILABLE, "h100", 24)
    assert isinstance(judged, Refused) and judged.status == 422
    assert str(judged) == ("the cluster has 16 H100 on 2 nodes: --gpu h100 --gpus 24 asks for "
                           "more (Slurm: Requested node configuration is not available)")


def test_other_refusals_keep_slurms_words(app_context):
    with standing_in(Nodes("idle")):
        judged = refused_by_slurm(SubmitRefused("Slurm refused the job: Invalid account"), "h100", 1)
    assert isinstance(judged, Refused) and str(judged) == "Slurm refused the job: Invalid account"
