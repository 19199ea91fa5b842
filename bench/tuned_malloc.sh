# Sourced by bench/vs_pytorch.sh and bench/ddp.sh: glibc malloc settings
# for the tuned PyTorch baseline (and ndtrain beside it): transparent huge
# pages, no mmap below 32 MiB and no trimming below 4 GiB, so freed
# activations keep their pages (fresh pages cost ~100x reused ones on
# these machines).
# shellcheck shell=bash
TUNED_MALLOC=glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296
