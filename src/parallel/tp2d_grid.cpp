#include "parallel/tp2d_grid.h"

#include "ops/ops.h"

namespace ndt {
namespace {

Placement shard(const char* axis, int dim, const ProcessGroup& g, int blocks) {
  Placement p;
  p.axis = axis;
  p.kind = Placement::Kind::kShard;
  p.dim = dim;
  p.parts = g.size();
  p.index = g.rank();
  p.blocks = blocks;
  return p;
}

}  // namespace

Layout grid_matrix_layout(
    int out,
    int in,
    const ProcessGroup& row,
    const ProcessGroup& col,
    int blocks) {
  return Layout{
      {out, in}, {shard("tp_col", 0, row, blocks), shard("tp_row", 1, col, 1)}};
}

Layout grid_vector_layout(
    int features,
    const ProcessGroup& row,
    const ProcessGroup& col,
    int blocks) {
  return Layout{
      {features},
      {shard("tp_col", 0, row, blocks), shard("tp_row", 0, col, 1)}};
}

Layout grid_feature_layout(
    Shape global, int dim, const ProcessGroup& row, const char* axis) {
  return Layout{std::move(global), {shard(axis, dim, row, 1)}};
}

Tensor gather_column_slice(const Tensor& piece, ProcessGroup& col) {
  Tensor out({piece.numel() * col.size()}, MemTag::kComm);
  col.all_gather(piece.data(), out.data(), piece.numel());
  return out;
}

void add_column_piece_grad(
    Parameter& p, const Tensor& slice_grad, ProcessGroup& col) {
  Tensor mine({p.grad.numel()}, MemTag::kComm);
  col.reduce_scatter(slice_grad.data(), mine.data(), mine.numel());
  ops::add_(p.grad, mine);
}

}  // namespace ndt
