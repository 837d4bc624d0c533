#!/bin/bash
# divergent run sweep-k4t9: rendered by slurm/script.py, safe to regenerate.
#SBATCH --job-name=div-sweep-k4t9
#SBATCH --account=acme
#SBATCH --partition=h100
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:h100:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --time=62
#SBATCH --array=0-1
#SBATCH --chdir=/srv/div/sweeps/acme/sweep-k4t9
#SBATCH --output=/srv/div/sweeps/acme/sweep-k4t9/slurm-%a.log
#SBATCH --error=/srv/div/sweeps/acme/sweep-k4t9/slurm-%a.log
#SBATCH --open-mode=append
#SBATCH --export=NONE
#SBATCH --requeue
#SBATCH --signal=USR1@45

set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
case "${SLURM_ARRAY_TASK_ID:-}" in
0) export div_env_decl='div_env=(LR=3e-4 SEED=1)' DIV_RUN=sweep-k4t9-0 div_state=/srv/div/runs/acme/sweep-k4t9-0 ;;
1) export div_env_decl='div_env=(LR=3e-4 '"'"'SEED=$(id)'"'"')' DIV_RUN=sweep-k4t9-1 div_state=/srv/div/runs/acme/sweep-k4t9-1 ;;
*) exit 1 ;;
esac
export DIV_PROJECT=classifier
export DIV_METRICS=/div/metrics.jsonl
export NNODES="$SLURM_JOB_NUM_NODES" PET_NNODES="$SLURM_JOB_NUM_NODES" WORLD_SIZE="$SLURM_JOB_NUM_NODES"
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR
export PET_MASTER_ADDR="$MASTER_ADDR"
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 40000))
export PET_MASTER_PORT="$MASTER_PORT"
export DIV_RESTART_COUNT="${SLURM_RESTART_COUNT:-0}"
export div_max_restarts=3
export div_volumes_dir=/srv/div/share/acme
export div_trees_dir=/srv/div/trees/acme
export div_code=/srv/div/trees/acme/classifier-code/9f31c2ab
export div_command='python -u -c '"'"'from train import run; run()'"'"''
export div_image=pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime
export div_scratch_root=/tmp
export div_gpus=yes
export div_launch='trap "" USR1; eval "$div_env_decl"; eval "$div_secrets_decl"; for div_kv in "${div_env[@]}" "${div_secrets[@]}"; do export -- "$div_kv"; done; _div_command=$div_command; unset -v "${!div_@}"; exec /bin/bash -c "$_div_command"'
export div_lines='import os
import select
import signal

for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
    signal.signal(sig, signal.SIG_IGN)
held = b""
while True:
    if held and not select.select([0], [], [], 0.2)[0]:
        os.write(1, held)
        held = b""
        continue
    data = os.read(0, 65536)
    if not data:
        break
    held += data
    cut = held.rfind(b"\n") + 1 or (len(held) if len(held) >= 1 << 20 else 0)
    view = memoryview(held)[:cut]
    while view:
        view = view[os.write(1, view):]
    held = held[cut:]
if held:
    os.write(1, held)
'
export div_usage_interval=10
export div_usage='"""What a run uses on this node, beside it, every few seconds: a line of
JSON appended to the state folder'"'"'s usage.<node>.jsonl (which the run'"'"'s
sandbox never sees). Standard library only; started by node.sh outside the
sandbox, as the job'"'"'s user, in the job'"'"'s cgroups, with nothing of the run'"'"'s
on its command line. Every line carries running totals since this attempt
began, so the server needs only a node'"'"'s last line for the run'"'"'s figures:
    {"time", "start", "attempt", "cpu_s", "memory", "memory_peak",
     "gpus": [[utilization %, memory bytes, watts], ...],
     "gpu_busy_s", "gpu_s", "gpu_memory_peak"}
CPU and memory come from the job'"'"'s cgroup (v1 or v2): all its steps, the
run'"'"'s processes and nothing else. GPU figures come from nvidia-smi for the
job'"'"'s own GPUs alone (job_gpus()); without it they are null, never invented.
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
    """{controller: the job'"'"'s folder} from /proc/self/cgroup'"'"'s lines: the
    job level (job_N), above the step this sampler runs in, so that every
    step of the job (pyxis runs the command in another) is counted."""
    found: dict[str, str] = {}
    for line in lines:
        _, controllers, path = line.rstrip("\n").split(":", 2)
        match = JOB_CGROUP.match(path)
        if match is None:
            continue
        job = match.group(1)
        if not controllers:     # v2'"'"'s one hierarchy (or v1'"'"'s hybrid "unified")
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
    """The job'"'"'s CPU time so far: cgroup v2'"'"'s cpu.stat, v1'"'"'s cpuacct."""
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
    """What the run'"'"'s processes hold: anonymous memory and tmpfs (its /tmp),
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
    """The job'"'"'s GPUs now, or None where there is no GPU telemetry. A GPU
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
        # Times are the start'"'"'s clock plus the monotonic clock since: a node
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
        """Now'"'"'s line; without `gpus_too`, the GPUs as last seen (the last
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
                "gpus": gpus,     # this sample'"'"'s (the charts'"'"'); the totals go on
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
    """The job'"'"'s GPUs as nvidia-smi -i takes them: Slurm'"'"'s global ids
    (SLURM_STEP_GPUS, SLURM_JOB_GPUS: never relative to a device cgroup,
    in the order of NVML'"'"'s own indices where gres.conf comes from NVML),
    else CUDA_VISIBLE_DEVICES; none when none of them is a list of ids."""
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = env.get(name, "")
        if re.fullmatch(r"\d+(,\d+)*", value):
            return value
    return ""


class Ending(Exception):
    """The node function'"'"'s TERM: the run has ended."""


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
    # line at once, without nvidia-smi, so that the run'"'"'s end waits on nothing.
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
'
export div_node_isolate=--div-isolate
export div_isolate=''
export div_job_hosts="/run/divergent/jobs/$SLURM_JOB_ID/hosts"
export div_python_env='if (cd / && python3 -I -m venv --system-site-packages --without-pip \
        /div/python) 2>/dev/null; then
    for div_pip in pip pip3; do
        printf '"'"'#!/bin/sh\nexec /div/python/bin/python -m pip "$@"\n'"'"' >/div/python/bin/$div_pip
        chmod +x /div/python/bin/$div_pip
    done
    export VIRTUAL_ENV=/div/python PATH="/div/python/bin:$PATH"
fi'
export div_bind_paths_decl='div_bind_paths=()'
div_end=$(SLURM_TIME_FORMAT=%s squeue --noheader --jobs="$SLURM_JOB_ID" --format=%e \
    2>/dev/null)
[[ $div_end =~ ^[0-9]+$ ]] && export DIV_DEADLINE=$div_end
if [ "$DIV_RESTART_COUNT" -gt "$div_max_restarts" ]; then
    echo "divergent: $DIV_RUN gives up: its nodes failed $DIV_RESTART_COUNT times" >>"$div_state/stderr"
    exit 1
elif [ "$DIV_RESTART_COUNT" -gt 0 ]; then
    echo "divergent: $DIV_RUN restarted after a node failure:" \
        "attempt $((DIV_RESTART_COUNT + 1)) of at most $((div_max_restarts + 1)), on $SLURM_JOB_NODELIST" \
        >>"$div_state/stderr"
fi
export div_secrets_decl=
: >>"$div_state/metrics.jsonl"

div_node() {
    # The run's own output goes straight to its files, so that srun's own
    # messages ("task 0: Exited with exit code 3") never mix into the log.
    # Several nodes append to one file: each through a relay that writes
    # whole lines, so that one node's line never lands inside another's.
    div_relays=()
    if [ "${SLURM_NNODES:-1}" -gt 1 ] && command -v python3 >/dev/null; then
        exec > >(exec python3 -I -c "$div_lines" >>"$div_state/stdout")
        div_relays+=($!)
        exec 2> >(exec python3 -I -c "$div_lines" >>"$div_state/stderr")
        div_relays+=($!)
    else
        exec >>"$div_state/stdout" 2>>"$div_state/stderr"
    fi
    eval "$div_bind_paths_decl"
    # One process a node: torch.distributed's env:// and torchrun (PET_*)
    # read the node's place in the run from these.
    export NODE_RANK=$SLURM_NODEID PET_NODE_RANK=$SLURM_NODEID RANK=$SLURM_NODEID
    # Slurm's warning (--signal) comes to this shell alone, Slurm's task:
    # div_warn passes it on to every process of the run.
    div_warned=0
    trap 'div_warned=1; div_warn' USR1
    scratch=$(mktemp -d "$div_scratch_root/div-$DIV_RUN.XXXXXX") || exit 1
    trap div_cleanup EXIT
    trap 'exit 143' TERM INT
    mkdir -p "$scratch/workspace" "$scratch/mnt"
    if [ -n "$div_code" ]; then
        cp -a "$div_code/." "$scratch/workspace/" || exit 1
    fi
    volumes=()
    local dir name
    for dir in "$div_volumes_dir"/*/; do
        name=$(basename "$dir")
        [[ -d $dir && $name =~ ^[a-z0-9_-][a-z0-9._-]{0,62}$ ]] && volumes+=("$name")
    done
    # In the background, with the warning ignored (bwrap, apptainer and the
    # run's processes inherit that), so that `wait` gives way to div_warn.
    (trap '' USR1; div_exec) &
    div_child=$!
    div_sample
    local rc
    while :; do
        wait "$div_child"
        rc=$?
        # The warning ended the wait, not the child: wait again.
        [ "$div_warned" = 1 ] || break
        div_warned=0
    done
    div_sampled
    # Per attempt: one on a node Slurm gave up on may still write.
    echo "$rc" >"$div_state/exit.$DIV_RESTART_COUNT.$SLURM_NODEID"
    # The first rank to fail gives the run its exit code: the others may
    # fail because it did. Made once (noclobber opens with O_EXCL).
    [ "$rc" = 0 ] || (set -C; echo "$rc" >"$div_state/exit.$DIV_RESTART_COUNT.first") 2>/dev/null
    exit "$rc"
}

# What the run uses on this node (slurm/batch/usage.py), beside it and
# outside its sandbox, until it ends; with the node's Python, when it has one.
div_sample() {
    div_sampler=
    # shellcheck disable=SC2154  # from the values block
    [ "$div_usage_interval" -gt 0 ] && command -v python3 >/dev/null || return 0
    # The program travels in the environment: ps on the node shows one short line.
    (trap '' USR1; DIV_USAGE_PROGRAM=$div_usage exec python3 -I -c \
        'import os; exec(os.environ.pop("DIV_USAGE_PROGRAM"))' \
        "$div_state/usage.$SLURM_NODEID.jsonl" "$div_usage_interval" "$div_child" \
        </dev/null >/dev/null 2>&1) &
    div_sampler=$!
    # Not a job of this shell's: killed by anyone, it is no notice in the run's log.
    disown "$div_sampler"
}

# Its last line, written as it is told the run has ended: a moment at most,
# never waited on longer (the run's end is never held by it).
div_sampled() {
    [ -n "$div_sampler" ] || return 0
    kill "$div_sampler" 2>/dev/null
    for _ in $(seq 200); do
        kill -0 "$div_sampler" 2>/dev/null || return 0
        sleep 0.01
    done
    kill -KILL "$div_sampler" 2>/dev/null
}

# Every process under the runtime's (div_child), found in one pass over one
# ps, so that the time between reading pids and signalling them stays short
# however many processes the run makes (the same window Slurm's own
# proctrack has): ours ignore the warning, and so does each of the run's
# that has not asked for it (see LAUNCH).
div_warn() {
    [ -n "${div_child:-}" ] || return 0
    # shellcheck disable=SC2046  # one word a pid: the list is the arguments
    { kill -USR1 $(ps -e -o pid=,ppid= | awk -v root="$div_child" '
        { kids[$2] = kids[$2] " " $1 }
        END { queue = root
              while (queue != "") {
                  n = split(queue, now, " "); queue = ""
                  for (i = 1; i <= n; i++) if (!(now[i] in seen)) {
                      seen[now[i]]; print now[i]; queue = queue kids[now[i]] }
              } }'); } 2>/dev/null
}

# Stored trees are bound over the volume's own code/ folder, when that is a
# folder: a file or link a member put there fails no run (the link would
# lead only within the sandbox anyway).
div_has_trees() {
    [ -n "$div_trees_dir" ] && [ -d "$div_trees_dir/$1" ] &&
        [ -d "$div_volumes_dir/$1/code" ] && [ ! -L "$div_volumes_dir/$1/code" ]
}

div_is_volume() {
    local v
    for v in "${volumes[@]}"; do [ "$v" = "$1" ] && return 0; done
    return 1
}

div_cleanup() {
    local entry name totals
    for entry in "$scratch"/mnt/* "$scratch"/mnt/.[!.]*; do
        [ -e "$entry" ] || continue
        name=$(basename "$entry")
        div_is_volume "$name" && continue
        totals=$(find "$entry" -type f -printf '%s\n' | awk '{n++; s+=$1} END {print n+0, s+0}')
        [ "${totals% *}" -gt 0 ] || continue
        # Decimal units, as the upload line writes them: 1.6 KB, never 0.0 MB.
        awk -v b="${totals#* }" -v n="$name" 'BEGIN {
            split("KB MB GB TB", units); size = b "";
            if (b >= 1000) { for (i = 1; b >= 1000 && i <= 4; i++) { b /= 1000; u = units[i] }
                             size = sprintf("%.1f %s", b, u) } else size = b " B";
            printf "%s written to /mnt/%s was lost: it is not a volume\n", size, n }' >&2
    done
    rm -rf "$scratch"
    # The relays write what they hold once nothing writes to them; a moment
    # at most (the run's processes are gone: its sandbox died with it).
    exec >&- 2>&-
    for _ in $(seq 50); do
        kill -0 "${div_relays[@]}" 2>/dev/null || break
        sleep 0.1
    done
}

div_exec() {
    local args=(--die-with-parent --unshare-user --unshare-pid --unshare-ipc --cap-drop ALL
        --disable-userns
        --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib
        --symlink usr/lib64 /lib64 --symlink usr/sbin /sbin
        --proc /proc --ro-bind /dev/null /proc/keys --ro-bind /dev/null /proc/key-users
        --dev /dev --tmpfs /tmp
        --bind "$scratch/mnt" /mnt --bind "$scratch/workspace" /workspace
        --bind "$div_state/metrics.jsonl" "$DIV_METRICS"
        --bind "$scratch/python" /div/python
        --setenv HOME /workspace --chdir /workspace)
    local etc
    for etc in passwd group nsswitch.conf hosts hostname resolv.conf host.conf gai.conf \
        services protocols localtime timezone ssl ca-certificates pki ld.so.cache \
        ld.so.conf ld.so.conf.d alternatives os-release mime.types /etc/python3*; do
        args+=(--ro-bind-try "/etc/${etc#/etc/}" "/etc/${etc#/etc/}")
    done
    # The job's own network names its nodes by their addresses in it.
    [ -f "$div_job_hosts" ] && args+=(--ro-bind "$div_job_hosts" /etc/hosts)
    local p v
    # shellcheck disable=SC2154  # declared by div_node's eval of div_bind_paths_decl
    for p in "${div_bind_paths[@]}"; do args+=(--ro-bind "$p" "$p"); done
    for p in /dev/nvidia* /dev/dri; do [ -e "$p" ] && args+=(--dev-bind "$p" "$p"); done
    for v in "${volumes[@]}"; do
        args+=(--bind "$div_volumes_dir/$v" "/mnt/$v")
        div_has_trees "$v" && args+=(--ro-bind "$div_trees_dir/$v" "/mnt/$v/code")
    done
    mkdir -p "$scratch/python"
    bwrap "${args[@]}" /bin/bash -c "$div_python_env
$div_launch"
}

srun --export=ALL --kill-on-bad-exit=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" ${div_node_isolate:+"$div_node_isolate"} \
    /bin/bash -c "$(declare -f div_node div_warn div_sample div_sampled div_has_trees div_is_volume div_cleanup \
        div_exec div_image_file div_pull_reason); div_node" \
    >>"$div_state/slurm.log" 2>&1
rc=$?
first=$(cat "$div_state/exit.$DIV_RESTART_COUNT.first" 2>/dev/null)
[ -n "$first" ] && exit "$first"
rank0=$(cat "$div_state/exit.$DIV_RESTART_COUNT.0" 2>/dev/null || echo "$rc")
[ "$rank0" != 0 ] && exit "$rank0"
exit "$rc"
