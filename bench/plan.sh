#!/usr/bin/env bash
# Layout search against measurement: `ndtrain plan` ranks every layout of
# NDT_PLAN_RANKS (default 2) ranks of the GPT benchmark model (bench/
# configs/gpt.yaml, 1 thread per rank) by predicted step time; this script
# then times each of them with `ndtrain bench` under mpirun and prints
# predicted against measured step time per layout, then
#   rank_agreement=X  Kendall's tau between the two orders (1: the same
#                     order, 0: unrelated, -1: reversed), over the pairs
#                     whose measured times differ by more than 3%
#   pick_regret=X     measured time of the planner's pick / the fastest
#                     measured layout - 1 (0: the pick was the fastest)
#   max_acts_error_mib=X  the largest difference between the plan's
#                     activation peak per rank and the largest measured
#                     (act_peak_mib), over every layout (the plan models
#                     each one's peak: one stage or a pipeline, sequence
#                     parallelism included; with and without recompute)
# The plan is calibrated in the same run: from a 1-rank `ndtrain bench` of
# the model, one rank's GFLOP/s (flops_per_step / (step time - the
# optimizer step)) and the update's time per parameter (update_ms /
# parameters), both scaled by cores / ranks when the ranks outnumber this
# machine's cores; the link's alpha and bus bandwidth from comm_bench's
# alpha-beta fit over 2 ranks (link_fit impl=ndt). The ranks share this
# host, so the plan counts their communication as work of their own cores
# (--comm-on-cores).
#
# NDT_PLAN_HOSTS=H (default 1) runs the ranks on H hosts of the test bed
# (scripts/hosts.sh, removed on exit), RANKS / H per host in rank order,
# with every host's link shaped to NDT_PLAN_LINK (default 1gbit; "off":
# unshaped). The plan then also gets --ranks-per-host and the host link
# fitted by comm_bench with one rank per host, and the script prints the
# same two metrics for the plan without hosts (every group at the link
# within a host) as rank_agreement_one_host= and pick_regret_one_host=.
# NDT_PLAN_ZERO0=1 times only the layouts without ZeRO.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${NDT_SKIP_SETUP:-0}" != 1 ]]; then scripts/setup.sh --bench; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
RANKS=${NDT_PLAN_RANKS:-2}
HOSTS=${NDT_PLAN_HOSTS:-1}
LINK=${NDT_PLAN_LINK:-1gbit}
ZERO0=${NDT_PLAN_ZERO0:-0}
ITERS=${NDT_BENCH_ITERS:-8}
WARMUP=${NDT_BENCH_WARMUP:-3}
CFG=bench/configs/gpt.yaml
[[ $RANKS =~ ^[1-9][0-9]*$ ]] || { echo "plan.sh: NDT_PLAN_RANKS=$RANKS: must be a positive integer" >&2; exit 2; }
if ! [[ $HOSTS =~ ^[1-9][0-9]*$ ]] || ((RANKS % HOSTS != 0)); then
  echo "plan.sh: NDT_PLAN_HOSTS=$HOSTS: must be a positive integer dividing NDT_PLAN_RANKS=$RANKS" >&2
  exit 2
fi
[[ $LINK =~ ^(off|[0-9]+[mg]bit)$ ]] || { echo "plan.sh: NDT_PLAN_LINK=$LINK: must be off or a rate like 1gbit, 100mbit" >&2; exit 2; }
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} NDT_GEMM=${NDT_GEMM:-onednn (unset)}" \
  "OMP_NUM_THREADS=1 ranks=$RANKS hosts=$HOSTS$( ((HOSTS > 1)) && echo " link=$LINK") iters=$ITERS warmup=$WARMUP"

field() {  # field NAME LINE
  sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"
}

out=$(build/ndtrain bench -c "$CFG" train.threads=1 --iters "$ITERS" \
      --warmup "$WARMUP")
one=$(grep '^bench ' <<<"$out")
params=$(sed -n 's/.* \([0-9]*\) parameters$/\1/p' <<<"$out")
t=$(field median_ms "$one"); upd=$(field update_ms "$one")
# Ranks beyond the cores share them: each runs at cores / ranks.
share=$(/usr/bin/python3 -c "print(min(1.0, $(nproc --all) / $RANKS))")
gflops=$(/usr/bin/python3 -c "print(f'{$(field flops_per_step "$one") / (($t - $upd) * 1e-3) / 1e9 * $share:.1f}')")
update_ns=$(/usr/bin/python3 -c "print(f'{$upd * 1e6 / $params / $share:.4f}')")
fit=$(mpirun --oversubscribe --bind-to none -np 2 build/comm_bench | grep '^link_fit impl=ndt')
alpha=$(field alpha_us "$fit"); gbps=$(field busbw_gbs "$fit")
echo "calibration: 1 rank $t ms per step, $upd ms of it the update of $params" \
  "parameters: $gflops GFLOP/s, $update_ns ns per parameter (cores / ranks = $share); $fit"

plan_args=(-c "$CFG" train.threads=1 --ranks "$RANKS" --top 1000
           --gflops "$gflops" --update-ns-per-param "$update_ns"
           --link-alpha-us "$alpha" --link-gbps "$gbps" --comm-on-cores)
launch=(mpirun --oversubscribe --bind-to none -np "$RANKS")
if ((HOSTS > 1)); then
  trap 'scripts/hosts.sh down >/dev/null 2>&1 || true' EXIT
  scripts/hosts.sh up "$HOSTS" >/dev/null
  scripts/hosts.sh link "$LINK" >/dev/null
  state=${NDT_HOSTS_DIR:-/tmp/${NDT_HOSTS_PREFIX:-ndt}-hosts}
  # The bed's hosts share this machine's cores: nothing is bound.
  hfit=$("$state/mpirun" --allow-run-as-root --bind-to none --map-by node \
         -np "$HOSTS" build/comm_bench | grep '^link_fit impl=ndt')
  echo "host link: $hfit"
  one_host=$(build/ndtrain plan "${plan_args[@]}")
  plan_args+=(--ranks-per-host "$((RANKS / HOSTS))"
              --host-link-alpha-us "$(field alpha_us "$hfit")"
              --host-link-gbps "$(field busbw_gbs "$hfit")")
  launch=("$state/mpirun" --allow-run-as-root --bind-to none -np "$RANKS")
fi
plan=$(build/ndtrain plan "${plan_args[@]}")
echo "$plan" | grep -v '^plan_layout '
pick=$(sed -n 's/^pick_overrides=//p' <<<"$plan")
results=()
while read -r line; do
  predicted=$(field step_ms "$line"); overrides=$(field overrides "$line")
  acts=$(field acts_mib "$line")
  if [[ $ZERO0 == 1 && $overrides =~ parallel\.zero=[1-9] ]]; then continue; fi
  flat=$predicted
  if ((HOSTS > 1)); then
    flat=$(grep "^plan_layout .*overrides=$overrides\( \|$\)" <<<"$one_host" |
           sed -n 's/.* step_ms=\([^ ]*\).*/\1/p')
  fi
  # shellcheck disable=SC2086
  got=$("${launch[@]}" build/ndtrain bench \
        -c "$CFG" train.threads=1 ${overrides//,/ } --iters "$ITERS" \
        --warmup "$WARMUP" < /dev/null | grep '^bench ')
  measured=$(field median_ms "$got")
  peak=$(field act_peak_mib "$got" | tr ',' '\n' | sort -g | tail -1)
  echo "measured $measured ms, predicted $predicted ms; activations measured $peak MiB, predicted $acts: $overrides"
  results+=("$predicted $measured $overrides $flat $acts $peak")
done < <(grep '^plan_layout ' <<<"$plan")
one_host_pick=$pick
if ((HOSTS > 1)); then one_host_pick=$(sed -n 's/^pick_overrides=//p' <<<"$one_host"); fi

printf '%s\n' "${results[@]}" | /usr/bin/python3 -c "
import sys
rows = [l.split() for l in sys.stdin if l.strip()]
pred = [float(r[0]) for r in rows]; meas = [float(r[1]) for r in rows]
names = [r[2] for r in rows]; flat = [float(r[3]) for r in rows]
acts = [(float(r[4]), float(r[5])) for r in rows]
print(f\"{'predicted_ms':>12} {'measured_ms':>12} {'ratio':>6} {'acts_mib':>9} {'measured':>9}  layout\")
for p, m, n, (a, am) in sorted(zip(pred, meas, names, acts), key=lambda x: x[1]):
    shown = f'{a:9.2f}' if a >= 0 else f\"{'-':>9}\"
    print(f'{p:12.1f} {m:12.1f} {m / p:6.2f} {shown} {am:9.2f}  {n}')
def agreement(pred):
    agree = total = 0
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            if abs(meas[i] - meas[j]) <= 0.03 * min(meas[i], meas[j]):
                continue
            total += 1
            agree += 1 if (pred[i] - pred[j]) * (meas[i] - meas[j]) > 0 else -1
    return f'{agree / total if total else 1:.2f} over {total} pairs'
def regret(pick, pred):
    # A pick that was not timed (NDT_PLAN_ZERO0): the fastest timed
    # layout by the same prediction.
    i = names.index(pick) if pick in names else pred.index(min(pred))
    return f'{meas[i] / min(meas) - 1:.3f} (pick {names[i]})'
print(f'rank_agreement={agreement(pred)}')
print(f'pick_regret={regret(\"$pick\", pred)}')
modelled = [abs(a - am) for a, am in acts if a >= 0]
if modelled:
    print(f'max_acts_error_mib={max(modelled):.2f} over {len(modelled)} layouts')
if $HOSTS > 1:
    print(f'rank_agreement_one_host={agreement(flat)}')
    print(f'pick_regret_one_host={regret(\"$one_host_pick\", flat)}')
"
