"""Typed rows from squeue and sacct (`--parsable2 --noheader`, times as epoch
seconds through SLURM_TIME_FORMAT=%s) and nodes from sinfo, and the pure
decisions on them: which of the two answers is the truth for a job, what a
Slurm state means to a run, whether a node can take jobs. No I/O here."""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

# %b: the GRES a node asks for, %D: how many nodes (the job's GPUs are both).
SQUEUE_FORMAT = "%i|%T|%r|%S|%N|%j|%b|%D"
# JobID, not JobIDRaw: a sweep's member is "87_3" (its raw id is another).
SACCT_FIELDS = ("JobID,State,ExitCode,Start,End,ElapsedRaw,NodeList,Reason,JobName,ReqTRES,"
                "TotalCPU,TRESUsageInMax")

LIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
               "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT"}
# How an attempt ends when Slurm requeues the job (--requeue): its newest
# sacct line says so until the next attempt's line comes.
MAY_RESTART = {"NODE_FAIL", "PREEMPTED"}
# Past this, such an end squeue does not list is final (MinJobAge is 300 s).
RESTART_GRACE = 600


# What a job used, from accounting (the last two of SACCT_FIELDS): its CPU
# time (the job's line sums its steps'), and each step's peak memory and GPU
# figures (TRESUsageInMax: mem=, and gres/gpumem= and gres/gpuutil= where
# the site gathers them).
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_TRES_AMOUNT = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)$")


@dataclass(slots=True)
class JobUsage:
    cpu_seconds: float | None = None
    max_memory_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    gpu_utilization: float | None = None     # the highest a step saw, 0..1


# No figure of sacct's is read past this (a century of CPU seconds, an
# exabyte): anything larger is garbage, not a measurement.
MOST = 1e18
_CPU_TIME = re.compile(r"^(?:(\d{1,6})-)?(?:(\d{1,6}):)?(\d{1,6}):(\d{1,6}(?:\.\d{1,6})?)$")


def cpu_time(text: str) -> float | None:
    """sacct's TotalCPU: [D-][HH:]MM:SS[.mmm]; None for anything else."""
    match = _CPU_TIME.match(text)
    if match is None:
        return None
    days, hours, minutes, seconds = (float(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _tres_amounts(text: str) -> dict[str, float]:
    amounts = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        match = _TRES_AMOUNT.match(value)
        if match and len(match.group(1)) <= 24:
            amount = float(match.group(1)) * _UNITS[match.group(2)]
            if amount <= MOST:
                amounts[name] = amount
    return amounts


def _job_usage(total_cpu: str, steps: list[str]) -> JobUsage:
    """The job's TotalCPU, and the highest of its steps' TRESUsageInMax."""
    peaks: dict[str, float] = {}
    for tres in steps:
        for name, value in _tres_amounts(tres).items():
            peaks[name] = max(value, peaks.get(name, value))
    memory, gpu_memory, gpu_util = (peaks.get(n) for n in ("mem", "gres/gpumem", "gres/gpuutil"))
    return JobUsage(cpu_seconds=cpu_time(total_cpu) if total_cpu else None,
                    max_memory_bytes=None if memory is None else int(memory),
                    gpu_memory_bytes=None if gpu_memory is None else int(gpu_memory),
                    gpu_utilization=None if gpu_util is None else gpu_util / 100)


# slots and no frozen __setattr__ detour: 10,000 rows parse in about half the time.
@dataclass(slots=True)
class JobRecord:
    job_id: str
    state: str                 # Slurm's base state: RUNNING, COMPLETED, CANCELLED, ...
    reason: str = ""           # why it waits, while PENDING
    exit_code: int | None = None
    signal: int | None = None
    start: int | None = None   # epoch seconds
    end: int | None = None
    elapsed_seconds: int | None = None   # every attempt's, when Slurm requeued it
    nodes: str = ""
    name: str = ""             # the job's name (div-<run>)
    restarts: int = 0          # attempts before this one (a node failed, ...)
    earlier_seconds: int = 0   # their elapsed seconds
    gpus: dict[str, int] = field(default_factory=dict)   # the job's, by GRES type
    usage: JobUsage | None = None   # what it used, from sacct (its newest attempt's)

    @property
    def finished(self) -> bool:
        """Ended, with its final record: its end; or, for a sweep's member
        ("87_3") canceled before it got a node, squeue's CANCELLED, since
        accounting keeps no record of its own for it (only the array's)."""
        if self.state in LIVE_STATES:
            return False
        return self.end is not None or (
            "_" in self.job_id and self.state == "CANCELLED" and not self.nodes)


def _epoch(text: str) -> int | None:
    # sacct and squeue print Unknown, None or 0 for times not yet known.
    return int(text) if text.isdigit() and text != "0" else None


def plain_reason(text: str) -> str:
    return "" if text in ("None", "(null)") else text


_GRES_KIND = re.compile(r"(^|,)gres[:/]")


def parse_squeue(output: str) -> dict[str, JobRecord]:
    records = {}
    for line in output.splitlines():
        if not line:
            continue
        job_id, state, reason, start, nodes, name, gres, node_count = line.split("|", 7)
        # squeue names a request's kind: "gres:gpu:h100:1"; sinfo does not.
        per_node = parse_gres(_GRES_KIND.sub(r"\1", gres))
        count = int(node_count) if node_count.isdigit() else 1
        # Without a node it never started: the start squeue shows for it is
        # Slurm's estimate (and stays on a job canceled while it waited).
        records[job_id] = JobRecord(job_id, state, plain_reason(reason),
                                    start=_epoch(start) if nodes else None,
                                    nodes=nodes, name=name,
                                    gpus={kind: n * count for kind, n in per_node.items()})
    return records


def parse_sacct(output: str) -> dict[str, JobRecord]:
    """One record per job from sacct's lines (see `accounted`). Of the
    steps' lines ("87.batch", "87.0") only whether one ran out of memory and
    their peaks are kept."""
    attempts, out_of_memory = [], set()
    # What each job used, kept as sacct's text and read only for jobs that
    # ended (a run's figures are settled once, at its end): the cycle reads
    # every live job's lines, and parses no TRES of theirs.
    total_cpus: dict[str, str] = {}
    steps_used: dict[str, list[str]] = {}
    for line in output.splitlines():
        if not line:
            continue
        fields = line.split("|")
        job_id, state, exit_code, start, end, elapsed, nodes, reason, name, tres = fields[:10]
        total_cpu, used = (fields[10], fields[11]) if len(fields) >= 12 else ("", "")
        if "." in job_id:
            job = job_id.split(".", 1)[0]
            if state == "OUT_OF_MEMORY":
                out_of_memory.add(job)
            steps_used.setdefault(job, []).append(used)
            continue
        # Steps follow their job's line: those before it were an earlier
        # attempt's, or an older job's under a reused id.
        total_cpus[job_id], steps_used[job_id] = total_cpu, []
        code, _, sig = exit_code.partition(":")
        attempts.append(JobRecord(
            job_id,
            # "CANCELLED by 0": the uid that cancelled is not part of the state.
            state.split(" ", 1)[0],
            plain_reason(reason),
            exit_code=int(code) if code.isdigit() else None,
            signal=int(sig) if sig.isdigit() else None,
            # A job canceled before it ran (by a stop, or a dependency that
            # failed) has its end as its "start" and no node: no start at all.
            start=None if nodes == "None assigned" else _epoch(start),
            end=_epoch(end),
            elapsed_seconds=int(elapsed) if elapsed.isdigit() else None,
            nodes="" if nodes == "None assigned" else nodes,
            name=name,
            gpus=tres_gpus(tres),
        ))
    records = accounted(attempts, out_of_memory)
    for job_id, record in records.items():
        if record.finished and (total_cpus.get(job_id) or steps_used.get(job_id)):
            record.usage = _job_usage(total_cpus.get(job_id, ""), steps_used.get(job_id, []))
    return records


def accounted(attempts: Iterable[JobRecord], out_of_memory: set[str]) -> dict[str, JobRecord]:
    """One record per job from the database's records of its attempts (one
    per attempt when Slurm requeued it, oldest first): the newest attempt's,
    with the earlier ones' count and seconds. A FAILED job one of whose
    steps ran out of memory is OUT_OF_MEMORY (the cgroup kill shows in the
    step; the job itself ends FAILED 9:0)."""
    records: dict[str, JobRecord] = {}
    for record in attempts:
        job_id, name = record.job_id, record.name
        earlier = records.get(job_id)
        # Only the same job's: after its id counter was reset, Slurm's
        # database holds other, older jobs under the same id.
        if earlier is not None and earlier.name == name:
            # A REQUEUED line has counted its restart already.
            record.restarts = earlier.restarts + (earlier.state != "REQUEUED")
            record.earlier_seconds = earlier.elapsed_seconds or 0
            record.elapsed_seconds = record.earlier_seconds + (record.elapsed_seconds or 0)
        if record.state == "REQUEUED":
            # This attempt has ended and the next has no line yet: the job
            # waits to start again.
            record = replace(record, restarts=record.restarts + 1, end=None,
                             earlier_seconds=record.elapsed_seconds or 0)
        records[job_id] = record
    for job_id in out_of_memory:
        if job_id in records and records[job_id].state == "FAILED":
            records[job_id].state = "OUT_OF_MEMORY"
    return records


def merge(live: dict[str, JobRecord], accounted: dict[str, JobRecord],
          now: int) -> dict[str, JobRecord]:
    """Live state from squeue, final state from sacct once the job has ended.

    Right after a fast start sacct can still say PENDING, so squeue wins for a
    job it lists; a job squeue no longer lists is taken from sacct. A job
    Slurm requeued is one record over its attempts."""
    merged = {job_id: _awaiting_restart(final, now) if job_id not in live else final
              for job_id, final in accounted.items()}
    for job_id, record in live.items():
        final = accounted.get(job_id)
        if final is not None and not _same_job(record, final):
            # Another, older job under a reused id: nothing of this one's.
            final = None
        if final is None:
            merged[job_id] = _accrued(record, now)
        elif final.finished and _started_again(record, final):
            # squeue shows a later attempt than sacct's newest line has.
            new = record.start is not None and final.end is not None and record.start > final.end
            merged[job_id] = _accrued(replace(record, start=record.start if new else None,
                                              restarts=final.restarts + 1,
                                              earlier_seconds=final.elapsed_seconds or 0), now)
        elif final.finished and record.state in LIVE_STATES and final.state in MAY_RESTART:
            # Torn down after a node failure, to be requeued: no end yet.
            merged[job_id] = replace(final, state=record.state, end=None, nodes=record.nodes)
        elif final.finished:
            # sacct can name only the batch host for a moment after the end.
            merged[job_id] = replace(final, nodes=record.nodes or final.nodes)
        elif final.state == "REQUEUED" and (record.start or 0) <= (final.start or 0):
            # Waiting to start again (squeue may still show the old start).
            merged[job_id] = replace(record, start=None, restarts=final.restarts,
                                     earlier_seconds=final.earlier_seconds,
                                     elapsed_seconds=final.earlier_seconds)
        else:
            merged[job_id] = _accrued(replace(record, restarts=final.restarts,
                                              earlier_seconds=final.earlier_seconds), now)
    return merged


# The name slurmdbd gives a job whose record it made before the job's own
# start message came (a job that started and ended within a second or two):
# its name, and nothing else, follows a few seconds later.
PLACEHOLDER_NAME = "allocation"


def _same_job(live: JobRecord, final: JobRecord) -> bool:
    """Whether sacct's record is of the job squeue lists, not of an older
    one under the same id: the same name, or slurmdbd's placeholder with the
    same start (an older job's start is another)."""
    if final.name == live.name:
        return True
    return final.name == PLACEHOLDER_NAME and final.start is not None \
        and final.start == live.start


def _accrued(record: JobRecord, now: int) -> JobRecord:
    """A live record's seconds: the earlier attempts' and this one's so far.
    An ended job squeue still lists (sacct down) keeps what it had accrued,
    and a job canceled while pending none."""
    if record.start is not None and record.state in LIVE_STATES - {"PENDING"}:
        return replace(record, elapsed_seconds=record.earlier_seconds + max(0, now - record.start))
    if record.restarts:
        return replace(record, elapsed_seconds=record.earlier_seconds)
    return record


def _started_again(live: JobRecord, final: JobRecord) -> bool:
    """Whether squeue's record is of a later attempt than sacct's newest
    (ended) line: waiting to start again, or started after it ended."""
    if live.state not in LIVE_STATES:
        return False
    return live.state in ("PENDING", "REQUEUED") or (
        live.start is not None and final.end is not None and live.start > final.end)


def _awaiting_restart(final: JobRecord, now: int) -> JobRecord:
    """A job squeue did not list (it refuses a whole list for one id it has
    forgotten) whose newest attempt ended as Slurm requeues: held unsettled,
    unless that was long ago, and counted a restart only once squeue or sacct
    shows the next attempt."""
    if final.state in MAY_RESTART and final.end is not None and now - final.end < RESTART_GRACE:
        return replace(final, state="REQUEUED", end=None)
    return final


# Slurm state -> run status (docs/developers/design.md, "States"). CANCELLED and TIMEOUT are
# settled by the caller, which knows whether it cancelled for spend or limit.
RUN_STATUS = {
    "PENDING": "queued", "REQUEUED": "queued", "CONFIGURING": "queued",
    "RUNNING": "running", "COMPLETING": "running", "SUSPENDED": "running",
    "RESIZING": "running", "SIGNALING": "running", "STAGE_OUT": "running",
    "COMPLETED": "succeeded",
    "FAILED": "failed", "OUT_OF_MEMORY": "failed", "NODE_FAIL": "failed",
    "BOOT_FAIL": "failed", "DEADLINE": "failed", "PREEMPTED": "failed",
    "CANCELLED": "canceled",
    "TIMEOUT": "budget_exceeded",
}


def run_status(record: JobRecord, stopped_for: str | None = None) -> str:
    """The run's status for a job record. `stopped_for` is the status we chose
    when we cancelled the job ourselves (budget_exceeded, limit_reached)."""
    status = RUN_STATUS.get(record.state, "failed")
    if status == "canceled" and stopped_for:
        return stopped_for
    return status


# sinfo -N -O: one line per node and partition. GresUsed goes last: its
# index lists hold commas.
SINFO_FIELDS = ("NodeHost:0|,StateCompact:0|,CPUsState:0|,Memory:0|,Partition:0|,Gres:0|,"
                "GresUsed:0")
# "gpu:h100:8(S:0-1)", "gpu:h100:3(IDX:0-1,3)", or untyped "gpu:8".
_GRES = re.compile(r"([^:,()]+)(?::([^:,()]+))?:(\d+)(?:\([^)]*\))?")
# Node states in which a free GPU can be given to a job.
SCHEDULABLE = {"idle", "mix", "alloc", "comp", "plnd"}


@dataclass(slots=True)
class NodeRecord:
    name: str
    state: str                  # sinfo's compact state: idle, mix, down*, drain, idle~ ...
    cpus_used: int
    cpus_total: int
    partitions: list[str]
    gpus: dict[str, int]        # GRES type -> count ("" for an untyped gpu GRES)
    gpus_used: dict[str, int]
    memory_mib: int = 0         # RealMemory

    @property
    def schedulable(self) -> bool:
        # "*": not responding; other marks (~ powered down, @ reboot) keep the base state.
        return not self.state.endswith("*") and self.state.rstrip("~#!%$@^-+") in SCHEDULABLE


def parse_gres(text: str) -> dict[str, int]:
    """GPU counts per type from a Gres or GresUsed column."""
    counts: dict[str, int] = {}
    for name, kind, count in _GRES.findall(text):
        if name == "gpu":
            counts[kind] = counts.get(kind, 0) + int(count)
    return counts


# sacct's ReqTRES: "cpu=2,mem=16G,node=1,billing=2,gres/gpu:h100=2,gres/gpu=2".
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu(?::([^=,]+))?=(\d+)")


def tres_gpus(text: str) -> dict[str, int]:
    """GPU counts per type from a TRES list: the typed counts where there are
    any (the untyped one is their sum), else the untyped count under ""."""
    typed: dict[str, int] = {}
    untyped: dict[str, int] = {}
    for kind, count in _TRES_GPU.findall(text):
        (typed if kind else untyped)[kind] = int(count)
    return typed or {kind: n for kind, n in untyped.items() if n}


def parse_sinfo_nodes(output: str) -> dict[str, NodeRecord]:
    """One record per node, its partitions gathered from its lines."""
    nodes: dict[str, NodeRecord] = {}
    for line in output.splitlines():
        if not line:
            continue
        name, state, cpus, memory, partition, gres, gres_used = line.split("|", 6)
        partition = partition.rstrip("*")        # "*" marks the default partition
        if name in nodes:
            nodes[name].partitions.append(partition)
            continue
        allocated, _idle, _other, total = (int(n) for n in cpus.split("/"))
        nodes[name] = NodeRecord(name, state, allocated, total, [partition],
                                 parse_gres(gres), parse_gres(gres_used),
                                 int(memory) if memory.isdigit() else 0)
    return nodes


def slurm_minutes(text: str) -> int | None:
    """A Slurm time limit (sinfo %l: "infinite", "30:00", "2:00:00",
    "1-12:00:00", "1-12") in whole minutes, rounded down so that a limit
    made from it never passes Slurm's; None when there is none."""
    text = text.strip()
    if text.lower() in ("", "infinite", "unlimited", "n/a", "none"):
        return None
    days, dash, clock = text.partition("-")
    if not dash:
        days, clock = "0", text
    try:
        parts = [int(part) for part in clock.split(":")]
        if dash:                       # d-h, d-h:m, d-h:m:s
            hours, minutes = (parts + [0, 0])[:2]
        elif len(parts) == 3:          # h:m:s
            hours, minutes = parts[:2]
        else:                          # m, m:s
            hours, minutes = 0, parts[0]
        return (int(days) * 24 + hours) * 60 + minutes
    except ValueError:
        return None
