"""Log followers against the rest of the API: the latency of GET /whoami
and GET /runs (200 requests from 8 threads, each timing out after 5 s)
while N followers (--followers, 500, spread over --orgs orgs, 25) keep
`GET /runs/<name>/logs?follow=1` open, against the same with no followers
(the baseline, measured first in the same run); and how many followers
were held open, refused, or not answered at all. A refused follower (429
or 503: app/services/follow_slots.py) tries again after its Retry-After,
as `div` does, so the refused keep knocking while the latency is measured.

The server is the real one, started by scripts/services (gunicorn gthread,
DIV_WORKERS x DIV_THREADS) on a free port, on a fresh database (SQLite in
a temporary folder, or DATABASE_URL) and data folder. No reconciler and no
Slurm: the followed run is a row left running, its stdout empty.

  .venv/bin/python bench/followers.py [--followers 500]
"""
from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.app_setup import bench_app  # noqa: E402
from bench.common import ROOT, record  # noqa: E402
from divergent.app.extensions import db  # noqa: E402
from divergent.app.models import Org, Project, Run, User  # noqa: E402
from divergent.app.services.files.volumes import run_dir  # noqa: E402

REQUESTS = 200
CLIENTS = 8
TIMEOUT = 5.0
SETTLE_SECONDS = 15
RUN = "followed"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flask(env: dict[str, str], *args: str) -> str:
    """An admin command as the server runs it (the service user)."""
    return subprocess.run([str(ROOT / "scripts" / "services"), "exec",
                           str(ROOT / ".venv" / "bin" / "flask"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True).stdout


def live_run(org_name: str) -> None:
    """The run an org's followers follow: running as far as anyone can tell."""
    org = db.session.execute(db.select(Org).filter_by(name=org_name)).scalar_one()
    user = db.session.execute(db.select(User).filter_by(username=org_name)).scalar_one()
    project = Project(org_id=org.id, name="bench")
    db.session.add(project)
    db.session.flush()
    db.session.add(Run(org_id=org.id, project_id=project.id, user_id=user.id, name=RUN,
                       status="running", slurm_job_id="1", gpu_type="h100", gpus=1, cpus=1,
                       memory_gib=8, image="img", command="python train.py",
                       rate_micros_per_hour=4_800_000))
    db.session.commit()
    state = Path(run_dir(org, RUN))
    state.mkdir(parents=True)
    (state / "stdout").touch()


class Followers:
    """Threads that each open the log stream and read it until the server
    goes; `states` counts where each one is."""

    def __init__(self, port: int):
        self.port = port
        self.states = Counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def move(self, old: str | None, new: str) -> str:
        with self.lock:
            if old:
                self.states[old] -= 1
            self.states[new] += 1
        return new

    def follow(self, key: str) -> None:
        state = self.move(None, "waiting for an answer")
        while not self.stop.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", self.port)
            try:
                conn.request("GET", f"/api/v1/runs/{RUN}/logs?follow=1",
                             headers={"Authorization": f"Bearer {key}"})
                response = conn.getresponse()
                if response.status in (429, 503):   # no slot: again after Retry-After, as div
                    state = self.move(state, f"refused ({response.status}), trying again")
                    response.read()
                    self.stop.wait(int(response.getheader("Retry-After", "5")))
                    continue
                if response.status != 200:
                    self.move(state, f"HTTP {response.status}")
                    return
                state = self.move(state, "held open")
                while response.readline():
                    pass
                self.move(state, "closed by the server")
                return
            except OSError as exc:
                self.move(state, type(exc).__name__)
                return
            finally:
                conn.close()

    def start(self, keys: list[str], n: int) -> None:
        for i in range(n):
            threading.Thread(target=self.follow, args=(keys[i % len(keys)],), daemon=True).start()


def latencies(port: int, key: str) -> tuple[list[float], Counter]:
    """REQUESTS timed requests, GET /whoami and GET /runs in turn, and how
    they ended; a timeout counts as TIMEOUT seconds."""
    def one(i: int) -> tuple[float, str]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        t0 = time.perf_counter()
        try:
            conn.request("GET", "/api/v1/whoami" if i % 2 else "/api/v1/runs",
                         headers={"Authorization": f"Bearer {key}"})
            response = conn.getresponse()
            response.read()
            return time.perf_counter() - t0, "ok" if response.status == 200 else "errors"
        except TimeoutError:
            return TIMEOUT, "timeouts"
        except OSError:
            return time.perf_counter() - t0, "errors"
        finally:
            conn.close()

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(one, range(REQUESTS)))
    return [t for t, _ in results], Counter(outcome for _, outcome in results)


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def report(what: str, samples: list[float], outcomes: Counter) -> tuple[float, float]:
    p50, p95 = percentile(samples, 0.5), percentile(samples, 0.95)
    print(f"{what}: p50 {p50 * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  "
          f"max {max(samples) * 1000:7.1f} ms  timeouts {outcomes['timeouts']}/{len(samples)}  "
          f"errors {outcomes['errors']}")
    return p50, p95


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--followers", type=int, default=500)
    parser.add_argument("--orgs", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-followers-") as tmp:
        # The server runs as the service user (scripts/services): the folder is its.
        shutil.chown(tmp, os.environ.get("DIV_SERVICE_USER", "divergent"))
        app = bench_app(tmp)
        port = free_port()
        env = {**os.environ, "FLASK_APP": "wsgi.py", "PORT": str(port), "DIV_PID_DIR": tmp,
               "DATABASE_URL": app.config["SQLALCHEMY_DATABASE_URI"],
               "DIV_DATA_DIR": app.config["DIV_DATA_DIR"]}
        flask(env, "db", "upgrade")
        keys = []
        for n in range(args.orgs):
            flask(env, "create-org", f"bench{n}")
            flask(env, "create-user", f"bench{n}", f"bench{n}")
            keys.append(flask(env, "create-key", f"bench{n}").strip())
            with app.app_context():
                live_run(f"bench{n}")
        with app.app_context():
            db.engine.dispose()   # nothing of root's left open on the database
        key = keys[0]
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        try:
            subprocess.run([str(ROOT / "scripts" / "services"), "start", "server"], env=env,
                           check=True, stdout=subprocess.DEVNULL)
            latencies(port, key)   # warm-up, not measured: the workers' first requests
            base50, base95 = report("0 followers", *latencies(port, key))
            followers = Followers(port)
            followers.start(keys, args.followers)
            deadline = time.monotonic() + SETTLE_SECONDS
            while followers.states["waiting for an answer"] and time.monotonic() < deadline:
                time.sleep(0.5)
            samples, outcomes = latencies(port, key)
            p50, p95 = report(f"{args.followers} followers", samples, outcomes)
            floor = " (at least: a timeout counts as 5 s)" if outcomes["timeouts"] else ""
            print(f"with followers / baseline: p50 {p50 / base50:.0f}x, "
                  f"p95 {p95 / base95:.0f}x{floor}")
            held = followers.states["held open"]
            record(f"API answer (p95) while {args.followers} followers hold the server "
                   f"({held} held open)", f"{p95 * 1000:.1f} ms", "< 100 ms",
                   f"no followers {base95 * 1000:.1f} ms", f"{p95 / base95:.1f}x")
            print("followers: " + ", ".join(f"{count} {state}" for state, count
                                            in sorted(followers.states.items()) if count))
            followers.stop.set()
        finally:
            # The master and its workers killed at once: a graceful stop
            # would wait for the followers.
            pid_file = Path(tmp, "server.pid")
            if pid_file.exists():
                os.killpg(os.getpgid(int(pid_file.read_text())), signal.SIGKILL)


if __name__ == "__main__":
    main()
