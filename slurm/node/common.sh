# shellcheck shell=bash disable=SC2034  # the scripts that source this use its settings
# Shared by divergent's prolog and epilog: the job's names and addresses.
CONF=${DIV_NODE_CONF:-/etc/slurm/divergent-node.conf}
# shellcheck source=/dev/null
. "$CONF"
JOB=${SLURM_JOB_ID:?}
NODE=${SLURMD_NODENAME:?}
[[ $JOB =~ ^[0-9]+$ ]] || { echo "divergent prolog: job id $JOB" >&2; exit 1; }
JOB_DIR=/run/divergent/jobs/$JOB
VETH=dj$JOB
TABLE=div_job_$JOB
# The node's end of every job's veth: the jobs' default route.
GATEWAY=169.254.0.1
PIDS_ROOT=${PIDS_ROOT:-/sys/fs/cgroup/pids/divergent}

# JOB_SUBNETS="node1=10.81 node2=10.82": each node's /16 for its jobs.
node_prefix() {
    local entry
    for entry in $JOB_SUBNETS; do
        [ "${entry%%=*}" = "$1" ] && { echo "${entry#*=}"; return 0; }
    done
    echo "divergent prolog: $1 has no job prefix in $CONF" >&2
    return 1
}

job_address() { echo "$1.$(((JOB >> 8) & 255)).$((JOB & 255))"; }

job_networks() {
    local entry out=()
    for entry in $JOB_SUBNETS; do out+=("${entry#*=}.0.0/16"); done
    (IFS=,; echo "${out[*]}")
}

# Slurm 22.05 names it SLURM_NODELIST in the prolog, later ones SLURM_JOB_NODELIST.
job_nodes() { scontrol show hostnames "${SLURM_JOB_NODELIST:-${SLURM_NODELIST:?}}"; }

peer_addresses() {
    local node
    while read -r node; do job_address "$(node_prefix "$node")"; done < <(job_nodes)
}

JOB_ADDR=$(job_address "$(node_prefix "$NODE")")

job_cleanup() {
    nft delete table inet "$TABLE" 2>/dev/null
    ip link del "$VETH" 2>/dev/null
    umount "$JOB_DIR/net" 2>/dev/null
    rm -rf "$JOB_DIR"
    local cgroup="$PIDS_ROOT/$NODE/job_$JOB" _
    # The job's last processes may still be leaving.
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        [ -d "$cgroup" ] || break
        rmdir "$cgroup" 2>/dev/null && break
        sleep 0.5
    done
    return 0
}
