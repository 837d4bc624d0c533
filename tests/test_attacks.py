"""Attacks on isolation, as an ordinary org member would make them, against
the real server, reconciler and dev cluster: one test per attack class, each
asserting that the attack fails and that nothing on the host changed.
test_identity.py and test_storage.py keep the first isolation tests."""
from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import re
import secrets
import socket
import stat
import subprocess
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest
import requests
from botocore.exceptions import ClientError

from divergent.app.services.files.code import FileEntry, tree_hash
from divergent.app.services.site.interactive import InteractiveSettings
from tests.buckets import s3_client
from tests.conftest import REGISTRY
from tests.images import push_image
from tests.serving import serving
from tests.sshd import free_port
from tests.stack import ROOT, SERVICE_USER, WORKER, running_stack


def _run_document(stdout: bytes) -> dict:
    """The run's JSON that `div run --json` prints after the run's own output."""
    text = stdout.decode()
    return json.loads(text[text.index("{\n"):])


def _canary(name: str) -> Path:
    """Where a payload that ran outside a sandbox would leave its mark: the
    node's own /tmp (a run's /tmp is a tmpfs of its own)."""
    return Path("/tmp") / f"div-canary-{name}-{secrets.token_hex(4)}"


def _run(stack, project, *args, org="e2e", timeout=120):
    done = stack.div("run", "--gpu", "cpu", *args, cwd=project, org=org, timeout=timeout)
    return done, done.stdout.decode(), done.stderr.decode()


def test_reserved_env_and_secret_names_are_refused_and_env_reaches_only_the_sandbox(
        stack, project):
    for flag in ("--env", "--secret"):
        for name in ("BASH_ENV", "ENV", "SLURM_JOB_ID", "SLURM_OVERLAP", "DIV_RUN", "MASTER_PORT"):
            value = f"{name}=x" if flag == "--env" else name
            refused = stack.div("run", "--gpu", "cpu", "--no-upload", flag, value, "--", "true",
                                cwd=project)
            assert refused.returncode == 2 and b"reserved" in refused.stderr, (flag, name)
    for name in ("BASH_ENV", "SLURM_JOBID", "BASH_FUNC_x", "div_state"):
        assert stack.api("PUT", f"/secrets/{name}", json={"value": "x"}).status_code == 400
        body = {"project": "p", "command": "true", "env": {name: "x"}}
        answer = stack.api("POST", "/runs", json=body)
        assert answer.status_code == 400 and "reserved" in answer.json()["error"], name
        schedule = stack.api("POST", "/schedules", json={"cron": "0 3 * * *", "name": "evil",
                                                         "run": body})
        assert schedule.status_code == 400, name

    # PATH is the run's own: fake scontrol, cp, srun, rm... on the share
    # never run outside the sandbox, however the run's PATH names them.
    canary = _canary("path")
    fakes = "scontrol cp srun rm mktemp find awk basename cat head bash bwrap sh env"
    made = _run(stack, project, "--no-upload", "--", "mkdir -p /mnt/evil-bin/bin && "
                f"for f in {fakes}; do printf '#!/bin/sh\\ntouch {canary}\\n' "
                "> /mnt/evil-bin/bin/$f; chmod +x /mnt/evil-bin/bin/$f; done")[0]
    assert made.returncode == 0, made.stderr
    bin_dir = stack.data_dir / "share/e2e/evil-bin/bin"
    secret = f"$(touch {canary}); `touch {canary}`'\"; touch {canary} #"
    assert stack.div("secrets", "set", "INJECTED", cwd=project,
                     input=secret.encode()).returncode == 0
    done, out, err = _run(stack, project, "--no-upload", "--name", "path-hijack",
                          "--env", f"PATH={bin_dir}:/usr/bin:/bin",
                          "--env", f"LD_PRELOAD={bin_dir}/none.so", "--env",
                          f"X=$(touch {canary})", "--secret", "INJECTED", "--",
                          'echo "path=$PATH"; echo "x=$X"; echo "s=$INJECTED"')
    assert done.returncode == 0, err
    assert f"path={bin_dir}:/usr/bin:/bin\n" in out           # in effect inside, and only there
    assert f"x=$(touch {canary})\n" in out and "s=***\n" in out
    assert not canary.exists()
    script = (stack.data_dir / "runs/e2e/path-hijack/batch.sh").read_text()
    assert "export PATH=/usr/local/sbin:" in script and f"export PATH={bin_dir}" not in script


def test_code_trees_are_the_servers_alone_and_immutable(stack, project):
    (project / "train.py").write_text("print('original code')\n")
    first = stack.div("run", "--gpu", "cpu", "--json", "train.py", cwd=project)
    assert first.returncode == 0, first.stderr
    ref = _run_document(first.stdout)["code"]
    volume, _, name = ref.partition("/code/")
    # A run cannot change a stored tree: /mnt/<volume>/code is read-only.
    done, out, err = _run(stack, project, "--no-upload", "--",
                          f"echo hacked > /mnt/{ref}/train.py; rm -rf /mnt/{ref}; "
                          f"mv /mnt/{volume}/code /mnt/{volume}/old; "
                          f"ln -s /etc /mnt/{volume}/code/cafebabe; "
                          # a link a run makes where no tree is yet
                          f"mkdir -p /mnt/evil-code/code && ln -s {ROOT}/instance "
                          "/mnt/evil-code/code/cafebabe && ln -s /etc /mnt/evil-code/code/deadbeef;"
                          f"cat /mnt/{ref}/train.py")
    assert "print('original code')" in out and err.count("Read-only file system") >= 3, err
    # Nor can the storage API write into one.
    body = b"print('hacked')\n"
    put = stack.api("PUT", f"/volumes/{volume}/files", params={"path": f"code/{name}/train.py"},
                    data=body, headers={"X-Div-Sha256": hashlib.sha256(body).hexdigest()})
    assert put.status_code == 409 and "never changed" in put.json()["error"]
    plan = stack.api("POST", f"/volumes/{volume}/plan",
                     json={"files": [{"path": f"code/{name}/x.py", "size": 1, "sha256": "0" * 64}]})
    assert plan.status_code == 409
    # A code reference to what a run made is no code at all.
    for planted in ("evil-code/code/cafebabe", "evil-code/code/deadbeef"):
        answer = stack.api("POST", "/runs", json={"project": "p", "command": "ls /workspace",
                                                  "gpu": "cpu", "code": planted})
        assert answer.status_code == 404, answer.text
    again = stack.div("run", "--gpu", "cpu", "train.py", cwd=project)
    assert again.returncode == 0 and again.stdout == b"original code\n"

    # A marker planted where the server once kept them (a dangling link, a
    # FIFO) leads the server nowhere.
    (project / "train.py").write_text("print('fresh volume')\n")
    entry = FileEntry("train.py", hashlib.sha256(b"print('fresh volume')\n").hexdigest(), 22, False)
    hash8 = tree_hash([entry])[:8]
    canary = _canary("marker")
    planted = _run(stack, project, "--no-upload", "--",
                   f"mkdir -p /mnt/fresh-code/code && ln -s {canary} "
                   f"/mnt/fresh-code/code/.{hash8}.tree && mkfifo /mnt/fresh-code/code/.x.tree")[0]
    assert planted.returncode == 0, planted.stderr
    fresh = stack.div("run", "--gpu", "cpu", "--volume", "fresh-code", "train.py", cwd=project,
                      timeout=60)
    assert fresh.returncode == 0 and fresh.stdout == b"fresh volume\n", fresh.stderr
    assert not canary.exists() and not os.path.lexists(canary)


def test_root_in_the_sandbox_is_nobody_on_the_node(sandbox_stack, project):
    sysctls = [Path("/proc/sys/vm/overcommit_memory"), Path("/proc/sys/kernel/core_pattern")]
    before = [p.read_text() for p in sysctls]
    done, out, err = _run(sandbox_stack, project, "--no-upload", "--name", "tries-root", "--",
                          "echo uid=$(id -u); grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; "
                          "echo 1 > /proc/sys/kernel/sysrq && echo WROTE-SYSRQ-SYSCTL; "
                          "echo h > /proc/sysrq-trigger && echo WROTE-SYSRQ; "
                          "echo 2 > /proc/sys/vm/overcommit_memory && echo WROTE-VM; "
                          "echo '|/tmp/x' > /proc/sys/kernel/core_pattern && echo WROTE-CORE; true")
    assert done.returncode == 0, err
    assert "CapEff:\t0000000000000000" in out and "NoNewPrivs:\t1" in out
    assert "WROTE" not in out and [p.read_text() for p in sysctls] == before
    assert "uid=0\n" not in out
    job = sandbox_stack.run_json("tries-root")["slurm_job_id"]
    assert _sacct(job, "User") == "div-e2e"          # the org's own: never root, nor the server


def test_a_run_cannot_write_the_figures_it_is_judged_by(sandbox_stack, project):
    """The sampler's files are in the run's state folder, which no runtime
    shows the run: one it forges beside $DIV_METRICS (or anywhere it can
    write) is never read, and its figures stay what was measured."""
    forged = json.dumps({"time": 9e9, "start": 0, "attempt": 99, "cpu_s": 1e9,
                         "memory": 1e15, "memory_peak": 1e15, "gpus": [[100, 1, 1]] * 8,
                         "gpu_busy_s": 1e9, "gpu_s": 1e9, "gpu_memory_peak": 1e15})
    done, out, err = _run(sandbox_stack, project, "--no-upload", "--name", "forges-usage", "--",
                          f"d=$(dirname $DIV_METRICS); for n in 0 1; do echo '{forged}' "
                          f"> $d/usage.$n.jsonl; done 2>/dev/null; "
                          "echo seen=$(find / -xdev -name 'usage.*.jsonl' -not -path \"$d/*\" "
                          "2>/dev/null | wc -l); sleep 2")
    assert done.returncode == 0, err
    assert "seen=0" in out
    usage = sandbox_stack.run_json("forges-usage")["usage"]
    assert (usage["max_memory_bytes"] or 0) < 1 << 40 and usage["gpu_utilization"] is None
    written = (sandbox_stack.data_dir / "runs" / "e2e" / "forges-usage" / "usage.0.jsonl")
    assert "1e+15" not in written.read_text() and not written.with_name("usage.1.jsonl").exists()


def _sacct(job: str, field: str) -> str:
    return subprocess.run(["sacct", "-n", "-X", "-P", "-o", field, "-j", job],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_slurm_is_out_of_reach_and_each_job_has_its_own_master_port(sandbox_stack, project):
    other = sandbox_stack.div("run", "--gpu", "cpu", "--no-upload", "--detach", "--name", "victim-job",
                      "--", "sleep 30", cwd=project, org="other")
    assert other.returncode == 0, other.stderr
    victim = sandbox_stack.run_json("victim-job", org="other")["slurm_job_id"]
    done, out, err = _run(sandbox_stack, project, "--no-upload", "--name", "pokes-slurm", "--",
                          # Slurm's commands retry a missing config for a minute.
                          f"echo port=$MASTER_PORT; timeout 3 srun --jobid={victim} --overlap "
                          f"true && echo STEP-ADDED; timeout 3 scontrol show job {victim} && "
                          "echo SAW-JOB; "
                          "ls /etc/slurm /run/munge /etc/munge 2>&1; true")
    assert done.returncode == 0, err
    assert "STEP-ADDED" not in out and "SAW-JOB" not in out
    # Slurm's commands find no configuration; an image has none of them.
    assert "slurm.conf" in err or "failed to run command 'srun'" in err, err
    assert "true" not in _sacct_steps(victim).values()      # its own steps only (bash)
    again = _run(sandbox_stack, project, "--no-upload", "--", "echo port=$MASTER_PORT")[1]
    ports = {re.search(r"port=(\d+)", text).group(1) for text in (out, again)}
    assert len(ports) == 2                                          # per job, never one for all
    sandbox_stack.div("stop", "victim-job", cwd=project, org="other")


def _sacct_steps(job: str) -> dict[str, str]:
    """Each step of the job and the program it ran."""
    listed = subprocess.run(["sacct", "-n", "-P", "-o", "JobID,JobName", "-j", job],
                            capture_output=True, text=True, check=True).stdout.split()
    return dict(line.split("|", 1) for line in listed if not line.startswith(f"{job}|"))


def test_the_server_never_follows_a_link_or_waits_on_a_fifo_in_a_volume(stack, project):
    made = _run(stack, project, "--no-upload", "--",
                "mkdir -p /mnt/traps/real && echo mine > /mnt/traps/real/mine.txt && "
                "mkfifo /mnt/traps/pipe && ln -s /etc /mnt/traps/etc && "
                "ln -s /etc/passwd /mnt/traps/passwd && ln -s /etc/hostname /mnt/traps/real/host")[0]
    assert made.returncode == 0, made.stderr
    listed = stack.api("GET", "/volumes/traps/ls", params={"recursive": "1"}).json()["entries"]
    assert [e["path"] for e in listed] == ["real/mine.txt"]
    started = time.monotonic()
    assert stack.api("GET", "/volumes/traps/files", params={"path": "pipe"}).status_code == 404
    assert time.monotonic() - started < 5                          # no thread hangs on it
    for path in ("passwd", "real/host"):
        assert stack.api("GET", "/volumes/traps/files", params={"path": path}).status_code == 404
    for route in ("/volumes/traps/ls", "/volumes/traps/files"):
        assert stack.api("GET", route, params={"path": "etc/passwd"}).status_code == 400
    passwd = Path("/etc/passwd").read_bytes()
    assert stack.div("storage", "rm", "traps", "passwd", cwd=project).returncode == 0
    assert stack.div("storage", "rm", "traps", "etc", cwd=project).returncode == 0
    assert Path("/etc/passwd").read_bytes() == passwd and Path("/etc/hostname").exists()

    # A run swaps a folder for a link to /etc while the server lists it.
    racing = stack.div("run", "--gpu", "cpu", "--no-upload", "--detach", "--name", "swapper", "--",
                       "mkdir -p /mnt/traps/d && touch /mnt/traps/d/ours; end=$((SECONDS+40)); "
                       "while [ $SECONDS -lt $end ]; do mv /mnt/traps/d /mnt/traps/d2; "
                       "ln -s /etc /mnt/traps/d; rm /mnt/traps/d; mv /mnt/traps/d2 /mnt/traps/d; done",
                       cwd=project)
    assert racing.returncode == 0, racing.stderr
    stack.wait_for_status("swapper", "running")
    seen = set()
    for _ in range(300):
        answer = stack.api("GET", "/volumes/traps/ls", params={"path": "d"})
        if answer.status_code == 200:
            seen.update(e["path"] for e in answer.json()["entries"])
    stack.div("stop", "swapper", cwd=project)
    assert seen <= {"d/ours"}, seen                               # never /etc's files


def test_no_run_and_no_org_starves_the_others(stack, project):
    # A run floods its metrics (26 MB, and 4,000 keys); another org's run
    # settles all the same while the flood is still being read.
    (project / "flood.py").write_text(
        "import json, os\n"
        "with open(os.environ['DIV_METRICS'], 'w') as f:\n"
        "    f.write(json.dumps({f'k{i}': i for i in range(4000)}) + '\\n')\n"
        "    f.writelines('{\"step\": %d, \"loss\": 0.5}\\n' % i for i in range(1000000))\n")
    flood = stack.div("run", "--gpu", "cpu", "--detach", "--name", "floods", "flood.py",
                      cwd=project, org="other")
    assert flood.returncode == 0, flood.stderr
    normal = stack.div("run", "--gpu", "cpu", "--no-upload", "--json", "--", "sleep 3", cwd=project)
    assert normal.returncode == 0, normal.stderr
    flooding = stack.run_json("floods", org="other")
    assert flooding["metrics_points"] < 1000001                   # still being read
    deadline = time.monotonic() + 120
    while stack.run_json("floods", org="other")["status"] == "running" \
            and time.monotonic() < deadline:
        time.sleep(1)
    flooded = stack.run_json("floods", org="other")
    assert flooded["status"] == "succeeded" and flooded["metrics_points"] == 1000001
    assert len(flooded["metrics"]) == 1000                        # keys capped

    # Followers: an org that opens many streams gets 429s past its share,
    # and everyone else, another org's followers included, is served.
    assert stack.div("run", "--gpu", "cpu", "--no-upload", "--detach", "--name", "followed",
                     "--", "sleep 60", cwd=project).returncode == 0
    assert stack.div("run", "--gpu", "cpu", "--no-upload", "--detach", "--name", "theirs",
                     "--", "sleep 60", cwd=project, org="other").returncode == 0
    streams, statuses = [], []
    for _ in range(70):   # the org's share: 32 a worker, 2 workers
        answer = requests.get(f"{stack.url}/api/v1/runs/followed/logs", stream=True, timeout=30,
                              params={"follow": "1"},
                              headers={"Authorization": f"Bearer {stack.tokens['e2e']}"})
        statuses.append(answer.status_code)
        streams.append(answer)
    try:
        assert statuses.count(429) >= 6 and set(statuses) <= {200, 429}, statuses
        started = time.monotonic()
        assert stack.api("GET", "/whoami").status_code == 200
        assert time.monotonic() - started < 2
        theirs = requests.get(f"{stack.url}/api/v1/runs/theirs/logs", stream=True, timeout=10,
                              params={"follow": "1"},
                              headers={"Authorization": f"Bearer {stack.tokens['other']}"})
        assert theirs.status_code == 200
        theirs.close()
    finally:
        for answer in streams:
            answer.close()
        stack.div("stop", "followed", cwd=project)
        stack.div("stop", "theirs", cwd=project, org="other")


def test_the_dashboard_and_api_behave_like_a_hardened_web_app(stack, project):
    session = stack.dashboard_session("e2e-user", "hardened-test-password")
    page = session.get(f"{stack.url}/")
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    # Sign-in sends the browser to this site's paths only.
    for target in ("/%09/evil.example", "//evil.example", "/\\evil.example", "https://evil.example",
                   "/%0a/evil.example"):
        fresh = requests.Session()
        token = re.search(r'name="csrf-token" content="([^"]+)"',
                          fresh.get(f"{stack.url}/login").text).group(1)
        answer = fresh.post(f"{stack.url}/login?next={target}", allow_redirects=False, data={
            "username": "e2e-user", "password": "hardened-test-password", "csrf_token": token})
        assert answer.status_code == 302 and answer.headers["Location"] == "/", target
    # A session ends on sign-out: a copied cookie stops working.
    copied = dict(session.cookies)
    token = re.search(r'name="csrf-token" content="([^"]+)"', page.text).group(1)
    session.post(f"{stack.url}/logout", headers={"X-CSRFToken": token})
    replay = requests.get(f"{stack.url}/", cookies=copied, allow_redirects=False)
    assert replay.status_code == 302 and "/login" in replay.headers["Location"]
    # And on a password change.
    again = stack.dashboard_session("e2e-user", "hardened-test-password")
    stack.flask("set-password", "e2e-user", "--password", "a-new-password-now")
    assert again.get(f"{stack.url}/", allow_redirects=False).status_code == 302

    # Bodies and parameters.
    # A 30 MB JSON body is refused from its Content-Length, before a byte is read.
    conn = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=10)
    conn.putrequest("POST", "/api/v1/runs")
    for name, value in (("Authorization", f"Bearer {stack.tokens['e2e']}"),
                        ("Content-Type", "application/json"), ("Content-Length", str(30 << 20))):
        conn.putheader(name, value)
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()
    for path, params in (("/usage", {"month": "9999-12"}), ("/usage", {"month": "x"}),
                         ("/runs", {"limit": "many"}), ("/runs", {"limit": "-1"})):
        answer = stack.api("GET", path, params=params)
        assert answer.status_code == 400 and answer.json()["error"], (path, params)

    # A secret a run writes to its metrics is *** like in its log.
    value = "metric-secret-" + secrets.token_hex(8)
    assert stack.div("secrets", "set", "METRIC_LEAK", cwd=project,
                     input=value.encode()).returncode == 0
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--json", "--secret", "METRIC_LEAK",
                     "--", 'echo "{\\"leak\\": \\"$METRIC_LEAK\\", \\"step\\": 1}" >> $DIV_METRICS',
                     cwd=project)
    assert done.returncode == 0, done.stderr
    run = _run_document(done.stdout)
    assert run["metrics"] == {"leak": "***", "step": 1} and value not in done.stdout.decode()

    # Revoking a key ends the streams open with it within seconds.
    key = stack.div("keys", "create", "--name", "to-revoke", cwd=project).stdout.decode().strip()
    assert stack.div("run", "--gpu", "cpu", "--no-upload", "--detach", "--name", "long-follow",
                     "--", "sleep 60", cwd=project).returncode == 0
    stream = requests.get(f"{stack.url}/api/v1/runs/long-follow/logs", stream=True, timeout=30,
                          params={"follow": "1"}, headers={"Authorization": f"Bearer {key}"})
    assert stream.status_code == 200
    ended = threading.Event()

    def read_to_end():
        try:
            for _ in stream.iter_lines():
                pass
        except requests.RequestException:
            pass
        ended.set()
    threading.Thread(target=read_to_end, daemon=True).start()
    assert stack.api("DELETE", f"/keys/{key[:key.index('_', 4)]}").status_code == 200
    assert ended.wait(5)
    stack.div("stop", "long-follow", cwd=project)

    # The server's own files are its user's alone.
    for path in (stack.server_log, stack.instance / "secret_key", stack.instance / "secrets_key"):
        info = path.stat()
        assert stat.S_IMODE(info.st_mode) & 0o077 == 0, path
    assert stat.S_IMODE(stack.instance.stat().st_mode) == 0o700


def test_no_metrics_line_request_or_volume_shape_takes_the_service_down(stack, project):
    # Metrics the parser or the database cannot take: nested too deep for
    # json, a lone surrogate in a run that has a secret to mask.
    assert stack.div("secrets", "set", "POISON_MASK", cwd=project,
                     input=b"mask-me-please").returncode == 0
    poisoned = _run(stack, project, "--no-upload", "--json", "--secret", "POISON_MASK", "--",
                    'echo \'{"a": 1}\' >> $DIV_METRICS; '
                    'python3 -c "print(\'[\' * 50000)" >> $DIV_METRICS; '
                    "printf '%s\\n' '{\"note\": \"\\ud800\", \"b\": 2}' >> $DIV_METRICS")
    assert poisoned[0].returncode == 0, poisoned[2]
    run = _run_document(poisoned[0].stdout)
    assert run["metrics"] == {"a": 1, "b": 2} and run["metrics_malformed"] == 1
    after = _run(stack, project, "--no-upload", "--", "echo still settling")
    assert after[0].returncode == 0 and after[1] == "still settling\n"      # the reconciler lives

    # Requests that once were 500s are 400s that say why.
    surrogate = '"\\ud800"'
    for method, path, body in (
            ("PUT", "/secrets/A", f'{{"value": {surrogate}}}'),
            ("POST", "/keys", f'{{"name": {surrogate}}}'),
            ("POST", "/runs", f'{{"project": "p", "command": {surrogate}}}'),
            ("POST", "/schedules", '{"cron": "* * * * *", "run": {"project": "p", '
                                   f'"command": "true", "env": {{"A": {surrogate}}}}}}}'),
            ("POST", "/runs", "[" * 100000),
            ("POST", "/runs", '{"project": "p", "command": "true", "max_spend": "1e999999"}'),
            ("POST", "/schedules", '{"cron": "0 0 31 2 *", "run": {"project": "p", '
                                   '"command": "true"}}')):
        answer = stack.api(method, path, data=body.encode(),
                           headers={"Content-Type": "application/json"})
        assert answer.status_code == 400 and answer.json()["error"], (path, body[:60], answer.text)
    for params in ({"month": "0000-01"}, {"month": "2026-١١"}):
        assert stack.api("GET", "/usage", params=params).status_code == 400
    assert stack.api("GET", "/runs", params={"limit": "１"}).status_code == 400

    # A volume of 21,000 folders: listings hold a bounded number of
    # descriptors, so they (and everyone else's requests) still answer.
    made = _run(stack, project, "--no-upload", "--",
                "mkdir -p /mnt/many-folders/d && cd /mnt/many-folders/d && mkdir $(seq 0 20999) "
                "&& touch 20999/last")[0]
    assert made.returncode == 0, made.stderr
    listed = stack.api("GET", "/volumes/many-folders/ls", params={"recursive": "1"})
    assert listed.status_code == 200 and [e["path"] for e in listed.json()["entries"]] == [
        "d/20999/last"]
    assert stack.api("GET", "/volumes").status_code == 200
    deep = stack.api("GET", "/volumes/many-folders/ls?path=" + "d/" * 1500)   # 1,500 deep
    assert deep.status_code == 404 and deep.json()["error"]           # walked, not recursed
    assert stack.div("storage", "rm", "many-folders", "--yes", cwd=project).returncode == 0


def test_a_link_a_run_left_in_a_volume_is_removed_by_a_purge_never_followed(app, runner,
                                                                           tmp_path):
    """A run may leave anything in its org's volumes; purging the removed
    org's volumes must delete the link, not what it points at."""
    from divergent.app.services.accounts.orgs import get_or_create_org
    from divergent.app.services.files.volumes import ensure_volume
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("another org's, or the host's")
    with app.app_context():
        volume = Path(ensure_volume(get_or_create_org("victim-owner"), "data"))
    (volume / "escape").symlink_to(outside)
    (volume / "file-link").symlink_to(outside / "keep.txt")
    done = runner.invoke(args=["remove-org", "victim-owner", "--purge", "--yes"])
    assert done.exit_code == 0, done.output
    assert not volume.exists()
    assert (outside / "keep.txt").read_text() == "another org's, or the host's"


def test_a_runs_values_are_never_read_as_directives_by_the_pyslurm_transport(tmp_path):
    """sbatch reads #SBATCH lines only above the script's first command; the
    pyslurm transport reads them itself, and must stop there too, or a run's
    env value could move the job to another org's account or user."""
    from divergent.slurm.pyslurm_client import submit_options
    from divergent.slurm.script import render_batch_script
    from tests.jobs import SITE, spec_for
    dirs = [tmp_path / d for d in ("state", "org", "code")]
    hostile = "x\n#SBATCH --account=victim\n#SBATCH --partition=b300\n#SBATCH --uid=0\n"
    script = render_batch_script(spec_for(dirs, "true", env={"NOTE": hostile}), SITE)
    assert "\n#SBATCH --account=victim\n" in script           # there, as a quoted value
    options = submit_options(script)
    assert (options["account"], options["partitions"]) == ("dev", "cpu")
    assert "user_id" not in options


def test_an_s3_transfer_runs_no_value_it_is_given_and_writes_through_no_link(stack, project,
                                                                            s3_org, s3_server):
    """A member's S3 locations and paths are each one argument of the
    transfer program inside the sandbox, never a shell word; a link a run
    planted where partial files go is refused, never written through; and
    another org's member cannot name this org's volume."""
    from tests.buckets import new_bucket, put_objects, s3_client
    s3 = s3_client(s3_server)
    bucket = new_bucket(s3)
    put_objects(s3, bucket, {"k/x": b"x"})
    volume = stack.data_dir / "share" / s3_org / "atk"
    for prefix in ("';touch /mnt/atk/pwned;'", "$(touch /mnt/atk/pwned)", "`touch /mnt/atk/pwned`"):
        done = stack.div("storage", "import", "atk/in", f"s3://{bucket}/{prefix}", cwd=project,
                         org=s3_org)
        assert done.returncode == 1
        assert f"s3://{bucket}/{prefix}: no objects there" in done.stderr.decode().splitlines()
    assert not (volume / "pwned").exists()

    # A run plants .div-partial as a link to another volume, then imports.
    planted, _, err = _run(stack, project, "--no-upload", "--",
                           "mkdir -p /mnt/victim && ln -s /mnt/victim /mnt/atk/.div-partial",
                           org=s3_org)
    assert planted.returncode == 0, err
    done = stack.div("storage", "import", "atk/in", f"s3://{bucket}/k", cwd=project, org=s3_org)
    assert done.returncode == 1
    assert "refused: .div-partial is a file or a link in the volume, not a folder" in \
        done.stderr.decode().splitlines()
    assert list((stack.data_dir / "share" / s3_org / "victim").iterdir()) == []
    assert os.path.islink(volume / ".div-partial") and not (volume / "in" / "x").exists()

    stack.add_org("s3thief")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        stack.div("secrets", "set", name, cwd=project, org="s3thief", input=s3_server[name].encode())
    stolen = stack.div("storage", "export", "atk", f"s3://{bucket}/stolen", cwd=project, org="s3thief")
    assert (stolen.returncode, stolen.stderr.decode()) == (2, "no volume named 'atk'\n")


def test_a_webhook_cannot_reach_the_server_or_the_cluster(app_context, app):
    """A member's webhook is the server's own request: a name that resolves
    to the server's host, or an address of the cluster's network, reaches
    nothing (only the networks a site allows, DIV_WEBHOOK_ALLOWED_NETWORKS)."""
    from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
    from divergent.app.services.errors import Invalid
    from divergent.app.services.notify.delivery import NotDelivered, send_webhook
    from divergent.app.services.notify.notices import add_channel
    from tests.receivers import Webhook
    app.config["DIV_WEBHOOK_ALLOWED_NETWORKS"] = ""
    user = get_or_create_user(get_or_create_org("attacker-org"), "mallory")
    for url in ("http://10.77.0.1:6817/", "http://127.0.0.1:8000/api/v1/runs",
                "http://[::ffff:127.0.0.1]/", "http://169.254.169.254/latest/meta-data/",
                "http://2130706433/", "http://0177.0.0.1/", "http://[::7f00:1]/",
                "http://[::ffff:0:7f00:1]/", "http://[64:ff9b::a00:1]/", "http://[2002:a00:1::]/"):
        with pytest.raises(Invalid, match="not a public address"):
            add_channel(user, webhook=url)
    receiver = Webhook()
    try:
        url = receiver.url.replace("127.0.0.1", "localhost")
        with pytest.raises(Invalid, match=r"may not reach localhost \(127.0.0.1\)"):
            add_channel(user, webhook=url)    # a name: every address it resolves to
        # And again as it is delivered: a name's answer may change since.
        with pytest.raises(NotDelivered, match=r"may not reach localhost \(127.0.0.1\)"):
            send_webhook(url, {"text": "x"}, "div-1-run-x-failed")
        assert receiver.tries == []
    finally:
        receiver.close()


def test_a_sweep_posted_straight_to_the_api_is_sized_before_any_run_is_made(stack):
    """Without `div run`'s check first: 8 variables of 100 values are 10^16
    combinations; the server counts them and refuses, making no run."""
    body = {"project": "p", "command": "true", "gpu": "cpu",
            "sweep": {f"K{i}": [str(v) for v in range(100)] for i in range(8)}}
    runs_before = len(stack.api("GET", "/runs", params={"limit": 500}).json()["runs"])
    started = time.monotonic()
    answer = stack.api("POST", "/sweeps", json=body)
    assert answer.status_code == 400 and "MaxArraySize" in answer.json()["error"]
    assert time.monotonic() - started < 5
    assert len(stack.api("GET", "/runs", params={"limit": 500}).json()["runs"]) == runs_before
    clash = stack.api("POST", "/sweeps", json={**body, "env": {"K0": "x"},
                                                "sweep": {"K0": ["1", "2"]}})
    assert clash.status_code == 400 and "both swept and set" in clash.json()["error"]


def test_a_run_cannot_take_a_sweep_s_job_name(app_context):
    """A sweep's members are found by the array's job name: a run named like
    a sweep could be taken for (and stop) a teammate's array."""
    from divergent.app.services.errors import Invalid
    from divergent.app.services.runs.request import parse_request
    with pytest.raises(Invalid, match="are a sweep's"):
        parse_request({"project": "p", "command": "true", "gpu": "cpu", "name": "sweep-0bbz"})


def test_no_org_may_queue_more_live_runs_than_the_site_allows(app_context, app):
    """Every live run is followed each cycle, for every org: one org's
    thousands of sweeps would slow (or, past an argument's size, stop) the
    reconciler for all. Counted before anything is made."""
    from divergent.app.extensions import db
    from divergent.app.models import Project, Run
    from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
    from divergent.app.services.errors import Conflict
    from divergent.app.services.runs.submit import check_may_start
    app.config["DIV_MAX_LIVE_RUNS_PER_ORG"] = 3
    user = get_or_create_user(get_or_create_org("busy"), "bo")
    project = Project(org_id=user.org_id, name="p")
    db.session.add(project)
    db.session.flush()
    db.session.add_all(Run(org_id=user.org_id, project_id=project.id, user_id=user.id,
                           name=f"run-{i}", status=status, gpu_type="cpu", gpus=1, cpus=1,
                           memory_gib=1, image="i", command="true", rate_micros_per_hour=1,
                           env={}, checks=[], mounts=[])
                       for i, status in enumerate(["queued", "running", "succeeded"]))
    db.session.commit()
    check_may_start(user)                     # 2 live: room for one more
    with pytest.raises(Conflict, match="has 2 runs queued or running; at most 3"):
        check_may_start(user, 2)


# What a run tries to reach, and what it finds: "open" or the error's name.
NETWORK_PROBE = """
import json, os, socket, sys
def reach(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        return "open"
    except OSError as exc:
        return type(exc).__name__
targets = json.loads(os.environ["TARGETS"])
print("REACH " + json.dumps({name: reach(*where) for name, where in targets.items()}))
"""

# A run of the other org's that listens on its MASTER_PORT and on 29999 and
# says whether anyone came.
LISTENER = """
import os, socket, time
s1 = socket.create_server(("0.0.0.0", int(os.environ["MASTER_PORT"])))
s2 = socket.create_server(("0.0.0.0", 29999))
for s in (s1, s2):
    s.settimeout(0.2)
came = 0
for _ in range(75):
    for s in (s1, s2):
        try:
            s.accept(); came += 1
        except TimeoutError:
            pass
print(f"CAME {came}", flush=True)
"""


def _job_of(stack, name: str, org: str) -> tuple[str, str]:
    """A running run's Slurm job id and its first node."""
    job = stack.run_json(name, org=org)["slurm_job_id"]
    node = subprocess.run(["squeue", "-h", "-j", job, "-o", "%N"], capture_output=True,
                          text=True, check=True).stdout.strip()
    return job, subprocess.run(["scontrol", "show", "hostnames", node], capture_output=True,
                               text=True, check=True).stdout.split()[0]


def _scontrol_fields(kind: str, name: str) -> dict[str, str]:
    """What `scontrol show job|node` says of one, as key=value pairs."""
    shown = subprocess.run(["scontrol", "-o", "show", kind, name], capture_output=True,
                           text=True, check=True).stdout
    return dict(field.split("=", 1) for field in shown.split() if "=" in field)


def _listening_ports(node: str, program: str) -> list[int]:
    """The TCP ports `program` listens on in a node's own network."""
    listed = subprocess.run(["nsenter", f"--net=/run/netns/div-{node}", "ss", "-Hltnp"],
                            capture_output=True, text=True, check=True).stdout
    return [int(line.split()[3].rsplit(":", 1)[1]) for line in listed.splitlines()
            if f'"{program}"' in line]


def test_a_run_reaches_its_own_job_and_the_sites_list_and_nothing_else_on_the_network(
        sandbox_stack, project):
    (project / "listen.py").write_text(LISTENER)
    (project / "probe.py").write_text(NETWORK_PROBE)
    victim = sandbox_stack.div("run", "--gpu", "cpu", "--detach", "--name", "net-victim", "listen.py",
                       cwd=project, org="other")
    assert victim.returncode == 0, victim.stderr
    sandbox_stack.wait_for_status("net-victim", "running", org="other")
    job, node = _job_of(sandbox_stack, "net-victim", "other")
    index = int(node.removeprefix("node"))
    victim_addr = f"10.{80 + index}.{(int(job) >> 8) & 255}.{int(job) & 255}"
    master_port = 20000 + int(job) % 40000
    # "running" comes from squeue as the batch step starts; its srun listens a moment later.
    deadline = time.monotonic() + 20
    while not (srun_ports := _listening_ports(node, "srun")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert srun_ports, "the victim's batch step runs srun, which listens for its I/O"
    targets = {
        "victim-master-port": [victim_addr, master_port],
        "victim-port": [victim_addr, 29999],
        "victim-srun": [f"10.77.0.{10 + index}", srun_ports[0]],
        "slurmctld": ["10.77.0.1", 6817],
        "slurmdbd": ["10.77.0.1", 6819],
        "s3": ["10.77.0.1", 18080],
        **{f"slurmd-node{i}": [f"10.77.0.{10 + i}", 6818] for i in range(1, 5)},
        "own-node-gateway": ["169.254.0.1", 6818],
        "server": ["10.77.0.1", sandbox_stack.port],
    }
    # On the victim's node and on another; --gpus 16 is two nodes, whose
    # ranks reach each other (rank 0 listens, rank 1 connects).
    done, out, err = _run(sandbox_stack, project, "--env", f"TARGETS={json.dumps(targets)}",
                          "--", "python probe.py")
    assert done.returncode == 0, err
    reached = json.loads(re.search(r"REACH (.*)", out).group(1))
    assert reached.pop("s3") == "open"
    assert set(reached.values()) <= {"OSError", "ConnectionRefusedError"}, reached
    assert all(result != "open" for result in reached.values()), reached
    peers = _run(sandbox_stack, project, "--gpu", "h100", "--gpus", "16", "--", (
        'if [ "$NODE_RANK" = 0 ]; then python -c "import os, socket; '
        "s = socket.create_server(('0.0.0.0', int(os.environ['MASTER_PORT']))); "
        "c, _ = s.accept(); print('PEER', c.recv(10).decode())\"; else "
        'python -c "import os, socket, time; time.sleep(2); '
        "socket.create_connection((os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])), "
        "timeout=10).sendall(b'hello')\"; fi"))
    assert peers[0].returncode == 0 and "PEER hello" in peers[1], peers[2]
    sandbox_stack.wait_for_status("net-victim", "succeeded", org="other", timeout=60)
    assert "CAME 0" in sandbox_stack.div("logs", "net-victim", cwd=project, org="other").stdout.decode()


FORK_BOMB = """
import os, time
children = 0
try:
    while children < 6000:
        if os.fork() == 0:
            time.sleep(20)
            os._exit(0)
        children += 1
except OSError as exc:
    print(f"STOPPED {children} {type(exc).__name__}", flush=True)
"""


def test_a_runs_processes_are_bounded_on_each_node(sandbox_stack, project):
    (project / "forks.py").write_text(FORK_BOMB)
    # Memory enough for 4096 processes (about 0.5 MB each on this kernel):
    # the pids limit, not the memory limit, is what stops it.
    done, out, err = _run(sandbox_stack, project, "--memory", "8", "forks.py")
    assert done.returncode == 0, err
    stopped = re.search(r"STOPPED (\d+) BlockingIOError", out)
    assert stopped and int(stopped.group(1)) < 4096, out    # the job's pids cgroup (PIDS_MAX)
    assert sandbox_stack.api("GET", "/whoami", org="other").status_code == 200


def test_a_site_may_keep_orgs_off_each_others_nodes(stack, project):
    stack.flask("site", "--org-nodes", "exclusive")
    try:
        for name, org in (("mcs-first", "e2e"), ("mcs-theirs", "other"), ("mcs-second", "e2e")):
            started = stack.div("run", "--gpu", "cpu", "--no-upload", "--detach", "--name", name,
                                "--", "sleep 600", cwd=project, org=org)
            assert started.returncode == 0, started.stderr
            stack.wait_for_status(name, "running", org=org)
        jobs = {name: _job_of(stack, name, org) for name, org in (
            ("mcs-first", "e2e"), ("mcs-theirs", "other"), ("mcs-second", "e2e"))}
        shown = {name: _scontrol_fields("job", job) for name, (job, _) in jobs.items()}
        # Each run holds its node for its org's account alone (OverSubscribe=MCS),
        # never the whole node for itself: the node takes that org's label, and
        # other jobs of the same org may still share it (which node Slurm packs
        # them on depends on the other tests' jobs meanwhile).
        for name, (_, node) in jobs.items():
            assert shown[name]["OverSubscribe"] == "MCS", shown[name]
            assert shown[name]["MCS_label"] == shown[name]["Account"], shown[name]
            assert _scontrol_fields("node", node)["MCS_label"] == shown[name]["MCS_label"], node
        assert shown["mcs-first"]["MCS_label"] == shown["mcs-second"]["MCS_label"]
        assert shown["mcs-theirs"]["MCS_label"] != shown["mcs-first"]["MCS_label"]
        assert jobs["mcs-theirs"][1] not in (jobs["mcs-first"][1], jobs["mcs-second"][1]), jobs
        doctor = stack.flask("doctor", check=False).stdout
        assert re.search(r"org nodes.*exclusive.*mcs/account", doctor), doctor
    finally:
        stack.flask("site", "--org-nodes", "shared")
        for name, org in (("mcs-first", "e2e"), ("mcs-theirs", "other"), ("mcs-second", "e2e")):
            stack.div("stop", name, cwd=project, org=org)


@pytest.fixture(scope="module")
def tight_stack(slurm_cluster):
    """A stack of its own with small limits, so stalls show in seconds: 16
    threads a worker (4 transfer slots), 2 transfers and 16 log streams
    an org, 3 s of silence a connection; its few files measured every 2 s."""
    with running_stack(free_port(), None, settings={
            "DIV_THREADS": "16", "DIV_TRANSFERS_PER_ORG": "2", "DIV_FOLLOWERS_PER_ORG": "16",
            "DIV_CLIENT_IDLE_SECONDS": "3", "DIV_CLIENT_HEADER_SECONDS": "3",
            "DIV_STORAGE_MEASURE_SECONDS": "2"}) as running:
        yield running


def _stalled_upload(stack, org: str, path: str = "big.bin") -> socket.socket:
    """A PUT of a 1 MB file that sends its headers and 2 bytes, then nothing."""
    conn = socket.create_connection(("127.0.0.1", stack.port))
    conn.sendall((f"PUT /api/v1/volumes/stall/files?path={path} HTTP/1.1\r\n"
                  f"Host: 127.0.0.1\r\nAuthorization: Bearer {stack.tokens[org]}\r\n"
                  f"X-Div-Sha256: {'0' * 64}\r\nContent-Length: 1000000\r\n\r\nab").encode())
    return conn


def _answer(conn: socket.socket, within: float) -> bytes:
    """What the server says (or b"" when it closes) within `within` seconds;
    None when it says nothing that long."""
    conn.settimeout(within)
    try:
        return conn.recv(4096)
    except TimeoutError:
        return None
    except ConnectionResetError:
        return b""


def test_stalled_uploads_hold_threads_only_to_their_deadline_and_never_another_orgs(tight_stack):
    stack = tight_stack
    assert stack.api("POST", "/volumes/stall/plan", org="other", json={"files": []}).ok
    stalled = [_stalled_upload(stack, "other", f"f{i}.bin") for i in range(60)]
    try:
        started = time.monotonic()
        for _ in range(5):
            assert stack.api("GET", "/whoami").status_code == 200
        # A refused upload's connection closes at once; the few admitted
        # hold a thread each for 3 s at most, of 32.
        assert time.monotonic() - started < 8
        # Past the org's share: refused at once, the client told to wait;
        # those let in hold their slot until 3 s of silence, then a 400.
        answers = [_answer(conn, max(0.1, started + 15 - time.monotonic())) for conn in stalled]
        refused = [a for a in answers if a and (b" 429 " in a or b" 503 " in a)]
        assert len(refused) >= 50 and all(b"Retry-After: 5" in a for a in refused)
        held = [a for a in answers if a is not None and a not in refused]
        assert 1 <= len(held) <= 8 and all(a == b"" or b" 400 " in a for a in held)
        assert time.monotonic() - started < 15
    finally:
        for conn in stalled:
            conn.close()
    # Headers a line a second, from more connections than the server has
    # threads (an outsider's slowloris, no key needed): each is cut off
    # after its header's 3 s, and everyone else is served meanwhile.
    trickling = [socket.create_connection(("127.0.0.1", stack.port)) for _ in range(40)]
    try:
        for conn in trickling:
            conn.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        for _ in range(8):
            for conn in trickling:
                with contextlib.suppress(OSError):
                    conn.sendall(b"X-a: b\r\n")
            time.sleep(1)
            if time.monotonic() - started > 4:
                # Generous: the workers beside this one load both cores.
                assert requests.get(f"{stack.url}/api/v1/health", timeout=8).status_code == 200
        assert [_answer(conn, 2) for conn in trickling] == [b""] * 40       # all cut off
    finally:
        for conn in trickling:
            conn.close()
    # Half a request line, then nothing: closed too.
    slow = socket.create_connection(("127.0.0.1", stack.port))
    slow.sendall(b"GET /api/v1/who")
    assert _answer(slow, 10) == b""
    slow.close()


def _follow_request(stack, org: str, run: str, protocol: str = "HTTP/1.1") -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", stack.port))
    conn.sendall((f"GET /api/v1/runs/{run}/logs?follow=1 {protocol}\r\nHost: 127.0.0.1\r\n"
                  f"Authorization: Bearer {stack.tokens[org]}\r\n\r\n").encode())
    return conn


def test_followers_that_never_read_hold_no_thread_and_are_cut_off(tight_stack, project):
    """An org opens as many log streams as the workers have threads (16
    each) and reads none of them, of a run that writes 40 MB: the streams are the
    hub's, so every other request is answered meanwhile; each is cut off
    once its client has taken nothing for 3 s, and its slot is the org's
    again. An HTTP/1.0 client gets the stream to the connection's close."""
    stack = tight_stack
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--detach", "--name", "loud", "--",
                     "head -c 40000000 /dev/zero | tr '\\0' x; sleep 120", cwd=project,
                     org="other")
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while _log_size(stack, "other", "loud") < 40_000_000 and time.monotonic() < deadline:
        time.sleep(0.5)
    stalled = [_follow_request(stack, "other", "loud") for _ in range(40)]
    try:
        for _ in range(10):
            started = time.monotonic()
            assert stack.api("GET", "/whoami").status_code == 200
            assert time.monotonic() - started < 2
        # The org's share (16 a worker of 2, tight_stack) is taken...
        first = [_answer(conn, 10) for conn in stalled]
        assert sum(1 for a in first if a and a.startswith(b"HTTP/1.1 200")) >= 16
        assert sum(1 for a in first if a and b" 429 " in a) >= 8
        # ...until the streams that read nothing are cut off.
        time.sleep(8)
        again = _follow_request(stack, "other", "loud", "HTTP/1.0")
        answer = _answer(again, 10)
        assert answer and answer.startswith(b"HTTP/1.1 200") and b"chunked" not in answer, answer
        again.close()
    finally:
        for conn in stalled:
            conn.close()
        stack.div("stop", "loud", cwd=project, org="other")


def _log_size(stack, org: str, run: str) -> int:
    try:
        return (stack.data_dir / "runs" / org / run / "stdout").stat().st_size
    except OSError:
        return 0


def test_an_upload_that_trickles_ends_at_its_deadline_while_nothing_arrives(app):
    from gunicorn.http.body import Body

    from divergent.app.services.errors import Invalid
    from divergent.app.web.upload_body import Deadline
    server, client = socket.socketpair()
    with app.app_context():
        app.config["DIV_CLIENT_IDLE_SECONDS"] = 60
        deadline = Deadline(server, 1.5, Body(None))
        started, buffer = time.monotonic(), bytearray(10)
        with pytest.raises(Invalid, match="must finish within"):
            while True:
                client.send(b"x")
                deadline.read(server.recv_into, buffer, 10)
                time.sleep(0.4)
    assert 1.4 < time.monotonic() - started < 3
    assert server.gettimeout() is None and deadline.body.failed


def test_a_plain_log_read_is_bounded_however_large_the_log(stack, project):
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--detach", "--name", "holes", "--",
                     "truncate -s 1T /dev/stdout; echo tail-line", cwd=project)
    assert done.returncode == 0, done.stderr
    assert stack.wait_for_status("holes", "succeeded", timeout=60)["status"] == "succeeded"
    started = time.monotonic()
    answer = stack.api("GET", "/runs/holes/logs")
    assert time.monotonic() - started < 10
    events = [json.loads(line) for line in answer.text.splitlines()]
    assert events[-1]["event"] == "more" and 0 < events[-1]["stdout"] <= 17 << 20


def test_parallel_runs_never_share_what_is_left_of_the_orgs_limit(stack):
    stack.add_org("tight-limit")
    stack.flask("org-limit", "tight-limit", "0.01")     # two minutes of one core
    answers = []

    def start(n: int):
        # A project each: with one, the requests wait for each other at
        # its first insert, and the hold is never raced.
        body = {"project": f"p{n}", "command": "sleep 600", "gpu": "cpu"}
        answers.append(stack.api("POST", "/runs", org="tight-limit", json=body))
    threads = [threading.Thread(target=start, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    made = [stack.run_json(a.json()["run"]["name"], org="tight-limit")
            for a in answers if a.status_code == 201]
    refused = [a.json()["error"] for a in answers if a.status_code == 403]
    # One run holds the rest of the limit at a time. Another is made only
    # after one ended (failed at once, say, on a loaded cluster) and gave
    # back what it had not spent: never more than the limit in all.
    live = [run for run in made if run["status"] in ("queued", "running")]
    assert len(live) == 1 and len(made) + len(refused) == 20, (
        [a.status_code for a in answers],
        [{key: run.get(key) for key in ("name", "status", "slurm_job_id", "restarts", "time_limit_minutes",
                                        "rate", "cost", "created_at", "started_at", "ended_at")}
         for run in made])
    assert sum(_may_spend(run) for run in made) <= Decimal("0.01"), made
    assert all("held by live runs" in message for message in refused)
    for run in live:
        stack.api("POST", f"/runs/{run['name']}/stop", org="tight-limit")


def _may_spend(run: dict) -> Decimal:
    """Dollars: an ended run's cost, a live one's time limit at its rate."""
    if run["status"] in ("queued", "running"):
        return Decimal(run["rate"]) * run["time_limit_minutes"] / 60
    return Decimal(run["cost"])


def _allocated(folder: Path) -> int:
    """Bytes the folder's files take on disk, each inode once."""
    seen, total = set(), 0
    for path in folder.rglob("*"):
        info = path.lstat()
        if (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
    return total


def test_a_manifest_naming_one_blob_many_times_costs_the_blob_once(stack):
    blob = os.urandom(4 << 20)
    sha = hashlib.sha256(blob).hexdigest()
    files = [{"path": f"copy{i}.bin", "sha256": sha, "size": len(blob)} for i in range(50)]
    body = {"volume": "amplified-code", "files": files}
    assert stack.api("POST", "/code/trees", org="other", json=body).json()["missing"] == [sha]
    assert stack.api("PUT", f"/code/blobs/{sha}", org="other", data=blob).status_code == 201
    # A size that is not the blob's is refused: what is charged and copied is what is stored.
    lying = {"volume": "amplified-code", "files": [{**files[0], "size": 0}]}
    refused = stack.api("POST", "/code/trees", org="other", json=lying)
    assert refused.status_code == 400 and "not 0" in refused.json()["error"]
    tree = stack.api("POST", "/code/trees", org="other", json=body).json()
    assert tree["files"] == 50
    name = tree["ref"].rpartition("/")[2]
    stored = _allocated(stack.data_dir / "trees/other/amplified-code" / name)
    browsed = _allocated(stack.data_dir / "share/other/amplified-code/code" / name)
    assert stored < 5 << 20 and browsed < 5 << 20, (stored, browsed)   # 200 MB each before


def test_a_bundle_member_with_holes_is_refused(stack, tmp_path):
    with open(tmp_path / "holes", "wb") as f:
        f.truncate(500 << 20)
        f.write(b"x")
    for form in ("gnu", "posix"):     # GNU's sparse member, and pax's GNU.sparse headers
        subprocess.run(["tar", "--sparse", f"--format={form}", "-cf", f"{form}.tar", "holes"],
                       cwd=tmp_path, check=True)
        assert stack.api("POST", "/volumes/sparse-vol/plan", json={"files": []}).ok
        answer = stack.api("POST", "/volumes/sparse-vol/bundle",
                           data=(tmp_path / f"{form}.tar").read_bytes(),
                           headers={"Content-Type": "application/x-tar"})
        assert answer.status_code == 400, answer.text
        assert "no sparse files" in answer.json()["error"]
    assert answer.status_code == 400, answer.text
    assert not (stack.data_dir / "share/e2e/sparse-vol/holes").exists()


def test_an_orgs_storage_quota_counts_volumes_trees_and_blobs_and_refuses_past_it(tight_stack,
                                                                                tmp_path):
    stack = tight_stack
    stack.add_org("quota-org")
    stack.flask("org-quota", "quota-org", "3MB")
    # 50 empty files 40 folders deep: 92 KB sent, 8 MB of folders made.
    for i in range(50):
        deep = tmp_path / "deep" / "/".join(f"d{i}" for _ in range(40))
        deep.mkdir(parents=True)
        (deep / "f").touch()
    subprocess.run(["tar", "--format=posix", "-cf", "deep.tar", "-C", "deep", "."], cwd=tmp_path,
                   check=True)
    assert stack.api("POST", "/volumes/deep/plan", org="quota-org", json={"files": []}).ok
    deep = stack.api("POST", "/volumes/deep/bundle", org="quota-org",
                     data=(tmp_path / "deep.tar").read_bytes(),
                     headers={"Content-Type": "application/x-tar"})
    assert deep.status_code == 507 and "storage quota" in deep.json()["error"], deep.text
    (tmp_path / "two.bin").write_bytes(os.urandom(2 << 20))
    first = stack.div("storage", "put", "data", "two.bin", cwd=tmp_path, org="quota-org")
    assert first.returncode == 0, first.stderr
    (tmp_path / "more.bin").write_bytes(os.urandom(2 << 20))
    second = stack.div("storage", "put", "data", "more.bin", cwd=tmp_path, org="quota-org")
    assert second.returncode == 1 and b"storage quota" in second.stderr, second.stderr
    assert b"Traceback" not in second.stderr
    listed = stack.div("storage", "ls", cwd=tmp_path, org="quota-org")
    assert b"of 3.0 MB quota" in listed.stderr, listed.stderr
    stack.flask("org-quota", "quota-org", "1MB")     # over it now: no run writes more
    run = stack.div("run", "--gpu", "cpu", "--no-upload", "--", "true", cwd=tmp_path,
                    org="quota-org")
    assert run.returncode == 1 and b"storage quota" in run.stderr, run.stderr
    # What a run wrote is measured (allocated blocks: holes are free) and counted.
    stack.flask("org-quota", "quota-org", "none")
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--",
                     "head -c 3000000 /dev/urandom > /mnt/data/written; truncate -s 1T /mnt/data/holes",
                     cwd=tmp_path, org="quota-org")
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 30
    usage = {}
    while time.monotonic() < deadline:
        usage = stack.api("GET", "/volumes", org="quota-org").json()["storage"]
        if usage["used_bytes"] > 5_000_000:
            break
        time.sleep(1)
    assert 5_000_000 < usage["used_bytes"] < 6_000_000, usage


def test_an_org_may_start_only_so_many_runs_within_slurms_job_age(app_context, app):
    from divergent.app.extensions import db
    from divergent.app.models import Org, Project, Run, User
    from divergent.app.services.errors import TooManySubmits
    from divergent.app.services.runs.submit import check_may_start
    org = Org(name="busy", slurm_account="busy")
    user = User(org=org, username="busy-user")
    db.session.add_all([org, user])
    db.session.flush()
    project = Project(org_id=org.id, name="p")
    db.session.add(project)
    db.session.flush()
    app.config["DIV_MAX_SUBMITS_PER_WINDOW"] = 5
    for i in range(5):
        db.session.add(Run(org_id=org.id, project_id=project.id, user_id=user.id, name=f"r{i}",
                           status="succeeded", gpu_type="cpu", gpus=1, cpus=1, memory_gib=2,
                           image="x", command="true", rate_micros_per_hour=1))
    db.session.commit()
    with pytest.raises(TooManySubmits, match="started 5 runs in the last 5 minutes"):
        check_may_start(user)


def test_each_orgs_slurm_account_caps_its_jobs_in_slurm_too(stack, project):
    assert stack.div("run", "--gpu", "cpu", "--no-upload", "--", "true", cwd=project,
                     org="other").returncode == 0
    limits = subprocess.run(["sacctmgr", "-n", "-P", "show", "assoc", "where",
                             f"account={stack.accounts['other']}", "user=", "format=GrpSubmit"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert limits and limits[0] == "2000", limits


def test_one_orgs_schedules_fire_a_fair_share_a_pass_and_at_most_so_many(app_context, app):
    from datetime import timedelta

    from divergent.app.extensions import db
    from divergent.app.models import Org, Schedule, User, utcnow
    from divergent.app.services.runs import schedules
    started = []
    schedules_started = schedules._start
    schedules._start = lambda row: started.append(row.org_id) or type("R", (), {"name": "r"})
    try:
        orgs = [Org(name=f"sched{i}", slurm_account=f"sched{i}") for i in range(2)]
        users = [User(org=org, username=f"{org.name}-user") for org in orgs]
        db.session.add_all(orgs + users)
        db.session.flush()
        due = utcnow() - timedelta(minutes=1)
        for i in range(30):
            db.session.add(Schedule(org_id=orgs[0].id, user=users[0], name=f"a{i}",
                                    cron="* * * * *", tz="UTC", request={}, next_at=due))
        db.session.add(Schedule(org_id=orgs[1].id, user=users[1], name="b", cron="* * * * *",
                                tz="UTC", request={}, next_at=due + timedelta(seconds=30)))
        db.session.commit()
        assert schedules.fire_due() == 3
        assert started.count(orgs[0].id) == 2 and started.count(orgs[1].id) == 1
    finally:
        schedules._start = schedules_started


def test_odd_values_in_notifications_are_refused_not_500s(stack):
    answer = stack.api("POST", "/notifications", json={"webhook": "https://example.org/x",
                                                       "schedule": {}})
    assert answer.status_code == 400, answer.text
    assert stack.api("DELETE", f"/notifications/{'9' * 40}").status_code == 404
    unclosed = stack.api("POST", "/notifications", json={"webhook": "http://[::1", "on": ["failed"]})
    assert unclosed.status_code == 400, unclosed.text
    assert stack.api("DELETE", "/notifications/١٢").status_code == 404     # not ASCII digits
    multicast = stack.api("POST", "/notifications", json={"webhook": "http://224.0.0.1/hook"})
    assert multicast.status_code == 400, multicast.text


def test_a_run_sees_no_kernel_keys_and_makes_no_user_namespace_of_its_own(sandbox_stack, project):
    done, out, err = _run(sandbox_stack, project, "--no-upload", "--",
                          "echo keys=$(cat /proc/keys /proc/key-users | wc -c); "
                          "unshare -U true && echo NESTED || echo no-nested")
    assert done.returncode == 0, err
    assert "keys=0" in out and "no-nested" in out and "NESTED" not in out, out


def test_a_run_in_an_image_sees_no_other_runs_processes_or_shared_memory(pyxis_stack, project):
    """enroot gives a container no pid namespace: the nodes mount /proc
    with hidepid (slurm/dev/up, docs/admins/images.md), and each run's
    /dev/shm is its own (slurm/node/enroot/30-divergent.fstab)."""
    victim = pyxis_stack.div("run", "--gpu", "cpu", "--no-upload", "--detach", "--name",
                             "shm-victim", "--", "echo theirs > /dev/shm/victim-shm; sleep 60",
                             cwd=project, org="other")
    assert victim.returncode == 0, victim.stderr
    pyxis_stack.wait_for_status("shm-victim", "running", org="other")
    try:
        done, out, err = _run(pyxis_stack, project, "--no-upload", "--",
                              "ps -eo user= | sort -u; ls /dev/shm; echo mine > /dev/shm/mine")
        assert done.returncode == 0, err
        assert out.split() == ["div-e2e"], out        # its own processes, and nothing else
        assert not Path("/dev/shm/victim-shm").exists() and not Path("/dev/shm/mine").exists()
    finally:
        pyxis_stack.div("stop", "shm-victim", cwd=project, org="other")


def test_an_image_that_would_reach_the_node_through_enroot_is_refused_there(pyxis_stack,
                                                                          project):
    """enroot makes an image's VOLUMEs bind mounts of the image's own
    folders, through the node's view of it (a link to /etc/slurm leads
    there), and its hooks write /etc/passwd the same way: image-pull
    refuses both kinds before any run starts one."""
    canary = _canary("passwd")
    tag = secrets.token_hex(4)
    push_image("attack/fstab", tag, {"data": "->/etc/slurm"}, {"Volumes": {"/data": {}}})
    push_image("attack/passwd", tag, {"etc/passwd": f"->{canary}", "etc/group": "root:x:0:\n"})
    for repository in ("attack/fstab", "attack/passwd"):
        done, out, err = _run(pyxis_stack, project, "--no-upload", "--image",
                              f"{REGISTRY}/{repository}:{tag}", "--", "ls /data")
        assert done.returncode == 125 and out == "", err
        assert re.search(r"divergent: could not pull \S+ on node\d: the image names mounts "
                         r"\(VOLUME\), or its /etc, /usr or /bin hold links out of it", err), err
    assert not canary.exists()


def test_a_container_that_does_not_start_never_runs_the_command_on_the_node(pyxis_stack,
                                                                           project):
    """enroot cannot start an image without /bin/sh: the step fails there
    (pyxis `required` in plugstack.conf), never runs the command with the
    node's own root."""
    canary, tag = _canary("nosh"), secrets.token_hex(4)
    push_image("attack/nosh", tag, {"etc/hostname": "nosh\n"})
    done, out, err = _run(pyxis_stack, project, "--no-upload", "--image",
                          f"{REGISTRY}/attack/nosh:{tag}", "--", f"touch {canary}")
    assert done.returncode != 0, err
    assert not canary.exists()


def test_the_image_users_sudo_rule_is_a_public_pull_and_a_login_is_what_the_server_wrote(
        pyxis_stack, project):
    """An org's user may run image-pull as div-images (sudo): never with a
    login file of its own making, whose password enroot would run."""
    assert _run(pyxis_stack, project, "--no-upload", "--", "true")[0].returncode == 0
    canary = _canary("netrc")
    forged = Path(tempfile.mkdtemp(prefix="div-forged-")) / "login"
    forged.write_text(f"machine 10.77.0.1 login dev password $(touch {canary})\n")
    forged.parent.chmod(0o755)
    forged.chmod(0o644)
    source = f"{REGISTRY}#div/python@sha256:{'0' * 64}"
    pull = "/usr/local/lib/divergent/image-pull"
    as_div_images = subprocess.run(
        ["runuser", "-u", "div-e2e", "--", "sudo", "-n", "-u", "div-images", pull, "--private",
         str(forged), source], capture_output=True, text=True)
    assert as_div_images.returncode != 0
    assert "div-images pulls public images alone" in as_div_images.stderr, as_div_images.stderr
    as_org = subprocess.run(["runuser", "-u", "div-e2e", "--", pull, "--private", str(forged),
                             source], capture_output=True, text=True)
    assert as_org.returncode != 0 and "not one the server wrote" in as_org.stderr, as_org.stderr
    assert not canary.exists()


def test_what_the_daemonized_server_writes_on_the_share_is_its_own_alone(stack, tmp_path):
    (tmp_path / "mine.txt").write_text("private\n")
    put = stack.div("storage", "put", "umask-vol", "mine.txt", cwd=tmp_path)
    assert put.returncode == 0, put.stderr
    for path in (stack.data_dir / "share/e2e/umask-vol", stack.data_dir / "share/e2e/umask-vol/mine.txt"):
        # The server's, and its org's group's by the ACL the org's folder
        # gives what is made in it: no other group, no one else.
        entries = subprocess.run(["getfacl", "-cpE", str(path)], capture_output=True, text=True,
                                 check=True).stdout.split()
        named = {entry.removeprefix("default:").rsplit(":", 1)[0] for entry in entries
                 if entry.removeprefix("default:").split(":")[1]}
        assert named == {f"user:{SERVICE_USER}", "group:div-e2e"}, (path, entries)
        assert {"group::---", "other::---"} <= set(entries), (path, entries)


def test_swifts_sample_account_is_not_there_only_the_stacks_own_keys(s3_server):
    sample = {**s3_server, "AWS_ACCESS_KEY_ID": "test:tester"}
    with pytest.raises(ClientError) as refused:
        s3_client(sample, secret="testing").list_buckets()
    assert refused.value.response["Error"]["Code"] in ("InvalidAccessKeyId", "AccessDenied",
                                                       "SignatureDoesNotMatch")
    assert s3_server["AWS_ACCESS_KEY_ID"] != "test:tester" and len(s3_server["AWS_SECRET_ACCESS_KEY"]) >= 24


def test_an_endpoint_that_answers_200_and_nothing_ends_the_transfer_in_one_line(tmp_path):
    import http.server
    import subprocess
    import sys

    class Empty(http.server.BaseHTTPRequestHandler):
        def _empty(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        do_GET = do_HEAD = do_PUT = do_POST = _empty

        def log_message(self, *args):
            pass

    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Empty)) as url:
        env = {"PATH": "/usr/bin:/bin", "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "k",
               "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1"}
        for target in ("s3://bucket/prefix", "s3://bucket/weights.bin"):
            done = subprocess.run([sys.executable, "s3/transfer.py", "import", target,
                                   str(tmp_path)], env=env, capture_output=True, text=True,
                                  timeout=60, cwd=ROOT)
            assert done.returncode == 1, done.stderr
            assert "Traceback" not in done.stderr and "KeyError" not in done.stderr, done.stderr
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_delete_or_an_upload_racing_a_runs_writes_is_never_a_500(stack, project):
    racing = stack.div("run", "--gpu", "cpu", "--no-upload", "--detach", "--name", "race-writer",
                       "--", "end=$((SECONDS+30)); while [ $SECONDS -lt $end ]; do "
                       "mkdir -p /mnt/race/d/e; touch /mnt/race/d/e/f$RANDOM /mnt/race/d/g$RANDOM; "
                       "rm -rf /mnt/race/x; touch /mnt/race/x; rm -f /mnt/race/x; mkdir -p /mnt/race/x; "
                       "done", cwd=project)
    assert racing.returncode == 0, racing.stderr
    stack.wait_for_status("race-writer", "running")
    body = b"raced\n"
    sha = hashlib.sha256(body).hexdigest()
    statuses = set()
    try:
        for i in range(150):
            statuses.add(stack.api("DELETE", "/volumes/race/files", params={"path": "d"}).status_code)
            put = stack.api("PUT", "/volumes/race/files", params={"path": f"x/f{i}"}, data=body,
                            headers={"X-Div-Sha256": sha})
            statuses.add(put.status_code)
    finally:
        stack.div("stop", "race-writer", cwd=project)
    assert statuses <= {200, 201, 400, 404, 409}, statuses


def test_a_place_a_run_made_unwritable_is_a_409_never_the_shares_fault(stack, project):
    """A run chmods a folder of its volume 000: a put or delete there is that
    place's state (409), not the share refusing the server (503: an admin's
    to fix)."""
    locked = stack.div("run", "--gpu", "cpu", "--no-upload", "--", "mkdir -p /mnt/locked/in "
                       "&& touch /mnt/locked/in/f && chmod 000 /mnt/locked/in", cwd=project)
    assert locked.returncode == 0, locked.stderr
    body = b"x"
    put = stack.api("PUT", "/volumes/locked/files", params={"path": "in/g"}, data=body,
                    headers={"X-Div-Sha256": hashlib.sha256(body).hexdigest()})
    deleted = stack.api("DELETE", "/volumes/locked/files", params={"path": "in/f"})
    assert (put.status_code, deleted.status_code) == (409, 409), (put.text, deleted.text)
    assert "a run may have changed it" in put.json()["error"]
    stack.div("run", "--gpu", "cpu", "--no-upload", "--", "chmod 755 /mnt/locked/in", cwd=project)


def test_the_server_may_act_as_org_users_with_slurms_commands_alone(slurm_cluster):
    """What a compromised server could do with its sudo rule: submit, cancel
    and update jobs as org users, and make org users; nothing as root, no
    shell, no other command, no other user, no environment of its own."""
    from divergent.app.services.accounts.unix_users import HELPER
    from divergent.slurm.transport import SUDO_REFUSALS
    for name in ("div-e2e", "div-other"):
        subprocess.run([HELPER, "make", name], check=True)

    def as_server(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["setpriv", f"--reuid={SERVICE_USER}", f"--regid={SERVICE_USER}",
                               "--init-groups", "--", "sudo", "-n", *argv],
                              capture_output=True, text=True, timeout=30)

    assert as_server("-u", "div-e2e", "--", "/usr/bin/sbatch", "--version").returncode == 0
    refused = [("-u", "root", "--", "/usr/bin/sbatch", "--version"),
               ("-u", "nobody", "--", "/usr/bin/sbatch", "--version"),
               ("-u", "div-e2e", "--", "/bin/bash", "-c", "id"),
               ("-u", "div-e2e", "--", "/usr/bin/scontrol", "show", "config"),
               ("-u", "div-e2e", "LD_PRELOAD=/tmp/x.so", "/usr/bin/sbatch", "--version"),
               ("-u", "div-e2e", "-E", "--", "/usr/bin/sbatch", "--version"),
               ("--", "/usr/bin/sbatch", "--version"),               # as root
               ("--", "/usr/sbin/useradd", "mallory")]
    for argv in refused:
        done = as_server(*argv)
        assert done.returncode == 1 and done.stderr.startswith(SUDO_REFUSALS), (argv, done)
    # Ordinary users root did not list, and one who administers the host.
    unlisted, admin = f"unlisted-{WORKER}", f"hostadmin-{WORKER}"
    for name, groups in ((unlisted, []), (admin, ["--groups", "sudo,div-members"])):
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", *groups,
                        name], capture_output=True)
    helper_refuses = [("make", "root"), ("make", "mallory"), ("make", "div-x;id"),
                      ("make", SERVICE_USER), ("member", "div-e2e", "root"),
                      ("member", "div-e2e", "div-other"), ("member", "div-e2e", "nobody"),
                      ("member", "div-e2e", SERVICE_USER), ("member", "div-e2e", unlisted),
                      ("member", "div-e2e", admin), ("member", "root", SERVICE_USER)]
    for args in helper_refuses:
        done = as_server(HELPER, *args)
        assert done.returncode == 2 and "divergent-org-user:" in done.stderr, (args, done)
    for name in ("root", SERVICE_USER, unlisted, admin):
        assert "div-e2e" not in subprocess.run(["id", "-nG", name], capture_output=True,
                                               text=True).stdout.split()


def test_only_the_server_reaches_an_interactive_run_and_only_with_its_token(stack, project):
    port = InteractiveSettings().port
    """Runs share nodes: a notebook's port is the server's alone to reach
    (the prolog's rules), and even from the server's host Jupyter answers
    nothing without the run's token, which only the server holds."""
    started = stack.div("notebook", "--gpu", "cpu", "--name", "nb-target", "-d", cwd=project,
                        org="other")
    assert started.returncode == 0, started.stderr
    try:
        stack.wait_for_status("nb-target", "running", org="other", timeout=60)
        job, node = _job_of(stack, "nb-target", "other")
        address = f"10.{80 + int(node.removeprefix('node'))}.{(int(job) >> 8) & 255}.{int(job) & 255}"
        theirs = {"Authorization": f"Bearer {stack.tokens['other']}"}
        url = f"{stack.url}/runs/nb-target/notebook/api/status"
        deadline = time.monotonic() + 120
        while requests.get(url, headers=theirs, timeout=30).status_code != 200:
            assert time.monotonic() < deadline, "the notebook never answered through the server"
            time.sleep(1)
        # The server's host reaches the port, but Jupyter wants the run's token.
        direct = requests.get(f"http://{address}:{port}/runs/nb-target/notebook/api/kernelspecs",
                              timeout=10, allow_redirects=False)
        assert direct.status_code == 403
        # Another org's key reaches nothing through the server.
        assert requests.get(url, headers={"Authorization": f"Bearer {stack.tokens['e2e']}"},
                            timeout=30).status_code == 404
        # A run of another org (Slurm fills the first nodes first: mostly the
        # notebook's own node) cannot connect to it at all.
        (project / "probe.py").write_text(NETWORK_PROBE)
        done, out, err = _run(stack, project, "--env",
                              f"TARGETS={json.dumps({'notebook': [address, port]})}", "--",
                              "hostname; python probe.py")
        assert done.returncode == 0, err
        assert json.loads(re.search(r"REACH (.*)", out).group(1))["notebook"] != "open"
    finally:
        stack.div("stop", "nb-target", cwd=project, org="other")


# A batch run that puts its own program on its interactive port in place of
# the terminal beside it: its 101 tries to set a cookie on the dashboard
# (a bare LF before the header), then it floods whoever connects.
FAKE_TERMINAL = """
import os, socket, subprocess, time
while True:     # the terminal beside it starts as it does: until the port is ours
    subprocess.run(["pkill", "-f", "environ.pop"])
    try:
        server = socket.create_server(("0.0.0.0", int(os.environ["PORT"])))
        break
    except OSError:
        time.sleep(0.2)
print("LISTENING", flush=True)
while True:
    conn, _ = server.accept()
    if os.fork() == 0:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\n"
                     b"Set-Cookie: session=planted; Path=/\\r\\nConnection: Upgrade\\r\\n\\r\\n")
        while True:
            conn.sendall(b"\\x82\\x7e\\xff\\xff" + b"x" * 65535)
"""


def _raw_terminal(stack, name: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", stack.port), timeout=30)
    sock.sendall((f"GET /runs/{name}/terminal HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  f"Authorization: Bearer {stack.tokens['e2e']}\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").encode())
    return sock


def test_a_run_on_its_own_port_sets_no_cookie_and_holds_no_thread_past_its_end(stack, project):
    (project / "fake.py").write_text(FAKE_TERMINAL)
    port = InteractiveSettings().port
    started = stack.div("run", "--gpu", "cpu", "-d", "--name", "fake-terminal", "--env",
                        f"PORT={port}", "fake.py", cwd=project)
    assert started.returncode == 0, started.stderr
    stack.wait_for_status("fake-terminal", "running", timeout=60)
    deadline = time.monotonic() + 60
    while "LISTENING" not in stack.div("logs", "fake-terminal", cwd=project).stdout.decode():
        assert time.monotonic() < deadline, "the run's own program never listened"
        time.sleep(0.5)
    head = _raw_terminal(stack, "fake-terminal")
    answer = head.recv(4096)
    assert answer.startswith(b"HTTP/1.1 101") and b"set-cookie" not in answer.lower(), answer
    head.close()
    # Clients that never read what the run floods them with: the run's end
    # lets their connections, threads and slots go.
    stalled = [_raw_terminal(stack, "fake-terminal") for _ in range(4)]
    time.sleep(2)
    assert stack.div("stop", "fake-terminal", cwd=project).returncode == 0
    peers = {f"127.0.0.1:{stack.port} 127.0.0.1:{sock.getsockname()[1]} " for sock in stalled}
    deadline = time.monotonic() + 30
    while True:
        # The server's ends closed (their FIN waits behind what was never
        # read): no process of the server's holds them any more.
        held = [line for line in subprocess.run(["ss", "-Htnp"], capture_output=True,
                                                text=True).stdout.splitlines()
                if any(peer in " ".join(line.split()) + " " for peer in peers)
                and "gunicorn" in line]
        if not held:
            break
        assert time.monotonic() < deadline, f"still held by the server: {held}"
        time.sleep(0.5)
    for sock in stalled:
        sock.close()
