#!/usr/bin/env bash
# Quality of the shipped configs across seeds: trains each config with
# every seed (train.seed=S, everything else as shipped, train.threads=2)
# and reads its final evaluation from metrics.jsonl. Prints one line per
# run (result, training seconds), then per config the median and the
# spread (min .. max) against its target, and last
# quality_targets_met=K/N (a config meets its target when the median of
# its seeds does).
#
# Targets: fashion_mlp test accuracy >= 90.5%, fashion_vit >= 89.5%,
# fortunes_gpt validation loss <= 1.60 nats/byte; each run <= 600 s of
# training.
#
# Environment:
#   NDT_QUALITY_CONFIGS="fashion_mlp fashion_vit fortunes_gpt"
#   NDT_QUALITY_SEEDS="1 2 3"
#   NDTRAIN=build/ndtrain
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

NDTRAIN=${NDTRAIN:-build/ndtrain}
CONFIGS=${NDT_QUALITY_CONFIGS:-fashion_mlp fashion_vit fortunes_gpt}
SEEDS=${NDT_QUALITY_SEEDS:-1 2 3}
[[ -x $NDTRAIN ]] || { echo "quality: $NDTRAIN not found (scripts/setup.sh)" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ndt_quality.XXXXXX")
echo "quality: runs in $WORK; $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

results=$WORK/results.tsv
: >"$results"
for cfg in $CONFIGS; do
  [[ -f configs/$cfg.yaml ]] || { echo "quality: no configs/$cfg.yaml" >&2; exit 1; }
  for seed in $SEEDS; do
    dir=$WORK/${cfg}_seed$seed
    if ! OMP_NUM_THREADS=2 "$NDTRAIN" train -c "configs/$cfg.yaml" \
        "train.seed=$seed" train.threads=2 "run.dir=$dir" >"$dir.log" 2>&1; then
      tail -n 20 "$dir.log" >&2
      echo "quality: $cfg seed $seed failed (log $dir.log)" >&2
      exit 1
    fi
    /usr/bin/python3 - "$cfg" "$seed" "$dir/metrics.jsonl" >>"$results" <<'PY'
import json, sys
cfg, seed, path = sys.argv[1:]
last_eval, seconds = None, 0.0
for line in open(path):
    j = json.loads(line)
    if "eval_loss" in j:
        last_eval = j
    seconds = max(seconds, j.get("train_seconds", 0.0))
if last_eval is None:
    sys.exit(f"quality: no evaluation in {path}")
value = last_eval.get("eval_accuracy", last_eval["eval_loss"])
print(f"{cfg}\t{seed}\t{value}\t{seconds}")
PY
    tail -n 1 "$results" | awk -F'\t' '{printf "quality: %s seed %s: %s after %.0f s of training\n", $1, $2, $3, $4}'
  done
done

/usr/bin/python3 - "$results" <<'PY'
import statistics, sys
targets = {"fashion_mlp": (">=", 0.905, "test accuracy"),
           "fashion_vit": (">=", 0.895, "test accuracy"),
           "fortunes_gpt": ("<=", 1.60, "validation loss, nats/byte")}
runs = {}
for line in open(sys.argv[1]):
    cfg, seed, value, seconds = line.rstrip("\n").split("\t")
    runs.setdefault(cfg, []).append((float(value), float(seconds)))
met = 0
print("%-13s %6s %9s %19s %9s %12s %s" % ("config", "seeds", "median", "spread", "target",
                                          "max_train_s", "met"))
for cfg, rs in runs.items():
    vals = [v for v, _ in rs]
    med = statistics.median(vals)
    op, goal, what = targets.get(cfg, ("", None, "?"))
    slow = max(s for _, s in rs)
    ok = goal is not None and slow <= 600 and (med >= goal if op == ">=" else med <= goal)
    met += ok
    print("%-13s %6d %9.4f %8.4f .. %-8.4f %2s %6.3f %12.0f %s (%s)" % (
        cfg, len(rs), med, min(vals), max(vals), op, goal or 0, slow,
        "yes" if ok else "no", what))
print(f"quality_targets_met={met}/{len(runs)}")
PY
