#!/usr/bin/env bash
# Checkpoints reload into another layout: a checkpoint written at step 3 by
# one layout is resumed by another, and the resumed run's losses at steps
# 4..6 must equal those of the writer's own uninterrupted run within the
# verify tolerance (relative 1e-5; layouts differ only in fp32 summation
# order), and the resumed run must log no step before 4 (a run that ignored
# train.resume would start at step 1 and reproduce the same losses). Pairs: pipeline (pp=2, 1F1B) -> serial, serial -> dp=2 x pp=2,
# dp=2 x pp=2 x tp=2 (sequence-split regions) -> tp=4 and -> serial, and
# pp=2 x 2D (tp=4 on a 2 x 2 grid) -> serial and serial -> 2D, and 2.5D
# (tp=8: two 2 x 2 grids) -> 3D (tp=8: a 2 x 2 x 2 cube) and -> serial,
# and sequence parallel sp=2 x tp=2 (Ulysses inside 1D) -> sp=4 (ring),
# -> serial, -> sp=2 x tp=2 (ring inside 1D) and -> sp=2 x tp=2 with
# sequence-split regions (tp_seq, ring), that layout -> serial, sp=2 x 2D
# (tp=4, ring) -> serial and -> sp=2 x 3D (tp=8, Ulysses), and ZeRO
# stage 1 (dp=2, optimizer state on the ranks that own each bucket) ->
# serial, serial ->
# ZeRO at dp=2, ZeRO dp=2 -> ZeRO dp=4 (other owners), ZeRO dp=2 x pp=2
# -> serial, the MLP under ZeRO dp=4 with the default buckets (one
# bucket: three ranks own nothing) -> serial, ZeRO dp=2 x tp=2 -> serial and back, ZeRO over sequence-
# parallel ranks (sp=2 x tp=2) -> serial, and ZeRO stage 2 (gradients
# sharded too, 2 micro-batches) at dp=2 -> stage 1 at dp=2 x pp=2, and
# serial -> stage 2 at dp=4, and ZeRO stage 3 (parameters sharded too;
# the writer gathers them from their owners) at dp=2 -> serial, serial ->
# stage 3 at dp=2 x tp=2 and back, and stage 3 at dp=2 x interleaved pp=2
# (each pipeline rank holds two chunks, so the parameters reach the writer
# from alternating ranks) -> serial.
# Usage: checkpoint_layouts.sh NDTRAIN_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cfg=(-c "$src/configs/verify/gpt.yaml" model.depth=4 model.heads=4 train.steps=6
     train.batch_size=16 train.log_every=1 train.checkpoint_every=3
     train.eval_samples=64 train.threads=1)

# Losses of every logged step from a run directory's metrics.jsonl.
losses() {
  python3 -c '
import json, sys
for line in open(sys.argv[1] + "/metrics.jsonl"):
    j = json.loads(line)
    if "loss" in j:
        print(j["step"], repr(j["loss"]))' "$1"
}

compare() {  # compare NAME DIR_REFERENCE DIR_RESUMED
  python3 - "$1" <(losses "$2") <(losses "$3") <<'PY'
import sys
name, a, b = sys.argv[1], open(sys.argv[2]).read().split(), open(sys.argv[3]).read().split()
ra = dict(zip(a[0::2], map(float, a[1::2])))
rb = dict(zip(b[0::2], map(float, b[1::2])))
if sorted(ra) != ["1", "2", "3", "4", "5", "6"]:
    print(f"FAIL {name}: the reference run logged steps {sorted(ra)}"); sys.exit(1)
if sorted(rb) != ["4", "5", "6"]:
    print(f"FAIL {name}: the resumed run logged steps {sorted(rb)}, "
          "want 4-6 only (was the checkpoint loaded?)"); sys.exit(1)
ra = {s: ra[s] for s in rb}
worst = max(abs(ra[s] - rb[s]) / abs(ra[s]) for s in ra)
print(f"{name}: steps 4-6 losses {[ra[s] for s in sorted(ra)]} vs "
      f"{[rb[s] for s in sorted(rb)]}, max rel diff {worst:.2e} (tolerance 1e-05)")
sys.exit(0 if worst <= 1e-5 else 1)
PY
}

run() {  # run NP DIR ARGS...
  local np=$1 dir=$2; shift 2
  if ((np == 1)); then
    "$bin" train "${cfg[@]}" run.dir="$dir" "$@" > "$dir.log" 2>&1
  else
    mpirun --oversubscribe --bind-to none -np "$np" "$bin" train "${cfg[@]}" \
      run.dir="$dir" "$@" > "$dir.log" 2>&1
  fi || { echo "FAIL: run $dir"; cat "$dir.log"; exit 1; }
}

run 2 "$work/pp" parallel.pp=2 parallel.microbatches=4
run 1 "$work/pp_to_serial" train.resume="$work/pp/checkpoints/step-3"
compare "pp=2 -> serial" "$work/pp" "$work/pp_to_serial" || exit 1

run 1 "$work/serial"
run 4 "$work/serial_to_dp2pp2" parallel.dp=2 parallel.pp=2 \
  parallel.microbatches=2 train.resume="$work/serial/checkpoints/step-3"
compare "serial -> dp=2 x pp=2" "$work/serial" "$work/serial_to_dp2pp2" || exit 1

run 8 "$work/hybrid" parallel.dp=2 parallel.pp=2 parallel.tp=2 \
  parallel.tp_seq=true parallel.microbatches=2
run 4 "$work/hybrid_to_tp4" parallel.tp=4 \
  train.resume="$work/hybrid/checkpoints/step-3"
compare "dp=2 x pp=2 x tp=2 -> tp=4" "$work/hybrid" "$work/hybrid_to_tp4" || exit 1
run 1 "$work/hybrid_to_serial" train.resume="$work/hybrid/checkpoints/step-3"
compare "dp=2 x pp=2 x tp=2 -> serial" "$work/hybrid" "$work/hybrid_to_serial" || exit 1

run 8 "$work/tp2d" parallel.pp=2 parallel.tp=4 parallel.tp_mode=2d \
  parallel.microbatches=2
run 1 "$work/tp2d_to_serial" train.resume="$work/tp2d/checkpoints/step-3"
compare "pp=2 x 2d tp=4 -> serial" "$work/tp2d" "$work/tp2d_to_serial" || exit 1
run 4 "$work/serial_to_tp2d" parallel.tp=4 parallel.tp_mode=2d \
  train.resume="$work/serial/checkpoints/step-3"
compare "serial -> 2d tp=4" "$work/serial" "$work/serial_to_tp2d" || exit 1

run 8 "$work/tp2p5d" parallel.tp=8 parallel.tp_mode=2.5d parallel.tp_depth=2
run 8 "$work/tp2p5d_to_tp3d" parallel.tp=8 parallel.tp_mode=3d \
  train.resume="$work/tp2p5d/checkpoints/step-3"
compare "2.5d tp=8 -> 3d tp=8" "$work/tp2p5d" "$work/tp2p5d_to_tp3d" || exit 1
run 1 "$work/tp2p5d_to_serial" train.resume="$work/tp2p5d/checkpoints/step-3"
compare "2.5d tp=8 -> serial" "$work/tp2p5d" "$work/tp2p5d_to_serial" || exit 1
run 4 "$work/sp2tp2" parallel.sp=2 parallel.tp=2 parallel.sp_attention=ulysses
run 4 "$work/sp2tp2_to_sp4" parallel.sp=4 parallel.sp_attention=ring \
  train.resume="$work/sp2tp2/checkpoints/step-3"
compare "sp=2 x tp=2 ulysses -> sp=4 ring" "$work/sp2tp2" "$work/sp2tp2_to_sp4" || exit 1
run 1 "$work/sp2tp2_to_serial" train.resume="$work/sp2tp2/checkpoints/step-3"
compare "sp=2 x tp=2 ulysses -> serial" "$work/sp2tp2" "$work/sp2tp2_to_serial" || exit 1
run 4 "$work/sp2tp2_to_ring" parallel.sp=2 parallel.tp=2 \
  parallel.sp_attention=ring train.resume="$work/sp2tp2/checkpoints/step-3"
compare "sp=2 x tp=2 ulysses -> sp=2 x tp=2 ring" "$work/sp2tp2" "$work/sp2tp2_to_ring" || exit 1
seq=(parallel.sp=2 parallel.tp=2 parallel.tp_seq=true parallel.sp_attention=ring)
run 4 "$work/sp2tp2_to_seq" "${seq[@]}" \
  train.resume="$work/sp2tp2/checkpoints/step-3"
compare "sp=2 x tp=2 ulysses -> sp=2 x tp=2 tp_seq ring" "$work/sp2tp2" "$work/sp2tp2_to_seq" || exit 1
run 4 "$work/sp2tp2seq" "${seq[@]}"
run 1 "$work/sp2tp2seq_to_serial" \
  train.resume="$work/sp2tp2seq/checkpoints/step-3"
compare "sp=2 x tp=2 tp_seq ring -> serial" "$work/sp2tp2seq" "$work/sp2tp2seq_to_serial" || exit 1
run 8 "$work/sp2tp2d" parallel.sp=2 parallel.tp=4 parallel.tp_mode=2d
run 1 "$work/sp2tp2d_to_serial" train.resume="$work/sp2tp2d/checkpoints/step-3"
compare "sp=2 x 2d tp=4 ring -> serial" "$work/sp2tp2d" "$work/sp2tp2d_to_serial" || exit 1
run 16 "$work/sp2tp2d_to_sp2tp3d" parallel.sp=2 parallel.tp=8 \
  parallel.tp_mode=3d parallel.sp_attention=ulysses \
  train.resume="$work/sp2tp2d/checkpoints/step-3"
compare "sp=2 x 2d tp=4 ring -> sp=2 x 3d tp=8 ulysses" "$work/sp2tp2d" "$work/sp2tp2d_to_sp2tp3d" || exit 1
zero=(parallel.zero=1 parallel.bucket_mb=0.01)
run 2 "$work/zero" parallel.dp=2 "${zero[@]}"
run 1 "$work/zero_to_serial" train.resume="$work/zero/checkpoints/step-3"
compare "zero dp=2 -> serial" "$work/zero" "$work/zero_to_serial" || exit 1
run 2 "$work/serial_to_zero" parallel.dp=2 "${zero[@]}" \
  train.resume="$work/serial/checkpoints/step-3"
compare "serial -> zero dp=2" "$work/serial" "$work/serial_to_zero" || exit 1
run 4 "$work/zero_to_zero4" parallel.dp=4 "${zero[@]}" \
  train.resume="$work/zero/checkpoints/step-3"
compare "zero dp=2 -> zero dp=4" "$work/zero" "$work/zero_to_zero4" || exit 1
run 4 "$work/zero_pp" parallel.dp=2 parallel.pp=2 parallel.microbatches=2 \
  "${zero[@]}"
run 1 "$work/zero_pp_to_serial" train.resume="$work/zero_pp/checkpoints/step-3"
compare "zero dp=2 x pp=2 -> serial" "$work/zero_pp" "$work/zero_pp_to_serial" || exit 1
gpt=("${cfg[@]}")
cfg=(-c "$src/configs/verify/mlp.yaml" train.steps=6 train.batch_size=16
     train.log_every=1 train.checkpoint_every=3 train.eval_samples=64
     train.threads=1)
run 4 "$work/zero_idle" parallel.dp=4 parallel.zero=1
run 1 "$work/zero_idle_to_serial" train.resume="$work/zero_idle/checkpoints/step-3"
compare "mlp zero dp=4, three ranks idle -> serial" "$work/zero_idle" "$work/zero_idle_to_serial" || exit 1
cfg=("${gpt[@]}")
run 4 "$work/zero_tp" parallel.dp=2 parallel.tp=2 "${zero[@]}"
run 1 "$work/zero_tp_to_serial" train.resume="$work/zero_tp/checkpoints/step-3"
compare "zero dp=2 x tp=2 -> serial" "$work/zero_tp" "$work/zero_tp_to_serial" || exit 1
run 4 "$work/serial_to_zero_tp" parallel.dp=2 parallel.tp=2 "${zero[@]}" \
  train.resume="$work/serial/checkpoints/step-3"
compare "serial -> zero dp=2 x tp=2" "$work/serial" "$work/serial_to_zero_tp" || exit 1
run 4 "$work/zero_sptp" parallel.sp=2 parallel.tp=2 \
  parallel.sp_attention=ulysses "${zero[@]}"
run 1 "$work/zero_sptp_to_serial" \
  train.resume="$work/zero_sptp/checkpoints/step-3"
compare "zero sp=2 x tp=2 -> serial" "$work/zero_sptp" "$work/zero_sptp_to_serial" || exit 1
zero2=(parallel.zero=2 parallel.bucket_mb=0.01 parallel.microbatches=2)
run 2 "$work/zero2" parallel.dp=2 "${zero2[@]}"
run 4 "$work/zero2_to_zero1_pp" parallel.dp=2 parallel.pp=2 "${zero[@]}" \
  parallel.microbatches=2 train.resume="$work/zero2/checkpoints/step-3"
compare "zero stage 2 dp=2 -> zero stage 1 dp=2 x pp=2" "$work/zero2" \
  "$work/zero2_to_zero1_pp" || exit 1
run 4 "$work/serial_to_zero2" parallel.dp=4 "${zero2[@]}" \
  train.resume="$work/serial/checkpoints/step-3"
compare "serial -> zero stage 2 dp=4" "$work/serial" "$work/serial_to_zero2" || exit 1
zero3=(parallel.zero=3 parallel.bucket_mb=0.01 parallel.microbatches=2)
run 2 "$work/zero3" parallel.dp=2 "${zero3[@]}"
run 1 "$work/zero3_to_serial" train.resume="$work/zero3/checkpoints/step-3"
compare "zero stage 3 dp=2 -> serial" "$work/zero3" "$work/zero3_to_serial" || exit 1
run 4 "$work/serial_to_zero3_tp" parallel.dp=2 parallel.tp=2 "${zero3[@]}" \
  train.resume="$work/serial/checkpoints/step-3"
compare "serial -> zero stage 3 dp=2 x tp=2" "$work/serial" \
  "$work/serial_to_zero3_tp" || exit 1
run 4 "$work/zero3_tp" parallel.dp=2 parallel.tp=2 "${zero3[@]}"
run 1 "$work/zero3_tp_to_serial" \
  train.resume="$work/zero3_tp/checkpoints/step-3"
compare "zero stage 3 dp=2 x tp=2 -> serial" "$work/zero3_tp" \
  "$work/zero3_tp_to_serial" || exit 1
run 4 "$work/zero3_interleaved" parallel.dp=2 parallel.pp=2 \
  parallel.pp_chunks=2 parallel.schedule=interleaved "${zero3[@]}"
run 1 "$work/zero3_interleaved_to_serial" \
  train.resume="$work/zero3_interleaved/checkpoints/step-3"
compare "zero stage 3 dp=2 x interleaved pp=2 -> serial" \
  "$work/zero3_interleaved" "$work/zero3_interleaved_to_serial" || exit 1
echo PASS
