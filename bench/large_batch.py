"""Large-batch study driver (bench/large_batch.sh runs it).

A small ViT on Fashion-MNIST trained for the same number of epochs at every
global batch, with SGD (Nesterov), AdamW, LARS and LAMB, each with its
papers' recipe and the same tuning budget per (optimizer, batch) cell:

  1. learning rate: a grid of GRID_POINTS rates spaced by 2x around a
     centre; while the best rate is at an edge of the grid, one more rate
     beyond that edge (at most GRID_EXTEND times). The rates are given at
     the base batch 128 and ndtrain scales them to the batch
     (optim.scale_lr: linear for SGD and LARS, sqrt for AdamW and LAMB);
     the centre is the optimizer's prior at batch 128, then the best base
     rate of the previous batch.
  2. warmup: at the best rate, 20% of the run instead of 10%.
  3. seeds: the best (rate, warmup) again with every seed in SEEDS[1:].

Selection is by final test accuracy (the dataset has no separate
validation split); a cell reports the mean over SEEDS and the spread.
Every run is a data-parallel run (parallel.dp=2, threads), as a user would
scale it out. Finished runs are kept in OUT and reused, so an interrupted
study continues where it stopped.

Writes OUT/results.json, docs/large_batch.md (the table and the finding)
and docs/large_batch.png, and prints last:
  lamb_max_batch_within_1pt=B lars_max_batch_within_1pt=B ...
"""

import json
import math
import os
import statistics
import subprocess
import sys

NDTRAIN = os.environ.get("NDTRAIN", "build/ndtrain")
OUT = os.environ.get("NDT_LB_OUT", "runs/large_batch")
EPOCHS = float(os.environ.get("NDT_LB_EPOCHS", "10"))
BATCHES = [int(b) for b in os.environ.get(
    "NDT_LB_BATCHES", "128 512 2048 8192").split()]
OPT_NAMES = os.environ.get("NDT_LB_OPTS", "lamb adamw lars sgd").split()
GRID_POINTS = int(os.environ.get("NDT_LB_GRID", "4"))
GRID_EXTEND = 4
# Warmup in epochs: 10% of the run for the grid, then 20%.
WARMUPS = [round(EPOCHS * f, 3) for f in (0.1, 0.2)]
SEEDS = [1, 2]
BASE_BATCH = 128
TRAIN_SAMPLES = 60000
WITHIN = 0.01  # "within 1 point"

MODEL = [
    "model.dim=64", "model.depth=2", "model.heads=2", "model.mlp_dim=128",
    "model.dropout=0", "data.augment=false",
]

# name -> (prior base rate at batch 128, optim.scale_lr, recipe overrides)
RECIPES = {
    # You et al. 2017 / 2018: momentum 0.9, polynomial decay power 2,
    # trust coefficient 0.001, weight decay, no layer adaptation for
    # biases and LayerNorm (optim.exclude_no_decay).
    "lars": (1.0, "linear", [
        "optim.name=lars", "optim.lars_mode=paper", "optim.momentum=0.9",
        "optim.weight_decay=5e-4", "optim.trust_coef=0.001",
        "optim.schedule=polynomial", "optim.power=2",
        "optim.exclude_no_decay=true"]),
    # You et al. 2020: Adam moments with bias correction, eps 1e-6,
    # decoupled weight decay 0.01, linear decay (polynomial power 1).
    "lamb": (5e-3, "sqrt", [
        "optim.name=lamb", "optim.eps=1e-6", "optim.weight_decay=0.01",
        "optim.schedule=polynomial", "optim.power=1",
        "optim.exclude_no_decay=true"]),
    # Controls: AdamW as transformers are usually trained, SGD with
    # Nesterov momentum; both with cosine decay.
    "adamw": (2e-3, "sqrt", [
        "optim.name=adamw", "optim.weight_decay=0.05",
        "optim.schedule=cosine"]),
    "sgd": (0.1, "linear", [
        "optim.name=sgd", "optim.momentum=0.9", "optim.nesterov=true",
        "optim.weight_decay=5e-4", "optim.schedule=cosine"]),
}


def steps_for(batch):
    return math.ceil(EPOCHS * TRAIN_SAMPLES / batch)


def run(opt, batch, base_lr, warmup, seed):
    """Trains one cell point (or reuses a finished run); returns its record."""
    name = f"{opt}_b{batch}_lr{base_lr:.4g}_w{warmup:g}_s{seed}"
    run_dir = os.path.join(OUT, "runs", name)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    steps = steps_for(batch)
    per_epoch = max(1, round(TRAIN_SAMPLES / batch))
    record = read_record(metrics, steps)
    if record is None:
        prior, scaling, recipe = RECIPES[opt]
        cmd = [NDTRAIN, "train", "-c", "configs/fashion_vit.yaml",
               f"run.dir={run_dir}", "train.overwrite=true", *MODEL,
               f"train.batch_size={batch}", f"train.steps={steps}",
               f"train.seed={seed}", f"train.log_every={max(1, steps // 20)}",
               f"train.eval_every={per_epoch}", "train.checkpoint_every=0",
               "parallel.dp=2", "parallel.dp_mode=threads",
               "optim.clip_grad_norm=0", "optim.warmup_steps=0",
               f"optim.warmup_epochs={warmup}", f"optim.lr={base_lr:.6g}",
               f"optim.scale_lr={scaling}", f"optim.base_batch={BASE_BATCH}",
               *recipe]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        record = read_record(metrics, steps)
        if record is None:
            # A diverged run stops with an error naming the step: it is a
            # result (accuracy of chance), not a failure of the study.
            if "diverged" not in proc.stderr + proc.stdout:
                sys.exit(f"large_batch: run {name} failed (exit "
                         f"{proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
            record = {"acc": 0.1, "curve": [], "diverged": True,
                      "seconds": 0.0}
    record.update(opt=opt, batch=batch, base_lr=base_lr, warmup=warmup,
                  seed=seed, steps=steps,
                  lr=base_lr * scale(RECIPES[opt][1], batch))
    flag = " diverged" if record.get("diverged") else ""
    print(f"{name}: accuracy {100 * record['acc']:.2f}%{flag}", flush=True)
    return record


def scale(scaling, batch):
    k = batch / BASE_BATCH
    return k if scaling == "linear" else math.sqrt(k)


def read_record(metrics, steps):
    """The final accuracy and the per-evaluation curve of a finished run."""
    if not os.path.exists(metrics):
        return None
    curve = []
    seconds = 0.0
    with open(metrics) as f:
        for line in f:
            m = json.loads(line)
            if "eval_accuracy" in m:
                curve.append((m["step"], m["eval_accuracy"]))
            seconds = m.get("train_seconds", seconds)
    if not curve or curve[-1][0] != steps:
        return None
    return {"acc": curve[-1][1], "curve": curve, "seconds": seconds}


def tune(opt, batch, centre):
    """Steps 1-3 for one cell; returns (winner records over seeds, trials)."""
    trials = {}

    def at(k):  # grid point k: centre * 2^k
        if k not in trials:
            trials[k] = run(opt, batch, centre * 2.0 ** k, WARMUPS[0],
                            SEEDS[0])
        return trials[k]

    half = GRID_POINTS // 2
    ks = list(range(-half, GRID_POINTS - half))
    for k in ks:
        at(k)
    for _ in range(GRID_EXTEND):
        best = max(trials, key=lambda k: trials[k]["acc"])
        if best == min(trials):
            at(best - 1)
        elif best == max(trials):
            at(best + 1)
        else:
            break
    best = max(trials, key=lambda k: trials[k]["acc"])
    edge = best in (min(trials), max(trials))
    lr = centre * 2.0 ** best
    tried = list(trials.values())
    warm = {WARMUPS[0]: trials[best]}
    for w in WARMUPS[1:]:
        warm[w] = run(opt, batch, lr, w, SEEDS[0])
        tried.append(warm[w])
    w_best = max(warm, key=lambda w: warm[w]["acc"])
    winners = [warm[w_best]] + [run(opt, batch, lr, w_best, s)
                                for s in SEEDS[1:]]
    return winners, tried, edge


def main():
    os.makedirs(OUT, exist_ok=True)
    cells = {}
    seconds = 0.0
    for opt in OPT_NAMES:
        centre = RECIPES[opt][0]
        for batch in BATCHES:
            print(f"== {opt} batch {batch}: {steps_for(batch)} steps, base "
                  f"rate grid around {centre:.4g}", flush=True)
            winners, tried, edge = tune(opt, batch, centre)
            seconds += sum(t["seconds"] for t in tried + winners[1:])
            centre = winners[0]["base_lr"]
            accs = [w["acc"] for w in winners]
            cells[(opt, batch)] = {
                "opt": opt, "batch": batch, "steps": winners[0]["steps"],
                "lr": winners[0]["lr"], "base_lr": winners[0]["base_lr"],
                "warmup": winners[0]["warmup"], "accs": accs,
                "mean": statistics.mean(accs), "trials": len(tried),
                "edge": edge,
                "curves": [w["curve"] for w in winners],
                "grid": sorted((t["base_lr"], t["warmup"], t["acc"])
                               for t in tried),
            }
    minutes = seconds / 60
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump([c for c in cells.values()], f, indent=1)
    report(cells, minutes)


def max_batch_within(cells, opt, baseline):
    """The largest batch B such that every batch up to B is within 1 point
    of the baseline (0: not even the smallest)."""
    out = 0
    for b in BATCHES:
        if cells[(opt, b)]["mean"] < baseline - WITHIN:
            break
        out = b
    return out


def report(cells, minutes):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b0 = BATCHES[0]
    baseline = max(cells[(o, b0)]["mean"] for o in OPT_NAMES)
    base_opt = max(OPT_NAMES, key=lambda o: cells[(o, b0)]["mean"])
    within = {o: max_batch_within(cells, o, baseline) for o in OPT_NAMES}
    lines = [
        f"Large-batch study: small ViT (dim 64, depth 2, heads 2, MLP 128, "
        f"patch 7, no dropout, no augmentation) on Fashion-MNIST, "
        f"{EPOCHS:g} epochs at every batch, data parallel (dp=2, threads). "
        f"Test accuracy (%) of the best (rate, warmup) per cell: mean of "
        f"{len(SEEDS)} seeds [min-max]; lr is the rate used at that batch, "
        f"warmup in epochs; trials = runs spent tuning the cell. "
        f"{minutes:.0f} minutes of training steps in all (evaluation and "
        f"start-up not counted).", "",
        "| optimizer | " + " | ".join(f"batch {b}" for b in BATCHES) + " |",
        "|---|" + "---|" * len(BATCHES)]
    for o in OPT_NAMES:
        row = []
        for b in BATCHES:
            c = cells[(o, b)]
            row.append(
                f"{100 * c['mean']:.2f} [{100 * min(c['accs']):.2f}-"
                f"{100 * max(c['accs']):.2f}] lr {c['lr']:.3g}, warmup "
                f"{c['warmup']:g}, {c['steps']} steps, {c['trials']} trials"
                + (" (best rate at the edge of the sweep)" if c["edge"] else ""))
        lines.append(f"| {o} | " + " | ".join(row) + " |")
    lines += ["",
              f"Baseline: the best mean accuracy at batch {b0}, "
              f"{100 * baseline:.2f}% ({base_opt}). Largest batch at which "
              f"an optimizer stays within 1 point of it at every batch up "
              f"to that one (0: not even at batch {b0}):", ""]
    for o in OPT_NAMES:
        own = cells[(o, b0)]["mean"]
        lines.append(
            f"- {o}: {within[o]} (against its own batch-{b0} result, "
            f"{100 * own:.2f}%: {max_batch_within(cells, o, own)})")
    with open("docs/large_batch.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    fig, axes = plt.subplots(1, 1 + len(BATCHES), figsize=(
        4 * (1 + len(BATCHES)), 3.6))
    ax = axes[0]
    for o in OPT_NAMES:
        ax.plot(BATCHES, [100 * cells[(o, b)]["mean"] for b in BATCHES],
                marker="o", label=o)
    ax.axhline(100 * (baseline - WITHIN), color="grey", ls="--", lw=0.8,
               label="baseline - 1 pt")
    ax.set_xscale("log", base=2)
    ax.set_xticks(BATCHES, [str(b) for b in BATCHES])
    ax.set_ylim(50, 100 * baseline + 2)
    ax.set_xlabel("global batch")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"best per cell, {EPOCHS:g} epochs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    for ax, b in zip(axes[1:], BATCHES):
        for o in OPT_NAMES:
            curve = cells[(o, b)]["curves"][0]
            if curve:
                ax.plot([s * b / TRAIN_SAMPLES for s, _ in curve],
                        [100 * a for _, a in curve], marker=".", label=o)
        ax.set_ylim(50, 100 * baseline + 2)
        ax.set_xlabel("epoch")
        ax.set_title(f"winners at batch {b} (seed {SEEDS[0]})")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig("docs/large_batch.png", dpi=110)
    print("wrote docs/large_batch.md and docs/large_batch.png")
    print(" ".join(f"{o}_max_batch_within_1pt={within[o]}"
                   for o in ["lamb", "lars", "adamw", "sgd"] if o in within))


if __name__ == "__main__":
    main()
