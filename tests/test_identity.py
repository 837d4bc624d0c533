"""Identity, secrets and isolation against the real server, reconciler and
cluster: keys made, listed and revoked at once; a secret that reaches a run
but shows as *** in its log and is nowhere in clear at rest; another org's
key that finds nothing; a run that cannot reach past its own org; and wrong
keys slowed down and logged."""
from __future__ import annotations

import http.client
import json
import re
import secrets
import subprocess

import sqlalchemy as sa

from tests.conftest import DEV_STATE
from tests.stack import ROOT


def test_keys_are_made_listed_and_revoked_at_once(stack, project):
    made = stack.div("keys", "create", "--name", "ci-box", cwd=project)
    assert made.returncode == 0, made.stderr
    key = made.stdout.decode().strip()
    assert key.startswith("div_") and b"shown only now" in made.stderr
    env = stack.div_env()
    env["DIV_TOKEN"] = key
    me = stack.div("whoami", cwd=project, env=env)
    assert me.stdout.decode().startswith(f"e2e-user in e2e (member), key {key[:16]}_… at ")

    listed = json.loads(stack.div("keys", "ls", "--json", cwd=project, env=env).stdout)
    row = next(r for r in listed if r["name"] == "ci-box")
    assert row["current"] and row["last_used_at"] and row["revoked_at"] is None
    assert key not in json.dumps(listed)                     # never the key itself again
    table = stack.div("keys", "ls", cwd=project).stdout.decode()
    assert re.search(rf"{row['prefix']}_…\s+e2e-user\s+ci-box\s+.*active", table)

    revoked = stack.div("keys", "revoke", row["prefix"], cwd=project)
    assert revoked.returncode == 0, revoked.stderr
    after = stack.div("whoami", cwd=project, env=env)          # at once: the next request
    assert after.returncode == 1 and after.stderr == b"invalid or missing API key\n"
    # Another user's key is not yours to revoke.
    theirs = stack.api("GET", "/keys", org="other").json()["keys"][0]["prefix"]
    assert stack.api("DELETE", f"/keys/{theirs}").status_code == 404
    assert stack.api("GET", "/whoami", org="other").status_code == 200


def test_a_secret_reaches_its_run_as_stars_and_is_never_at_rest_in_clear(stack, project):
    value = "hunter2-" + secrets.token_hex(12)
    set_it = stack.div("secrets", "set", "API_TOKEN", cwd=project, input=f"{value}\n".encode())
    assert set_it.returncode == 0, set_it.stderr
    listed = stack.div("secrets", "ls", cwd=project).stdout.decode()
    assert re.search(r"API_TOKEN\s+e2e-user\s+\d{4}-", listed) and value not in listed
    assert value not in stack.api("GET", "/secrets").text

    (project / "show.py").write_text(
        "import os, sys\n"
        "token = os.environ['API_TOKEN']\n"
        "print('token is', token)\n"
        "print('length', len(token))\n"
        "sys.stdout.write('split ' + token[:7]); sys.stdout.flush()\n"
        "import time; time.sleep(1)\n"
        "print(token[7:] + ' joined')\n"
        "print('to stderr', token, file=sys.stderr)\n")
    done = stack.div("run", "--gpu", "cpu", "--name", "shows-a-secret", "--secret", "API_TOKEN",
                     "show.py", cwd=project)
    assert done.returncode == 0, done.stderr
    out, err = done.stdout.decode(), done.stderr.decode()
    assert value not in out + err
    assert "token is ***\n" in out and f"length {len(value)}\n" in out     # the run had it
    assert "split *** joined\n" in out                  # masked across two writes
    assert "to stderr ***" in err
    again = stack.div("logs", "shows-a-secret", cwd=project)
    assert again.stdout.decode() == out and value not in again.stderr.decode()

    session = stack.dashboard_session("e2e-user", "secret-test-password")
    page = session.get(f"{stack.url}/runs/shows-a-secret").text
    assert "token is ***" in page and "<code>API_TOKEN</code>" in page
    assert value not in page

    state = stack.data_dir / "runs/e2e/shows-a-secret"
    assert value in (state / "stdout").read_text()      # the run's own file, on the share
    assert value not in (state / "batch.sh").read_text()
    assert not (state / "secrets.env").exists()          # deleted once the run ended
    engine = sa.create_engine(stack.database_url)
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT sealed_value FROM secret")).scalars().all()
        sealed = conn.execute(sa.text("SELECT secrets_sealed FROM run WHERE name = "
                                      "'shows-a-secret'")).scalar_one()
    engine.dispose()
    assert stored and sealed and all(value not in text for text in stored + [sealed])

    unknown = stack.div("run", "--gpu", "cpu", "--no-upload", "--secret", "NOT_SET",
                        "--", "true", cwd=project)
    # Bad input, found by the server's check before anything is uploaded: exit 2.
    assert unknown.returncode == 2 and b"no secret named 'NOT_SET'" in unknown.stderr
    removed = stack.div("secrets", "rm", "API_TOKEN", cwd=project)
    assert removed.returncode == 0 and "API_TOKEN" not in stack.api("GET", "/secrets").text


def test_another_orgs_key_finds_nothing_of_this_org(stack, project):
    (project / "note.txt").write_text("e2e only")
    assert stack.div("storage", "put", "e2e-private", "note.txt", cwd=project).returncode == 0
    assert stack.div("secrets", "set", "E2E_ONLY", cwd=project, input=b"e2e-value").returncode == 0
    ran = stack.div("run", "--gpu", "cpu", "--no-upload", "--name", "e2e-owned", "--",
                    "echo mine", cwd=project)
    assert ran.returncode == 0, ran.stderr

    for method, path in (("GET", "/runs/e2e-owned"), ("GET", "/runs/e2e-owned/logs"),
                         ("POST", "/runs/e2e-owned/stop"), ("GET", "/volumes/e2e-private/ls"),
                         ("GET", "/volumes/e2e-private/files?path=note.txt"),
                         ("DELETE", "/volumes/e2e-private"), ("DELETE", "/secrets/E2E_ONLY"),
                         ("GET", "/runs/e2e-owned/logs?follow=1")):
        answer = stack.api(method, path, org="other")
        assert answer.status_code == 404, (method, path, answer.text)
    runs = stack.api("GET", "/runs?limit=500", org="other").json()["runs"]
    assert all(run["name"] != "e2e-owned" for run in runs)
    assert "e2e-private" not in stack.api("GET", "/volumes", org="other").text
    assert "E2E_ONLY" not in stack.api("GET", "/secrets", org="other").text
    # Its usage counts its own runs only (project names are the org's own:
    # both orgs may well have one called like this folder).
    usage = stack.api("GET", "/usage", org="other").json()
    assert sum(p["runs"] for p in usage["projects"]) == len(runs)
    borrowed = stack.div("run", "--gpu", "cpu", "--no-upload", "--secret", "E2E_ONLY", "--",
                         "true", cwd=project, org="other")
    assert borrowed.returncode == 2 and b"no secret named 'E2E_ONLY'" in borrowed.stderr
    # Slurm's own accounting sees orgs: each submits under its own account.
    theirs = stack.div("run", "--gpu", "cpu", "--no-upload", "--name", "other-owned", "--",
                       "true", cwd=project, org="other")
    assert theirs.returncode == 0, theirs.stderr
    for org, name in (("e2e", "e2e-owned"), ("other", "other-owned")):
        job = stack.run_json(name, org)["slurm_job_id"]
        account = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "Account", "-j", job],
                                 capture_output=True, text=True, check=True).stdout.strip()
        assert account == stack.accounts[org]
    # The dashboard: another org's run and its telemetry are 404s too.
    session = stack.dashboard_session("other-user", "other-test-password")
    for path in ("/runs/e2e-owned", "/runs/e2e-owned/telemetry.json", "/runs/e2e-owned/log"):
        assert session.get(f"{stack.url}{path}").status_code == 404, path


def test_a_run_sees_its_own_volumes_and_workspace_and_nothing_else(stack, project):
    (project / "data.txt").write_text("theirs")
    assert stack.div("storage", "put", "other-data", "data.txt", cwd=project,
                     org="other").returncode == 0
    (project / "probe.sh").write_text("echo probing\n")
    assert stack.div("storage", "put", "probe-vol", "probe.sh", cwd=project).returncode == 0
    off_limits = [stack.data_dir / "share/other/other-data", stack.data_dir / "runs",
                  stack.data_dir, ROOT, stack.instance, DEV_STATE, "/etc/munge", "/etc/slurm",
                  "/root", "/var/lib/postgresql"]
    probe = "; ".join(f'[ -e {p} ] && echo "reachable {p}"' for p in off_limits)
    done = stack.div("run", "--gpu", "cpu", "--name", "probes-isolation", "--",
                     f"echo mnt: $(ls /mnt); echo workspace: $(ls /workspace); {probe}; "
                     "grep CapEff /proc/self/status; cat /mnt/probe-vol/probe.sh", cwd=project)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    volumes = lines[0].removeprefix("mnt: ").split()
    assert "probe-vol" in volumes and "other-data" not in volumes
    assert set(volumes) == {p.name for p in (stack.data_dir / "share/e2e").iterdir()
                            if not p.name.startswith(".")}
    assert lines[1] == "workspace: data.txt probe.sh"          # its own code, nothing more
    assert not [line for line in lines if line.startswith("reachable")]
    assert "CapEff:\t0000000000000000" in lines and lines[-1] == "echo probing"


def _from(address: str, port: int, key: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(address, 0))
    conn.request("GET", "/api/v1/whoami", headers={"Authorization": f"Bearer {key}"})
    answer = conn.getresponse()
    answer.read()
    conn.close()
    return answer


def test_wrong_keys_are_slowed_per_key_and_never_lock_out_a_right_one(stack):
    good = stack.tokens["e2e"]
    prefix = good[:good.index("_", 4)]                      # div_<id>, shown in `div keys ls`
    attacker = "127.0.0.23"
    codes = [_from(attacker, stack.port, f"{prefix}_guess{i}").status for i in range(10)]
    assert codes == [401] * 10
    slowed = _from(attacker, stack.port, f"{prefix}_guess10")
    assert slowed.status == 429 and int(slowed.getheader("Retry-After")) > 200
    made_up = [_from(attacker, stack.port, f"div_{i:012x}_guess").status for i in range(11)]
    assert made_up == [401] * 10 + [429]                    # made-up keys: per address
    # The right key is served all the same, from that address and any other.
    assert _from(attacker, stack.port, good).status == 200
    assert _from("127.0.0.24", stack.port, good).status == 200
    log = stack.server_log.read_text()
    assert (f"auth: a wrong API key ({prefix}) from address 127.0.0.23 "
            f"(key {prefix}: 10 in the window)") in log
