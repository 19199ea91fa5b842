// The tensor-parallel grids of the 2D and 2.5D layer tests on threads:
// d grids of q x q (d = 1: 2D), mesh axes tp_dep (when d > 1) x tp_row x
// tp_col, as TensorParallelMode lays them out. Grid k, row i takes
// row-block k q + i of the d q row-blocks of every batch's samples; the
// grids hold the same parameters, whose gradients are summed over tp_dep
// (what the engine's gradient reduction does for 2.5D) before they are
// compared with the serial ones.
#pragma once

#include <string>
#include <vector>

#include "comm/mesh.h"
#include "nn/module.h"
#include "test_util.h"

namespace ndt::test {

struct GridCase {
  int q;
  int d;
};

// 2D at q = 2 and 3, 2.5D at q = 2, d = 2.
inline const std::vector<GridCase> kGridCases = {{2, 1}, {3, 1}, {2, 2}};

inline std::string grid_label(const GridCase& g) {
  return "q=" + std::to_string(g.q) + " d=" + std::to_string(g.d);
}

inline Mesh grid_mesh(ProcessGroup& pg, const GridCase& g) {
  if (g.d == 1)
    return Mesh(pg, {g.q, g.q}, {"tp_row", "tp_col"});
  return Mesh(pg, {g.d, g.q, g.q}, {"tp_dep", "tp_row", "tp_col"});
}

// My place on the grids.
struct GridRank {
  int q, d, k, i, j;
  explicit GridRank(const Mesh& mesh)
      : q(mesh.size("tp_col")),
        d(mesh.names().size() == 3 ? mesh.size("tp_dep") : 1),
        k(d > 1 ? mesh.coord("tp_dep") : 0),
        i(mesh.coord("tp_row")),
        j(mesh.coord("tp_col")) {}
  // My row-block of all d q.
  int row() const {
    return k * q + i;
  }
  // My block of an activation [B, .., C]: my samples, my features.
  Tensor block(const Tensor& t) const {
    return grid_block(t, d * q, row(), q, j);
  }
  // My samples of t (ids, images, targets, whole-feature outputs).
  Tensor samples(const Tensor& t) const {
    const int64_t b = t.dim(0) / (d * q);
    return t.rows(row() * b, b);
  }
};

// Sums the gradients of `ps` over the grids (2.5D's depth reduction);
// nothing for 2D.
inline void sum_over_depth(Mesh& mesh, const std::vector<Parameter*>& ps) {
  if (mesh.names().size() == 2)
    return;
  for (Parameter* p : ps)
    mesh.group("tp_dep").all_reduce(p->grad.data(), p->grad.numel());
}

}  // namespace ndt::test
