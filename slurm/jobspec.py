"""What a run asks of Slurm (JobSpec), the site's Slurm settings (SlurmSite),
and the strict patterns every user value is checked against before it can
reach a batch script."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

GPU_TYPES = ("b300", "h200", "h100", "l40s")
CPU = "cpu"
DEFAULT_IMAGE = "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime"
RUNTIMES = ("none", "pyxis", "apptainer")

RUN_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
ACCOUNT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
VOLUME_NAME = re.compile(r"^[a-z0-9_-][a-z0-9._-]{0,62}$")
# State folders appear in #SBATCH lines, which Slurm parses without a shell
# and where % is a pattern: only plain path characters.
STATE_PATH = re.compile(r"^/[A-Za-z0-9._/-]+$")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Names Slurm, bash or divergent give meaning to, and the ones the platform
# sets for every run: a run's env and secrets may not use them. The run's
# values only ever reach its sandbox, so this is defence in depth.
RESERVED_ENV = re.compile(
    r"^(?:(?:SLURM|SLURMD|SRUN|SBATCH|SALLOC|SPANK|DIV|div|BASH_FUNC)_.*"
    r"|BASH_ENV|ENV|SHELLOPTS|BASHOPTS|PS4|NNODES|NODE_RANK|MASTER_ADDR|MASTER_PORT)$")
# Images are passed quoted, but a strict shape keeps odd refs out of logs too.
IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")


def job_name(run_name: str) -> str:
    """The Slurm job name of a run: how the reconciler finds a job whose id
    the server never recorded (DESIGN.md "A run and its job")."""
    return f"div-{run_name}"


class InvalidJobSpec(ValueError):
    """A JobSpec value that must never reach a batch script."""


@dataclass(frozen=True)
class SlurmSite:
    """How this cluster names things and runs containers: site configuration."""

    partitions: dict[str, str] = field(
        default_factory=lambda: {t: t for t in (*GPU_TYPES, CPU)})
    gres_types: dict[str, str] = field(
        default_factory=lambda: {t: t for t in GPU_TYPES})
    gpus_per_node: int = 8
    runtime: str = "none"
    # Node-local folder for each run's scratch (workspace/ and mnt/).
    scratch_root: str = "/tmp"
    # Runtime `none`: read-only paths of the node's software beyond /usr and
    # /etc (where the site's Python lives, say), and PATH inside the run.
    bind_paths: tuple[str, ...] = ()
    path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    def __post_init__(self):
        if self.runtime not in RUNTIMES:
            raise InvalidJobSpec(f"runtime must be one of {', '.join(RUNTIMES)}")


@dataclass(frozen=True)
class JobSpec:
    """One run as Slurm sees it. Cores and memory are totals for the run."""

    run_name: str
    account: str
    gpu_type: str
    gpus: int
    cpus: int
    memory_gib: int
    command: str
    state_dir: str
    # The org's folder on the share: every volume in it is bound at
    # /mnt/<volume> when the run starts, so a volume made while the run
    # queues is there too.
    volumes_dir: str
    project: str
    image: str = DEFAULT_IMAGE
    time_limit_minutes: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    # The uploaded code, a tree only the server writes; None (--no-upload)
    # leaves /workspace empty.
    code_dir: str | None = None
    # The org's stored code trees, <volume>/<name> each: bound read-only at
    # /mnt/<volume>/code, so no run can change the code another one gets.
    trees_dir: str | None = None

    def __post_init__(self):
        validate(self)

    @property
    def is_cpu(self) -> bool:
        return self.gpu_type == CPU

    def nodes(self, site: SlurmSite) -> int:
        if self.is_cpu:
            return 1
        return max(1, math.ceil(self.gpus / site.gpus_per_node))

    def per_node(self, total: int, site: SlurmSite) -> int:
        return math.ceil(total / self.nodes(site))


def _check(pattern: re.Pattern, value: str, what: str) -> None:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidJobSpec(f"invalid {what}: {value!r}")


def check_env_name(name: object, what: str = "env variable") -> str:
    if not isinstance(name, str) or not ENV_KEY.fullmatch(name):
        raise InvalidJobSpec(f"invalid {what} name {name!r}: letters, digits and _, "
                             "not starting with a digit")
    if RESERVED_ENV.fullmatch(name):
        raise InvalidJobSpec(f"{name} is reserved: SLURM_*, DIV_*, BASH_ENV, ENV, BASH_FUNC_* "
                             "and the names divergent sets for a run cannot be set by a run")
    return name


def validate(spec: JobSpec) -> None:
    _check(RUN_NAME, spec.run_name, "run name")
    _check(ACCOUNT_NAME, spec.account, "account")
    _check(IMAGE_REF, spec.image, "image")
    _check(STATE_PATH, spec.state_dir, "state folder")
    _check(RUN_NAME, spec.project, "project")
    if spec.gpu_type not in (*GPU_TYPES, CPU):
        raise InvalidJobSpec(f"invalid gpu type: {spec.gpu_type!r}")
    if spec.gpus < 1:
        raise InvalidJobSpec("gpus must be at least 1")
    if spec.gpus > 8 and spec.gpus % 8:
        raise InvalidJobSpec("more than 8 GPUs must be a multiple of 8 (whole nodes)")
    if spec.cpus < 1 or spec.memory_gib < 1:
        raise InvalidJobSpec("cpus and memory must be at least 1")
    if spec.time_limit_minutes is not None and spec.time_limit_minutes < 1:
        raise InvalidJobSpec("time limit must be at least 1 minute")
    for key in spec.env:
        check_env_name(key)
    for value in (spec.command, spec.state_dir, spec.volumes_dir, spec.code_dir or "",
                  spec.trees_dir or "", *spec.env.values()):
        if "\0" in value:
            raise InvalidJobSpec("values must not contain NUL bytes")
    for path in (spec.state_dir, spec.volumes_dir, spec.code_dir, spec.trees_dir):
        if path is not None and not path.startswith("/"):
            raise InvalidJobSpec(f"paths must be absolute: {path!r}")
