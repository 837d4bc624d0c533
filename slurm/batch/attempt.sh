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
