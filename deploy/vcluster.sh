#!/usr/bin/env bash
# A real Slurm cluster on one Linux machine, for elastic's tests, benchmarks and demos.
#
#   deploy/vcluster.sh install   # Debian packages it needs, only those missing (root)
#   deploy/vcluster.sh up        # bridge + N network namespaces ec-n1..ec-nN, each with its
#                                # own address, sshd and slurmd; munged + slurmctld on the host
#   deploy/vcluster.sh status    # what runs; exit 0 only when every part is up
#   deploy/vcluster.sh env       # the exports that point salloc and elasticd at it
#   deploy/vcluster.sh down      # stop what `up` started (by recorded pid) and remove it
#
# Nodes node1..nodeN live at 10.200.0.11..10.200.0.1N on bridge br-ec (10.200.0.1). The
# namespaces share this machine's file system, as a real cluster's nodes share home: the
# project's .venv is at the same path on every node.
#
# Why things are done the way they are (facts gathered while building it are in deploy/README.md):
# - daemons enter a namespace with nsenter, never `ip netns exec` (which remounts /sys, and
#   slurmd then dies on a missing /sys/fs/cgroup); `unshare --uts` gives each node its name;
# - munged, sshd, slurmd, slurmctld are started by hand and stopped by the pid in their
#   pidfile after checking that the pid still runs our command line (never by name);
# - everything lives under $VCLUSTER_STATE (default /run/elastic-vcluster): keys, configs,
#   logs; nothing in /etc is touched, so salloc needs SLURM_CONF (see `env`);
# - `up` and `down` may be re-run at any point: each step checks before it acts, and `down`
#   removes only the links and namespaces listed in $STATE/owned.
set -euo pipefail

STATE=${VCLUSTER_STATE:-/run/elastic-vcluster}
NODES=${VCLUSTER_NODES:-3}
BRIDGE=br-ec
SUBNET=10.200.0
PACKAGES=(slurm-wlm munge openssh-server openssh-client procps iproute2 util-linux e2fsprogs openmpi-bin libopenmpi-dev gcc libc6-dev)

die() { echo "vcluster: $*" >&2; exit 1; }
say() { echo "vcluster: $*"; }

require_root() { [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces need CAP_NET_ADMIN)"; }
check_nodes() { [[ "$NODES" =~ ^[1-9]$ ]] || die "VCLUSTER_NODES must be 1..9, not '$NODES'"; }

# ---- packages -----------------------------------------------------------------------------
missing_packages() {
    local p
    for p in "${PACKAGES[@]}"; do
        [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || echo "$p"
    done
}

cmd_install() {
    require_root
    local missing
    missing=$(missing_packages | tr '\n' ' ')
    if [ -z "${missing// /}" ]; then
        say "packages present: ${PACKAGES[*]}"
        return 0
    fi
    command -v apt-get >/dev/null || die "missing packages ($missing) and no apt-get to install them"
    say "installing $missing"
    # The lists may be stale or absent on a fresh machine; update once, then install.
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    missing=$(missing_packages | tr '\n' ' ')
    [ -z "${missing// /}" ] || die "still missing after apt-get: $missing"
    say "installed"
}

# ---- pids we own ----------------------------------------------------------------------------
# A pidfile's pid is ours only while that process's command line still names our state dir.
owned_pid() {
    local pidfile=$1 pid
    [ -s "$pidfile" ] || return 1
    pid=$(tr -dc '0-9' <"$pidfile")
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline")" == *"$STATE"* ]] || return 1
    echo "$pid"
}

# Live = exists and is not a zombie (this machine's init may reap orphans late).
alive_pid() {
    local st
    st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [ -n "$st" ] && [ "$st" != Z ]
}

stop_pidfile() {
    local what=$1 pidfile=$2 pid child i
    pid=$(owned_pid "$pidfile") || { rm -f "$pidfile"; return 0; }
    # sshd leaves its sessions running when the listener stops: they are children we
    # started through it, so they go too (by their parent pid, not by name).
    for child in $(ps -o pid= --ppid "$pid" 2>/dev/null); do kill -TERM "$child" 2>/dev/null || true; done
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 100); do
        alive_pid "$pid" || break
        sleep 0.05
    done
    if alive_pid "$pid"; then
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
    fi
    rm -f "$pidfile"
    say "stopped $what (pid $pid)"
}

# ---- configuration --------------------------------------------------------------------------
node_addr() { echo "$SUBNET.1$1"; }

write_configs() {
    local i ctl
    mkdir -p "$STATE"/{log,ssh,state,spool} "$STATE/munge"
    chmod 755 "$STATE"
    # Keys: one client key for root, one host key per node.
    [ -s "$STATE/ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C elastic-vcluster -f "$STATE/ssh/id_ed25519"
    cp "$STATE/ssh/id_ed25519.pub" "$STATE/ssh/authorized_keys"
    for i in $(seq "$NODES"); do
        [ -s "$STATE/ssh/host_ed25519_n$i" ] || ssh-keygen -q -t ed25519 -N '' -C "node$i" -f "$STATE/ssh/host_ed25519_n$i"
    done
    chmod 700 "$STATE/ssh"
    cat >"$STATE/sshd_config" <<EOF
# sshd for the vcluster nodes; started once per namespace with its own ListenAddress.
AuthorizedKeysFile $STATE/ssh/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
AcceptEnv LANG LC_* SLURM_* ELASTIC*
MaxStartups 100:30:200
MaxSessions 100
ClientAliveInterval 15
EOF
    {
        echo "# ssh_config for the vcluster nodes: ssh -F $STATE/ssh_config node1"
        for i in $(seq "$NODES"); do
            printf 'Host node%s\n    HostName %s\n' "$i" "$(node_addr "$i")"
        done
        cat <<EOF
Host node*
    User root
    IdentityFile $STATE/ssh/id_ed25519
    IdentitiesOnly yes
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    BatchMode yes
    LogLevel ERROR
    ConnectTimeout 5
EOF
    } >"$STATE/ssh_config"

    if [ ! -s "$STATE/munge/munge.key" ]; then
        dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
    fi
    chown -R munge:munge "$STATE/munge"
    chmod 711 "$STATE/munge"  # munged: the socket dir must be searchable by all
    chmod 400 "$STATE/munge/munge.key"

    ctl=$(hostname -s)
    cat >"$STATE/slurm.conf" <<EOF
# Slurm for the elastic vcluster (written by deploy/vcluster.sh; SLURM_CONF points here)
ClusterName=elasticvc
SlurmctldHost=$ctl($SUBNET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$STATE/state
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=30
Waittime=0
NodeName=node[1-$NODES] NodeAddr=$SUBNET.[11-1$NODES] CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

# ---- network --------------------------------------------------------------------------------
own() { grep -qxF "$1" "$STATE/owned" 2>/dev/null || echo "$1" >>"$STATE/owned"; }

# has_addr NETNS DEV CIDR ("" = this namespace). Captured first: with pipefail, `ip | grep -q`
# fails when grep stops reading early.
has_addr() {
    local out
    if [ -n "$1" ]; then out=$(ip -n "$1" addr show dev "$2"); else out=$(ip addr show dev "$2"); fi
    [[ "$out" == *"inet $3 "* ]]
}

net_up() {
    local i ns
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        own "link $BRIDGE"
    fi
    has_addr "" "$BRIDGE" "$SUBNET.1/24" || ip addr add "$SUBNET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for i in $(seq "$NODES"); do
        ns=ec-n$i
        if [ ! -e "/run/netns/$ns" ]; then
            ip netns add "$ns"
            own "netns $ns"
        fi
        if ! ip link show "veth-n$i" >/dev/null 2>&1; then
            ip link add "veth-n$i" type veth peer name eth0 netns "$ns"
            own "link veth-n$i"
        fi
        ip link set "veth-n$i" master "$BRIDGE" up
        has_addr "$ns" eth0 "$(node_addr "$i")/24" || ip -n "$ns" addr add "$(node_addr "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
    done
}

net_down() {
    local kind name
    [ -f "$STATE/owned" ] || return 0
    # Namespaces last: deleting a veth end removes its peer inside the namespace too.
    while read -r kind name; do
        [ "$kind" = link ] && [ "$name" != "$BRIDGE" ] && ip link del "$name" 2>/dev/null && say "removed link $name"
    done <"$STATE/owned"
    while read -r kind name; do
        [ "$kind" = netns ] && ip netns del "$name" 2>/dev/null && say "removed namespace $name"
    done <"$STATE/owned"
    while read -r kind name; do
        [ "$kind" = link ] && [ "$name" = "$BRIDGE" ] && ip link del "$name" 2>/dev/null && say "removed bridge $name"
    done <"$STATE/owned"
    rm -f "$STATE/owned"
}

# Runs a command as node $1: in its network namespace, under its own host name.
in_node() {
    local i=$1; shift
    nsenter --net="/run/netns/ec-n$i" unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$i" "$@"
}

# ---- daemons --------------------------------------------------------------------------------
start_munged() {
    owned_pid "$STATE/munge/munged.pid" >/dev/null && return 0
    mkdir -p /run/munge
    su -s /bin/sh munge -c "/usr/sbin/munged --key-file=$STATE/munge/munge.key \
        --socket=$STATE/munge/munge.socket --pid-file=$STATE/munge/munged.pid \
        --log-file=$STATE/munge/munged.log --seed-file=$STATE/munge/munged.seed" \
        || die "munged did not start; see $STATE/munge/munged.log"
    wait_for "munged" 30 owned_pid "$STATE/munge/munged.pid"
    say "started munged (pid $(owned_pid "$STATE/munge/munged.pid"))"
}

# Up = its pidfile names our slurmctld and it answers a ping: the slurmds that start next
# register with it, and salloc asks it.
slurmctld_answers() {
    local out
    owned_pid "$STATE/slurmctld.pid" >/dev/null || return 1
    out=$(SLURM_CONF="$STATE/slurm.conf" scontrol ping 2>/dev/null) || return 1
    [[ "$out" == *" is UP"* ]]
}

start_slurmctld() {
    owned_pid "$STATE/slurmctld.pid" >/dev/null && return 0
    /usr/sbin/slurmctld -f "$STATE/slurm.conf" || die "slurmctld did not start; see $STATE/log/slurmctld.log"
    wait_for "slurmctld" 60 slurmctld_answers
    say "started slurmctld (pid $(owned_pid "$STATE/slurmctld.pid"))"
}

start_sshd() {
    local i=$1
    owned_pid "$STATE/sshd-n$i.pid" >/dev/null && return 0
    mkdir -p /run/sshd
    in_node "$i" /usr/sbin/sshd -f "$STATE/sshd_config" -o "ListenAddress=$(node_addr "$i")" \
        -o "HostKey=$STATE/ssh/host_ed25519_n$i" -o "PidFile=$STATE/sshd-n$i.pid" \
        -E "$STATE/log/sshd-n$i.log" || die "sshd for node$i did not start; see $STATE/log/sshd-n$i.log"
    wait_for "sshd on node$i" 30 owned_pid "$STATE/sshd-n$i.pid"
    say "started sshd for node$i (pid $(owned_pid "$STATE/sshd-n$i.pid"))"
}

start_slurmd() {
    local i=$1
    owned_pid "$STATE/slurmd-node$i.pid" >/dev/null && return 0
    mkdir -p "$STATE/spool/node$i"
    in_node "$i" /usr/sbin/slurmd -f "$STATE/slurm.conf" -N "node$i" \
        || die "slurmd for node$i did not start; see $STATE/log/slurmd-node$i.log"
    wait_for "slurmd on node$i" 60 owned_pid "$STATE/slurmd-node$i.pid"
    say "started slurmd for node$i (pid $(owned_pid "$STATE/slurmd-node$i.pid"))"
}

# wait_for WHAT SECONDS CMD...: poll CMD every 0.1 s until it succeeds, for SECONDS of real
# time. The bounds are for a loaded machine (a CI run on 2 cores beside other tests), where a
# daemon's start and each try (an sinfo, a ping) take seconds, not for an idle one: a bound
# that runs out says something is wrong, not slow.
wait_for() {
    local what=$1 bound=$2; shift 2
    local deadline=$((SECONDS + bound))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || die "$what not ready after $bound s (logs in $STATE/log)"
        sleep 0.1
    done
}

nodes_idle() {
    local out
    out=$(SLURM_CONF="$STATE/slurm.conf" sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
    [ "$(echo "$out" | grep -c ' idle$')" -eq "$NODES" ]
}

cmd_up() {
    require_root
    check_nodes
    local i
    if [ -n "$(missing_packages)" ]; then cmd_install; fi
    mkdir -p "$STATE"
    write_configs
    net_up
    start_munged
    for i in $(seq "$NODES"); do start_sshd "$i"; done
    start_slurmctld
    for i in $(seq "$NODES"); do start_slurmd "$i"; done
    wait_for "all $NODES nodes idle in Slurm" 60 nodes_idle
    say "up: node[1-$NODES] at $SUBNET.[11-1$NODES]; state in $STATE"
    cmd_env
}

cmd_down() {
    require_root
    local i
    if [ ! -d "$STATE" ]; then
        say "nothing to stop ($STATE does not exist)"
        return 0
    fi
    for i in $(seq 9); do
        [ -e "$STATE/slurmd-node$i.pid" ] && stop_pidfile "slurmd node$i" "$STATE/slurmd-node$i.pid"
        [ -e "$STATE/sshd-n$i.pid" ] && stop_pidfile "sshd node$i" "$STATE/sshd-n$i.pid"
    done
    stop_pidfile slurmctld "$STATE/slurmctld.pid"
    stop_pidfile munged "$STATE/munge/munged.pid"
    net_down
    # Keep the logs for a post-mortem; everything else (keys, configs, Slurm state) goes.
    find "$STATE" -mindepth 1 -maxdepth 1 ! -name log -exec rm -rf {} +
    say "down (logs kept in $STATE/log)"
}

cmd_status() {
    local ok=0 i pid
    report() {  # report NAME PIDFILE
        if pid=$(owned_pid "$2"); then printf '  %-18s running (pid %s)\n' "$1" "$pid"
        else printf '  %-18s stopped\n' "$1"; ok=1; fi
    }
    echo "vcluster state in $STATE"
    report munged "$STATE/munge/munged.pid"
    report slurmctld "$STATE/slurmctld.pid"
    for i in $(seq "$NODES"); do
        if [ -e "/run/netns/ec-n$i" ]; then printf '  %-18s present (%s)\n' "namespace ec-n$i" "$(node_addr "$i")"
        else printf '  %-18s absent\n' "namespace ec-n$i"; ok=1; fi
        report "sshd node$i" "$STATE/sshd-n$i.pid"
        report "slurmd node$i" "$STATE/slurmd-node$i.pid"
    done
    if [ "$ok" -eq 0 ] && [ -f "$STATE/slurm.conf" ]; then
        SLURM_CONF="$STATE/slurm.conf" sinfo -N -o '  %N %t' 2>/dev/null || true
    fi
    return "$ok"
}

cmd_env() {
    echo "export SLURM_CONF=$STATE/slurm.conf"
    echo "export ELASTIC_SSH_CONFIG=$STATE/ssh_config"
}

case "${1:-}" in
    install) cmd_install ;;
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *) echo "usage: $0 install|up|down|status|env   (env: VCLUSTER_STATE, VCLUSTER_NODES)" >&2; exit 2 ;;
esac
