# Sourced by bench/vs_pytorch.sh and bench/ddp.sh: how the tuned PyTorch
# baseline runs.
# TUNED_MALLOC: glibc malloc settings (ndtrain runs with them too):
# transparent huge pages, no mmap below 32 MiB and no trimming below 4 GiB,
# so freed activations keep their pages (fresh pages cost ~100x reused ones
# on these machines).
# TORCH_CAPS: the ATen CPU kernel levels (ATEN_CPU_CAPABILITY) the tuned
# PyTorch is run with, the faster run counting: torch 1.13 picks its AVX2
# kernels by itself even where the CPU has AVX-512.
# shellcheck shell=bash
TUNED_MALLOC=glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296
TORCH_CAPS=default
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo \
  && grep -qw avx512vl /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo; then
  TORCH_CAPS="default avx512"
fi
