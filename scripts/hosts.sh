#!/usr/bin/env bash
# A test bed of N "hosts" on this machine, for multi-host runs without any
# network beyond it (README, Multi-host runs):
#   scripts/hosts.sh up [N]     N hosts (default 2) and a head node
#   scripts/hosts.sh down       removes everything `up` made
#   scripts/hosts.sh status     what exists now
#   scripts/hosts.sh link RATE  shapes every host's link to RATE (tc tbf,
#                               e.g. 10gbit, 1gbit); `link off` removes it
#
# Host i is a network namespace <prefix>-h<i> whose eth0 (one end of a veth
# pair; the other end, <prefix>-h<i>v, is a port of the bridge <prefix>-br
# in the root namespace) has the address <net>.<i+1>/24. The head node,
# where mpirun runs, is the namespace <prefix>-head with <net>.254 on the
# same bridge. Addresses come from the benchmarking range 198.18.0.0/15;
# no namespace has a default route and the bridge has no address, so
# nothing leaves the bed and the root namespace's own network is not
# changed. Every process the launcher starts on a host, and mpirun on the
# head node, gets its own UTS namespace whose host name is the node's
# name, so MPI sees N nodes (MPI_Get_processor_name, shared-memory splits)
# and ranks on different hosts talk TCP.
#
# A cut link leaves TCP connections silent, not closed. So that mpirun
# notices within seconds (not TCP's default 15 minutes) that a host is
# gone, the bed's namespaces give up on unacknowledged data after
# tcp_retries2=2 retransmissions (3-4 s here; the default, 15, takes about
# 15 minutes) and mpirun's daemons send keepalives
# after 2 s of silence (oob_tcp_keepalive_*); a cluster sets the same on
# its nodes (sysctl net.ipv4.tcp_retries2, README).
#
# `up` writes into the state directory:
#   hostfile     one line per host, "<name> slots=<S>"
#   agent        OpenMPI's plm_rsh_agent: `agent HOST CMD...` runs CMD on
#                HOST (ip netns exec + unshare --uts, host name set)
#   mpirun_args  the mpirun options of this bed, one per line
#   mpirun       `mpirun ARGS...` on the head node with those options
# and prints the mpirun command line. No file outside the state
# directory is written (/etc/hosts is not needed: ORTE hands the
# hostfile's names to the agent, and the daemons report their addresses);
# /run/netns, which ip netns mounts on first use, is removed by `down` if
# `up` made it.
#
# Environment:
#   NDT_HOSTS_PREFIX=ndt        names of namespaces, bridge and veths
#                               (1-8 lower-case letters or digits)
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
head=$prefix-head

die() {
  echo "hosts: $*" >&2
  exit 1
}

[[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
  die "NDT_HOSTS_PREFIX '$prefix' must be 1-8 lower-case letters or digits"
[[ $net =~ ^198\.(18|19)\.([0-9]{1,3})$ ]] && ((BASH_REMATCH[2] < 256)) ||
  die "NDT_HOSTS_NET '$net' must be 198.18.X or 198.19.X (benchmarking range)"
[[ $dir =~ ^/[A-Za-z0-9._/-]+$ ]] ||
  die "NDT_HOSTS_DIR '$dir' must be an absolute path without spaces"

# Namespaces of this bed that exist now (also ones a failed `up` left).
bed_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' |
    grep -E "^$prefix-(h[0-9]+|head)$" || true
}

bed_hosts() {
  bed_namespaces | grep -v -- "-head$" || true
}

down() {
  local ns pids
  for ns in $(bed_namespaces); do
    # Every process of the node: ranks, launcher daemons, mpirun, shells.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
  done
  for ns in $(bed_namespaces); do
    ip link del "${ns}v" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  if [[ -f $dir/made_run_netns && -d /run/netns ]] &&
    [[ -z $(ls -A /run/netns) ]]; then
    while mountpoint -q /run/netns; do umount /run/netns || break; done
    rmdir /run/netns 2>/dev/null || true
  fi
  rm -rf "$dir"
  local left
  left=$(bed_namespaces)
  [[ -z $left ]] || die "could not remove namespaces: $left"
  ! ip link show "$bridge" > /dev/null 2>&1 || die "could not remove $bridge"
}

# add_node NAMESPACE ADDRESS: a namespace on the bridge.
add_node() {
  local ns=$1 addr=$2
  ip netns add "$ns"
  ip link add "${ns}v" type veth peer name "${ns}p"
  ip link set "${ns}p" netns "$ns"
  ip -n "$ns" link set "${ns}p" name eth0
  ip link set "${ns}v" master "$bridge"
  ip link set "${ns}v" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  # Per namespace: a silent peer fails a connection with unacknowledged
  # data after seconds instead of ~15 min.
  ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_retries2=2
}

up() {
  local n=$1 i
  ((n >= 1 && n <= 250)) || die "N must be 1..250, not $n"
  [[ -z $(bed_namespaces) ]] && ! ip link show "$bridge" > /dev/null 2>&1 ||
    die "a bed '$prefix' exists already; run '$0 down' first"
  if ip -o addr show | grep -q " inet $net\."; then
    die "$net.0/24 is in use on this machine; set NDT_HOSTS_NET"
  fi
  # A failure half way removes what was made.
  trap 'echo "hosts: up failed, removing what was made" >&2; down' ERR

  mkdir -p "$dir"
  # ip netns keeps its namespaces under /run/netns, a mount point it makes
  # on first use; `down` removes it again if `up` made it.
  [[ -d /run/netns ]] || touch "$dir/made_run_netns"
  ip link add "$bridge" type bridge
  ip link set "$bridge" up
  : > "$dir/hostfile"
  add_node "$head" "$net.254"
  for ((i = 0; i < n; ++i)); do
    add_node "$prefix-h$i" "$net.$((i + 1))"
    echo "$prefix-h$i slots=$slots" >> "$dir/hostfile"
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
    --mca btl_tcp_if_include "$net.0/24" \
    --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 \
    --mca oob_tcp_keepalive_probes 3 > "$dir/mpirun_args"
  cat > "$dir/mpirun" <<EOF
#!/bin/sh
# mpirun on the head node of the host bed '$prefix' (scripts/hosts.sh).
exec ip netns exec $head unshare --uts sh -c 'hostname $head && exec "\$0" "\$@"' \\
  mpirun $(tr '\n' ' ' < "$dir/mpirun_args")"\$@"
EOF
  chmod +x "$dir/mpirun"

  # Each host and the head node reach one another: a TCP connection to a
  # closed port is refused at once when the peer is reachable.
  local from to said
  for ((i = 0; i < n; ++i)); do
    for from in "$prefix-h$i" "$head"; do
      to=$net.254
      [[ $from == "$head" ]] && to=$net.$((i + 1))
      said=$(ip netns exec "$from" timeout 3 bash -c \
        "exec 3<>/dev/tcp/$to/9" 2>&1 || true)
      [[ $said == *refused* ]] ||
        { echo "hosts: $from cannot reach $to: $said" >&2; false; }
    done
  done
  trap - ERR
  echo "hosts: $n hosts up ($net.1-$net.$n, head node $net.254), state in $dir"
  echo "$dir/mpirun -np $((n * slots)) ... runs:"
  echo "ip netns exec $head mpirun $(tr '\n' ' ' < "$dir/mpirun_args")-np $((n * slots)) ..."
}

# link RATE|off: token bucket on both ends of every host's link, so each
# host sends and receives at most RATE.
link() {
  local rate=$1 ns
  for ns in $(bed_hosts); do
    tc qdisc del dev "${ns}v" root 2>/dev/null || true
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    [[ $rate == off ]] && continue
    tc qdisc add dev "${ns}v" root tbf rate "$rate" burst 256kb latency 5ms
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" \
      burst 256kb latency 5ms
  done
}

status() {
  local ns
  for ns in $(bed_namespaces); do
    echo "$ns: $(ip -n "$ns" -o -4 addr show dev eth0 | awk '{print $4}')," \
      "$(ip netns pids "$ns" | wc -l) processes," \
      "link $(ip -o link show "${ns}v" | grep -o 'state [A-Z]*')," \
      "qdisc $(tc qdisc show dev "${ns}v" | awk 'NR==1{print $2, $0 ~ /rate/ ? $0 : ""}' | sed 's/ qdisc.*rate/ rate/; s/burst.*//')"
  done
  ip -o link show "$bridge" 2>/dev/null | awk '{print $2, $9}' || true
}

case ${1:-} in
  up) up "${2:-2}" ;;
  down) down ;;
  status) status ;;
  link) [[ -n ${2:-} ]] || die "usage: $0 link RATE|off"; link "$2" ;;
  *) die "usage: $0 up [N] | down | status | link RATE|off" ;;
esac
