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
