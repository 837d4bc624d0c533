"""What interactive runs cost (docs/users/interactive.md), on the dev stack
(runtime pyxis, div/python:3.11 cached), the baselines measured in the same
run:
- `div shell` to its prompt against a trivial `div run`'s start (until the
  run's first line is on the terminal), medians of 5;
- a keystroke's echo through div shell (the client, the server's proxy, the
  run's terminal on its node and back), 200 of them, against the same in
  `srun --pty bash` on the same node (Slurm's own interactive step);
- JupyterLab's page in Chromium through the server's proxy against the same
  page straight from the run's address (with its token), medians of 5;
- what the terminal beside every batch run costs it: `div run -- true`
  with the site's interactive runs on against off (alternating), medians of 5.

Run by hand on a machine where `make up` ran:  .venv/bin/python bench/interactive.py
"""
from __future__ import annotations

import os
import pty
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DIV, ROOT, div, div_env, jobs_cancelled_after, record, summary  # noqa: E402

ROUNDS = 5
KEYS = 200
FLASK = [str(ROOT / "scripts" / "services"), "exec", str(ROOT / ".venv" / "bin" / "flask")]
PROMPT = re.compile(rb"[$#] $", re.M)


class Terminal:
    """A command on a PTY of its own, as a person's terminal runs it."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(cwd)
            os.execvpe(argv[0], argv, {**env, "TERM": "xterm-256color"})
        self.seen = b""

    def until(self, pattern: re.Pattern[bytes], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not pattern.search(self.seen):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError(f"{pattern.pattern!r} never came: {self.seen[-300:]!r}")
            self.seen += os.read(self.fd, 65536)

    def echo_seconds(self, key: bytes) -> float:
        """One keystroke to its echo on this terminal."""
        self.seen = b""
        started = time.perf_counter()
        os.write(self.fd, key)
        self.until(re.compile(re.escape(key)))
        return time.perf_counter() - started

    def close(self) -> None:
        os.write(self.fd, b"\x15exit\r")
        try:
            os.waitpid(self.pid, 0)
        finally:
            os.close(self.fd)


def seconds_until(argv: list[str], pattern: re.Pattern[bytes], cwd: Path) -> float:
    started = time.perf_counter()
    term = Terminal(argv, cwd, div_env())
    try:
        term.until(pattern)
        return time.perf_counter() - started
    finally:
        term.close()


def keystrokes(term: Terminal) -> list[float]:
    term.until(PROMPT)
    samples = [term.echo_seconds(bytes([ord("a") + n % 26])) for n in range(KEYS)]
    return samples


def notebook_loads(project: Path) -> tuple[float, float]:
    """JupyterLab in Chromium through the proxy, and straight from the run."""
    import json

    import requests
    from playwright.sync_api import sync_playwright

    env = div_env()
    run = json.loads(div("notebook", "--gpu", "cpu", "--no-upload", "-d", "--json",
                         "--name", f"bench-nb-{os.getpid()}", cwd=project).stdout)
    headers = {"Authorization": f"Bearer {env['DIV_TOKEN']}"}
    deadline = time.monotonic() + 120
    while requests.get(run["url"] + "api/status", headers=headers, timeout=30).status_code != 200:
        if time.monotonic() > deadline:
            raise TimeoutError("the notebook never answered")
        time.sleep(0.5)
    run = requests.get(f"{env['DIV_API_URL']}/api/v1/runs/{run['name']}", headers=headers,
                       timeout=30).json()["run"] | {"url": run["url"]}
    direct = direct_url(run)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--no-sandbox", "--disable-gpu"])
        proxied = load_times(browser, run["url"] + "lab", headers)
        straight = load_times(browser, direct, {})
        browser.close()
    div("stop", run["name"], cwd=project)
    return statistics.median(proxied), statistics.median(straight)


def direct_url(run: dict) -> str:
    """The same page at the run's own address, with its token (the server's host may)."""
    from divergent.app.services.site.interactive import InteractiveSettings
    node = run["nodes"] if "nodes" in run else subprocess.run(
        ["squeue", "-h", "-j", run["slurm_job_id"], "-o", "%N"], capture_output=True,
        text=True).stdout.strip()
    job = int(run["slurm_job_id"])
    address = f"10.{80 + int(node.removeprefix('node'))}.{(job >> 8) & 255}.{job & 255}"
    token = subprocess.run(["cat", f"/proc/{jupyter_pid(run['name'])}/environ"],
                           capture_output=True).stdout.split(b"\0")
    value = next(item.split(b"=", 1)[1].decode() for item in token
                 if item.startswith(b"JUPYTER_TOKEN="))
    return (f"http://{address}:{InteractiveSettings().port}/runs/{run['name']}/notebook/lab"
            f"?token={value}")


def jupyter_pid(name: str) -> int:
    listed = subprocess.run(["pgrep", "-f", f"base_url=/runs/{name}/notebook/"],
                            capture_output=True, text=True).stdout.split()
    return int(listed[-1])


def load_times(browser, url: str, headers: dict[str, str]) -> list[float]:
    samples = []
    for _ in range(ROUNDS):
        context = browser.new_context(extra_http_headers=headers)
        page = context.new_page()
        started = time.perf_counter()
        page.goto(url)
        page.wait_for_selector(".jp-Launcher", timeout=60_000)
        samples.append(time.perf_counter() - started)
        context.close()
    return samples


def site_subnets(subnets: str) -> None:
    subprocess.run([*FLASK, "site", "interactive", "--job-subnets", subnets], check=True,
                   capture_output=True)


def beside_cost(project: Path, flags: list[str]) -> tuple[float, float]:
    """`div run -- true` with shells beside batch runs, and without."""
    subnets = subprocess.run([*FLASK, "site", "interactive"], capture_output=True, text=True,
                             check=True).stdout.split("\n")[0].split(None, 2)[2]
    with_beside, without = [], []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        div("run", *flags, "--", "true", cwd=project)
        with_beside.append(time.perf_counter() - started)
        site_subnets("")
        try:
            started = time.perf_counter()
            div("run", *flags, "--", "true", cwd=project)
            without.append(time.perf_counter() - started)
        finally:
            site_subnets(subnets)
    return statistics.median(with_beside), statistics.median(without)


def main() -> None:
    env = div_env()
    image = f"{env['DIV_DEV_REGISTRY']}/div/python:3.11"
    flags = ["--gpu", "cpu", "--no-upload", "--image", image]
    with tempfile.TemporaryDirectory() as folder, jobs_cancelled_after("bash"):
        project = Path(folder)
        runs, shells = [], []
        for _ in range(ROUNDS):
            runs.append(seconds_until([DIV, "run", *flags, "--", "echo run-started"],
                                      re.compile(rb"run-started"), project))
            shells.append(seconds_until([DIV, "shell", *flags], PROMPT, project))
        run_start, shell_start = statistics.median(runs), statistics.median(shells)
        print(f"div run's first line {run_start:.2f} s, div shell's prompt {shell_start:.2f} s")

        term = Terminal([DIV, "shell", *flags], project, env)
        through_div = keystrokes(term)
        term.close()
        term = Terminal(["srun", "-A", "dev", "-p", "cpu", "-w", "node1", "--pty", "bash",
                         "--norc"], project, {**env, "PS1": "$ "})
        through_srun = keystrokes(term)
        term.close()
        print(f"keystroke echo: div shell {summary(through_div)}; srun --pty {summary(through_srun)}")

        proxied, straight = notebook_loads(project)
        print(f"JupyterLab's page: through the server {proxied:.2f} s, straight {straight:.2f} s")
        beside, alone = beside_cost(project, flags)
        print(f"div run -- true: with a terminal beside {beside:.2f} s, without {alone:.2f} s")

    def p95(samples: list[float]) -> float:
        return sorted(samples)[int(len(samples) * 0.95)]
    record("div shell to its prompt", f"{shell_start:.2f} s", "within 1 s of div run's start",
           f"{run_start:.2f} s (div run's first line)", f"+{shell_start - run_start:.2f} s")
    record("keystroke echo p95 (div shell)", f"{p95(through_div) * 1000:.1f} ms", "< 50 ms",
           f"{p95(through_srun) * 1000:.1f} ms (srun --pty)",
           f"{p95(through_div) / p95(through_srun):.1f}x")
    record("JupyterLab's page, through the proxy", f"{proxied:.2f} s", "",
           f"{straight:.2f} s (straight from the run)", f"{proxied / straight:.2f}x")
    record("div run -- true with a terminal beside it", f"{beside:.2f} s", "unchanged",
           f"{alone:.2f} s (without)", f"{beside - alone:+.2f} s")


if __name__ == "__main__":
    main()
