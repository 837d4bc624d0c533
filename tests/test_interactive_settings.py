"""A site's [interactive] settings and what they refuse before anything is
uploaded: interactive runs on a site whose server does not reach runs, on
a GPU type it keeps for batch work, across nodes, or without each run's own
network; `flask site interactive` as an admin types it."""
from __future__ import annotations

from dataclasses import replace

import pytest

from divergent.app.services.errors import Invalid
from divergent.app.services.runs.interactive import check_interactive, first_node
from divergent.app.services.site.interactive import InteractiveSettingsError, interactive_settings
from divergent.app.services.site.settings import load_site, save_site


def with_interactive(**values) -> None:
    site = load_site()
    save_site(replace(site, interactive=replace(site.interactive, **values)))


def test_a_site_that_does_not_reach_runs_has_no_interactive_runs(app_context):
    with pytest.raises(Invalid, match="no interactive runs"):
        check_interactive("shell", "cpu", 1)
    check_interactive("batch", "h100", 16)


def test_the_site_says_which_types_and_runs_take_one_node_of_their_own_network(app_context):
    with_interactive(job_subnets={"node1": "10.81"}, gpu_types=("cpu",))
    check_interactive("notebook", "cpu", 1)
    with pytest.raises(Invalid, match="no interactive runs on h100: cpu only"):
        check_interactive("shell", "h100", 1)
    with_interactive(gpu_types=None)
    with pytest.raises(Invalid, match="one node: at most 8 GPUs"):
        check_interactive("shell", "h100", 16)
    with pytest.raises(Invalid, match="kind must be one of"):
        check_interactive("desktop", "cpu", 1)
    site = load_site()
    save_site(replace(site, slurm=replace(site.slurm, run_network="shared")))
    with pytest.raises(Invalid, match="own network"):
        check_interactive("shell", "cpu", 1)


def test_settings_are_checked_as_an_admin_writes_them(runner, app_context):
    shown = runner.invoke(args=["site", "interactive", "--job-subnets", "node1=10.81 gpu-7=10.97",
                                "--idle-minutes", "30", "--notebook-host", "nb.example.org"])
    assert shown.exit_code == 0, shown.output
    assert "job subnets   node1=10.81 gpu-7=10.97" in shown.output
    assert "notebook host nb.example.org" in shown.output
    assert load_site().interactive.job_address("gpu-7", 258) == "10.97.1.2"
    for bad in (["--job-subnets", "node1=10.81.0.0/16"], ["--port", "22"],
                ["--notebook-host", "https://nb.example.org"], ["--idle-minutes", "0"]):
        refused = runner.invoke(args=["site", "interactive", *bad])
        assert refused.exit_code == 1 and "Error:" in refused.output, (bad, refused.output)
    with pytest.raises(InteractiveSettingsError):
        interactive_settings({"ports": 1})


def test_the_first_node_of_slurms_node_list():
    assert first_node("node3") == "node3"
    assert first_node("gpu-[3-4,7]") == "gpu-3"
    assert first_node("gpu-[12,14]") == "gpu-12"
    assert first_node("a1,b2") == "a1"
