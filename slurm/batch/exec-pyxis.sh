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
