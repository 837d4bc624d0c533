"""The dashboard in real headless Chromium (Debian's), against the real
server, reconciler and cluster: sign in, start a run through the CLI, watch
its log grow and page it back, see its Telemetry chart, press Stop and see
it canceled; as a site admin, the Cluster, Orgs and Schedules pages.
Screenshots of each page go to DIV_SCREENSHOTS (artifacts/screenshots)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.stack import ROOT

SHOTS = Path(os.environ.get("DIV_SCREENSHOTS", ROOT / "artifacts" / "screenshots"))
PASSWORD = "browser-test-password"


def test_watch_a_run_live_chart_it_and_stop_it(stack, project, browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    stack.flask("set-password", "e2e-user", "--password", PASSWORD)
    (project / "train.py").write_text(
        "import json, os, time\n"
        "for n in range(1500):\n"           # 75 KB first: more than the page's tail
        "    print(f'warmup {n:05d} ' + 'x' * 36)\n"
        "for step in range(600):\n"
        "    print(f'tick {step}', flush=True)\n"
        "    with open(os.environ['DIV_METRICS'], 'a') as f:\n"
        "        f.write(json.dumps({'step': step, 'loss': 1 / (step + 1)}) + '\\n')\n"
        "    time.sleep(0.5)\n")
    started = stack.div("run", "--gpu", "l40s", "-d", "--name", "watched-in-chromium",
                        "--env", "LR=3e-4", "train.py", cwd=project)
    assert started.returncode == 0, started.stderr

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{stack.url}/login")
    page.screenshot(path=SHOTS / "login.png")
    page.fill("input[name=username]", "e2e-user")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")
    page.screenshot(path=SHOTS / "runs.png", full_page=True)

    page.click("text=watched-in-chromium")
    expect(page.locator("#log")).to_contain_text("tick 2", timeout=30_000)
    expect(page.locator("#log")).to_contain_text("tick 8", timeout=30_000)   # it grows
    expect(page.locator("#run-header")).to_contain_text("running")
    page.screenshot(path=SHOTS / "run.png", full_page=True)
    page.reload()                                # now the page loads the log's tail
    expect(page.locator("#log")).not_to_contain_text("warmup 00000")
    below_view = "(() => { const l = document.getElementById('log');" \
                 " return l.scrollHeight - l.scrollTop - l.clientHeight; })()"
    assert page.evaluate(below_view) < 8                    # the box shows the end
    page.click("#log-earlier")                   # the log pages backwards
    expect(page.locator("#log")).to_contain_text("warmup 00000")
    expect(page.locator("#log-earlier")).to_have_count(0)
    # The reader stays on the lines they were reading, below what came in above.
    assert page.evaluate("document.getElementById('log').scrollTop") > 10_000

    page.click("text=Telemetry")
    expect(page.locator("figure.chart:not(.system) figcaption")).to_have_text("loss")
    expect(page.locator("figure.chart canvas").first).to_be_visible(timeout=10_000)
    points = page.evaluate("JSON.parse(document.getElementById('chart-data').textContent)[0].data[0].length")
    assert points >= 8
    page.screenshot(path=SHOTS / "telemetry.png", full_page=True)

    page.click("text=Overview")
    page.click("text=Stop…")
    expect(page.locator("h1")).to_have_text("Stop watched-in-chromium?")
    page.screenshot(path=SHOTS / "stop.png")
    page.click("button.danger")
    expect(page.locator("#run-header")).to_contain_text("canceled", timeout=30_000)
    page.screenshot(path=SHOTS / "canceled.png", full_page=True)
    assert stack.run_json("watched-in-chromium")["status"] == "canceled"

    page.goto(f"{stack.url}/spend")
    expect(page.locator("#by-day-chart canvas")).to_be_visible()
    page.screenshot(path=SHOTS / "spend.png", full_page=True)
    page.goto(f"{stack.url}/volumes")
    page.screenshot(path=SHOTS / "volumes.png", full_page=True)
    assert page.goto(f"{stack.url}/cluster").status == 403
    page.close()


def test_a_site_admin_sees_the_cluster(stack, project, browser):
    stack.flask("create-user", "e2e", "site-boss", "--role", "site_admin")
    stack.flask("set-password", "site-boss", "--password", PASSWORD)
    (project / "hold.py").write_text("import time\ntime.sleep(120)\n")
    started = stack.div("run", "--gpu", "h200", "--gpus", "2", "-d", "--name", "holds-two-h200",
                        "hold.py", cwd=project)
    assert started.returncode == 0, started.stderr
    stack.wait_for_status("holds-two-h200", "running")

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{stack.url}/login?next=/cluster")
    page.fill("input[name=username]", "site-boss")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Cluster")
    row = page.locator("table.gpus tr", has_text="H200")
    assert int(row.locator("td").nth(1).inner_text()) >= 2      # in use, from sinfo
    expect(page.locator("table.nodes")).to_contain_text("node1")
    expect(page.locator("table.prices")).to_contain_text("$5.45")
    page.screenshot(path=SHOTS / "cluster.png", full_page=True)
    page.click("nav >> text=Orgs")
    expect(page.locator("table.orgs")).to_contain_text("other")
    page.screenshot(path=SHOTS / "orgs.png", full_page=True)
    made = stack.div("schedule", "create", "--cron", "0 3 * * mon", "--name", "weekly-eval",
                     "--", "--gpu", "cpu", "hold.py", cwd=project)
    assert made.returncode == 0, made.stderr
    page.click("nav >> text=Schedules")
    expect(page.locator("table.schedules")).to_contain_text("weekly-eval")
    expect(page.locator("table.schedules")).to_contain_text("python -u hold.py")
    page.screenshot(path=SHOTS / "schedules.png", full_page=True)
    page.close()
    assert stack.div("schedule", "rm", "weekly-eval", cwd=project).returncode == 0
    stack.div("stop", "holds-two-h200", cwd=project)


PAGES = ("/", "/runs/{run}", "/runs/{run}/telemetry", "/volumes", "/spend", "/schedules",
         "/sweeps", "/settings", "/cluster", "/admin")


@pytest.mark.parametrize("width", [1400, 390])
def test_every_page_fits_the_screen_and_shows_local_times(stack, project, browser, width):
    """A desktop and a phone: no page is wider than the screen, the nav is a
    few lines at most, times are the reader's (Europe/Berlin here), and
    nothing the pages ask for is missing (the favicon included)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    if "layout-admin" not in stack.flask("users").stdout:
        stack.flask("create-user", "e2e", "layout-admin", "--role", "site_admin")
    stack.flask("set-password", "layout-admin", "--password", PASSWORD)
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--name", f"layout-{width}",
                     "--", "echo one; echo two >&2", cwd=project)
    assert done.returncode == 0, done.stderr
    started_utc = stack.run_json(f"layout-{width}")["started_at"]

    context = browser.new_context(viewport={"width": width, "height": 860},
                                  timezone_id="Europe/Berlin")
    page = context.new_page()
    missing = []
    page.on("response", lambda r: r.status == 404 and missing.append(r.url))
    page.goto(f"{stack.url}/login")
    page.fill("input[name=username]", "layout-admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")
    for path in PAGES:
        page.goto(stack.url + path.format(run=f"layout-{width}"))
        page.wait_for_load_state("networkidle")
        name = path.strip("/").replace("/", "-").replace("{run}", "one") or "runs"
        page.screenshot(path=SHOTS / f"{name}-{width}.png", full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= width, path
        assert page.locator("header.top").bounding_box()["height"] < 130, path
    assert missing == []

    # The runs list uses the screen: no sideways swipe to reach the cost,
    # no status clipped, and at 1400 px most of the width, Hardware unwrapped.
    page.goto(stack.url + "/")
    table = page.locator("#runs-table")
    assert page.evaluate("(() => { const t = document.getElementById('runs-table');"
                         " return t.scrollWidth <= t.clientWidth; })()")
    first_cost = page.locator("table.runs tbody tr").first.locator("td.num")
    assert first_cost.bounding_box()["x"] + first_cost.bounding_box()["width"] <= width
    assert page.evaluate("[...document.querySelectorAll('table.runs .status')].every("
                         "s => s.scrollWidth <= s.clientWidth + 1)")
    if width == 1400:
        assert table.bounding_box()["width"] > 1200
        hw = page.locator("table.runs td.hw").first
        assert hw.evaluate("td => td.getClientRects().length === 1 && "
                           "td.clientHeight < 2 * parseFloat(getComputedStyle(td).lineHeight)")

    # The run's page: its start in Berlin time (UTC+1 in December), exact on hover.
    page.goto(f"{stack.url}/runs/layout-{width}")
    started = page.locator("dt:text-is('Started') + dd time")
    hour = int(started_utc[11:13])
    expect(started).to_have_text(re.compile(rf" {(hour + 1) % 24:02d}:{started_utc[14:16]}$"))
    assert "Europe/Berlin" in started.get_attribute("title")
    assert started.get_attribute("datetime") == started_utc.split(".")[0].removesuffix("Z") + "Z"
    context.close()


def test_small_metrics_get_their_digits_a_run_reruns_and_its_command_copies(stack, project,
                                                                             browser):
    """A learning rate of 3e-4 and below is drawn between ticks that say so
    (uPlot's own said "0.001, 0, 0, 0"); Rerun makes a new run of the same;
    the CLI command is there to copy."""
    stack.flask("set-password", "e2e-user", "--password", PASSWORD)
    (project / "lr.py").write_text(
        "import json, os\n"
        "with open(os.environ['DIV_METRICS'], 'a') as f:\n"
        "    for step in range(20):\n"
        "        f.write(json.dumps({'step': step, 'lr': 3e-4 * (1 - step / 40)}) + '\\n')\n")
    done = stack.div("run", "--gpu", "cpu", "--name", "small-lr", "lr.py", cwd=project)
    assert done.returncode == 0, done.stderr

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.goto(f"{stack.url}/login?next=/runs/small-lr/telemetry")
    page.fill("input[name=username]", "e2e-user")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    figure = page.locator("figure.chart").first
    expect(figure).to_have_attribute("aria-label", re.compile(r"^lr; y axis: "))
    ticks = figure.get_attribute("aria-label").split("y axis: ")[1].split(", ")
    values = [float(t) for t in ticks if t]
    assert len(values) >= 3 and len(set(ticks)) == len(ticks), ticks
    assert all(1e-4 < v < 4e-4 for v in values), ticks

    page.goto(f"{stack.url}/runs/small-lr")
    expect(page.locator("table.metrics")).to_contain_text("lr")
    page.click("button.copy")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("div run --gpu cpu ") and copied.endswith("-- 'python -u lr.py'")
    page.click("text=Rerun")
    expect(page.locator(".flash")).to_contain_text("runs what small-lr ran")
    again = page.locator("h1").inner_text().split()[0]
    assert again != "small-lr"
    assert stack.wait_for_status(again, "succeeded", timeout=60)["command"] == "python -u lr.py"
    context.close()
