#!/usr/bin/env bash
# A test bed of N "hosts" on this machine, for multi-host runs without any
# network beyond it (README, Multi-host runs):
#   scripts/hosts.sh up [N]     N hosts (default 2)
#   scripts/hosts.sh down       removes everything `up` made
#   scripts/hosts.sh status     what exists now
#
# Host i is a network namespace <prefix>-h<i> whose eth0 (one end of a veth
# pair; the other end, <prefix>-h<i>v, is on the bridge <prefix>-br) has the
# address <net>.<i+1>/24; the bridge holds <net>.254, so mpirun, started in
# the root namespace, reaches every host's launcher daemon. Addresses come
# from the benchmarking range 198.18.0.0/15; no namespace has a default
# route and nothing is forwarded out. A process started on host i by the
# launcher agent gets its own UTS namespace whose host name is
# <prefix>-h<i>, so MPI sees N nodes (MPI_Get_processor_name, shared-memory
# splits) and ranks on different hosts talk TCP.
#
# `up` writes into the state directory:
#   hostfile     one line per host, "<name> slots=<S>"
#   agent        OpenMPI's plm_rsh_agent: `agent HOST CMD...` runs CMD on
#                HOST (ip netns exec + unshare --uts, host name set)
#   mpirun_args  the mpirun options of this bed, one per line
# and prints the mpirun command line. /etc/hosts is not touched: ORTE
# passes the hostfile's names to the agent, and the daemons report their
# addresses themselves.
#
# Environment:
#   NDT_HOSTS_PREFIX=ndt        names of namespaces, bridge and veths
#                               (at most 8 characters)
#   NDT_HOSTS_NET=198.18.0      first three octets of the /24 used
#   NDT_HOSTS_DIR=/tmp/<prefix>-hosts  state directory
#   NDT_HOSTS_SLOTS=2           slots per host in the hostfile
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), iproute2 and unshare.
set -Eeuo pipefail

prefix=${NDT_HOSTS_PREFIX:-ndt}
net=${NDT_HOSTS_NET:-198.18.0}
dir=${NDT_HOSTS_DIR:-/tmp/$prefix-hosts}
slots=${NDT_HOSTS_SLOTS:-2}
bridge=$prefix-br

die() {
  echo "hosts: $*" >&2
  exit 1
}

[[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
  die "NDT_HOSTS_PREFIX '$prefix' must be 1-8 lower-case letters or digits"
[[ $net =~ ^198\.(18|19)\.([0-9]{1,3})$ ]] && ((BASH_REMATCH[2] < 256)) ||
  die "NDT_HOSTS_NET '$net' must be 198.18.X or 198.19.X (benchmarking range)"

# Namespaces of this bed that exist now (also ones a failed `up` left).
bed_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-h[0-9]+$" || true
}

down() {
  local ns pids
  for ns in $(bed_namespaces); do
    # Every process of the host: ranks, launcher daemons, agents' shells.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null || true
  done
  for ns in $(bed_namespaces); do
    ip link del "${ns}v" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$dir"
  local left
  left=$(bed_namespaces)
  [[ -z $left ]] || die "could not remove namespaces: $left"
  ! ip link show "$bridge" > /dev/null 2>&1 || die "could not remove $bridge"
}

up() {
  local n=$1 i ns
  ((n >= 1 && n <= 250)) || die "N must be 1..250, not $n"
  [[ -z $(bed_namespaces) ]] && ! ip link show "$bridge" > /dev/null 2>&1 ||
    die "a bed '$prefix' exists already; run '$0 down' first"
  if ip -o addr show | grep -q " inet $net\."; then
    die "$net.0/24 is in use on this machine; set NDT_HOSTS_NET"
  fi
  # A failure half way removes what was made.
  trap 'echo "hosts: up failed, removing what was made" >&2; down' ERR

  ip link add "$bridge" type bridge
  ip addr add "$net.254/24" dev "$bridge"
  ip link set "$bridge" up
  mkdir -p "$dir"
  : > "$dir/hostfile"
  for ((i = 0; i < n; ++i)); do
    ns=$prefix-h$i
    ip netns add "$ns"
    ip link add "${ns}v" type veth peer name "${ns}p"
    ip link set "${ns}p" netns "$ns"
    ip -n "$ns" link set "${ns}p" name eth0
    ip link set "${ns}v" master "$bridge"
    ip link set "${ns}v" up
    ip -n "$ns" addr add "$net.$((i + 1))/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    echo "$ns slots=$slots" >> "$dir/hostfile"
  done

  # ORTE runs `agent HOST CMD...` as it would run ssh: CMD is one shell
  # command line split into words.
  cat > "$dir/agent" <<EOF
#!/bin/sh
# plm_rsh_agent of the host bed '$prefix' (scripts/hosts.sh).
host=\$1
shift
case \$host in
  $prefix-h[0-9]*) ;;
  *) echo "agent: unknown host '\$host'" >&2; exit 255 ;;
esac
exec ip netns exec "\$host" unshare --uts sh -c "hostname \$host && \$*"
EOF
  chmod +x "$dir/agent"
  printf '%s\n' --hostfile "$dir/hostfile" \
    --mca plm_rsh_agent "$dir/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self \
    --mca oob_tcp_if_include "$net.0/24" \
    --mca btl_tcp_if_include "$net.0/24" > "$dir/mpirun_args"

  # Each host reaches the next one and the bridge: a TCP connection to a
  # closed port is refused at once when the peer is reachable.
  local to said
  for ((i = 0; i < n; ++i)); do
    for to in "$net.$(((i + 1) % n + 1))" "$net.254"; do
      said=$(ip netns exec "$prefix-h$i" timeout 3 bash -c \
        "exec 3<>/dev/tcp/$to/9" 2>&1 || true)
      [[ $said == *refused* ]] ||
        { echo "hosts: $prefix-h$i cannot reach $to: $said" >&2; false; }
    done
  done
  trap - ERR
  echo "hosts: $n hosts up ($net.1-$net.$n), state in $dir"
  echo "mpirun $(tr '\n' ' ' < "$dir/mpirun_args")-np $((n * slots)) ..."
}

status() {
  local ns
  for ns in $(bed_namespaces); do
    echo "$ns: $(ip -n "$ns" -o -4 addr show dev eth0 | awk '{print $4}')," \
      "$(ip netns pids "$ns" | wc -l) processes"
  done
  ip -o link show "$bridge" 2>/dev/null | awk '{print $2, $9}' || true
}

case ${1:-} in
  up) up "${2:-2}" ;;
  down) down ;;
  status) status ;;
  *) die "usage: $0 up [N] | down | status" ;;
esac
