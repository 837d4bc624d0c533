"""The admin commands in-process (app/admin/), through Flask's CLI runner on
a fresh database: what each prints, and that a bad value is one line with
click's exit code, never a traceback. The same commands against the real
stack, as the service user, are in test_admin.py."""
from __future__ import annotations

import pytest

from divergent.app.extensions import db
from divergent.app.models import Org, Project, Run
from divergent.app.services.accounts.keys import user_for_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.accounts.passwords import user_for_password
from divergent.app.services.errors import Invalid
from divergent.app.services.runs.request import parse_request
from divergent.app.services.runs.sizing import size_run
from divergent.app.services.site import slurm_access
from divergent.slurm.client import SlurmError


def flask(runner, *args: str, code: int = 0):
    done = runner.invoke(args=list(args))
    assert done.exit_code == code, (args, done.output, done.exception)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return done.output


@pytest.fixture
def acme(runner):
    flask(runner, "create-org", "acme")
    flask(runner, "create-user", "acme", "alice")
    return runner


def test_orgs_and_users_are_made_listed_and_bad_names_are_usage_errors(acme, app):
    assert "user bob in acme (org_admin)" in flask(acme, "create-user", "acme", "bob",
                                                    "--role", "org_admin")
    bad = flask(acme, "create-org", "Not A Name", code=2)
    assert "Invalid value for NAME: org names are lowercase letters" in bad
    assert "no org named 'nope'" in flask(acme, "create-user", "nope", "carol", code=1)
    assert "usernames are lowercase" in flask(acme, "create-user", "acme", "Carol!", code=1)
    orgs = flask(acme, "orgs").splitlines()
    assert orgs[1].split() == ["acme", "acme", "2", "$0.00", "no", "limit"]
    users = [line.split()[:3] for line in flask(acme, "users", "--org", "acme").splitlines()[1:]]
    assert users == [["alice", "acme", "member"], ["bob", "acme", "org_admin"]]
    assert flask(acme, "users", "--org", "other").splitlines()[1:] == []


def test_keys_and_passwords_go_to_a_user_named_on_the_command_line(acme, app):
    key = flask(acme, "create-key", "alice", "--name", "laptop").strip()
    assert "no user named 'mallory'" in flask(acme, "create-key", "mallory", code=1)
    short = flask(acme, "set-password", "alice", "--password", "short", code=2)
    assert "Invalid value for PASSWORD: a password needs at least 12 characters" in short
    assert "password set for alice" in flask(acme, "set-password", "alice",
                                             "--password", "a-long-password")
    with app.app_context():
        assert user_for_key(key).username == "alice"
        assert user_for_password("alice", "a-long-password").username == "alice"


def test_limits_and_prices_are_set_and_refused_in_dollars(acme, app):
    assert "acme: $500.00 a month" in flask(acme, "org-limit", "acme", "500")
    assert "Invalid value for USD" in flask(acme, "org-limit", "acme", "lots", code=2)
    assert "(limit $500.00)" in flask(acme, "usage")
    assert "acme: no limit a month" in flask(acme, "org-limit", "acme", "none")
    with app.app_context():
        assert db.session.execute(db.select(Org)).scalar_one().monthly_limit_micros is None
    assert "h100       $4.80/h" in flask(acme, "prices")
    changed = flask(acme, "prices", "--set", "h100=5.10", "--set", "extra_gib=0.05")
    assert "h100       $5.10/h" in changed and "extra GiB  $0.05/h" in changed
    assert "h100       $5.10/h" in flask(acme, "prices")             # saved
    refused = flask(acme, "prices", "--set", "tpu=1", code=2)
    assert "Invalid value for --set: 'tpu': a GPU type" in refused
    with open(app.config["DIV_PRICES_FILE"], "w") as f:
        f.write("[per_gpu_hour\n")
    assert "the site's price table is broken" in flask(acme, "prices", code=1)


def test_the_site_settings_are_shown_changed_and_refused_in_plain_words(runner, app, tmp_path):
    app.config["DIV_SITE_FILE"] = str(tmp_path / "site.toml")
    shown = flask(runner, "site")
    assert "gpus per node  8" in shown and "Slurm on       this host" in shown
    assert "is not a Slurm name" in flask(runner, "site", "--partition", "h100=no such", code=1)
    assert "is not TYPE=NAME" in flask(runner, "site", "--gres", "h100", code=2)
    changed = flask(runner, "site", "--gpus-per-node", "4", "--partition", "h100=gpu-h100")
    assert "gpus per node  4" in changed and "h100   gpu-h100" in changed
    assert "gpus_per_node = 4" in (tmp_path / "site.toml").read_text()
    ssh = flask(runner, "site", "--transport", "ssh", code=1)
    assert 'kind = "ssh" needs host' in ssh


def test_rotating_the_secrets_key_says_how_many_values_it_sealed_again(runner):
    assert "0 sealed values re-encrypted under the first key" in flask(
        runner, "rotate-secrets", "--new-key")


class AccountingDown:
    def query(self, job_ids, squeue_alone=False):
        raise SlurmError("sacct: error: Problem talking to the database: Connection refused")


def test_charges_while_slurms_accounting_is_down_is_one_line(acme, app):
    with app.app_context():
        org = get_or_create_org("acme")
        user = get_or_create_user(org, "alice")
        project = Project(org_id=org.id, name="p")
        db.session.add(project)
        db.session.flush()
        db.session.add(Run(org_id=org.id, project_id=project.id, user_id=user.id, name="run-1",
                           status="succeeded", slurm_job_id="5", gpu_type="cpu", gpus=1, cpus=1,
                           memory_gib=2, image="img", command="true",
                           rate_micros_per_hour=300_000))
        db.session.commit()
    with slurm_access.standing_in(AccountingDown()):
        down = flask(acme, "charges", code=1)
    assert "Error: Slurm's accounting did not answer: sacct: error: Problem talking" in down


def test_a_key_name_longer_than_the_column_is_refused_by_the_service(acme):
    assert "at most 64 characters" in flask(acme, "create-key", "alice", "--name", "k" * 65,
                                            code=1)


def test_the_catalog_is_the_sites_own_once_a_type_is_added(runner, app, tmp_path):
    app.config["DIV_SITE_FILE"] = str(tmp_path / "site.toml")
    added = flask(runner, "site", "gpu", "add", "a100", "--gres", "gpu:a100", "--partition", "gpu",
                  "--per-node", "4", "--price", "3", "--cores", "8", "--memory", "64",
                  "--node-cores", "32", "--node-memory", "240", "--qos", "normal")
    assert "a100   gpu         a100                  4    8 c   64 GiB    32 c   240 GiB  qos normal" \
        in added
    assert "[gpu.a100]" in (tmp_path / "site.toml").read_text()
    assert "a100       $3.10/h" in flask(runner, "prices", "--set", "a100=3.10")
    flask(runner, "site", "gpu", "rm", "h100")
    listed = flask(runner, "site", "gpu", "ls")
    assert "h100" not in listed and "$3.10/h" in listed and "gpus per node  per type" in flask(
        runner, "site")
    assert "'h100': a GPU type (b300, h200, l40s, cpu, a100)" in flask(
        runner, "prices", "--set", "h100=1", code=2)
    assert "the catalog has no 'h100'" in flask(runner, "site", "gpu", "rm", "h100", code=1)
    assert "is not gpu or gpu:TYPE" in flask(runner, "site", "gpu", "add", "tpu", "--gres",
                                             "tpu:v5", "--partition", "x", "--price", "1", code=1)
    assert "Invalid value for '--price'" in flask(runner, "site", "gpu", "add", "x", "--partition",
                                                "x", "--price", "lots", code=2)
    assert "[gpu.x]" not in (tmp_path / "site.toml").read_text()     # a bad price changed nothing
    with app.app_context():
        req = parse_request({"project": "p", "command": "true", "gpu": "a100", "gpus": 8})
        sized = size_run(get_or_create_org("acme"), req)
        assert (sized.cpus, sized.memory_gib, sized.rate) == (64, 512, 24_800_000)
        with pytest.raises(Invalid, match="whole nodes of 4"):
            parse_request({"project": "p", "command": "true", "gpu": "a100", "gpus": 6})
        with pytest.raises(Invalid, match="gpu must be one of b300, h200, l40s, cpu, a100"):
            parse_request({"project": "p", "command": "true", "gpu": "h100"})


def test_a_docs_type_changed_into_a_cpu_like_type_is_saved_as_the_sites_catalog(runner, app,
                                                                                tmp_path):
    app.config["DIV_SITE_FILE"] = str(tmp_path / "site.toml")
    flask(runner, "site", "gpu", "add", "l40s", "--partition", "x", "--price", "1")
    assert "[gpu.l40s]" in (tmp_path / "site.toml").read_text()


@pytest.mark.parametrize("gpus, says", [(10**30, "at most 2048"), (4096, "at most 2048")])
def test_a_run_asks_for_at_most_256_nodes_of_gpus(app_context, gpus, says):
    with pytest.raises(Invalid, match=says):
        parse_request({"project": "p", "command": "true", "gpu": "h100", "gpus": gpus})
    with pytest.raises(Invalid, match="at most 64"):
        parse_request({"project": "p", "command": "true", "gpu": "cpu", "gpus": 65})


def test_usage_says_how_much_of_the_months_gpu_hours_worked_and_site_usage_its_settings(
        acme, app, tmp_path):
    with app.app_context():
        org = get_or_create_org("acme")
        user = get_or_create_user(org, "alice")
        project = Project(org_id=org.id, name="p")
        db.session.add(project)
        db.session.flush()
        for name, usage in (("measured", {"gpu_utilization": 0.6}), ("blind", None)):
            db.session.add(Run(org_id=org.id, project_id=project.id, user_id=user.id,
                               name=name, status="succeeded", gpu_type="h100", gpus=2, cpus=2,
                               memory_gib=16, image="img", command="true",
                               rate_micros_per_hour=9_600_000, elapsed_seconds=3600,
                               usage=usage))
        db.session.commit()
    assert "  GPU hours 4.0, 60% of them working" in flask(acme, "usage")
    app.config["DIV_SITE_FILE"] = str(tmp_path / "site.toml")
    assert "idle policy   off" in flask(acme, "site", "usage")
    on = flask(acme, "site", "usage", "--idle-warn", "30", "--idle-below", "0.1")
    assert "under 0.1 of its GPUs: warned after 30 min, stopped 30 min later" in on
    assert "idle_warn_minutes = 30.0" in (tmp_path / "site.toml").read_text()
    assert "idle_below: a utilisation above 0" in flask(acme, "site", "usage", "--idle-below",
                                                        "2", code=1)
    assert "idle policy   off" in flask(acme, "site", "usage", "--idle-off")
