# Sourced by the tests in tests/multihost: a bed of namespace hosts
# (scripts/hosts.sh) of the test's own, under the prefix "ndtt" and the
# network 198.19.77.0/24, removed again when the test exits, however it
# exits (a guardian process cleans up after a SIGKILL too, and each test
# removes what a killed run may have left before it starts). One test at a
# time holds the bed (a lock).
#
#   bed_up SOURCE_DIR N   N hosts of 2 slots; sets bed_dir, bed_mpirun
#                         (array: the mpirun command of the bed) and work
#                         (a scratch directory, removed on exit)
#
# Where the kernel refuses network namespaces (no privilege, no support),
# bed_up prints a loud SKIP line and exits 0: the tests need the bed.
export NDT_HOSTS_PREFIX=ndtt NDT_HOSTS_NET=198.19.77
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1

bed_cleanup() {
  "$bed_src/scripts/hosts.sh" down > /dev/null 2>&1 ||
    echo "bed: WARNING: hosts.sh down failed; run NDT_HOSTS_PREFIX=ndtt $bed_src/scripts/hosts.sh down"
  [[ -n ${KEEP:-} || -z ${work:-} ]] || rm -rf "$work"
}

bed_up() {
  bed_src=$1
  local n=$2 why
  if ! why=$(unshare --net true 2>&1); then
    echo "SKIP: ******** the kernel refuses network namespaces here" \
      "($why); multi-host tests not run ********"
    exit 0
  fi
  if ! why=$(unshare --uts true 2>&1); then
    echo "SKIP: ******** the kernel refuses UTS namespaces here" \
      "($why); multi-host tests not run ********"
    exit 0
  fi
  # The lock is on /tmp itself, so that no file is left behind.
  exec 9< /tmp
  flock -w 240 9 || { echo "FAIL: another multi-host test held the bed for 240 s"; exit 1; }
  work=$(mktemp -d)
  export NDT_HOSTS_DIR=$work/bed
  trap bed_cleanup EXIT
  trap 'exit 130' INT TERM
  # A guardian removes the bed also when this shell dies without running
  # its traps (SIGKILL from a ctest timeout): it polls this shell's pid in a
  # session of its own, and holds the lock (fd 9) until it has cleaned up.
  local me=$$
  setsid bash -c 'trap "" INT TERM HUP
    while kill -0 '"$me"' 2>/dev/null; do sleep 0.5; done
    "$0"/scripts/hosts.sh down > /dev/null 2>&1
    [[ -n $1 ]] || rm -rf "$2"' "$bed_src" "${KEEP:-}" "$work" \
    < /dev/null > /dev/null 2>&1 &
  "$bed_src/scripts/hosts.sh" down > /dev/null 2>&1 || true  # a killed run's
  "$bed_src/scripts/hosts.sh" up "$n" || { echo "FAIL: hosts.sh up $n"; exit 1; }
  bed_dir=$NDT_HOSTS_DIR
  bed_mpirun=("$bed_dir/mpirun" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
}

# Seconds since the epoch, with fractions.
now() {
  date +%s.%N
}

# elapsed T0: seconds since T0, one decimal.
elapsed() {
  awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'
}

# check_checkpoints DIR: every step-N under DIR has its manifest, and each
# file the manifest lists has the size and CRC-32 it states. Prints one
# line per checkpoint; exit code 1 if any is damaged.
check_checkpoints() {
  python3 - "$1" <<'PY'
import json, os, sys, zlib
root, ok = sys.argv[1], True
for d in sorted(os.listdir(root), key=lambda d: (len(d), d)):
    if d.startswith("."):
        print(f"{d}: hidden temporary, not a checkpoint")
        continue
    m = json.load(open(os.path.join(root, d, "manifest.json")))
    good = True
    for name, info in m["files"].items():
        data = open(os.path.join(root, d, name), "rb").read()
        good &= len(data) == info["bytes"] and zlib.crc32(data) == info["crc32"]
    ok &= good
    print(f"{d}: step {m['step']}, {len(m['files'])} files, "
          f"{'intact' if good else 'DAMAGED'}")
sys.exit(0 if ok else 1)
PY
}
