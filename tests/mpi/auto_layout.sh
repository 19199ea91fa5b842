#!/usr/bin/env bash
# train, verify and bench --auto-layout run in the layout `ndtrain plan`
# picks for the job's ranks, with plan's model of the machine:
#   - 2 ranks of the verify GPT under 0.9 MiB per rank, machine given:
#     the pick is plan's with --comm-on-cores (all ranks on one host: the
#     transfers run on their cores): pp=2 over 4 micro-batches, the same
#     overrides as plan's pick_overrides; verify passes in it and train
#     runs it (its start-up names the pipeline);
#   - the machine measured (rank 0 measures, every rank takes its
#     numbers; the link in the host timed on the job's ranks, said
#     "(measured)", where the machine given above takes its link options
#     as they are): train runs and every rank runs the one layout; at 4
#     ranks on fewer cores the measured rate is each rank's share of them;
#   - one process: the serial layout, or recompute under 2.5 MiB;
#   - errors: an override of what the plan chooses, a limit no layout
#     fits (each reported once, by rank 0), a machine option without
#     --auto-layout.
# Usage: auto_layout.sh NDTRAIN_BINARY SOURCE_DIR
set -u
bin=$1
src=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpi=(mpirun --oversubscribe --bind-to none -np 2)
cfg=(-c "$src/configs/verify/gpt.yaml" train.threads=1)
run=(train.steps=3 train.eval_every=0 train.checkpoint_every=0
  train.eval_samples=16)
machine=(--gflops 100 --update-ns-per-param 1 --link-alpha-us 2 --link-gbps 7.5)

fail() {
  echo "FAIL: $*"
  exit 1
}
# want LOG REGEX: the log has a line matching REGEX
want() {
  grep -Eq -- "$2" "$1" || { cat "$1"; fail "$1: no line matches '$2'"; }
}

"$bin" plan "${cfg[@]}" --ranks 2 "${machine[@]}" --memory-mib 0.9 --comm-on-cores \
  >"$work/plan.log" 2>&1 || { cat "$work/plan.log"; fail "plan"; }
pick=$(sed -n 's/^pick_overrides=//p' "$work/plan.log")
[[ -n $pick ]] || fail "plan printed no pick"
echo "plan: $pick"

"${mpi[@]}" "$bin" verify "${cfg[@]}" --auto-layout "${machine[@]}" \
  --memory-mib 0.9 >"$work/verify.log" 2>&1 \
  || { cat "$work/verify.log"; fail "verify --auto-layout exited non-zero"; }
want "$work/verify.log" "^ndtrain: layout from the plan: pp=2 \(microbatches=4\), predicted 0\.55 ms per step, .* within 0\.9 MiB per rank .* on the ranks' cores\); overrides ${pick//./\\.}$"
want "$work/verify.log" "^verify: PASS"
echo "verify: $(grep -m1 '^ndtrain: layout from the plan' "$work/verify.log")"

"${mpi[@]}" "$bin" train "${cfg[@]}" "${run[@]}" run.dir="$work/pp" \
  --auto-layout "${machine[@]}" --memory-mib 0.9 >"$work/train.log" 2>&1 \
  || { cat "$work/train.log"; fail "train --auto-layout exited non-zero"; }
want "$work/train.log" "^ndtrain: pipeline, 2 stages x 1 chunk\(s\), schedule 1f1b, 4 micro-batch"
want "$work/train.log" "^step 3/3 "

# Measured on rank 0: whatever the pick, every rank runs it (a rank in
# another layout would stop the job at start-up).
"${mpi[@]}" "$bin" train "${cfg[@]}" "${run[@]}" run.dir="$work/measured" \
  --auto-layout >"$work/measured.log" 2>&1 \
  || { cat "$work/measured.log"; fail "train --auto-layout, machine measured"; }
want "$work/measured.log" "^ndtrain: layout from the plan: .* of [0-9]+ layouts of 2 ranks \([0-9.]+ GFLOP/s per rank"
# The link in the host, measured on the job's ranks when no link option is
# given; as given otherwise.
want "$work/measured.log" "link alpha [0-9]+\.[0-9]+ us, [0-9]+\.[0-9]+ GB/s \(measured\) on the ranks' cores\); overrides "
grep -q "(measured)" "$work/verify.log" && { cat "$work/verify.log"; fail "link given, yet measured"; }
want "$work/verify.log" "link alpha 2\.00 us, 7\.500 GB/s on the ranks' cores\); overrides "
want "$work/measured.log" "^step 3/3 "
echo "measured: $(grep -m1 '^ndtrain: layout from the plan' "$work/measured.log")"

# 4 ranks of 1 thread: where they outnumber the cores, rank 0's measured
# rate is cut to each rank's share of them.
mpirun --oversubscribe --bind-to none -np 4 "$bin" train "${cfg[@]}" \
  "${run[@]}" run.dir="$work/four" --auto-layout >"$work/four.log" 2>&1 \
  || { cat "$work/four.log"; fail "train --auto-layout, 4 ranks"; }
want "$work/four.log" "^step 3/3 "
cores=$(nproc)
if ((cores < 4)); then
  want "$work/four.log" "GFLOP/s per rank \(measured: 4 threads of 4 ranks share $cores cores\)"
elif grep -q "measured: .* share" "$work/four.log"; then
  fail "four: $cores cores are not shared by 4 ranks"
fi
echo "four: $(grep -m1 '^ndtrain: layout from the plan' "$work/four.log")"

"$bin" verify "${cfg[@]}" --auto-layout "${machine[@]}" \
  >"$work/one.log" 2>&1 || { cat "$work/one.log"; fail "one process"; }
want "$work/one.log" "^ndtrain: layout from the plan: serial, .* of 2 layouts of 1 ranks"
"$bin" verify "${cfg[@]}" --auto-layout "${machine[@]}" --memory-mib 2.5 \
  >"$work/one_limit.log" 2>&1 || { cat "$work/one_limit.log"; fail "one process, 2.5 MiB"; }
want "$work/one_limit.log" "^ndtrain: layout from the plan: recompute, .*parallel\.recompute=block$"
want "$work/one_limit.log" "^verify: PASS"

# expect_error NAME REGEX CMD...: exit 1..127 and a line matching REGEX
expect_error() {
  local name=$1 regex=$2
  shift 2
  "$@" >"$work/$name.log" 2>&1
  local rc=$?
  ((rc > 0 && rc < 128)) || { cat "$work/$name.log"; fail "$name: exit $rc"; }
  want "$work/$name.log" "$regex"
  echo "$name: $(grep -m1 -E -- "$regex" "$work/$name.log")"
}
expect_error override "error: ndtrain train --auto-layout: the override parallel\.dp sets what the plan chooses" \
  "${mpi[@]}" "$bin" train "${cfg[@]}" "${run[@]}" parallel.dp=2 \
  run.dir="$work/override" --auto-layout "${machine[@]}"
[[ ! -e $work/override ]] || fail "override: the run wrote $work/override"
# Every rank meets it; rank 0 alone reports it.
[[ $(grep -c "error: ndtrain train --auto-layout: the override" "$work/override.log") == 1 ]] \
  || { cat "$work/override.log"; fail "override: not reported once"; }
expect_error no_fit "error: no layout of 2 ranks fits --memory-mib 0\.01: the smallest, " \
  "${mpi[@]}" "$bin" train "${cfg[@]}" "${run[@]}" run.dir="$work/no_fit" \
  --auto-layout "${machine[@]}" --memory-mib 0.01
[[ ! -e $work/no_fit ]] || fail "no_fit: the run wrote $work/no_fit"
[[ $(grep -c "error: no layout of 2 ranks fits" "$work/no_fit.log") == 1 ]] \
  || { cat "$work/no_fit.log"; fail "no_fit: not reported once"; }
expect_error needs_flag "error: ndtrain bench: --memory-mib requires --auto-layout" \
  "$bin" bench "${cfg[@]}" --memory-mib 1
echo PASS
