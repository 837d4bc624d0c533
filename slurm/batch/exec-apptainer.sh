div_exec() {
    local args=(exec --contain --pid --ipc --pwd /workspace
        --bind "$scratch/workspace:/workspace" --bind "$scratch/mnt:/mnt"
        --bind "$div_state/metrics.jsonl:$DIV_METRICS") v
    [ "$div_gpus" = yes ] && args+=(--nv)
    for v in "${volumes[@]}"; do
        args+=(--bind "$div_volumes_dir/$v:/mnt/$v")
        div_has_trees "$v" && args+=(--bind "$div_trees_dir/$v:/mnt/$v/code:ro")
    done
    [ -f "$div_job_hosts" ] && args+=(--bind "$div_job_hosts:/etc/hosts:ro")
    apptainer "${args[@]}" "docker://$div_image" /bin/bash -c "$div_launch"
}
