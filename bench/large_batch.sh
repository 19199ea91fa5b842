#!/usr/bin/env bash
# Large-batch study: does LARS or LAMB hold accuracy where AdamW and SGD do
# not? A small ViT on Fashion-MNIST, the same epochs at global batch 128,
# 512, 2048 and 8192 (64x), every (optimizer, batch) cell tuned with the
# same budget (learning-rate grid, warmup, 2 seeds for the winner); the
# protocol is in bench/large_batch.py. Writes docs/large_batch.md and
# docs/large_batch.png and ends with
#   lamb_max_batch_within_1pt=B lars_max_batch_within_1pt=B
#   adamw_max_batch_within_1pt=B sgd_max_batch_within_1pt=B
# About an hour on 2 cores. Finished runs are reused (runs/large_batch), so
# an interrupted study continues where it stopped.
#
# Environment:
#   NDT_SKIP_SETUP=1      do not run scripts/setup.sh (build/ndtrain must exist)
#   NDT_LB_EPOCHS=10      epochs at every batch
#   NDT_LB_BATCHES="128 512 2048 8192", NDT_LB_OPTS="lamb adamw lars sgd"
#   NDT_LB_GRID=4         learning rates in each cell's first grid
#   NDT_LB_OUT=runs/large_batch
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${NDT_SKIP_SETUP:-0}" != 1 ]]; then scripts/setup.sh --bench; fi
echo "environment: $(nproc) cores, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}," \
  "OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}"
exec /usr/bin/python3 bench/large_batch.py
