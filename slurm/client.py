"""SlurmClient: one method per Slurm command, all of one shape: build argv,
run it through the injected transport, check the return code and stderr,
parse into typed records."""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from divergent.slurm.records import (
    LIVE_STATES,
    SACCT_FIELDS,
    SINFO_FIELDS,
    SQUEUE_FORMAT,
    JobRecord,
    NodeRecord,
    merge,
    parse_sacct,
    parse_sinfo_nodes,
    parse_squeue,
    slurm_minutes,
)
from divergent.slurm.transport import (
    CommandNotRun,
    CommandResult,
    LocalTransport,
    SlurmTransport,
    SudoTransport,
    TransportError,
)

log = logging.getLogger("divergent.slurm")

# Epoch seconds: sacct otherwise prints the controller's local time, no zone.
TIME_ENV = {"SLURM_TIME_FORMAT": "%s"}


# sbatch failures after which the controller may have the job all the same:
# never a refusal (which would forget the run), never "not received".
UNSURE = ("Unable to contact slurm controller", "Socket timed out",
          "Zero Bytes were transmitted")


class SlurmError(RuntimeError):
    """Slurm refused or failed a command; the message is Slurm's own."""


class SlurmUnreachable(SlurmError):
    """The transport could not run Slurm's commands at all (SSH down, ...)."""


class SubmitNotReceived(SlurmUnreachable):
    """sbatch never reached the controller: no job was made."""


class SubmitRefused(SlurmError):
    """Slurm will never run this job as asked (more than the cluster has, a
    bad account, ...)."""


# What Slurm's refusals of a site's conventions mean, for whoever reads
# them: the user first, an admin next.
HINTS = (
    ("Invalid account", "the org's Slurm account does not exist or may not use this "
                        "partition: an admin makes it, or maps the org to one "
                        "(flask org-account ORG ACCOUNT)"),
    ("Invalid qos", "the QoS is not one this account may use: an admin sets the site's "
                    "(flask site --qos) or the type's (flask site gpu add … --qos)"),
    ("Job violates accounting/QOS policy", "the account's or QoS's limits refuse it "
                                           "(sacctmgr show assoc, show qos)"),
    ("Requested time limit is invalid", "longer than the partition's MaxTime or the "
                                        "QoS's MaxWall"),
)


def _slurm_message(result: CommandResult) -> str:
    lines = [line.split("error: ", 1)[-1].removeprefix("Batch job submission failed: ")
             .removeprefix("allocation failure: ")
             for line in result.stderr.splitlines() if line.strip()]
    message = "; ".join(dict.fromkeys(lines)) or f"exit code {result.returncode}"
    hints = [hint for text, hint in HINTS if text.lower() in message.lower()]
    return f"{message} ({hints[0]})" if hints else message


class SlurmClient:
    def __init__(self, transport: SlurmTransport | None = None) -> None:
        self.transport = transport or LocalTransport()

    def as_user(self, user: str | None) -> SlurmClient:
        """A client whose commands run as Unix user `user` (sudo over this
        client's transport), for what a job's owner does: submit, cancel,
        shorten. None, or this transport's own user: this client."""
        if user is None or user == self.transport.user:
            return self
        return ActingClient(SudoTransport(self.transport, user), self)

    def _call(self, argv: list[str], stdin: str | None = None) -> CommandResult:
        try:
            return self.transport.run(argv, stdin=stdin, env=TIME_ENV)
        except CommandNotRun as exc:
            # Certainly never reached Slurm: a submit made no job.
            raise SubmitNotReceived(str(exc)) from exc
        except TransportError as exc:
            raise SlurmUnreachable(str(exc)) from exc

    def _run(self, argv: list[str], stdin: str | None = None,
             ok_errors: tuple[str, ...] = ()) -> CommandResult:
        return self._check(argv, self._call(argv, stdin), ok_errors)

    @staticmethod
    def _check(argv: list[str], result: CommandResult,
               ok_errors: tuple[str, ...] = ()) -> CommandResult:
        # Slurm can exit 0 and still print an error.
        failed = result.returncode != 0 or "error:" in result.stderr
        if failed and not any(text in result.stderr + result.stdout for text in ok_errors):
            raise SlurmError(f"{argv[0]}: {_slurm_message(result)}")
        return result

    def _sbatch(self, argv: list[str], script: str) -> CommandResult:
        return _judged_sbatch(self._call(argv, stdin=script))

    # Whether this client can submit and follow a sweep's job array.
    submits_arrays = True

    def config(self) -> dict[str, str]:
        """The controller's settings, as scontrol show config lists them."""
        pairs = (line.partition("=") for line in
                 self._run(["scontrol", "show", "config"]).stdout.splitlines())
        return {key.strip(): value.strip() for key, sep, value in pairs if sep}

    def max_array_size(self) -> int:
        """Slurm's MaxArraySize: a job array's indices go up to one less."""
        value = self.config().get("MaxArraySize", "")
        return int(value) if value.isdigit() else 1001      # Slurm's default

    def srun_options(self) -> str:
        """srun's help, which lists the options SPANK plugins add."""
        return self._run(["srun", "--help"]).stdout

    def probe(self, partition: str, account: str, argv: list[str]) -> str:
        """What `argv` prints on a node of `partition`, run there as a
        one-minute job step of `account`; SlurmError with its reason if it
        fails or no node is free within 30 s."""
        return self._run(["srun", f"--partition={partition}", f"--account={account}",
                          "--nodes=1", "--ntasks=1", "--time=1", "--immediate=30",
                          "--job-name=divergent-doctor", "--quiet", "--", *argv]).stdout.strip()

    def submit(self, script: str) -> str:
        """Submits a batch script (on stdin) and returns the job id."""
        return self._submitted(self._sbatch(["sbatch", "--parsable"], script))

    def _submitted(self, result: CommandResult) -> str:
        """The job id from sbatch's answer, or why there is none."""
        if "Batch job submission failed" in result.stderr:
            raise SubmitRefused(f"Slurm refused the job: {_slurm_message(result)}")
        out = self._check(["sbatch"], result).stdout.strip()
        job_id = out.split(";", 1)[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch: unexpected answer {out!r}")
        return job_id

    def test_submit(self, script: str) -> None:
        """Whether Slurm would take the batch script (sbatch --test-only):
        SubmitRefused with Slurm's reason if not. Nothing is queued."""
        result = self._sbatch(["sbatch", "--test-only"], script)
        if result.returncode != 0 and ("allocation failure" in result.stderr or
                                       "Batch job submission failed" in result.stderr):
            raise SubmitRefused(f"Slurm refused the job: {_slurm_message(result)}")
        self._check(["sbatch"], result)

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", _job_id(job_id)])

    def shorten(self, job_id: str, minutes: int) -> None:
        """Lowers a job's time limit (any user may lower their own job's)."""
        self._run(["scontrol", "update", f"JobId={_job_id(job_id)}", f"TimeLimit={int(minutes)}"])

    def query(self, job_ids: list[str], squeue_alone: bool = False) -> dict[str, JobRecord]:
        """Records for many jobs in one squeue and one sacct call. With
        `squeue_alone`, an accounting that does not answer (slurmdbd down)
        leaves squeue's answer: live jobs go on being followed, and an ended
        one waits for its final record."""
        ids = [_job_id(j) for j in job_ids]
        if not ids:
            return {}
        return self._merged(self._listed(ids), lambda: self._accounted(ids), squeue_alone)

    def _listed(self, ids: list[str]) -> dict[str, JobRecord]:
        """The controller's records of those of `ids` it still holds."""
        live = {}
        for some in _chunks(ids):
            # squeue refuses the whole list once one id has left its memory.
            # --array: a sweep's waiting members one a line ("87_3"), not "87_[0-19]".
            live.update(parse_squeue(self._run(
                ["squeue", "--noheader", "--array", "--states=all", f"--jobs={','.join(some)}",
                 f"--format={SQUEUE_FORMAT}"], ok_errors=("Invalid job id",)).stdout))
        return live

    def ended(self, job_ids: list[str]) -> set[str]:
        """Of `job_ids`, those the controller no longer runs (ended, or
        forgotten): squeue alone, which answers in milliseconds where sacct
        takes a round trip to the database, so it can be asked often."""
        ids = [_job_id(j) for j in job_ids]
        live = self._listed(ids) if ids else {}
        return {j for j in ids if j not in live or live[j].state not in LIVE_STATES}

    def _accounted(self, ids: list[str]) -> dict[str, JobRecord]:
        # Steps too: an out-of-memory kill shows only in a step's state.
        # Every attempt of a requeued job (--duplicates): each is billed.
        return parse_sacct("".join(self._run([
            "sacct", "--noheader", "--parsable2", "--duplicates", f"--jobs={','.join(some)}",
            f"--format={SACCT_FIELDS}"]).stdout for some in _chunks(ids)))

    @staticmethod
    def _merged(live: dict[str, JobRecord], final: Callable[[], dict[str, JobRecord]],
                squeue_alone: bool) -> dict[str, JobRecord]:
        try:
            accounted = final()
        except SlurmError as exc:
            if not squeue_alone:
                raise
            log.warning("accounting did not answer, following squeue alone: %s", exc)
            accounted = {}
        return merge(live, accounted, int(time.time()))

    def jobs_named(self, names: list[str], account: str,
                   submitted_since: int) -> tuple[dict[str, str], bool]:
        """Job ids by job name, of jobs of `account` submitted at or after
        `submitted_since` (epoch seconds) that squeue or sacct knows (the
        lowest id when a name has several), and whether sacct answered: when
        it did not, a job that has left squeue is not among them."""
        wanted = ",".join(names)
        if not wanted:
            return {}, True
        live = self._run(["squeue", "--noheader", "--states=all", f"--name={wanted}",
                          f"--account={account}", "--format=%i|%j|%V"]).stdout
        window = max(60, int(time.time()) - submitted_since + 60)
        try:
            accounted, complete = self._run([
                "sacct", "--noheader", "--parsable2", "--allocations", f"--name={wanted}",
                f"--accounts={account}", f"--starttime=now-{window}",
                "--format=JobID,JobName,Submit"]).stdout, True
        except SlurmError as exc:
            log.warning("accounting did not answer, looking in squeue alone: %s", exc)
            accounted, complete = "", False
        found: dict[str, str] = {}
        for line in (live + "\n" + accounted).splitlines():
            job_id, name, submitted = (line.split("|") + ["", ""])[:3]
            job_id = array_of(job_id)     # a sweep's array: its job
            if job_id.isdigit() and name in names and submitted.isdigit() \
                    and int(submitted) >= submitted_since:
                found[name] = min(found.get(name, job_id), job_id, key=int)
        return found, complete

    def nodes(self) -> dict[str, NodeRecord]:
        """Every node with its state, cores and GPUs in use, from one sinfo."""
        return parse_sinfo_nodes(self._run(["sinfo", "--Node", "--noheader",
                                            f"--Format={SINFO_FIELDS}"]).stdout)

    def ping(self) -> str:
        """scontrol ping's answer when the controller is up; SlurmError if not."""
        result = self._call(["scontrol", "ping"])
        answer = " ".join(result.stdout.split()) or _slurm_message(result)
        if result.returncode != 0 or " is UP" not in answer:
            raise SlurmError(f"scontrol ping: {answer}")
        return answer

    def version(self) -> str:
        """The controller's Slurm release ("22.05.8")."""
        version = self.config().get("SLURM_VERSION")
        if version is None:
            raise SlurmError("scontrol show config: no SLURM_VERSION")
        return version

    def partitions(self) -> set[str]:
        return set(self._run(["sinfo", "--noheader", "--format=%R"]).stdout.split())

    def partition_max_minutes(self) -> dict[str, int | None]:
        """Each partition's MaxTime in minutes; None where it has none."""
        lines = self._run(["sinfo", "--noheader", "--format=%R|%l"]).stdout.splitlines()
        return {name: slurm_minutes(limit) for name, _, limit in
                (line.partition("|") for line in lines if line)}

    def clusters(self) -> list[str]:
        """The clusters slurmdbd knows: an answer means accounting works."""
        return self._run(["sacctmgr", "--noheader", "--parsable2", "show", "cluster",
                          "format=Cluster"]).stdout.split()

    def sees_folder(self, path: str) -> bool:
        """Whether a folder is there where Slurm's commands run (the login
        node, for the SSH transport): the share must be the same path there."""
        return self._call(["test", "-d", path]).returncode == 0

    def submitter_version(self) -> str:
        """sbatch's version as this client's user runs it: whether the
        submit path reaches Slurm as that user (sudo's rule, the user known
        where Slurm's commands run)."""
        return self._run(["sbatch", "--version"]).stdout.strip()

    def in_account(self, account: str, user: str) -> bool:
        """Whether `user` may submit to `account` (an association of both)."""
        return bool(self._run(["sacctmgr", "-n", "-P", "show", "assoc", f"account={account}",
                               f"user={user}", "format=User"]).stdout.split())

    def admin_level(self) -> str:
        """Slurm's AdminLevel of the user Slurm's commands run as: None,
        Operator or Administrator (sacctmgr)."""
        shown = self._run(["sacctmgr", "-n", "-P", "show", "user", self.transport.user,
                           "format=AdminLevel"]).stdout.split()
        return shown[0] if shown else "None"

    def ensure_account(self, account: str, max_jobs: int | None = None,
                       users: tuple[str, ...] = ()) -> None:
        """A Slurm account for an org, with the user Slurm's commands run as
        and `users` (who submit its jobs) in it; at most `max_jobs` of its
        jobs pending or running at once (GrpSubmitJobs, where slurm.conf
        enforces limits)."""
        nothing_new = ("Nothing new added",)
        limit = [f"GrpSubmitJobs={max_jobs}"] if max_jobs is not None else []
        self._run(["sacctmgr", "-i", "add", "account", account, *limit], ok_errors=nothing_new)
        if limit:    # an account made before, by an earlier version or an admin
            self._run(["sacctmgr", "-i", "modify", "account", "where", f"name={account}", "set",
                       *limit], ok_errors=("Nothing modified",))
        self.add_users(account, (self.transport.user, *users))

    def add_users(self, account: str, users: tuple[str, ...]) -> None:
        """`users` in the account (an Operator may add them, and so may the
        account's coordinator where the site's admins made the account)."""
        nothing_new = ("Nothing new added",)
        for user in dict.fromkeys(users):
            added = self._run(["sacctmgr", "-i", "add", "user", user, f"account={account}"],
                              ok_errors=nothing_new)
            # One made before is not waited for (the controller may be away:
            # no time lost); one another process made a moment ago is
            # awaited by the submit it refuses (ActingClient).
            if not any(text in added.stdout + added.stderr for text in nothing_new):
                self._await_association(account, user)

    def _await_association(self, account: str, user: str, timeout: float = 10.0) -> None:
        """A new association reaches slurmctld a moment after sacctmgr
        returns (slurmdbd sends it on): until then sbatch refuses the account
        as invalid, and the org's first run would fail. Wait until the
        controller's own cache has the user in the account."""
        shown = re.compile(rf"^ClusterName=\S+ Account={re.escape(account)} "
                           rf"UserName={re.escape(user)}\(", re.M | re.I)
        deadline = time.monotonic() + timeout
        while not shown.search(self._run(["scontrol", "show", "assoc_mgr", "flags=assoc",
                                          f"accounts={account}", f"users={user}"]).stdout):
            if time.monotonic() > deadline:
                raise SlurmError(f"slurmctld does not know account {account} {timeout:.0f} s "
                                 "after it was made")
            time.sleep(0.1)


ACCOUNT_LINE = re.compile(r"^#SBATCH --account=(\S+)$", re.M)


class ActingClient(SlurmClient):
    """A client acting as a job's owner. A submit refused for an account
    its user is not in yet is tried once more after the controller has the
    user in it: another server process may have just added them, and
    slurmdbd not told the controller yet."""

    def __init__(self, transport: SudoTransport, own: SlurmClient) -> None:
        super().__init__(transport)
        self.own = own

    def _sbatch(self, argv: list[str], script: str) -> CommandResult:
        result = super()._sbatch(argv, script)
        account = ACCOUNT_LINE.search(script)
        if "Invalid account" in result.stderr and account:
            try:
                self.own._await_association(account.group(1), self.transport.user, timeout=5)
            except SlurmError:
                return result           # not coming: the refusal stands
            result = super()._sbatch(argv, script)
        return result


def _judged_sbatch(result: CommandResult) -> CommandResult:
    """sbatch's answer, unless it says the controller may not have the job."""
    if result.returncode != 0 and \
            "Unable to contact slurm controller (connect failure)" in result.stderr:
        # Not a refusal: the same job goes in once the controller is back.
        # (A send or receive failure may have reached it: not this.)
        raise SubmitNotReceived(f"Slurm's controller does not answer "
                                f"({_slurm_message(result)})")
    if any(text in result.stderr for text in UNSURE):
        raise SlurmUnreachable(f"Slurm's controller did not answer in time "
                               f"({_slurm_message(result)})")
    return result


# A job, or one member of a job array (a sweep's run): "87", "87_3".
JOB_OR_TASK = re.compile(r"^[0-9]+(_[0-9]+)?$")


def _job_id(job_id: str) -> str:
    if not JOB_OR_TASK.fullmatch(str(job_id)):
        raise SlurmError(f"not a job id: {job_id!r}")
    return str(job_id)


# One argument may be at most 128 KiB (Linux's MAX_ARG_STRLEN): this many
# ids (at most 12 digits, an underscore and 4 of a sweep's index, and a comma
# each) stay within half of it, however many runs are live.
IDS_PER_CALL = 3000


def _chunks(ids: list[str]) -> list[list[str]]:
    return [ids[start:start + IDS_PER_CALL] for start in range(0, len(ids), IDS_PER_CALL)]


def array_of(job_id: str) -> str:
    """The job of an id squeue or sacct prints: "87" for "87", "87_3" and
    "87_[0-19]" alike."""
    return job_id.split("_", 1)[0]
