#!/usr/bin/env bash
# Only rank 0 holds the serial model in a verify: a 4-rank dp=4 verify of a
# GPT (1.7M parameters) runs the serial run on rank 0 and the floor runs on
# ranks 1 and 2; rank 3 runs neither, so it never holds a copy of the
# serial model, and its memory peak must stay below rank 0's by at least
# the serial model's training state (parameters, gradients and AdamW's two
# moments: 16 bytes per parameter). Rank 3 receives the serial tensors
# one parameter at a time.
# Usage: verify_memory.sh NDTRAIN_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
mpirun --oversubscribe --bind-to none -np 4 "$bin" verify \
  -c "$src/configs/verify/gpt.yaml" model.dim=256 model.heads=4 \
  model.mlp_dim=1024 parallel.dp=4 train.threads=1 verify.steps=2 \
  >"$out" 2>&1
rc=$?
cat "$out"
if ((rc != 0)) || ! grep -q '^verify: PASS$' "$out"; then
  echo "FAIL: the verify did not pass (exit $rc)"
  exit 1
fi
params=$(sed -n 's/^verify: gpt (\([0-9]*\) parameters).*/\1/p' "$out")
peaks=$(sed -n 's/^verify: memory peak per rank (MiB): \([0-9. ]*\) (.*/\1/p' "$out")
read -r -a mib <<<"$peaks"
if [[ -z $params ]] || ((${#mib[@]} != 4)); then
  echo "FAIL: no parameter count or no memory line for 4 ranks"
  exit 1
fi
awk -v p="$params" -v r0="${mib[0]}" -v r3="${mib[3]}" 'BEGIN {
  state = 16 * p / 1048576
  printf "rank 0 %.1f MiB, rank 3 %.1f MiB: %.1f MiB apart; serial training state %.1f MiB\n", r0, r3, r0 - r3, state
  if (r0 - r3 >= state) { print "PASS"; exit 0 }
  print "FAIL: rank 3 holds about a serial model more than it needs"
  exit 1
}'
