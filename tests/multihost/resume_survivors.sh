#!/usr/bin/env bash
# Resume on the survivors: a GPT run at dp=4 over 2 namespace hosts (2 ranks
# each) loses host ndtt-h1 (every process on it SIGKILLed) after its
# checkpoint at step 20; the job must end non-zero. The run then resumes
# with train.resume=latest in the same run directory on the ranks left,
# dp=2 on ndtt-h0 alone, and the losses it logs (only steps after the
# checkpoint) must continue those of an uninterrupted dp=4 run over both
# hosts within verify's tolerance (relative 1e-5; the layouts differ only
# in fp32 summation order). Every checkpoint the lost run left must be
# complete (manifest, sizes and CRC-32 of its files).
# Usage: resume_survivors.sh NDTRAIN_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
source "$src/tests/multihost/bed.sh"
bed_up "$src" 2

steps=300
cfg=(-c "$src/configs/verify/gpt.yaml" train.steps=$steps train.log_every=1
     train.checkpoint_every=20 train.eval_samples=64 train.threads=1
     comm.timeout_s=10)

fail() {
  echo "FAIL: $*"
  exit 1
}

# Losses of the metrics lines after the first SKIP lines: "step loss".
losses() {  # losses RUN_DIR SKIP
  python3 - "$1/metrics.jsonl" "$2" <<'PY'
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    if i < int(sys.argv[2]):
        continue
    j = json.loads(line)
    if "loss" in j:
        print(j["step"], repr(j["loss"]))
PY
}

# 1. The uninterrupted reference: dp=4 over both hosts.
timeout 300 "${bed_mpirun[@]}" -np 4 "$bin" train "${cfg[@]}" parallel.dp=4 \
  run.dir="$work/full" > "$work/full.log" 2>&1 ||
  { cat "$work/full.log"; fail "uninterrupted run"; }

# 2. The same run; host ndtt-h1 is lost once checkpoint step-20 exists.
"${bed_mpirun[@]}" -np 4 "$bin" train "${cfg[@]}" parallel.dp=4 \
  run.dir="$work/cut" > "$work/cut.log" 2>&1 &
job=$!
for _ in $(seq 1 3000); do
  [[ -f $work/cut/checkpoints/step-20/manifest.json ]] && break
  kill -0 $job 2>/dev/null || break
  sleep 0.01
done
[[ -f $work/cut/checkpoints/step-20/manifest.json ]] ||
  { cat "$work/cut.log"; fail "no checkpoint step-20 while the run lived"; }
t0=$(now)
kill -9 $(ip netns pids ndtt-h1)
ip link set ndtt-h1v down  # and the host stays unreachable
while kill -0 $job 2>/dev/null; do
  sleep 0.1
  if (($(elapsed "$t0" | cut -d. -f1) > 30)); then
    kill -9 $job; fail "the job lived 30 s after losing ndtt-h1"
  fi
done
wait $job
rc=$?
echo "lost host ndtt-h1: job ended $(elapsed "$t0") s later, exit code $rc"
((rc != 0)) || fail "exit code 0 after losing a host"
last=$(tail -1 "$work/cut/metrics.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])')
echo "the lost run logged up to step $last of $steps"
((last < steps)) || fail "the run finished before the host was lost"

# Every checkpoint left is complete and intact.
check_checkpoints "$work/cut/checkpoints" || fail "a checkpoint of the lost run is damaged"
ckpt=$(ls "$work/cut/checkpoints" | grep -E '^step-[0-9]+$' | sort -t- -k2 -n | tail -1)

# 3. Resume on the survivors: dp=2 on ndtt-h0.
seen=$(wc -l < "$work/cut/metrics.jsonl")
timeout 300 "${bed_mpirun[@]}" --host ndtt-h0:2 -np 2 "$bin" train "${cfg[@]}" \
  parallel.dp=2 train.resume=latest run.dir="$work/cut" > "$work/resume.log" 2>&1 ||
  { cat "$work/resume.log"; fail "resume on the survivors"; }
grep -m1 "ndtrain: data parallel" "$work/resume.log"

python3 - "${ckpt#step-}" "$steps" <(losses "$work/full" 0) \
  <(losses "$work/cut" "$seen") <<'PY'
import sys
start, steps = int(sys.argv[1]), int(sys.argv[2])
def read(p):
    w = open(p).read().split()
    return {int(s): float(l) for s, l in zip(w[0::2], w[1::2])}
full, resumed = read(sys.argv[3]), read(sys.argv[4])
want = list(range(start + 1, steps + 1))
if sorted(full) != list(range(1, steps + 1)):
    print(f"FAIL: the uninterrupted run logged {len(full)} steps"); sys.exit(1)
if sorted(resumed) != want:
    print(f"FAIL: the resumed run logged steps {min(resumed, default=None)}.."
          f"{max(resumed, default=None)}, want {want[0]}..{want[-1]}"); sys.exit(1)
diffs = {s: abs(resumed[s] - full[s]) / abs(full[s]) for s in want}
worst = max(diffs, key=diffs.get)
print(f"resumed from step {start} at dp=2 on one host: steps {want[0]}-{want[-1]}, "
      f"loss at step {want[0]} {resumed[want[0]]!r} vs {full[want[0]]!r}, "
      f"at step {steps} {resumed[steps]!r} vs {full[steps]!r}; "
      f"max rel diff {diffs[worst]:.2e} at step {worst} (tolerance 1e-05)")
sys.exit(0 if diffs[worst] <= 1e-5 else 1)
PY
(($? == 0)) || fail "resumed losses differ from the uninterrupted run"
echo PASS
