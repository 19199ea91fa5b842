#!/usr/bin/env python3
"""Draws one training step of an ndtrain Chrome trace (train.trace=true)
as a timeline, one row per rank, and prints per-rank statistics and a
breakdown of the step's pipeline bubble (see decompose); --table prints
that breakdown for every traced step.

  /usr/bin/python3 bench/plot_trace.py runs/pp4/trace.json \
      --step 5 --out docs/pipeline_trace.png
  /usr/bin/python3 bench/plot_trace.py TRACE --table   # bubble breakdown

Forward spans are blue, backward orange, sends/receives grey (receives are
the waits for the neighbour), gradient reduction and optimizer green.
Without --out only the statistics are printed (no matplotlib needed).

Clock alignment: every rank's trace time is seconds since its own
set_origin() call right after a barrier, and ranks leave a barrier up to a
few ms apart, so the tracks of the file are shifted against each other by
that much. Unless --no-align, each rank's shift is estimated from the
matched send/receive pairs (a receive cannot end before its send began:
for a pair r -> s, shift_s - shift_r >= send_start_r - recv_end_s; both
directions bound the difference from both sides, and the midpoint of the
bounds is used) and applied before anything is computed.
"""
import argparse
import collections
import json
import re
import statistics


def load(path):
    with open(path) as f:
        doc = json.load(f)
    names, spans = {}, []
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X":
            spans.append(e)
    return names, spans


def coords(names):
    """tid -> (dp, pp) from the track names "rank R (dp D, pp S)"."""
    out = {}
    for r, n in names.items():
        m = re.search(r"dp (\d+), pp (\d+)", n)
        out[r] = (int(m.group(1)), int(m.group(2))) if m else (0, r)
    return out


def clock_shifts(names, spans):
    """Per-rank shift (us) to add to a rank's times, from send/receive
    pairs (see the module doc). Instruction peers are pipeline ranks of
    the same data-parallel replica. Only ranks that exchanged messages
    are tied together, so each replica is aligned within itself (the
    lowest rank of each replica is not shifted)."""
    co = coords(names)
    tid = {c: r for r, c in co.items()}
    recv = {(e["tid"], e["name"], e["args"]["step"]): e for e in spans}
    lower = {}  # (r, s) -> max over sends r->s of (send_start - recv_end)
    for e in spans:
        m = re.match(r"S([AG])(\d+(?:\.\d+)?)>(\d+)$", e["name"])
        if not m:
            continue
        kind, mb, peer = m.group(1), m.group(2), int(m.group(3))
        dp, pp = co[e["tid"]]
        to = tid.get((dp, peer))
        rv = recv.get((to, f"R{kind}{mb}<{pp}", e["args"]["step"]))
        if rv is None:
            continue
        d = e["ts"] - (rv["ts"] + rv["dur"])
        key = (e["tid"], to)
        lower[key] = max(lower.get(key, d), d)
    shift = {}
    for root in sorted(co):
        if root in shift:
            continue
        shift[root] = 0.0
        todo = [root]
        while todo:  # breadth-first over ranks that exchanged messages
            r = todo.pop(0)
            for s in sorted(co):
                if s in shift or ((r, s) not in lower and (s, r) not in lower):
                    continue
                lo = lower.get((r, s))             # shift_s - shift_r >= lo
                hi = lower.get((s, r))             # shift_r - shift_s >= hi
                hi = None if hi is None else -hi   # shift_s - shift_r <= -hi
                if lo is not None and hi is not None:
                    d = 0.5 * (lo + hi)
                else:
                    d = lo if lo is not None else hi
                shift[s] = shift[r] + d
                todo.append(s)
    return shift


def replay(order, dur):
    """Makespan of one step when every rank runs its forward/backward list
    `order[r]` (a list of (op, mb)) in order, an instruction starting when
    the rank is free and its input is there (F mb on rank r after F mb on
    r-1; B mb on r after B mb on r+1), with durations dur(r, op, mb) and
    free communication. One chunk per rank only."""
    P = len(order)
    end, pos, t = {}, [0] * P, [0.0] * P
    left = sum(len(o) for o in order)
    while left:
        moved = False
        for r in range(P):
            while pos[r] < len(order[r]):
                op, mb = order[r][pos[r]]
                dep = (r - 1, "F", mb) if op == "F" else (r + 1, "B", mb)
                if 0 <= dep[0] < P and dep not in end:
                    break
                start = max(t[r], end.get(dep, 0.0))
                t[r] = end[(r, op, mb)] = start + dur(r, op, mb)
                pos[r] += 1
                left -= 1
                moved = True
        if not moved:
            raise ValueError("schedule deadlocks in replay")
    return max(t)


def decompose(sel, ranks, span):
    """Where the measured makespan goes beyond the textbook one: replays
    the step with (a) every F and B at the mean over all ranks (equal
    stages, no jitter: the theory), (b) each rank's own mean (adds stage
    imbalance), (c) the measured durations (adds per-micro-batch jitter);
    the rest of the measured makespan is communication and gaps."""
    comp = [e for e in sel if e["cat"] in ("forward", "backward")]
    if any(e["args"].get("chunk", 0) != 0 for e in comp):
        return
    order, d = [], {}
    for r in ranks:
        mine = sorted((e for e in comp if e["tid"] == r), key=lambda e: e["ts"])
        order.append([(e["name"][0], e["args"]["microbatch"]) for e in mine])
        for e in mine:
            d[(ranks.index(r), e["name"][0], e["args"]["microbatch"])] = (
                1e-3 * e["dur"])
    mean_all = {op: statistics.mean(v for (r, o, m), v in d.items() if o == op)
                for op in "FB"}
    mean_rank = {(r, op): statistics.mean(
        v for (rr, o, m), v in d.items() if rr == r and o == op)
        for r in range(len(ranks)) for op in "FB"}
    busy = sum(d.values())
    P = len(ranks)
    rows = [("equal stages, no jitter (theory)",
             replay(order, lambda r, op, mb: mean_all[op])),
            ("+ per-stage mean F/B (imbalance)",
             replay(order, lambda r, op, mb: mean_rank[(r, op)])),
            ("+ measured F/B durations (jitter)",
             replay(order, lambda r, op, mb: d[(r, op, mb)])),
            ("measured (adds communication, gaps)", span)]
    return [(what, ms, 1 - busy / (P * ms)) for what, ms in rows]


def step_span(sel):
    """(first span start, last F/B end) of one step's spans."""
    t0 = min(e["ts"] for e in sel)
    end = max(e["ts"] + e["dur"] for e in sel
              if e["cat"] in ("forward", "backward"))
    return t0, end


def pipeline_ranks(names):
    """The ranks of data-parallel replica 0 in pipeline order."""
    co = coords(names)
    return sorted((r for r in co if co[r][0] == 0), key=lambda r: co[r][1])


def table(names, spans):
    """One row per traced step but the first: bubble of the replays and
    the measured one (see decompose), then the mean."""
    steps = sorted({e["args"]["step"] for e in spans})[1:]
    print("%5s %9s %11s %9s %9s %10s" % (
        "step", "theory", "+imbalance", "+jitter", "measured", "makespan"))
    acc = []
    for s in steps:
        sel = [e for e in spans if e["args"]["step"] == s]
        t0, end = step_span(sel)
        ranks = pipeline_ranks(names)
        sel = [e for e in sel if e["tid"] in ranks]
        t0, end = step_span(sel)
        rows = decompose(sel, ranks, 1e-3 * (end - t0))
        if rows is None:
            raise SystemExit("--table needs one chunk per rank")
        b = [r[2] for r in rows]
        acc.append(b)
        print("%5d %9.4f %11.4f %9.4f %9.4f %8.1f ms" % (
            s, *b, rows[-1][1]))
    m = [statistics.mean(x[i] for x in acc) for i in range(4)]
    print("%5s %9.4f %11.4f %9.4f %9.4f" % ("mean", *m))


def stats(names, spans, step):
    """Per-rank busy time of F and B, idle time and span counts in one step."""
    sel = [e for e in spans if e["args"].get("step") == step]
    if not sel:
        raise SystemExit(f"no spans for step {step}")
    t0 = min(e["ts"] for e in sel)
    t1 = max(e["ts"] + e["dur"] for e in sel)
    print(f"step {step}: {len(sel)} spans, {1e-3 * (t1 - t0):.2f} ms "
          "from first entry to last span end")
    end_compute = max(e["ts"] + e["dur"] for e in sel
                      if e["cat"] in ("forward", "backward"))
    busy_all = 0.0
    for r in sorted(names):
        mine = sorted((e for e in sel if e["tid"] == r), key=lambda e: e["ts"])
        by = collections.defaultdict(list)
        for e in mine:
            by[e["cat"]].append(e["dur"] * 1e-3)
        f, b = by["forward"], by["backward"]
        busy = sum(f) + sum(b)
        busy_all += busy
        first_f = min((e["ts"] for e in mine if e["cat"] == "forward"),
                      default=t0)
        order = " ".join(e["name"] for e in mine
                         if e["cat"] in ("forward", "backward"))
        wait = sum(by["recv_act"]) + sum(by["recv_grad"])
        # OPT appears twice, nested: the executor's instruction and the
        # engine's optimizer step inside it; the outer one is the longest.
        print(f"  {names[r]}: F {len(f)} x {sum(f) / max(len(f), 1):.2f} ms,"
              f" B {len(b)} x {sum(b) / max(len(b), 1):.2f} ms, busy "
              f"{busy:.2f} ms, idle {1e-3 * (end_compute - t0) - busy:.2f} ms"
              f" (recv waits {wait:.2f} ms), first F at "
              f"+{1e-3 * (first_f - t0):.2f} ms, RED "
              f"{sum(by['reduce_grads']):.2f} ms, OPT "
              f"{max(by['optimizer_step'], default=0):.2f} ms")
        print(f"    order: {order}")
    span = 1e-3 * (end_compute - t0)
    print(f"  bubble (1 - busy / (ranks * makespan to last F/B end)): "
          f"{1 - busy_all / (len(names) * span):.4f}")
    rows = None
    if len(pipeline_ranks(names)) == len(names):  # replica 0 only
        rows = decompose(sel, pipeline_ranks(names), span)
    if rows:
        print("  makespan replayed from this step's F/B durations, free "
              "communication:")
        for what, ms, b in rows:
            print(f"    {what:38s} {ms:9.2f} ms  bubble {b:.4f}")
    return sel, t0


COLORS = {"forward": "#4c72b0", "backward": "#dd8452",
          "reduce_grads": "#55a868", "optimizer_step": "#2d7d46"}


def plot(names, sel, t0, out, step):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ranks = sorted(names)
    fig, ax = plt.subplots(figsize=(14, 0.8 + 0.7 * len(ranks)))
    for e in sel:
        y = len(ranks) - 1 - ranks.index(e["tid"])
        x, w = 1e-3 * (e["ts"] - t0), 1e-3 * e["dur"]
        c = COLORS.get(e["cat"], "#bbbbbb")
        h = 0.8 if e["cat"] in COLORS else 0.35
        ax.broken_barh([(x, w)], (y - h / 2, h), facecolors=c,
                       edgecolors="white", linewidth=0.3)
        if e["cat"] in ("forward", "backward") and w > 0:
            ax.text(x + w / 2, y, e["name"], ha="center", va="center",
                    fontsize=7, color="white")
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([names[r] for r in reversed(ranks)])
    ax.set_xlabel("ms since the step's first span")
    ax.set_title(f"step {step}: forward (blue), backward (orange), "
                 "send/recv (grey, thin), RED/OPT (green)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, default=None,
                    help="step to show (default: the last traced step)")
    ap.add_argument("--out", default=None, help="PNG to write")
    ap.add_argument("--no-align", action="store_true",
                    help="use the file's times as they are")
    ap.add_argument("--table", action="store_true",
                    help="only the bubble decomposition of every step "
                    "(theory, + imbalance, + jitter, measured)")
    a = ap.parse_args()
    names, spans = load(a.trace)
    if not a.no_align:
        shift = clock_shifts(names, spans)
        print("clock shifts applied (ms): " + ", ".join(
            f"rank {r} {1e-3 * d:+.3f}" for r, d in sorted(shift.items())))
        for e in spans:
            e["ts"] += shift[e["tid"]]
    if a.table:
        table(names, spans)
        return
    step = a.step
    if step is None:
        step = max(e["args"]["step"] for e in spans)
    sel, t0 = stats(names, spans, step)
    if a.out:
        plot(names, sel, t0, a.out, step)


if __name__ == "__main__":
    main()
