#!/usr/bin/env bash
# Large-batch study: a small ViT on Fashion-MNIST trained for the same
# number of epochs at global batch B, 8B and 32B (B = 128) with SGD
# (momentum), AdamW, LARS and LAMB; reports the final test accuracy per
# (optimizer, batch) as a table (docs/large_batch.md) and a plot
# (docs/large_batch.png).
#
# Learning-rate scaling from the base rate at B (k = batch / B):
#   SGD, LARS:   lr = base * k          (linear scaling, Goyal et al.)
#   AdamW, LAMB: lr = base * sqrt(k)    (square-root scaling)
# with linear warmup over the first 10% of steps and cosine decay to 0.
# NDT_LB_EPOCHS (default 2) sets the epochs; NDT_LB_THREADS the threads.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${NDT_SKIP_SETUP:-0}" != 1 ]]; then scripts/setup.sh --bench; fi
EPOCHS=${NDT_LB_EPOCHS:-2}
THREADS=${NDT_LB_THREADS:-0}
OUT=${NDT_LB_OUT:-runs/large_batch}
mkdir -p "$OUT" docs
BASE_B=128
# optimizer name, base lr at B=128, scaling (lin|sqrt), extra overrides
OPTS=(
  "sgd 0.05 lin optim.momentum=0.9 optim.weight_decay=5e-4"
  "adamw 1e-3 sqrt optim.weight_decay=0.05"
  "lars 2.0 lin optim.momentum=0.9 optim.weight_decay=5e-4 optim.trust_coef=0.001"
  "lamb 2e-3 sqrt optim.weight_decay=0.05 optim.eps=1e-6"
)
results="$OUT/results.txt"
: > "$results"
for spec in "${OPTS[@]}"; do
  read -r name base scale extra <<<"$spec"
  for k in 1 8 32; do
    B=$((BASE_B * k))
    steps=$(( (EPOCHS * 60000 + B - 1) / B ))
    warm=$(( steps / 10 ))
    lr=$(/usr/bin/python3 -c "import math; print($base * ($k if '$scale' == 'lin' else math.sqrt($k)))")
    dir="$OUT/${name}_b$B"
    echo "== $name batch $B: $steps steps, lr $lr"
    # shellcheck disable=SC2086
    build/ndtrain train -c configs/fashion_vit.yaml run.dir="$dir" \
      train.overwrite=true \
      model.dim=64 model.depth=2 model.heads=2 model.mlp_dim=128 \
      data.augment=false train.batch_size=$B train.steps=$steps \
      train.log_every=$(( steps < 10 ? 1 : steps / 5 )) train.eval_every=0 \
      train.checkpoint_every=0 train.threads=$THREADS optim.name=$name \
      optim.lr=$lr optim.warmup_steps=$warm optim.schedule=cosine \
      optim.clip_grad_norm=0 $extra | grep -E "^eval|trained"
    acc=$(grep eval_accuracy "$dir/metrics.jsonl" | tail -1 | \
          /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read())['eval_accuracy'])")
    echo "$name $B $lr $acc" >> "$results"
  done
done
/usr/bin/python3 - "$results" "$EPOCHS" <<'PY'
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
epochs = sys.argv[2]
opts = []
for r in rows:
    if r[0] not in opts:
        opts.append(r[0])
batches = sorted({int(r[1]) for r in rows})
acc = {(r[0], int(r[1])): float(r[3]) for r in rows}
lrs = {(r[0], int(r[1])): float(r[2]) for r in rows}
lines = [f"Final test accuracy (%), small ViT, {epochs} epochs of Fashion-MNIST",
         "", "| optimizer | " + " | ".join(f"batch {b}" for b in batches) + " |",
         "|---|" + "---|" * len(batches)]
for o in opts:
    lines.append(f"| {o} | " + " | ".join(
        f"{100 * acc[(o, b)]:.2f} (lr {lrs[(o, b)]:.3g})" for b in batches) + " |")
open("docs/large_batch.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
plt.figure(figsize=(6, 4))
for o in opts:
    plt.plot(batches, [100 * acc[(o, b)] for b in batches], marker="o", label=o)
plt.xscale("log", base=2)
plt.xticks(batches, [str(b) for b in batches])
plt.xlabel("global batch")
plt.ylabel("test accuracy (%)")
plt.title(f"Small ViT, Fashion-MNIST, {epochs} epochs")
plt.grid(alpha=0.3)
plt.legend()
plt.tight_layout()
plt.savefig("docs/large_batch.png", dpi=120)
print("wrote docs/large_batch.md and docs/large_batch.png")
PY
