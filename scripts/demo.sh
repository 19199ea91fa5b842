#!/usr/bin/env bash
# Builds ndtrain, then trains the default job: the MLP on Fashion-MNIST
# (real data from Debian's dataset-fashion-mnist), evaluates it on the
# 10k test images, and says where the outputs went.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/ndtrain train -c configs/fashion_mlp.yaml run.name=demo "$@"
echo
echo "demo: outputs in runs/demo/"
echo "  metrics:     runs/demo/metrics.jsonl"
echo "  checkpoints: runs/demo/checkpoints/"
