"""What a run asks of Slurm (JobSpec), the site's Slurm settings (SlurmSite)
with its catalog of hardware (GpuType), and the strict patterns every user
value is checked against before it can reach a batch script."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from divergent.terms import (
    CORES_PER_UNIT,
    CPU,
    DEFAULT_IMAGE,
    ENV_KEY,
    GIB_PER_CPU,
    GIB_PER_GPU,
    GPU_TYPES,
    GPUS_PER_NODE,
    IMAGE_REF,
    NODE_CORES,
    NODE_GIB,
    RESERVED_ENV,
    RUN_NAME,
)

RUNTIMES = ("none", "pyxis", "apptainer")
# "isolated": each run's tasks join the network of their own job that
# divergent's prolog makes on each node (slurm/node/); "shared": the node's.
RUN_NETWORKS = ("isolated", "shared")
# "exclusive": a run shares nodes only with its own org's (Slurm's MCS,
# mcs/account with select); "shared": with anyone's.
ORG_NODES = ("shared", "exclusive")

# A catalog name as users type it: a100, rtx6000, h100-80g.
GPU_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
# Partition, GRES, feature, QoS and account names go into #SBATCH lines,
# which Slurm parses without a shell: plain names only (GRES with its ':').
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
GRES = re.compile(r"^gpu(?::[A-Za-z0-9_.-]{1,64})?$")
ACCOUNT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
# State folders appear in #SBATCH lines, which Slurm parses without a shell
# and where % is a pattern: only plain path characters.
STATE_PATH = re.compile(r"^/[A-Za-z0-9._/-]+$")
JOB_ID = re.compile(r"^[0-9]{1,12}$")
# An image as the nodes' pull helper takes it (slurm/node/image-pull checks
# the same shape): REGISTRY#REPOSITORY@sha256:HEX, resolved by the server.
IMAGE_SOURCE = re.compile(
    r"^[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?(?::[0-9]{1,5})?"
    r"#[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"@sha256:[0-9a-f]{64}$")


def job_name(run_name: str) -> str:
    """The Slurm job name of a run: how the reconciler finds a job whose id
    the server never recorded (docs/developers/design.md, "A run and its
    job")."""
    return f"div-{run_name}"


class InvalidJobSpec(ValueError):
    """A JobSpec value that must never reach a batch script."""


@dataclass(frozen=True)
class GpuType:
    """One kind of hardware the site sells, and how Slurm is asked for it.
    `gres` is `gpu:<type>` (typed) or `gpu` (untyped: the partition or the
    constraint says which); None is the cpu type, which asks for no GRES.
    `cores` and `memory_gib` are what one GPU (or cpu unit) includes, the
    node_ fields what a node has to give runs."""

    name: str
    partition: str
    gres: str | None = None
    per_node: int = GPUS_PER_NODE
    constraint: str | None = None
    qos: str | None = None
    cores: int = CORES_PER_UNIT
    memory_gib: int = GIB_PER_GPU
    node_cores: int = NODE_CORES
    node_gib: int = NODE_GIB

    def __post_init__(self) -> None:
        _check(GPU_NAME, self.name, "GPU type name")
        for value, what in ((self.partition, "partition"), (self.constraint, "constraint"),
                            (self.qos, "QoS")):
            if value is not None:
                _check(SLURM_NAME, value, f"{what} of {self.name}")
        if self.gres is not None:
            _check(GRES, self.gres, f"GRES of {self.name} (gpu or gpu:TYPE)")
        for number, what, top in ((self.per_node, "GPUs a node", 64), (self.cores, "cores", 512),
                                  (self.memory_gib, "GiB", 8192),
                                  (self.node_cores, "cores a node", 4096),
                                  (self.node_gib, "GiB a node", 65536)):
            if not isinstance(number, int) or not 1 <= number <= top:
                raise InvalidJobSpec(f"{self.name}: {what} must be 1 to {top}")

    @property
    def is_cpu(self) -> bool:
        return self.gres is None

    def nodes_for(self, units: int) -> int:
        return 1 if self.is_cpu else max(1, -(-units // self.per_node))


def default_catalog(per_node: int = GPUS_PER_NODE, partitions: dict[str, str] | None = None,
                    gres: dict[str, str] | None = None) -> dict[str, GpuType]:
    """The docs' table: b300, h200, h100, l40s (8 a node, 1 core and 8 GiB
    each) and cpu (2 GiB a unit), each in a partition of its name, with the
    partition and typed GRES names a site gives them."""
    partitions, gres = partitions or {}, gres or {}
    catalog = {t: GpuType(t, partitions.get(t, t), f"gpu:{gres.get(t, t)}", per_node)
               for t in GPU_TYPES}
    catalog[CPU] = GpuType(CPU, partitions.get(CPU, CPU), None, memory_gib=GIB_PER_CPU)
    return catalog


@dataclass(frozen=True)
class SlurmSite:
    """How this cluster names things and runs containers: site configuration."""

    catalog: dict[str, GpuType] = field(default_factory=default_catalog)
    runtime: str = "none"
    # The QoS every job asks for, unless its type names its own (a site
    # with AccountingStorageEnforce=qos requires one).
    qos: str | None = None
    # Whether divergent makes each org's Slurm account (sacctmgr), or the
    # site's admins map orgs to accounts they made.
    make_accounts: bool = True
    # Node-local folder for each run's scratch (workspace/ and mnt/).
    scratch_root: str = "/tmp"
    # Runtime `none`: read-only paths of the node's software beyond /usr and
    # /etc (where the site's Python lives, say), and PATH inside the run.
    bind_paths: tuple[str, ...] = ()
    path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    run_network: str = "isolated"
    org_nodes: str = "shared"

    def __post_init__(self) -> None:
        if self.qos is not None:
            _check(SLURM_NAME, self.qos, "QoS")
        if self.runtime not in RUNTIMES:
            raise InvalidJobSpec(f"runtime must be one of {', '.join(RUNTIMES)}")
        if self.run_network not in RUN_NETWORKS:
            raise InvalidJobSpec(f"run_network must be one of {', '.join(RUN_NETWORKS)}")
        if self.org_nodes not in ORG_NODES:
            raise InvalidJobSpec(f"org_nodes must be one of {', '.join(ORG_NODES)}")


INTERACTIVE_KINDS = ("shell", "notebook")
# A batch run's is a terminal beside its command, for `div shell RUN`.
BESIDE = "batch"
# Where the server serves a notebook run (Jupyter's base URL): /runs/<name>/notebook/.
BASE_URL = re.compile(r"^/[A-Za-z0-9._/-]*/$")


@dataclass(frozen=True)
class Interactive:
    """A run the server reaches (div shell, div notebook, and div shell RUN
    beside a batch run's command): what serves it on the job's own address,
    at which port, and how long it may go unused."""

    kind: str
    port: int
    idle_seconds: int
    base_url: str = "/"

    def __post_init__(self) -> None:
        if self.kind not in (BESIDE, *INTERACTIVE_KINDS):
            raise InvalidJobSpec(f"interactive kind must be one of {BESIDE}, "
                                 f"{', '.join(INTERACTIVE_KINDS)}")
        if not 1024 <= self.port <= 65535 or self.idle_seconds < 1:
            raise InvalidJobSpec("interactive port 1024..65535 and idle time at least 1 s")
        _check(BASE_URL, self.base_url, "notebook base URL")


@dataclass(frozen=True)
class ArrayMember:
    """One member of a sweep's job array: its run, state folder and env
    (the run's own with the sweep's values)."""

    run_name: str
    state_dir: str
    env: dict[str, str]


@dataclass(frozen=True)
class JobSpec:
    """One run as Slurm sees it (or, with `array`, a sweep's runs: each
    member's name, state folder and env replace the spec's own). Cores and memory are totals for the run."""

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
    # Whether the server wrote secrets for it: an attempt finds them in its
    # state folder or does not start.
    has_secrets: bool = False
    # Job ids that must end well (afterok) before this job starts: the
    # copies of the buckets a run mounts.
    after_jobs: tuple[str, ...] = ()
    array: tuple[ArrayMember, ...] = ()
    # Runtime pyxis: the image as the nodes pull and cache it, its size
    # (the pull line's), and whether its registry takes the org's login.
    image_source: str | None = None
    image_size: int = 0
    image_private: bool = False
    interactive: Interactive | None = None
    # Seconds between the samples of what the run uses on each node; 0: none.
    usage_interval: int = 0

    def __post_init__(self) -> None:
        validate(self)

    def hardware(self, site: SlurmSite) -> GpuType:
        """The catalog's type of this run, which must fit its nodes."""
        gpu = site.catalog.get(self.gpu_type)
        if gpu is None:
            raise InvalidJobSpec(f"this site sells no {self.gpu_type!r} "
                                 f"(it sells {', '.join(site.catalog)})")
        if not gpu.is_cpu and self.gpus > gpu.per_node and self.gpus % gpu.per_node:
            raise InvalidJobSpec(f"more than {gpu.per_node} GPUs must be a multiple of "
                                 f"{gpu.per_node} (whole nodes)")
        return gpu

    def nodes(self, site: SlurmSite) -> int:
        return self.hardware(site).nodes_for(self.gpus)

    def per_node(self, total: int, site: SlurmSite) -> int:
        return -(-total // self.nodes(site))


def _check(pattern: re.Pattern[str], value: str, what: str) -> None:
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
    if spec.image_source is not None:
        _check(IMAGE_SOURCE, spec.image_source, "image source")
    _check(STATE_PATH, spec.state_dir, "state folder")
    _check(RUN_NAME, spec.project, "project")
    _check(GPU_NAME, spec.gpu_type, "gpu type")
    if spec.gpus < 1:
        raise InvalidJobSpec("gpus must be at least 1")
    if spec.cpus < 1 or spec.memory_gib < 1:
        raise InvalidJobSpec("cpus and memory must be at least 1")
    if spec.time_limit_minutes is not None and spec.time_limit_minutes < 1:
        raise InvalidJobSpec("time limit must be at least 1 minute")
    if not isinstance(spec.usage_interval, int) or not 0 <= spec.usage_interval <= 3600:
        raise InvalidJobSpec("usage interval: 0 to 3600 seconds")
    for key in spec.env:
        check_env_name(key)
    for value in (spec.command, spec.state_dir, spec.volumes_dir, spec.code_dir or "",
                  spec.trees_dir or "", *spec.env.values()):
        if "\0" in value:
            raise InvalidJobSpec("values must not contain NUL bytes")
    for job in spec.after_jobs:
        _check(JOB_ID, job, "job id")
    for member in spec.array:
        _check(RUN_NAME, member.run_name, "run name")
        _check(STATE_PATH, member.state_dir, "state folder")
        for key, value in member.env.items():
            check_env_name(key)
            if "\0" in value:
                raise InvalidJobSpec("values must not contain NUL bytes")
    for path in (spec.state_dir, spec.volumes_dir, spec.code_dir, spec.trees_dir):
        if path is not None and not path.startswith("/"):
            raise InvalidJobSpec(f"paths must be absolute: {path!r}")
