"""SlurmClient over pyslurm: Slurm's C API in this process, for a server on a
login node whose pyslurm matches the cluster's Slurm. The controller's jobs
come from one RPC (no process, no text to parse), submissions and cancels
are RPCs too; what pyslurm has no call for (sbatch --test-only, sinfo,
sacctmgr, a requeued job's every attempt) goes through the commands on this
host, as SlurmClient does.

pyslurm is optional: load_pyslurm() imports it, when the site chooses it
(`flask site --transport pyslurm`) or `flask doctor` looks for it."""
from __future__ import annotations

import importlib
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from divergent.slurm.client import SlurmClient, SlurmError, SlurmUnreachable, _job_id, _judged_sbatch
from divergent.slurm.records import LIVE_STATES, JobRecord, accounted, plain_reason
from divergent.slurm.transport import CommandResult, LocalTransport, SlurmTransport

# How to get a pyslurm for this host's Slurm, for whoever reads the error.
INSTALL_HINT = ("build it for this Slurm with `make pyslurm` (scripts/pyslurm-wheel), "
                "or for Slurm 25.11 `pip install 'pyslurm==25.11.*'` into the server's venv; "
                "or use `flask site --transport local`")

# The #SBATCH lines slurm/script.py writes, as JobSubmitDescription's
# attributes. Any other line is refused rather than dropped: a job must
# never run with less than its script asks.
DIRECTIVES = {
    "job-name": "name", "account": "account", "partition": "partitions",
    "nodes": "nodes", "ntasks-per-node": "ntasks_per_node", "gres": "gres_per_node",
    "constraint": "constraints", "qos": "qos", "cpus-per-task": "cpus_per_task",
    "mem": "memory_per_node", "time": "time_limit", "chdir": "working_directory",
    "output": "standard_output", "error": "standard_error",
    "open-mode": "log_files_open_mode", "export": "environment",
    "requeue": "is_requeueable", "signal": "signal", "dependency": "dependencies",
    "kill-on-invalid-dep": "kill_on_invalid_dependency",
    # --exclusive=mcs: pyslurm's resource_sharing takes sbatch's word for it.
    "exclusive": "resource_sharing",
}
ALREADY_DONE = "Job/step already completing or completed"
# Live states in which the job has ended all the same: its final record may
# be in the database (the commands' merge settles on it).
ENDING = {"COMPLETING", "STAGE_OUT"}
# Those pyslurm takes as numbers (the rest it parses as sbatch does).
NUMBERS = {"ntasks_per_node", "cpus_per_task", "time_limit"}

T = TypeVar("T")


def load_pyslurm() -> ModuleType:
    """The pyslurm module; SlurmUnreachable saying what to do when there is
    none (or it was built for another Slurm and its library is gone)."""
    try:
        return importlib.import_module("pyslurm")
    except ImportError as exc:
        raise SlurmUnreachable(f"pyslurm does not import ({exc}): {INSTALL_HINT}") from None


def series(version: str) -> str:
    """A release's series: "22.05.8" and pyslurm's "22.5.3" are both 22.5."""
    major, minor = (version.split(".") + ["0"])[:2]
    return f"{int(major)}.{int(minor)}"


def submit_options(script: str) -> dict[str, Any]:
    """JobSubmitDescription's attributes from a batch script's #SBATCH lines,
    read as sbatch reads them: up to the first line that is not a comment
    (a run's values further down can never be taken for a directive)."""
    options: dict[str, Any] = {}
    for line in script.splitlines()[1:]:
        if not line.startswith("#SBATCH "):
            if line.strip() and not line.startswith("#"):
                break
            continue
        flag, _, value = line.removeprefix("#SBATCH ").strip().partition("=")
        attribute = DIRECTIVES.get(flag.removeprefix("--"))
        if attribute is None:
            raise SlurmError(f"pyslurm: cannot submit a script with #SBATCH {flag}")
        options[attribute] = int(value) if attribute in NUMBERS else value or True
    if "signal" in options:
        options["signal"] = _warning(options["signal"])
    if "kill_on_invalid_dependency" in options:
        options["kill_on_invalid_dependency"] = options["kill_on_invalid_dependency"] == "yes"
    # The server's own environment must never reach a run: script.py says
    # --export=NONE, for which pyslurm's own reading would need a string.
    if options.pop("environment", None) != "NONE":
        raise SlurmError("pyslurm: the script must say #SBATCH --export=NONE")
    # sbatch counts the tasks from the nodes; pyslurm would ask for one.
    options["ntasks"] = int(options.get("nodes", 1)) * options.get("ntasks_per_node", 1)
    options["environment"] = sbatch_environment(options)
    options["get_user_environment"] = True
    return options


def _warning(value: str) -> dict[str, int]:
    """--signal=USR1@45 as pyslurm takes it (it knows signals by their SIG
    names, sbatch without)."""
    name, _, lead = value.partition("@")
    number = int(name) if name.isdigit() else signal.Signals["SIG" + name.removeprefix("SIG")]
    return {"signal": int(number), "time": int(lead or 60)}


def sbatch_environment(options: dict[str, Any]) -> dict[str, str]:
    """What sbatch --export=NONE puts in a job's environment beyond the
    SLURM_* variables of its own (which pyslurm copies from this process's
    too): the script reads SLURM_CPUS_PER_TASK, and a run sees what it would
    under sbatch."""
    environment = {
        "SLURM_EXPORT_ENV": "NONE",
        "SLURM_JOB_NAME": options.get("name", ""),
        "SLURM_PRIO_PROCESS": str(os.getpriority(os.PRIO_PROCESS, 0)),
        "SLURM_SUBMIT_DIR": os.getcwd(),
        "SLURM_SUBMIT_HOST": socket.gethostname(),
        "SLURM_UMASK": _umask(),
    }
    if "cpus_per_task" in options:
        environment["SLURM_CPUS_PER_TASK"] = str(options["cpus_per_task"])
    if "ntasks_per_node" in options:
        environment["SLURM_NTASKS_PER_NODE"] = str(options["ntasks_per_node"])
    if "log_files_open_mode" in options:
        environment["SLURM_OPEN_MODE"] = options["log_files_open_mode"][:1]
    return environment


def _umask() -> str:
    # Read, never set and put back: os.umask() would change it for every
    # thread of the server for that moment.
    with open("/proc/self/status") as status:
        return next(line.split()[1] for line in status if line.startswith("Umask:"))


# What sbatch sleeps on and tries again (the queue is full, job creation is
# paused for a moment); pyslurm gives up at once.
BUSY = ("Resource temporarily unavailable", "Unable to create job record, try again",
        "Requested nodes are busy")
RETRIES = 5


def _submission_class(pyslurm: ModuleType) -> type[Any]:
    # A class of a module imported at run time, without stubs: mypy cannot know it.
    class Submission(pyslurm.JobSubmitDescription):  # type: ignore[misc,name-defined]
        """pyslurm 22.5.3 reads --signal but never puts it in the job's
        description: without this a run would get no warning before its
        time limit."""

        def _create_job_submit_desc(self, is_update: bool = False) -> None:
            super()._create_job_submit_desc(is_update)
            self._set_signal()
    return Submission


class PyslurmClient(SlurmClient):
    # pyslurm's records key an array's members by their raw ids: sweeps go
    # through the sbatch client (`flask site`: transport local or ssh).
    submits_arrays = False
    def __init__(self, transport: SlurmTransport | None = None) -> None:
        super().__init__(transport or LocalTransport())
        self.pyslurm = load_pyslurm()
        try:
            self._submission = _submission_class(self.pyslurm)
        except AttributeError as exc:
            # Another release's pyslurm, or not pyslurm at all.
            raise SlurmUnreachable(f"pyslurm {getattr(self.pyslurm, '__version__', '?')} "
                                   f"lacks the calls this client makes ({exc}): "
                                   f"{INSTALL_HINT}") from None
        # libslurm keeps per-process state (its config, its connections):
        # one call at a time from this process's threads.
        self._lock = threading.Lock()

    def _rpc(self, command: str, call: Callable[[], T]) -> T:
        try:
            with self._lock:
                return call()
        except self.pyslurm.RPCError as exc:
            raise SlurmError(f"{command}: {exc.msg}") from None

    def submit(self, script: str) -> str:
        description = self._submission(**submit_options(script))
        # pyslurm takes the script from a file, as sbatch does.
        with tempfile.NamedTemporaryFile("w", prefix="div-batch-", suffix=".sh") as file:
            file.write(script)
            file.flush()
            description.script = file.name
            for attempt in range(RETRIES + 1):
                try:
                    with self._lock:
                        job_id = description.submit()
                    break
                except self.pyslurm.RPCError as exc:
                    if exc.msg in BUSY and attempt < RETRIES:
                        time.sleep(attempt + 1)     # as sbatch: 1 s, 2 s, ...
                        continue
                    # Judged as sbatch's own answer would be.
                    return self._submitted(_judged_sbatch(CommandResult(
                        1, "", f"sbatch: error: Batch job submission failed: {exc.msg}\n")))
                except ValueError as exc:
                    raise SlurmError(f"pyslurm: {exc}") from None
        return self._submitted(CommandResult(0, f"{job_id}\n", ""))

    def cancel(self, job_id: str) -> None:
        job = int(_job_id(job_id))
        try:
            # The call that judges by its return code (Job.cancel judges by
            # errno, which a success can leave set).
            with self._lock:
                self.pyslurm.slurm_kill_job(job, signal.SIGKILL, 0)
        except ValueError as exc:
            message = exc.args[0] if exc.args else str(exc)
            if message != ALREADY_DONE:         # as scancel: nothing to do
                raise SlurmError(f"scancel: {message}") from None

    def shorten(self, job_id: str, minutes: int) -> None:
        changes = self.pyslurm.JobSubmitDescription(time_limit=int(minutes))
        job = self.pyslurm.Job(int(_job_id(job_id)))
        self._rpc("scontrol update", lambda: job.modify(changes))

    def query(self, job_ids: list[str], squeue_alone: bool = False) -> dict[str, JobRecord]:
        """As SlurmClient.query, from fewer places: a live job's record is the
        controller's alone (it holds all there is until the job ends); an
        ended one's final record comes from the database through pyslurm,
        which keeps one record a job, so a job Slurm requeued (and one the
        controller has forgotten, which may have been) is read from sacct
        --duplicates, every attempt of it."""
        ids = [_job_id(j) for j in job_ids]
        if not ids:
            return {}
        live, requeued = self._controller(set(ids))
        ended = [j for j in ids if j in live and j not in requeued
                 and (live[j].state not in LIVE_STATES or live[j].state in ENDING)]
        uncertain = [j for j in ids if j not in live or j in requeued]

        def final() -> dict[str, JobRecord]:
            records = self._database(ended, live)
            if uncertain:
                records.update(self._accounted(uncertain))
            return records
        return self._merged(live, final, squeue_alone)

    def _listed(self, ids: list[str]) -> dict[str, JobRecord]:
        return self._controller(set(ids))[0]

    def _controller(self, ids: set[str]) -> tuple[dict[str, JobRecord], set[str]]:
        """The controller's records of `ids`, and which of them Slurm requeued."""
        jobs = self._rpc("squeue", self.pyslurm.Jobs.load)
        live, requeued = {}, set()
        for job in jobs.values():
            job_id = str(job.id)
            if job_id not in ids:
                continue
            per_node = _gpus(job.gres_per_node)
            live[job_id] = JobRecord(
                job_id, job.state, plain_reason(job.state_reason or ""), start=job.start_time or None,
                nodes=job.allocated_nodes or "", name=job.name or "",
                gpus={kind: n * (job.num_nodes or 1) for kind, n in per_node.items()})
            if job.requeue_count:
                requeued.add(job_id)
        return live, requeued

    def _database(self, ids: list[str], live: dict[str, JobRecord]) -> dict[str, JobRecord]:
        """Final records from slurmdbd through pyslurm (the GPUs asked for are
        the controller's: pyslurm does not read a record's TRES)."""
        if not ids:
            return {}
        wanted = self.pyslurm.db.JobFilter(ids=[int(j) for j in ids])
        jobs = self._rpc("sacct", lambda: self.pyslurm.db.Jobs.load(wanted))
        attempts, out_of_memory = [], set()
        for job in jobs.values():
            job_id = str(job.id)
            if job_id not in live:
                continue
            if any(step.state == "OUT_OF_MEMORY" for step in job.steps.values()):
                out_of_memory.add(job_id)
            nodes = job.nodelist or ""
            attempts.append(JobRecord(
                job_id, (job.state or "").split(" ", 1)[0], plain_reason(job.state_reason or ""),
                exit_code=job.exit_code, signal=job.exit_code_signal,
                start=job.start_time if job.start_time and nodes != "None assigned" else None,
                end=job.end_time or None,
                elapsed_seconds=job.elapsed_time or 0,
                nodes="" if nodes == "None assigned" else nodes,
                name=job.name or "", gpus=live[job_id].gpus))
        return accounted(attempts, out_of_memory)



def _gpus(gres: dict[str, int] | None) -> dict[str, int]:
    """{"gpu:h100": 2} or {"gpu": 2} as counts per type ("" untyped)."""
    counts: dict[str, int] = {}
    for name, count in (gres or {}).items():
        kind, _, typ = str(name).partition(":")
        if kind == "gpu":
            counts[typ] = counts.get(typ, 0) + int(count)
    return counts
