"""A site's own Slurm conventions, in-process with Slurm's answers scripted
(slurm_access.standing_in): a partition's MaxTime caps a run's --time and
the header says so, and such a run ends failed, not over budget; orgs use
accounts the site's admins made when it says so."""
from __future__ import annotations

import subprocess

import pytest

from divergent.app.models import Run
from divergent.app.reconciler import settle
from divergent.app.services.accounts.orgs import get_or_create_org
from divergent.app.services.runs.request import parse_request
from divergent.app.services.runs.sizing import size_run
from divergent.app.services.runs.text import header_line, summary_line
from divergent.app.services.site import slurm_access
from divergent.app.services.site.slurm_access import ensure_org_account
from divergent.slurm.client import SlurmClient
from divergent.slurm.records import JobRecord
from divergent.slurm.transport import CommandResult
from divergent.terms import DEFAULT_IMAGE
from tests.test_admin_commands import flask


class Partitions:
    def __init__(self, max_minutes: dict[str, int | None]):
        self.max_minutes, self.accounts_made = max_minutes, []

    def partition_max_minutes(self):
        return self.max_minutes

    def ensure_account(self, account, max_jobs=None, users=()):
        self.accounts_made.append(account)


def request(**fields):
    return parse_request({"project": "p", "command": "true", "gpu": "cpu", **fields})


def test_a_partitions_max_time_caps_the_runs_time_limit_and_the_header_says_so(app_context):
    org = get_or_create_org("acme")
    with slurm_access.standing_in(Partitions({"cpu": 30})):
        capped = size_run(org, request(max_spend="5"))            # $5 of cpu: 16h 40m
        assert (capped.minutes, capped.limited_by) == (30, "maxtime")
        unlimited = size_run(org, request())
        assert (unlimited.minutes, unlimited.limited_by) == (30, "maxtime")
    with slurm_access.standing_in(Partitions({"cpu": 6000})):
        assert size_run(org, request(max_spend="5")).limited_by == "spend"
    run = Run(name="run-x", gpu_type="cpu", gpus=1, cpus=1, memory_gib=2, status="running",
              rate_micros_per_hour=300_000, max_spend_micros=5_000_000, time_limit_minutes=30,
              time_limit_by="maxtime", cost_micros=0)
    assert header_line(run) == ("run-x CPU, 1 core, 2 GiB $0.30/h max spend $5.00; the "
                                "partition's time limit ends it after about 30m")
    settle(run, JobRecord("1", "TIMEOUT", exit_code=0, start=1_000, end=2_830,
                          elapsed_seconds=1_830))
    assert run.status == "failed"
    assert summary_line(run) == ("run-x failed after 30m 30s: the partition's time limit ended "
                                 "it, and spent $0.15")


def test_orgs_use_the_accounts_the_sites_admins_made_when_it_says_so(runner, app, tmp_path):
    app.config["DIV_SITE_FILE"] = str(tmp_path / "site.toml")
    assert flask(runner, "create-org", "vision", "--account", "lab-vision").startswith(
        "org vision (Slurm account lab-vision")
    assert "'lab-vision' is another org's" in flask(runner, "create-org", "nlp", "--account",
                                                     "lab-vision", code=2)
    assert "accounts       existing" in flask(runner, "site", "--accounts", "existing",
                                              "--qos", "normal")
    assert 'make_accounts = false' in (tmp_path / "site.toml").read_text()
    scripted = Partitions({})
    with app.app_context(), slurm_access.standing_in(scripted):
        ensure_org_account(get_or_create_org("vision"))
        assert scripted.accounts_made == []
    flask(runner, "site", "--accounts", "make")
    with app.app_context(), slurm_access.standing_in(scripted):
        ensure_org_account(get_or_create_org("vision"))
        assert scripted.accounts_made == ["lab-vision"]


class SlowController:
    """Slurm's answers with slurmdbd's news reaching slurmctld late: the
    controller's cache shows a new association only on the third asking."""
    user = "divergent"

    def __init__(self):
        self.asked, self.made = [], False

    def run(self, argv, stdin=None, env=None):
        self.asked.append(argv[:3])
        if argv[0] == "sacctmgr":
            return CommandResult(1, " Nothing new added.\n", "") if self.made else \
                CommandResult(0, " Adding User(s)\n", "")
        known = sum(asked[:2] == ["scontrol", "show"] for asked in self.asked) >= 3
        cached = "ClusterName=c Account=acme UserName=divergent(999) Partition=\n" if known else ""
        return CommandResult(0, cached, "")


def test_a_new_account_is_used_once_the_controller_knows_it():
    slow = SlowController()
    SlurmClient(slow).ensure_account("acme")
    assert slow.asked == [["sacctmgr", "-i", "add"]] * 2 + [["scontrol", "show", "assoc_mgr"]] * 3
    # One made before is not waited for (slurmctld may be away: no time lost).
    slow.asked, slow.made = [], True
    SlurmClient(slow).ensure_account("acme")
    assert slow.asked == [["sacctmgr", "-i", "add"]] * 2


@pytest.mark.parametrize("setting, says", [("make_accounts = 1", "true or false"),
                                           ('qos = "a b"', "is not a Slurm name")])
def test_bad_conventions_in_the_site_file_say_which(runner, app, tmp_path, setting, says):
    app.config["DIV_SITE_FILE"] = str(tmp_path / "site.toml")
    (tmp_path / "site.toml").write_text(f"[slurm]\n{setting}\n")
    assert says in flask(runner, "site", code=1)


@pytest.mark.cluster_wide   # changes l40s's MaxTime
def test_on_the_dev_cluster_a_partitions_max_time_becomes_the_jobs_time_limit(stack, project):
    scontrol = ["scontrol", "update", "PartitionName=l40s"]
    subprocess.run([*scontrol, "MaxTime=5"], check=True)
    try:
        started = stack.div("run", "--gpu", "l40s", "--no-upload", "-d", "--", "sleep", "300",
                            cwd=project)
        assert started.returncode == 0, started.stderr
        assert b"the partition's time limit ends it after about 5m" in started.stderr
        name = started.stdout.decode().strip()
        job = stack.run_json(name)["slurm_job_id"]
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True)
        assert "TimeLimit=00:05:00" in shown.stdout, shown.stdout
        stack.div("stop", name, cwd=project)
    finally:
        subprocess.run([*scontrol, "MaxTime=UNLIMITED"], check=True)


def test_a_null_gpu_or_image_is_the_default_as_if_not_sent(app_context):
    """The API's description lets every optional field be null: never a 500."""
    sent = request(gpu=None, image=None)
    assert (sent.gpu, sent.image) == ("h100", DEFAULT_IMAGE)


@pytest.mark.parametrize("setting, says", [
    ('submit_as = "root"', "submit_as: one of org, member, service"),
    ('org_user = "jobs"', "org_user: a Unix name with {org} in it once"),
    ('org_user = "{org}-{org}"', "org_user: a Unix name with {org} in it once"),
    ('org_user = "Div {org}"', "org_user: a Unix name with {org} in it once"),
    ("make_users = 1", "make_users: true or false"),
    ("shell = true", "unknown setting 'shell'")])
def test_bad_identity_settings_say_which(runner, app, tmp_path, setting, says):
    app.config["DIV_SITE_FILE"] = str(tmp_path / "site.toml")
    (tmp_path / "site.toml").write_text(f"[identity]\n{setting}\n")
    assert says in flask(runner, "site", code=1)


def test_an_org_whose_unix_user_name_would_be_too_long_is_never_made(runner, app):
    name = "a-very-long-org-name-of-29-chr"
    assert "would run as Unix user 'div-a-very-long-org-name-of-29-chr', which is not a Unix " \
           "name" in flask(runner, "create-org", name, code=2)
    assert "no org named" in flask(runner, "create-user", name, "someone", code=1)
