#!/usr/bin/env bash
# Distributed data parallel benchmark: per-step time of the ViT and GPT
# benchmark models (bench/configs) with dp=2 (2 MPI ranks, 1 thread each)
# against 1 rank with 1 thread on the same global batch, and against
# PyTorch DDP (gloo, 2 processes, 1 thread each) in the same run.
#   scaling efficiency = t(1 rank) / (2 * t(dp=2))
#   hidden fraction    = 1 - (all-reduce time not overlapped) / (all-reduce time)
# Last line: speedup_vs_pytorch_ddp=X (min over models of pytorch / ndtrain
# at dp=2).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${NDT_SKIP_SETUP:-0}" != 1 ]]; then scripts/setup.sh --bench; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
ITERS=${NDT_BENCH_ITERS:-10}
WARMUP=${NDT_BENCH_WARMUP:-3}
MODELS=${NDT_BENCH_MODELS:-vit gpt}
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}  iters=$ITERS warmup=$WARMUP"

field() {  # field NAME LINE
  sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"
}

rows=()
min_speedup=""
for m in $MODELS; do
  one=$(build/ndtrain bench -c "bench/configs/$m.yaml" train.threads=1 \
        --iters "$ITERS" --warmup "$WARMUP" | grep '^bench ')
  two=$(mpirun --oversubscribe --bind-to none -np 2 build/ndtrain bench \
        -c "bench/configs/$m.yaml" train.threads=1 parallel.dp=2 \
        --iters "$ITERS" --warmup "$WARMUP" | grep '^bench ')
  pt=$(cd bench && /usr/bin/python3 pytorch_ddp.py --model "$m" --world 2 \
        --iters "$ITERS" --warmup "$WARMUP" | grep '^pytorch_ddp ')
  echo "$one"; echo "$two"; echo "$pt"
  t1=$(field median_ms "$one"); t2=$(field median_ms "$two")
  tp=$(field median_ms "$pt"); hid=$(field hidden_fraction "$two")
  ar=$(field allreduce_ms "$two"); ex=$(field exposed_ms "$two")
  row=$(/usr/bin/python3 -c "
t1,t2,tp=$t1,$t2,$tp
print(f'$m {t1:10.1f} {t2:10.1f} {tp:12.1f} {t1/(2*t2):8.3f} {$ar:10.1f} {$ex:10.1f} {$hid:7.3f} {tp/t2:8.2f}')")
  rows+=("$row")
  sp=$(/usr/bin/python3 -c "print(f'{$tp/$t2:.2f}')")
  if [[ -z "$min_speedup" ]] || /usr/bin/python3 -c "import sys; sys.exit(0 if $sp < $min_speedup else 1)"; then
    min_speedup=$sp
  fi
done
echo
printf '%-5s %10s %10s %12s %8s %10s %10s %7s %8s\n' model 1rank_ms dp2_ms pytorch_ddp efficiency allred_ms exposed_ms hidden speedup
for r in "${rows[@]}"; do echo "$r"; done
echo "speedup_vs_pytorch_ddp=$min_speedup"
