# shellcheck shell=bash disable=SC2034  # the scripts that source this use its settings
# Settings and helpers shared by slurm/dev/up and slurm/dev/down.
# Every setting can be overridden from the environment.

# The profile: `docs`, the docs' cluster (every node with 8 of each of the
# docs' GPU types), or `site2`, a site unlike it (typed A100 nodes of 4, a
# node of untyped GPUs behind its own partition, a `gpu` partition with a
# MaxTime, QoS enforced, accounts made by the admin beforehand).
PROFILE=${DIV_DEV_PROFILE:-docs}
case "$PROFILE" in
    docs) NODES=${DIV_DEV_NODES:-4}; CLUSTER=${DIV_DEV_CLUSTER:-divdev}; SUFFIX= ;;
    site2) NODES=3; CLUSTER=divsite2; SUFFIX=-site2 ;;
    *) echo "slurm/dev: error: DIV_DEV_PROFILE is docs or site2, not $PROFILE" >&2; exit 1 ;;
esac
STATE=${DIV_DEV_STATE:-/var/lib/div-dev}
CONF_DIR=${DIV_DEV_SLURM_CONF_DIR:-/etc/slurm}
# site2's accounts, made as a site's admins would (sacctmgr, before divergent
# runs), and the QoS its jobs must ask for.
SITE2_ACCOUNTS=(lab-e2e lab-other)
SITE2_QOS=div
SITE2_MAXTIME=30
DEV_ACCOUNT=${DIV_DEV_ACCOUNT:-dev}
SERVICE_USER=${DIV_SERVICE_USER:-divergent}
BRIDGE=div-br0
BRIDGE_ADDR=10.77.0.1
CTL_HOST=$(hostname -s)
GPU_TYPES=(b300 h200 h100 l40s)
GPUS_PER_TYPE=8
NODE_MEMORY_MB=$((336 * 1024))
# The accounting database is local to this machine and the dev cluster only.
# divergent's prolog, epilog and SPANK plugin, as a site installs them.
NODE_PARTS=${DIV_DEV_NODE_PARTS:-/usr/local/lib/divergent}
# The dev S3 server's port on the bridge: the one thing outside their job
# that runs reach. Processes and threads of a job on a node, at most.
S3_PORT=${DIV_S3_PORT:-18080}
PIDS_MAX=${DIV_DEV_PIDS_MAX:-4096}
# Where interactive runs serve in their jobs' networks (the server's [interactive] port).
INTERACTIVE_PORT=62888
# Images (runtime pyxis, slurm/dev/containers): the registry on the bridge
# (and 127.0.0.1, for pushing), its storage, and the nodes' image cache and
# the user that owns it (slurm/node/image-pull).
REGISTRY_PORT=${DIV_DEV_REGISTRY_PORT:-5000}
REGISTRY_STORAGE=${DIV_DEV_REGISTRY_STORAGE:-$STATE/registry}
# The same images behind a login (USER:PASSWORD in REGISTRY_LOGIN, root's):
# a private registry for runs whose org holds the login in its secrets.
PRIVATE_REGISTRY_PORT=${DIV_DEV_PRIVATE_REGISTRY_PORT:-5001}
REGISTRY_LOGIN=$STATE/registry-private.login
IMAGE_USER=div-images
IMAGE_CACHE=${DIV_DEV_IMAGE_CACHE:-$STATE/images}
DB_PASSWORD=${DIV_DEV_DB_PASSWORD:-div-dev-slurm}
# Seconds an accounting query may wait for a lock (Slurm's recommended value).
# Not a setting: slurmdbd exits on a shorter wait that runs out (slurm/dev/up).
DB_LOCK_WAIT=900

say() { echo "slurm/dev: $*" >&2; }
die() { say "error: $*"; exit 1; }

node_addr() { echo "10.77.0.$((10 + $1))"; }
# Node i's jobs' addresses: 10.(80+i).x.y (slurm/node/prolog).
job_prefix() { echo "10.$((80 + $1))"; }

pid_file() { echo "$STATE/run/$1.up.pid"; }

# A pid is alive when its process exists and is not a zombie: this machine's
# init reaps orphans slowly, so a dead daemon lingers as Z for a while.
pid_alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

alive() {
    local f
    f=$(pid_file "$1")
    [ -s "$f" ] && pid_alive "$(cat "$f")"
}

# Starts a daemon in the foreground mode of its own, detached from this shell,
# and records its pid for `down`.
start_daemon() {
    local name=$1
    shift
    mkdir -p "$STATE/run" "$STATE/log"
    setsid "$@" >>"$STATE/log/$name.out" 2>&1 </dev/null &
    echo $! >"$(pid_file "$name")"
}

wait_for() {
    # A deadline, not a count of tries: one try can itself take seconds
    # (sinfo waits for a controller that is not there).
    local what=$1 deadline=$((SECONDS + 30))
    shift
    while [ "$SECONDS" -lt "$deadline" ]; do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    die "$what did not come up within 30 s; logs are in $STATE/log"
}

# Writes $2 from stdin only when the content differs; says whether it did.
write_if_changed() {
    local target=$1 mode=$2 tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if [ -f "$target" ] && cmp -s "$tmp" "$target"; then
        rm -f "$tmp"
        return 1
    fi
    install -D -m "$mode" "$tmp" "$target"
    rm -f "$tmp"
    return 0
}
