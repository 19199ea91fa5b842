#!/usr/bin/env bash
# Builds ndtrain, then trains the main job: the byte-level GPT of
# configs/fortunes_gpt.yaml on the fortunes text (Debian's `fortunes`) with
# all three kinds of parallelism at once, 8 MPI ranks as
# dp=2 x pp=2 x tp=2 (two data-parallel replicas of a 2-stage 1F1B
# pipeline whose layers are split over 2 tensor-parallel ranks, with
# sequence-split regions). On this 2-core machine the ranks are
# oversubscribed, so the run is shortened to DEMO_STEPS steps (default
# 600, about 3 minutes here). Prints the validation loss and where the
# metrics, the Chrome trace and the checkpoint went. Extra arguments are
# config overrides (key=value).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
steps=${DEMO_STEPS:-600}
run=runs/demo
log=$(mktemp)
trap 'rm -f "$log"' EXIT
mpirun --oversubscribe --bind-to none -np 8 build/ndtrain train \
  -c configs/fortunes_gpt.yaml run.name=demo train.overwrite=true \
  parallel.dp=2 parallel.pp=2 parallel.tp=2 parallel.tp_seq=true \
  parallel.microbatches=4 train.threads=1 train.steps="$steps" \
  optim.warmup_steps=$((steps / 12)) train.eval_every=$((steps / 3)) \
  train.checkpoint_every=0 train.trace=true "$@" 2>&1 | tee "$log"
echo
echo "demo: GPT on fortunes, dp=2 x pp=2 x tp=2 on 8 ranks, $steps steps"
echo "  validation loss: $(grep '^eval step' "$log" | tail -1 |
  sed 's/.*| loss \([0-9.]*\).*/\1/') nats per byte"
echo "  metrics:    $run/metrics.jsonl"
echo "  trace:      $run/trace.json (open in https://ui.perfetto.dev)"
echo "  checkpoint: $(sed -n 's/^ndtrain: checkpoint //p' "$log")"
