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
