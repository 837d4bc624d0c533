"""What runs use, on the dev cluster: a run that keeps one of its two cores
busy and holds a GiB, measured live by its sampler and at its end by
Slurm's accounting, charted on the Telemetry tab in Chromium, its last line
saying it asked for far more memory than it used, and never shown to
another org; and the site's idle policy warning a run's owner and then
stopping the run (CPU utilisation standing in for the fake GPUs'), leaving
alone one that may idle."""
from __future__ import annotations

import json
import subprocess
import time

from playwright.sync_api import expect

from tests.receivers import receivers, wait_for
from tests.stack import VENV_BIN

GIB = 1 << 30
PASSWORD = "usage-test-password"
BUSY = """import os, time
block = bytearray(1 << 30)
for i in range(0, len(block), 4096):    # a GiB it really holds
    block[i] = 1
print("holding a GiB", flush=True)
end = time.time() + 70
while time.time() < end:                # one core of its two, busy
    pass
times = os.times()                      # what it used, by its own count
print(f"cpu {times.user + times.system:.1f}")
"""


def test_a_busy_core_of_two_and_a_gib_are_measured_charted_and_kept_to_the_org(
        stack, project, browser):
    stack.flask("site", "usage", "--interval", "2")
    (project / "busy.py").write_text(BUSY)
    div = subprocess.Popen(
        [str(VENV_BIN / "div"), "run", "--gpu", "cpu", "--cpu", "2", "--memory", "16",
         "--name", "busy-core", "--", "python3 busy.py"],
        cwd=project, env=stack.div_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # Live: the sampler's figures, a few seconds behind.
        wait_for(lambda: (_usage(stack, "busy-core").get("max_memory_bytes") or 0) >= GIB,
                 timeout=90)
        live = stack.run_json("busy-core")["usage"]
        assert live["source"] == "sampler" and live["memory_requested_bytes"] == 16 * GIB
        assert live["gpu_utilization"] is None and live["gpu_note"] is None   # a cpu run

        # Another org sees neither the run nor its usage.
        assert stack.api("GET", "/runs/busy-core", org="other").status_code == 404
        other = stack.dashboard_session(*_browser_user(stack, "usage-other", "other"))
        assert other.get(f"{stack.url}/runs/busy-core/telemetry.json").status_code == 404

        stack.flask("set-password", "e2e-user", "--password", PASSWORD)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{stack.url}/login?next=/runs/busy-core/telemetry")
        page.fill("input[name=username]", "e2e-user")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        expect(page.locator("#system")).to_have_text("System")
        expect(page.locator("figure.system figcaption")).to_have_text(
            ["CPU cores in use", "Memory (GiB)"])
        expect(page.locator("figure.system canvas").first).to_be_visible(timeout=10_000)
        cores = page.evaluate("JSON.parse(document.getElementById('chart-data').textContent)"
                              ".find(c => c.title === 'CPU cores in use').data[1]")
        # One core, busy (as much of one as this machine gives it).
        assert max(v for v in cores if v is not None) > 0.4
        page.close()

        out, err = div.communicate(timeout=180)
    finally:
        div.kill()
        stack.flask("site", "usage", "--interval", "10")
    last = err.decode().strip().splitlines()[-1]
    assert div.returncode == 0, err.decode()
    # The last line adds one hint: 16 GiB asked, about 1 GiB used.
    assert last.startswith("busy-core finished in ") and " · peak memory 1." in last
    assert last.endswith(" GiB of 16 GiB"), last
    run = stack.run_json("busy-core")
    usage = run["usage"]
    assert usage["source"] == "slurm"
    # Near a half of its two cores: what the program counted of its own CPU
    # time over the run's two cores' time (a busy test machine may give a
    # busy loop less than a whole core, and this says how much it got).
    own = float(out.decode().split("cpu ")[1]) / (2 * run["duration"])
    assert 0.2 < usage["cpu_efficiency"] <= 0.6 and abs(usage["cpu_efficiency"] - own) < 0.08, \
        (usage, own)
    assert GIB <= usage["max_memory_bytes"] < 2 * GIB, usage


def _usage(stack, name: str) -> dict:
    """The run's usage; nothing while the run is not made yet (its code uploads)."""
    answer = stack.api("GET", f"/runs/{name}")
    return answer.json()["run"]["usage"] if answer.status_code == 200 else {}


def _browser_user(stack, username: str, org: str) -> tuple[str, str]:
    if username not in stack.flask("users").stdout:
        stack.flask("create-user", org, username)
    stack.flask("set-password", username, "--password", PASSWORD)
    return username, PASSWORD


def test_the_idle_policy_warns_then_stops_an_idle_run_but_not_one_that_may_idle(stack, project):
    stack.flask("site", "usage", "--interval", "1", "--idle-warn", "0.1", "--idle-stop", "0.1",
                "--idle-below", "0.2", "--idle-measure", "cpu")
    try:
        with receivers(int(stack.settings["DIV_SMTP_PORT"])) as (webhook, _):
            made = stack.div("notify", "add", "--webhook", webhook.url, cwd=project)
            assert made.returncode == 0, made.stderr
            allowed = stack.div("run", "--gpu", "cpu", "--no-upload", "--allow-idle", "-d",
                                "--name", "may-idle", "--", "sleep 300", cwd=project)
            assert allowed.returncode == 0, allowed.stderr
            started = time.monotonic()
            idle = stack.div("run", "--gpu", "cpu", "--no-upload", "--name", "sits-idle",
                             "--", "sleep 300", cwd=project)
            took = time.monotonic() - started
            last = idle.stderr.decode().strip().splitlines()[-1]
            # Stopped, canceled (exit 1, as any stop without a code of its own), saying why.
            assert idle.returncode == 1, idle.stderr.decode()
            assert last.startswith("sits-idle was stopped after "), last
            assert "its CPUs stayed under 20% utilization for " in last
            assert took < 120
            wait_for(lambda: any(m["event"] == "idle" and m["run"] == "sits-idle"
                                 for m in webhook.received), timeout=30)
            warning = next(m for m in webhook.received if m["event"] == "idle")
            assert "will be stopped" in warning["text"]
            assert stack.run_json("sits-idle")["status"] == "canceled"
            # The one that may idle idled as long and runs on.
            assert stack.run_json("may-idle")["status"] == "running"
            assert stack.run_json("may-idle")["allow_idle"] is True
            assert stack.div("stop", "may-idle", cwd=project).returncode == 0
            for row in json.loads(stack.div("notify", "ls", "--json", cwd=project).stdout):
                stack.div("notify", "rm", str(row["id"]), cwd=project)
    finally:
        stack.flask("site", "usage", "--idle-off", "--interval", "10")
