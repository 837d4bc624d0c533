div_exec() {
    local mounts="$scratch/workspace:/workspace,$scratch/mnt:/mnt,$div_state/metrics.jsonl:$DIV_METRICS" v
    for v in "${volumes[@]}"; do
        mounts+=",$div_volumes_dir/$v:/mnt/$v"
        div_has_trees "$v" && mounts+=",$div_trees_dir/$v:/mnt/$v/code:ro"
    done
    [ -f "$div_job_hosts" ] && mounts+=",$div_job_hosts:/etc/hosts:ro"
    # --export=ALL: under the job's --export=NONE a step would get none of
    # the div_* values LAUNCH needs.
    srun --overlap --export=ALL --nodes=1 --ntasks=1 --nodelist="$SLURMD_NODENAME" \
        ${div_isolate:+"$div_isolate"} --container-image="$div_image" --container-mounts="$mounts" \
        --container-workdir=/workspace --no-container-mount-home \
        /bin/bash -c "$div_launch"
}
