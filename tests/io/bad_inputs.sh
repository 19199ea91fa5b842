#!/usr/bin/env bash
# Crafted bad inputs, end to end: every case must end ndtrain with exit
# code 1 (not 0, not a signal) and a message holding the expected fragment,
# without touching the files of the run it points at.
#   tests/io/bad_inputs.sh NDTRAIN SOURCE_DIR
# Prints one line per case and PASS or FAIL at the end.
set -u
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cfg=$src/configs/fashion_mlp.yaml
small=(model.hidden=[16] train.steps=2 train.batch_size=8
  optim.warmup_steps=0 train.eval_samples=64 train.log_every=1
  train.threads=1)
failures=0
cases=0

# expect NAME FRAGMENT COMMAND...: exit code 1 and FRAGMENT in the output.
expect() {
  local name=$1 fragment=$2
  shift 2
  cases=$((cases + 1))
  local out rc
  out=$("$@" 2>&1 < /dev/null)
  rc=$?
  if [[ $rc -ne 1 ]]; then
    echo "FAIL $name: exit code $rc (want 1)"
    echo "$out" | tail -5 | sed 's/^/    /'
    failures=$((failures + 1))
  elif ! grep -qF -- "$fragment" <<< "$out"; then
    echo "FAIL $name: message lacks '$fragment'"
    echo "$out" | tail -5 | sed 's/^/    /'
    failures=$((failures + 1))
  else
    echo "ok   $name: $(grep -F -- "$fragment" <<< "$out" | head -1 | cut -c1-150)"
  fi
}

# check NAME CONDITION...: a plain assertion.
check() {
  local name=$1
  shift
  cases=$((cases + 1))
  if "$@"; then
    echo "ok   $name"
  else
    echo "FAIL $name"
    failures=$((failures + 1))
  fi
}

# The binary, stopped after 120 s: a hang fails the case (exit 124).
nd() {
  timeout 120 "$bin" "$@"
}
train() {
  nd train -c "$cfg" "${small[@]}" "$@"
}

sums() {
  (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
}

# Python helpers that edit a checkpoint the way an attacker with a text
# editor would, recomputing the crc32 the manifest records where asked.
py() {
  python3 - "$@" << 'EOF'
import json, struct, sys, zlib, os
op, d = sys.argv[1], sys.argv[2]
mpath = os.path.join(d, "manifest.json")
def load():
    return json.load(open(mpath))
def save(m):
    json.dump(m, open(mpath, "w"))
def refresh(m, name):
    data = open(os.path.join(d, name), "rb").read()
    m["files"][name] = {"bytes": len(data), "crc32": zlib.crc32(data)}
deep = lambda n: "[" * n + "]" * n
if op == "manifest":          # apply a Python statement to m
    m = load(); exec(sys.argv[3]); save(m)
elif op == "raw":             # replace a JSON value by raw text
    text = json.dumps(load())
    key, raw = sys.argv[3], eval(sys.argv[4])
    m = load()
    marker = '"@@RAW@@"'
    exec(key + " = '@@RAW@@'")
    open(mpath, "w").write(json.dumps(m).replace(marker, raw))
elif op == "header":          # edit model.safetensors's header h, recrc
    name = "model.safetensors"
    p = os.path.join(d, name)
    blob = open(p, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    h = json.loads(blob[8:8 + n])
    first = sorted(k for k in h if k != "__metadata__")[0]
    raw = None
    exec(sys.argv[3])
    text = json.dumps(h)
    if raw is not None:
        text = text.replace('"@@RAW@@"', raw)
    body = blob[8 + n:]
    extra = sys.argv[4] if len(sys.argv) > 4 else ""
    if extra == "nan":
        body = struct.pack("<f", float("nan")) + body[4:]
    length = 2**63 if extra == "len" else len(text)
    open(p, "wb").write(struct.pack("<Q", length) + text.encode() + body)
    m = load(); refresh(m, name); save(m)
EOF
}

# --- a real run to start from ------------------------------------------
base=$work/base
if ! train run.dir="$base" > "$work/base.log" 2>&1; then
  cat "$work/base.log"
  echo FAIL
  exit 1
fi
good=$base/checkpoints/step-2

# A copy of the good checkpoint at $work/$1/checkpoints/step-2 (or named $2).
copy_ck() {
  local dir=$work/$1/checkpoints/${2:-step-2}
  mkdir -p "$(dirname "$dir")"
  cp -r "$good" "$dir"
  echo "$dir"
}
resume() {
  local ck=$1
  shift
  train train.steps=4 run.dir="$work/resumed-$RANDOM" train.resume="$ck" "$@"
}

# --- 1: deep JSON (stack overflow in recursive walkers) ---------------
ck=$(copy_ck deep_format)
py raw "$ck" 'm["format"]' 'deep(100000)'
expect deep_manifest_format "deeper than 64 levels" resume "$ck"
ck=$(copy_ck deep_files)
py raw "$ck" 'm["files"]["model.safetensors"]' 'deep(100000)'
expect deep_manifest_files "deeper than 64 levels" resume "$ck"
ck=$(copy_ck deep_config)
py raw "$ck" 'm["config"]' '"{\"a\": " + deep(20000) + "}"'
expect deep_manifest_config "deeper than 64 levels" resume "$ck"
ck=$(copy_ck deep_shape)
py header "$ck" 'h[first]["shape"] = "@@RAW@@"; raw = deep(100000)'
expect deep_safetensors_shape "nests JSON deeper than 64" resume "$ck"
ck=$(copy_ck deep_offsets)
py header "$ck" 'h[first]["data_offsets"] = "@@RAW@@"; raw = deep(100000)'
expect deep_safetensors_offsets "nests JSON deeper than 64" resume "$ck"

# --- 2, 3: manifest step counts ----------------------------------------
ck=$(copy_ck opt_step)
py manifest "$ck" 'm["optimizer"]["step"] = -1000'
expect optimizer_step_negative "optimizer.step -1000" resume "$ck"
# Not under a step-N name, so the directory does not give the step away;
# resumed into the base run's own directory, whose metrics must survive.
before=$(sums "$base")
ck=$(copy_ck neg_step ck)
py manifest "$ck" 'm["step"] = -5'
expect step_negative "expected a non-negative integer" \
  train train.steps=4 run.dir="$base" train.resume="$ck"
ck=$(copy_ck wrapped_step ck)
py manifest "$ck" 'm["step"] = 2**64 - 1'
expect step_wrapped "expected a non-negative integer" \
  train train.steps=4 run.dir="$base" train.resume="$ck"
check base_run_untouched_by_bad_resumes test "$before" = "$(sums "$base")"

# --- 4: manifest.json that is not a small regular file -----------------
ck=$(copy_ck zero_manifest)
rm "$ck/manifest.json" && ln -s /dev/zero "$ck/manifest.json"
expect manifest_dev_zero "is not a regular file" resume "$ck"
ck=$(copy_ck fifo_manifest)
rm "$ck/manifest.json" && mkfifo "$ck/manifest.json"
expect manifest_fifo "is not a regular file" resume "$ck"
ck=$(copy_ck huge_manifest)
truncate -s 100M "$ck/manifest.json"
expect manifest_huge "more than the limit" resume "$ck"

# --- 5: command-line integers ------------------------------------------
expect schedule_pp_wraps "--pp: must be at most 2147483647" \
  nd schedule --pp 4294967298 --microbatches 4 --kind 1f1b
expect bench_warmup_wraps "--warmup: must be at most 2147483647" \
  nd bench -c "$cfg" "${small[@]}" --iters 1 --warmup 2147483648

# --- 6: runs do not mix ------------------------------------------------
before=$(sums "$base")
expect fresh_run_into_used_dir "already holds a previous run" \
  train run.dir="$base" train.seed=9
check fresh_run_left_first_run_byte_identical \
  test "$before" = "$(sums "$base")"
expect resume_other_optimizer "optim.name: checkpoint \"adamw\", config \"lamb\"" \
  resume "$good" optim.name=lamb
expect resume_other_seed "train.seed: checkpoint 1, config 7" \
  resume "$good" train.seed=7
expect resume_other_data "data.augment" resume "$good" data.augment=true
expect resume_other_lr "optim.lr" resume "$good" optim.lr=0.5

# --- 7: write errors ---------------------------------------------------
mkdir -p "$work/full"
ln -s /dev/full "$work/full/metrics.jsonl"
expect metrics_on_full_device "metrics.jsonl: No space left on device" \
  train run.dir="$work/full"

# --- 8: clear messages -------------------------------------------------
ck=$(copy_ck i32)
py header "$ck" 'h[first]["dtype"] = "I32"'
expect tensor_dtype_i32 "has dtype I32" resume "$ck"
ck=$(copy_ck no_opt_step)
py manifest "$ck" 'del m["optimizer"]["step"]'
expect optimizer_step_missing "has no integer \"optimizer\"" resume "$ck"
ck=$(copy_ck stored_config)
py manifest "$ck" 'm["config"]["train"]["stepz"] = 3'
expect stored_config_invalid "stores an invalid config (not your config file)" \
  resume "$ck"

# Fashion-MNIST directories with one crafted file each.
real=/usr/share/datasets/fashion-mnist
idx() {  # idx DIR FILE NDIMS DIM...: gzip'd IDX header, no payload
  local dir=$1 file=$2 nd=$3
  shift 3
  python3 -c '
import gzip, struct, sys
dims = [int(x) for x in sys.argv[3:]]
gzip.open(sys.argv[1], "wb").write(bytes([0, 0, 8, int(sys.argv[2])]) +
    b"".join(struct.pack(">I", d) for d in dims))' "$dir/$file" "$nd" "$@"
}
data_dir() {
  local dir=$work/$1
  mkdir -p "$dir"
  for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \
    t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    ln -s "$real/$f" "$dir/$f"
  done
  echo "$dir"
}
d=$(data_dir idx_overflow)
rm "$d/train-images-idx3-ubyte.gz"
idx "$d" train-images-idx3-ubyte.gz 3 4294967295 4294967295 4294967295
expect idx_dims_overflow "implausible payload" \
  train run.dir="$work/r_idx" data.path="$d"
expect batch_size_huge "out of memory" \
  train run.dir="$work/r_bs" train.batch_size=2147483648

# --- 9: empty datasets -------------------------------------------------
d=$(data_dir empty_test)
rm "$d"/t10k-*
idx "$d" t10k-images-idx3-ubyte.gz 3 0 28 28
idx "$d" t10k-labels-idx1-ubyte.gz 1 0
expect empty_test_set "t10k-images-idx3-ubyte.gz: holds no images" \
  train run.dir="$work/r_empty_test" data.path="$d"
d=$(data_dir empty_train)
rm "$d"/train-*
idx "$d" train-images-idx3-ubyte.gz 3 0 28 28
idx "$d" train-labels-idx1-ubyte.gz 1 0
expect empty_training_set "train-images-idx3-ubyte.gz: holds no images" \
  train run.dir="$work/r_empty_train" data.path="$d"

# --- 10: leftovers, names, order of checks -----------------------------
dead=4194000
while kill -0 "$dead" 2> /dev/null; do dead=$((dead + 1)); done
cp -r "$base" "$work/stale"
mkdir "$work/stale/checkpoints/.step-3.tmp-$dead"
train train.steps=4 run.dir="$work/stale" train.resume=latest \
  > "$work/stale.log" 2>&1
check stale_temp_dir_removed test ! -e "$work/stale/checkpoints/.step-3.tmp-$dead"
printf 'run:\n  name: "a\\x1bb"\n' > "$work/esc.yaml"
expect esc_in_name_escaped "got 'a\\x1bb'" nd train -c "$work/esc.yaml"
check esc_not_echoed_raw \
  bash -c "! \"$bin\" train -c \"$work/esc.yaml\" 2>&1 | grep -q $'\\x1b'"
printf 'run:\n  name: "a\\0b"\n' > "$work/nul.yaml"
expect nul_in_name_escaped "got 'a\\x00b'" nd train -c "$work/nul.yaml"
ck=$(copy_ck nul_file)
py manifest "$ck" 'm["files"]["x\u0000\u001b"] = {"bytes": 1, "crc32": 1}'
expect nul_in_manifest_file_name "invalid file name 'x\\x00\\x1b'" resume "$ck"
touch "$work/plainfile"
expect run_dir_checked_before_data "run.dir $work/plainfile/x cannot be created" \
  train run.dir="$work/plainfile/x" data.path=/nonexistent/data

# --- also: non-finite values -------------------------------------------
expect diverged_loss "at step" train run.dir="$work/r_nan" optim.lr=1e30
check diverged_run_wrote_no_checkpoint test ! -e "$work/r_nan/checkpoints"
ck=$(copy_ck nan_tensor)
py header "$ck" 'pass' nan
expect checkpoint_nan_tensor "a checkpoint must hold finite values" resume "$ck"

# --- 2D tensor parallelism: splits checked before training ------------
gpt=(-c "$src/configs/verify/gpt.yaml" train.steps=3 train.threads=1
  run.dir="$work/r_2d")
expect tp2d_not_square "parallel.tp must be a perfect square" \
  nd train "${gpt[@]}" parallel.tp=2 parallel.tp_mode=2d
expect tp2d_heads "model.heads (3)" \
  nd train "${gpt[@]}" parallel.tp=4 parallel.tp_mode=2d model.heads=3 \
  model.dim=48 model.mlp_dim=96
# 63 evaluation samples end in a batch of 15, which 2 grid rows cannot
# split: refused when the layout is built, before the first step.
expect tp2d_eval_split "the evaluation set (63 samples" \
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 "$bin" train \
  "${gpt[@]}" parallel.tp=4 parallel.tp_mode=2d train.eval_samples=63
check tp2d_eval_split_before_training test ! -e "$work/r_2d/metrics.jsonl"
# 1D's sequence-split regions split each batch's tokens: the ViT's 17
# tokens per sample over 2 ranks need an even batch, and 63 evaluation
# samples end in a batch of 15.
expect tp1d_seq_eval_split "the evaluation set (63 samples" \
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" train \
  -c "$src/configs/verify/vit.yaml" train.steps=3 train.threads=1 \
  run.dir="$work/r_1d_seq" parallel.tp=2 parallel.tp_seq=true \
  train.eval_samples=63
check tp1d_seq_eval_split_before_training test ! -e "$work/r_1d_seq/metrics.jsonl"

# A layout the config refuses is refused before MPI starts, on every rank
# alike: rank 0 alone reports it, once (the ViT's 17 tokens over sp=2).
sp_out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 "$bin" \
  train -c "$src/configs/verify/vit.yaml" train.steps=3 train.threads=1 \
  run.dir="$work/r_sp" parallel.sp=2 parallel.dp=2 2>&1)
check sp_split_reported_once \
  test "$(grep -c "error: parallel.sp=2 splits each sample's 17 tokens" <<< "$sp_out")" = 1
check sp_split_reported_without_rank grep -q "^error: parallel.sp=2" <<< "$sp_out"
# ... and the other ranks wait for rank 0's exit to end the job: ending
# at once, they ended it before rank 0 had printed in 6 of 30 runs of 8
# ranks. Ten runs, each must print the message once and exit non-zero.
reported=0
for _ in $(seq 10); do
  pp_out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 8 \
    "$bin" verify -c "$src/configs/verify/gpt.yaml" parallel.pp=8 2>&1) \
    && continue
  [[ $(grep -c "error: parallel.pp (8)" <<< "$pp_out") == 1 ]] \
    && reported=$((reported + 1))
done
check pp_split_reported_in_every_run test "$reported" = 10
# An error every rank meets after MPI started (here the job's size) is
# reported by rank 0 alone, while the others wait for its abort: before,
# each of 4 ranks printed it.
reported=0
for _ in $(seq 5); do
  np_out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 \
    "$bin" train "${gpt[@]}" parallel.dp=2 2>&1) && continue
  [[ $(grep -c "error: the layout (dp 2 x pp 1 x tp 1 x sp 1" <<< "$np_out") == 1 ]] \
    && grep -q "^\[rank 0\] error: the layout" <<< "$np_out" \
    && reported=$((reported + 1))
done
check job_size_reported_once_by_rank0 test "$reported" = 5

# --- 2.5D and 3D tensor parallelism: splits checked before training ----
expect tp2p5d_not_grids "must be q^2 x 2" \
  nd train "${gpt[@]}" parallel.tp=6 parallel.tp_mode=2.5d parallel.tp_depth=2
expect tp_depth_without_2p5d "leave it at 1" \
  nd train "${gpt[@]}" parallel.tp=4 parallel.tp_mode=2d parallel.tp_depth=2
expect tp3d_not_cube "parallel.tp must be a perfect cube" \
  nd train "${gpt[@]}" parallel.tp=4 parallel.tp_mode=3d
expect tp3d_heads "model.heads (3) must be divisible by the cube side p = 2" \
  nd train "${gpt[@]}" parallel.tp=8 parallel.tp_mode=3d model.heads=3 \
  model.dim=48 model.mlp_dim=96
expect tp3d_batch "in p^2 = 4 blocks: train.batch_size (6)" \
  nd train "${gpt[@]}" parallel.tp=8 parallel.tp_mode=3d train.batch_size=6

# --- already handled before, kept working ------------------------------
expect unknown_key "did you mean 'optim.lr'" train optim.lrr=1
printf 'a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n' \
  > "$work/bomb.yaml"
expect yaml_bomb "unknown config section" nd train -c "$work/bomb.yaml"
expect run_name_traversal "names a directory" train run.name=../x
ck=$(copy_ck traversal)
py manifest "$ck" 'm["files"]["../x"] = {"bytes": 1, "crc32": 1}'
expect manifest_file_traversal "invalid file name '../x'" resume "$ck"
ck=$(copy_ck truncated)
truncate -s 100 "$ck/model.safetensors"
expect truncated_safetensors "is truncated" resume "$ck"
ck=$(copy_ck header_len)
py header "$ck" 'pass' len
expect safetensors_header_length "is larger than the file" resume "$ck"
d=$(data_dir not_gzip)
rm "$d/train-images-idx3-ubyte.gz"
echo "plain text" > "$d/train-images-idx3-ubyte.gz"
expect idx_not_gzip "not a gzip file" train run.dir="$work/r_gz" data.path="$d"

# train.overwrite=true replaces the previous run: its higher step is gone,
# so train.resume=latest cannot pick it up.
cp -r "$base" "$work/over"
train run.dir="$work/over" train.steps=1 train.overwrite=true \
  > "$work/over.log" 2>&1
check overwrite_replaces_previous_run \
  test "$(ls "$work/over/checkpoints")" = step-1
check overwrite_key_is_validated \
  bash -c "\"$bin\" train -c \"$cfg\" train.overwrite=maybe 2>&1 |
    grep -q \"'train.overwrite' must be true or false\""

# A warmup in epochs longer than the run is found before anything is
# written.
expect warmup_epochs_too_long "optim.warmup_epochs (1) is 8 steps" \
  train run.dir="$work/r_warm" train.batch_size=8000 optim.warmup_epochs=1
check warmup_epochs_too_long_writes_nothing test ! -e "$work/r_warm"

echo "$cases cases, $failures failed"
if ((failures)); then
  echo FAIL
  exit 1
fi
echo PASS
