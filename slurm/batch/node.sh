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
