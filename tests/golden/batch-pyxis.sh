#!/bin/bash
# divergent run run-k4t9: rendered by slurm/script.py, safe to regenerate.
#SBATCH --job-name=div-run-k4t9
#SBATCH --account=acme
#SBATCH --partition=h100
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:h100:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --time=62
#SBATCH --chdir=/srv/div/runs/acme/run-k4t9
#SBATCH --output=/srv/div/runs/acme/run-k4t9/slurm.log
#SBATCH --error=/srv/div/runs/acme/run-k4t9/slurm.log
#SBATCH --open-mode=append
#SBATCH --export=NONE
#SBATCH --requeue
#SBATCH --signal=USR1@45

set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export div_env_decl='div_env=(LR=3e-4)' DIV_RUN=run-k4t9 div_state=/srv/div/runs/acme/run-k4t9
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
export div_node_isolate=''
export div_isolate=--div-isolate
export div_job_hosts="/run/divergent/jobs/$SLURM_JOB_ID/hosts"
export div_image_source='10.77.0.1:5000#div/python@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'
export div_image_size='65.4 MB'
export div_image_login=''
export div_image_failed=image.failed
export div_command_started=command.started
export div_bind_paths_decl='div_bind_paths=(/opt/conda)'
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
    local rc
    while :; do
        wait "$div_child"
        rc=$?
        # The warning ended the wait, not the child: wait again.
        [ "$div_warned" = 1 ] || break
        div_warned=0
    done
    # Per attempt: one on a node Slurm gave up on may still write.
    echo "$rc" >"$div_state/exit.$DIV_RESTART_COUNT.$SLURM_NODEID"
    # The first rank to fail gives the run its exit code: the others may
    # fail because it did. Made once (noclobber opens with O_EXCL).
    [ "$rc" = 0 ] || (set -C; echo "$rc" >"$div_state/exit.$DIV_RESTART_COUNT.first") 2>/dev/null
    exit "$rc"
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

# The image's file on this node (slurm/node/image-pull): from the node's
# cache, or pulled into it first, which the run's log says. A pull that
# fails ends the run with enroot's reason and marks it: free unless a node ran it.
div_image_file() {
    local pull=/usr/local/lib/divergent/image-pull login=() log
    # shellcheck disable=SC2154  # div_image_* come from the values block
    [ -n "$div_image_login" ] && login=(--private "$div_state/$div_image_login")
    "$pull" --cached "${login[@]}" "$div_image_source" 2>/dev/null && return 0
    echo "divergent: pulling $div_image on $SLURMD_NODENAME ($div_image_size)" >&2
    log="$div_state/image-pull.$SLURMD_NODENAME.log"
    "$pull" "${login[@]}" "$div_image_source" 2>"$log" && return 0
    echo "divergent: could not pull $div_image on $SLURMD_NODENAME: $(div_pull_reason "$log")" >&2
    : >"$div_state/$div_image_failed"
    return 125
}

# enroot's reason in a pull's log, else its last word (sudo's, say).
div_pull_reason() {
    if grep -q '\[ERROR\]' "$1"; then
        sed -n 's/^.*\[ERROR\] //p' "$1" | tail -n 1
    else
        grep -v '^[[:space:]]*$' "$1" | tail -n 1
    fi
}

# `pyxis`: a step of its own on this node, in the image (read-only, each
# run's writes in an overlay of its own), through enroot.
div_exec() {
    local image
    image=$(div_image_file) || return $?
    # shellcheck disable=SC2154  # from the values block
    : >"$div_state/$div_command_started"
    local mounts="$scratch/workspace:/workspace,$scratch/mnt:/mnt,$div_state/metrics.jsonl:$DIV_METRICS" v
    for v in "${volumes[@]}"; do
        mounts+=",$div_volumes_dir/$v:/mnt/$v"
        div_has_trees "$v" && mounts+=",$div_trees_dir/$v:/mnt/$v/code:ro"
    done
    [ -f "$div_job_hosts" ] && mounts+=",$div_job_hosts:/etc/hosts:ro"
    # --export=ALL: under the job's --export=NONE a step would get none of
    # the div_* values LAUNCH needs. The step's output goes to this node's
    # own (its files, or the relays), opened by slurmstepd on this node;
    # srun's own lines ("task 0: Exited with exit code 3") to Slurm's log.
    srun --overlap --export=ALL --nodes=1 --ntasks=1 --nodelist="$SLURMD_NODENAME" \
        ${div_isolate:+"$div_isolate"} --div-container --container-image="$image" --container-mounts="$mounts" \
        --container-workdir=/workspace --no-container-mount-home \
        --output="/proc/$BASHPID/fd/1" --error="/proc/$BASHPID/fd/2" --open-mode=append \
        /bin/bash -c "$div_launch" >>"$div_state/slurm.log" 2>&1
}

srun --export=ALL --kill-on-bad-exit=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" ${div_node_isolate:+"$div_node_isolate"} \
    /bin/bash -c "$(declare -f div_node div_warn div_has_trees div_is_volume div_cleanup \
        div_exec div_image_file div_pull_reason); div_node" \
    >>"$div_state/slurm.log" 2>&1
rc=$?
first=$(cat "$div_state/exit.$DIV_RESTART_COUNT.first" 2>/dev/null)
[ -n "$first" ] && exit "$first"
rank0=$(cat "$div_state/exit.$DIV_RESTART_COUNT.0" 2>/dev/null || echo "$rc")
[ "$rank0" != 0 ] && exit "$rank0"
exit "$rc"
