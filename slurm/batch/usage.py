"""What a run uses on this node, beside it, every few seconds: a line of
JSON appended to the state folder's usage.<node>.jsonl (which the run's
sandbox never sees). Standard library only; started by node.sh outside the
sandbox, as the job's user, in the job's cgroups, with nothing of the run's
on its command line. Every line carries running totals since this attempt
began, so the server needs only a node's last line for the run's figures:
    {"time", "start", "attempt", "cpu_s", "memory", "memory_peak",
     "gpus": [[utilization %, memory bytes, watts], ...],
     "gpu_busy_s", "gpu_s", "gpu_memory_peak"}
CPU and memory come from the job's cgroup (v1 or v2): all its steps, the
run's processes and nothing else. GPU figures come from nvidia-smi for the
job's own GPUs alone (job_gpus()); without it they are null, never invented.
argv: the file, the interval in seconds, the pid whose end ends the sampler."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

CGROUP_ROOT = "/sys/fs/cgroup"
# Past this the file grows four times slower: a run that lasts a month
# stays a few MiB (the server reads a bounded amount of it anyway).
SLOWER_PAST = 4 * 1024 * 1024
NVIDIA_SMI_QUERY = "index,utilization.gpu,memory.used,power.draw"
NVIDIA_SMI_SECONDS = 5
MIB = 1024 * 1024
JOB_CGROUP = re.compile(r"^(.*?/job_\d+)(/|$)")


def job_cgroups(lines: Iterable[str]) -> dict[str, str]:
    """{controller: the job's folder} from /proc/self/cgroup's lines: the
    job level (job_N), above the step this sampler runs in, so that every
    step of the job (pyxis runs the command in another) is counted."""
    found: dict[str, str] = {}
    for line in lines:
        _, controllers, path = line.rstrip("\n").split(":", 2)
        match = JOB_CGROUP.match(path)
        if match is None:
            continue
        job = match.group(1)
        if not controllers:     # v2's one hierarchy (or v1's hybrid "unified")
            unified = os.path.join(CGROUP_ROOT, "unified")
            found["unified"] = (unified if os.path.isdir(unified) else CGROUP_ROOT) + job
            continue
        # Co-mounted controllers sit under their joined name ("cpu,cpuacct")
        # or each its own, as the node mounts them.
        for controller in controllers.split(","):
            joined = os.path.join(CGROUP_ROOT, controllers)
            root = joined if os.path.isdir(joined) else os.path.join(CGROUP_ROOT, controller)
            found[controller] = root + job
    return found


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _stat(text: str | None) -> dict[str, int]:
    pairs = (line.split() for line in (text or "").splitlines())
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}


def cpu_seconds(groups: dict[str, str]) -> float | None:
    """The job's CPU time so far: cgroup v2's cpu.stat, v1's cpuacct."""
    if "unified" in groups:
        usec = _stat(_read(os.path.join(groups["unified"], "cpu.stat"))).get("usage_usec")
        if usec is not None:
            return usec / 1e6
    if "cpuacct" in groups:
        text = _read(os.path.join(groups["cpuacct"], "cpuacct.usage"))
        if text and text.strip().isdigit():
            return int(text) / 1e9
    return None


def memory_bytes(groups: dict[str, str]) -> int | None:
    """What the run's processes hold: anonymous memory and tmpfs (its /tmp),
    not the page cache of files it read, which the kernel takes back."""
    if "unified" in groups:
        stat = _stat(_read(os.path.join(groups["unified"], "memory.stat")))
        if "anon" in stat:
            return stat["anon"] + stat.get("shmem", 0)
    if "memory" in groups:
        stat = _stat(_read(os.path.join(groups["memory"], "memory.stat")))
        if "total_rss" in stat:
            return stat["total_rss"] + stat.get("total_shmem", 0)
    return None


def parse_nvidia_smi(text: str) -> list[list[Any]]:
    """[[utilization %, memory bytes, watts], ...] from
    `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,power.draw
    --format=csv,noheader,nounits`; a value NVML does not give
    ("[N/A]", "[Not Supported]") is None."""
    gpus: list[list[Any]] = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4 or not fields[0].isdigit():
            continue
        util, memory, power = (_number(f) for f in fields[1:])
        gpus.append([util, None if memory is None else int(memory * MIB), power])
    return gpus


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and value >= 0 else None


# An nvidia-smi that did not end when killed (a GPU hanging it in the
# kernel): no other is started while it lasts.
_stuck: list[subprocess.Popen[str]] = []


def gpu_sample(devices: str) -> list[list[Any]] | None:
    """The job's GPUs now, or None where there is no GPU telemetry. A GPU
    that hangs nvidia-smi in the kernel never holds the sampler: it is
    killed after NVIDIA_SMI_SECONDS and never waited for."""
    if not devices or shutil.which("nvidia-smi") is None:
        return None
    if _stuck and _stuck[0].poll() is None:
        return None
    _stuck.clear()
    try:
        proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}",
                                 "--format=csv,noheader,nounits", "-i", devices],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return None
    try:
        out, _ = proc.communicate(timeout=NVIDIA_SMI_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        _stuck.append(proc)
        return None
    return (parse_nvidia_smi(out) or None) if proc.returncode == 0 else None


class Totals:
    def __init__(self, attempt: int, groups: dict[str, str], devices: str) -> None:
        self.groups, self.devices = groups, devices
        # Times are the start's clock plus the monotonic clock since: a node
        # clock stepped while the run runs never stretches or shrinks them.
        self.start = time.time()
        self.started = self.last = time.monotonic()
        self.attempt = attempt
        self.cpu_at_start = cpu_seconds(groups)
        self.memory_peak = 0
        self.gpu_busy_s = self.gpu_s = 0.0
        self.gpu_memory_peak = 0
        self.gpus: list[list[Any]] | None = None     # as last seen

    def sample(self, gpus_too: bool = True) -> dict[str, Any]:
        """Now's line; without `gpus_too`, the GPUs as last seen (the last
        line, written as the run ends, never waits on nvidia-smi)."""
        now = time.monotonic()
        cpu = cpu_seconds(self.groups)
        memory = memory_bytes(self.groups)
        if memory is not None:
            self.memory_peak = max(self.memory_peak, memory)
        # A failed call (or the last line) adds nothing to the totals and
        # never loses them: they are written once GPUs were ever seen.
        gpus = gpu_sample(self.devices) if gpus_too else None
        if gpus is not None:
            self.gpus = gpus
        for util, used, _ in gpus or []:
            if util is not None:
                self.gpu_busy_s += min(util, 100.0) / 100 * (now - self.last)
                self.gpu_s += now - self.last
            self.gpu_memory_peak = max(self.gpu_memory_peak, used or 0)
        self.last = now
        return {"time": round(self.start + now - self.started, 3),
                "start": round(self.start, 3), "attempt": self.attempt,
                "cpu_s": None if cpu is None or self.cpu_at_start is None
                else round(cpu - self.cpu_at_start, 3),
                "memory": memory, "memory_peak": self.memory_peak if memory is not None else None,
                "gpus": gpus,     # this sample's (the charts'); the totals go on
                "gpu_busy_s": round(self.gpu_busy_s, 3) if self.gpus else None,
                "gpu_s": round(self.gpu_s, 3) if self.gpus else None,
                "gpu_memory_peak": self.gpu_memory_peak if self.gpus else None}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def job_gpus(env: dict[str, str]) -> str:
    """The job's GPUs as nvidia-smi -i takes them: Slurm's global ids
    (SLURM_STEP_GPUS, SLURM_JOB_GPUS: never relative to a device cgroup,
    in the order of NVML's own indices where gres.conf comes from NVML),
    else CUDA_VISIBLE_DEVICES; none when none of them is a list of ids."""
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = env.get(name, "")
        if re.fullmatch(r"\d+(,\d+)*", value):
            return value
    return ""


class Ending(Exception):
    """The node function's TERM: the run has ended."""


def _ending(*_: object) -> None:
    raise Ending


def main(path: str, interval: float, watched: int) -> None:
    with open("/proc/self/cgroup") as f:
        groups = job_cgroups(f)
    totals = Totals(int(os.environ.get("DIV_RESTART_COUNT", "0") or 0), groups,
                    job_gpus(dict(os.environ)))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o640)

    def write(line: dict[str, Any]) -> None:
        # A full or failing share loses this line, never the sampler (its
        # totals carry on in the next; a part written is a line the server skips).
        try:
            os.write(fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())
        except OSError:
            pass
    # The node function ends the sampler as the run ends (TERM): one last
    # line at once, without nvidia-smi, so that the run's end waits on nothing.
    signal.signal(signal.SIGTERM, _ending)
    try:
        pause = interval
        while _alive(watched):
            write(totals.sample())
            if os.fstat(fd).st_size > SLOWER_PAST:
                pause = interval * 4
            deadline = time.monotonic() + pause
            while time.monotonic() < deadline and _alive(watched):
                time.sleep(min(1.0, pause))
        write(totals.sample(gpus_too=False))
    except Ending:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        write(totals.sample(gpus_too=False))


if __name__ == "__main__":
    main(sys.argv[1], max(1.0, float(sys.argv[2])), int(sys.argv[3]))
