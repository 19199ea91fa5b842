"""PyTorch DistributedDataParallel reference for bench/ddp.sh.

Runs the models of pytorch_step.py under torch.nn.parallel.DDP with the
gloo backend, WORLD processes on this machine, each with one thread and
1/WORLD of the same global batch, and times full training steps (median
after warm-up). Run with Debian's PyTorch:
  /usr/bin/python3 bench/pytorch_ddp.py --model vit --world 2
Options for the tuned run: --foreach 1 (AdamW's multi-tensor path),
--grad-view 1 (gradient_as_bucket_view=True: gradients live in DDP's
buckets, no copy in or out), --bucket-mb N (bucket_cap_mb, default 25).
Prints: pytorch_ddp model=<m> world=<n> median_ms=<x> foreach=<0|1>
grad_view=<0|1> bucket_mb=<N>
"""
import argparse
import math
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import pytorch_step as ps


def worker(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, x, y, loss_fn = ps.build(args.model)
    ps.init_weights(model)
    model.train()
    n = x.shape[0] // args.world
    x, y = x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]
    # Debian's torch 1.13 gloo build fails in DDP's initial
    # broadcast_coalesced ("Invalid scalar type"); every process builds the
    # same weights from the same seed, so that broadcast is skipped. The
    # gradient all-reduce (what is timed) is unaffected.
    torch.nn.parallel.distributed._sync_module_states = lambda **kw: None
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, broadcast_buffers=False,  # the only buffers are constant masks
        bucket_cap_mb=args.bucket_mb,
        gradient_as_bucket_view=bool(args.grad_view))
    opt = torch.optim.AdamW(ps.param_groups(model, 0.01), lr=1e-3,
                            betas=(0.9, 0.999), eps=1e-8,
                            foreach=bool(args.foreach))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.iters):
        dist.barrier()
        t0 = time.perf_counter()
        loss = step()
        times.append((time.perf_counter() - t0) * 1e3)
    if not math.isfinite(loss.item()):
        raise SystemExit(f"pytorch_ddp: non-finite loss {loss.item()}")
    if rank == 0:
        print(f"pytorch_ddp model={args.model} world={args.world} "
              f"median_ms={statistics.median(times):.3f} "
              f"foreach={args.foreach} grad_view={args.grad_view} "
              f"bucket_mb={args.bucket_mb:g}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, choices=["mlp", "vit", "gpt"])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--foreach", type=int, default=0, choices=[0, 1])
    ap.add_argument("--grad-view", type=int, default=0, choices=[0, 1])
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    args = ap.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
