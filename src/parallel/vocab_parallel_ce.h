// Cross-entropy over logits whose vocabulary is split over a process
// group (Megatron's vocab_parallel_cross_entropy): no rank holds the logits
// of the whole vocabulary; the softmax statistics are combined with
// all-reductions of [N] vectors. Used by the LM heads of 1D (group: tp)
// and 2D (group: the ranks of my grid row) tensor parallelism.
//
// Note [Vocabulary-parallel cross-entropy]
// logits [N, V/P] holds columns [v_begin, v_begin + V/P) of the global
// [N, V] logits (P = group size); targets int32 [N] are global ids. With
// m_n the global row max and z_n = sum over all V of exp(l - m_n) (each
// rank sums its columns, then all-reduce):
//   loss_n = log z_n - (l_{n, target} - m_n)    (as ops::cross_entropy)
//   p_{n, v} = exp(l_{n, v} - m_n) / z_n        (my columns only)
// Collectives per forward: all-reduce max [N], sum [2N] (fp64), and for
// `correct` max [N] twice (the argmax as (largest probability, lowest
// index)). Every rank of the group ends with every row's loss.
#pragma once

#include <cstdint>

#include "comm/process_group.h"
#include "nn/head.h"
#include "tensor/tensor.h"

namespace ndt {

// Replaces logits by my block of probabilities and adds the loss terms to
// stats: the summed loss (double, in row order), N terms, and the argmax
// == target count (the argmax is the lowest index with the largest
// probability, as in the serial head, found with a max of the values and
// then of -index). targets: N ids (any shape). Throws DataError for a
// target outside [0, V).
void vocab_parallel_cross_entropy(
    Tensor& logits,
    const Tensor& targets,
    int64_t v_begin,
    ProcessGroup& group,
    LossStats& stats);

// In place over my block of probabilities [N, V/P]: (p - onehot(target)) *
// scale, the onehot only on the rank that holds the target's column.
void vocab_parallel_cross_entropy_backward(
    Tensor& probs, const Tensor& targets, int64_t v_begin, float scale);

}  // namespace ndt
