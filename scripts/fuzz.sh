#!/usr/bin/env bash
# Fuzzes the readers of untrusted input with libFuzzer (tests/fuzz): the
# config loader (YAML text + key=value overrides), the safetensors reader,
# the checkpoint manifest loader and the IDX reader.
#   scripts/fuzz.sh [SECONDS]   each target for SECONDS (default 30)
# Builds the harnesses with clang, ASan and UBSan into build-fuzz/ (the g++
# build in build/ is not touched), seeds each target from real files
# (tests/fuzz/corpus, tests/fuzz/checkpoint, configs/, and the first
# records of the Fashion-MNIST files), then runs the targets one after
# another. Prints the executions per target; exits non-zero if any target
# finds a crash, a sanitizer error, a hang (> 10 s per input), a leak or
# an out-of-memory. Inputs that fail are kept in build-fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
targets=(config safetensors manifest idx)
out=build-fuzz

if ! command -v clang++ > /dev/null; then
  echo "fuzz: clang++ not found; run scripts/setup.sh --fuzz" >&2
  exit 1
fi
cmake -S . -B "$out" -DNDT_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$out.log" 2>&1 \
  || { cat "$out.log"; exit 1; }
cmake --build "$out" -j2 --target "${targets[@]/#/fuzz_}" >> "$out.log" 2>&1 \
  || { tail -50 "$out.log"; exit 1; }
rm -f "$out.log"

# Seeds generated from real files.
seeds=$out/seeds
rm -rf "$seeds"
mkdir -p "$seeds/config" "$seeds/idx"
i=0
for f in configs/*.yaml configs/verify/*.yaml; do
  [[ -f $f ]] || continue
  cp "$f" "$seeds/config/$i.yaml"
  # The same file with overrides (NUL-separated after the YAML text).
  { cat "$f"; printf '\0train.steps=5\0optim.lr=0.01\0model.hidden=[8, 8]'; } \
    > "$seeds/config/$i-overrides"
  i=$((i + 1))
done
fmnist=/usr/share/datasets/fashion-mnist
if [[ -d $fmnist ]]; then
  # Mode byte (tests/fuzz/fuzz_idx.cpp): 0 labels, 2 images, compressed by
  # the harness; 1 and 3 the gzip bytes as they are.
  python3 - "$fmnist" "$seeds/idx" << 'EOF'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for name, mode, per in (("t10k-labels-idx1-ubyte.gz", 0, 1),
                        ("t10k-images-idx3-ubyte.gz", 2, 784)):
    raw = gzip.open(f"{src}/{name}").read()
    ndims = raw[3]
    head = bytearray(raw[:4 + 4 * ndims])
    struct.pack_into(">I", head, 4, 3)  # the first 3 records only
    small = bytes(head) + raw[4 + 4 * ndims:4 + 4 * ndims + 3 * per]
    open(f"{dst}/{name}.raw", "wb").write(bytes([mode]) + small)
    open(f"{dst}/{name}.gz", "wb").write(
        bytes([mode | 1]) + gzip.compress(small))
EOF
fi

seed_dirs() {
  case $1 in
    config) echo "$seeds/config" ;;
    safetensors) echo tests/fuzz/checkpoint ;;
    manifest) echo tests/fuzz/corpus/manifest ;;
    idx) echo "$seeds/idx" ;;
  esac
}

status=0
for t in "${targets[@]}"; do
  corpus=$out/corpus/$t
  artifacts=$out/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  log=$out/fuzz_$t.log
  rc=0
  # shellcheck disable=SC2046
  "$out/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 \
    -max_len=16384 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$corpus" $(seed_dirs "$t") > "$log" 2>&1 || rc=$?
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
  if ((rc)); then
    echo "fuzz: $t FAILED (exit $rc) after ${execs:-?} executions; see $log"
    grep -m1 -E "ERROR|SUMMARY" "$log" || true
    ls "$artifacts"
    status=1
  else
    echo "fuzz: $t ${execs:-?} executions in $secs s, no crash, hang or leak"
  fi
done
exit $status
