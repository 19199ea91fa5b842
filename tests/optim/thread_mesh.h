// ThreadMesh: ranks of a named mesh as std::threads in one process, for the
// sharded-norm tests of LARS/LAMB (test_layer_norms.cpp, test_lars_lamb.cpp).
//
// Ranks are row-major over the axes (the last axis varies fastest). Each
// rank's AxisSumFn sums a double vector over the ranks that share its
// coordinates on every axis NOT in `axes`, adding contributions in member
// order, so every member gets bitwise the same result and a run is
// deterministic. Stands in for mesh.group(axes).all_reduce until
// comm/ exists. No timeouts: a mismatched call sequence hangs the test.
#pragma once

#include <barrier>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/check.h"
#include "optim/layer_norms.h"
#include "test_util.h"

namespace ndt::test {

class ThreadMesh {
 public:
  ThreadMesh(std::vector<std::string> names, std::vector<int> sizes)
      : names_(std::move(names)), sizes_(std::move(sizes)) {
    NDT_ASSERT(names_.size() == sizes_.size());
    size_ = 1;
    for (int s : sizes_)
      size_ *= s;
    calls_.assign(size_, 0);
  }
  int size() const {
    return size_;
  }
  int axis_size(const std::string& axis) const {
    return sizes_[axis_index(axis)];
  }
  int coord(int rank, const std::string& axis) const {
    return coords(rank)[axis_index(axis)];
  }
  // Number of AxisSumFn calls `rank` has made.
  int calls(int rank) const {
    return calls_[rank];
  }

  AxisSumFn sum_fn(int rank) {
    return [this, rank](
               const std::vector<std::string>& axes, double* data, int64_t n) {
      ++calls_[rank];
      auto [group, member] = find_group(rank, axes);
      group->slots[member].assign(data, data + n);
      group->bar.arrive_and_wait();
      for (int64_t i = 0; i < n; ++i) {
        double s = 0;
        for (const std::vector<double>& slot : group->slots) {
          NDT_ASSERT(static_cast<int64_t>(slot.size()) == n);
          s += slot[i];
        }
        data[i] = s;
      }
      // Nobody refills a slot before every member has read them all.
      group->bar.arrive_and_wait();
    };
  }

  // Runs f(rank) on size() threads and joins them.
  void run(const std::function<void(int)>& f) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size_; ++r)
      threads.emplace_back(f, r);
    for (std::thread& t : threads)
      t.join();
  }

 private:
  struct Group {
    explicit Group(int n) : bar(n), slots(n) {}
    std::barrier<> bar;
    std::vector<std::vector<double>> slots;
  };

  int axis_index(const std::string& axis) const {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == axis)
        return static_cast<int>(i);
    }
    NDT_ASSERT(false, "no mesh axis '", axis, "'");
    return -1;
  }
  std::vector<int> coords(int rank) const {
    std::vector<int> c(sizes_.size());
    for (int i = static_cast<int>(sizes_.size()) - 1; i >= 0; --i) {
      c[i] = rank % sizes_[i];
      rank /= sizes_[i];
    }
    return c;
  }
  // The group spanned by `axes` through `rank`, and rank's index in it
  // (row-major over `axes` in mesh order).
  std::pair<Group*, int> find_group(
      int rank, const std::vector<std::string>& axes) {
    std::vector<int> c = coords(rank);
    std::vector<bool> in(sizes_.size(), false);
    for (const std::string& a : axes)
      in[axis_index(a)] = true;
    std::vector<int> key_coords;
    int member = 0, n = 1;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (in[i]) {
        member = member * sizes_[i] + c[i];
        n *= sizes_[i];
      } else {
        key_coords.push_back(c[i]);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto& g = groups_[{axes, key_coords}];
    if (!g)
      g = std::make_unique<Group>(n);
    return {g.get(), member};
  }

  std::vector<std::string> names_;
  std::vector<int> sizes_;
  int size_ = 1;
  std::vector<int> calls_;  // written only by the owning rank's thread
  std::mutex mu_;
  std::map<
      std::pair<std::vector<std::string>, std::vector<int>>,
      std::unique_ptr<Group>>
      groups_;
};

// The block of `global` (1-D or 2-D) that `layout` gives this rank.
inline Tensor local_block(const Tensor& global, const Layout& layout) {
  NDT_ASSERT(global.shape() == layout.global_shape);
  const Shape ls = layout.local_shape();
  const std::vector<int64_t> off = layout.local_offset();
  Tensor out(ls, MemTag::kOther);
  if (ls.size() == 1) {
    for (int64_t i = 0; i < ls[0]; ++i) {
      out.data()[i] = global.data()[off[0] + i];
    }
    return out;
  }
  NDT_ASSERT(ls.size() == 2, "local_block: 1-D or 2-D only");
  const int64_t cols = global.shape()[1];
  for (int64_t r = 0; r < ls[0]; ++r) {
    for (int64_t c = 0; c < ls[1]; ++c) {
      out.data()[r * ls[1] + c] =
          global.data()[(off[0] + r) * cols + off[1] + c];
    }
  }
  return out;
}

inline Placement shard(std::string axis, int dim, int parts, int index) {
  return {std::move(axis), Placement::Kind::kShard, dim, parts, index};
}
inline Placement replicate(std::string axis) {
  return {std::move(axis), Placement::Kind::kReplicate, -1, 1, 0};
}

struct ShardSpec {
  std::string name;
  Shape global_shape;
  bool decay;
  std::vector<Placement> placements;
};

// The parameters of the sharded tests as `rank` of a ("tp", "dp") mesh
// holds them: rows and columns split over tp, a tp-replicated vector (its
// norm must not be multiplied by the tp size), a no-decay bias split over
// tp, and a matrix split over both axes. Every one is replicated over dp
// unless it names dp.
inline std::vector<ShardSpec> sharded_specs(const ThreadMesh& mesh, int rank) {
  const int tp = mesh.axis_size("tp"), dp = mesh.axis_size("dp");
  const int t = mesh.coord(rank, "tp"), d = mesh.coord(rank, "dp");
  return {
      {"w_rows", {8, 12}, true, {shard("tp", 0, tp, t)}},
      {"w_cols", {8, 12}, true, {shard("tp", 1, tp, t)}},
      {"ln", {12}, true, {replicate("tp")}},
      {"bias", {12}, false, {shard("tp", 0, tp, t)}},
      {"w_2axes",
       {8, 12},
       true,
       {shard("tp", 0, tp, t), shard("dp", 1, dp, d)}},
  };
}

// Global tensors of the sharded tests: values and the grads of step `t`.
inline Tensor global_value(const ShardSpec& s) {
  return randn(s.global_shape, 7, s.name, 0.5f);
}
inline Tensor global_grad(const ShardSpec& s, int t) {
  return randn(s.global_shape, 100 + t, s.name, 0.1f);
}

// Parameters holding this rank's blocks of global_value().
inline std::vector<std::unique_ptr<Parameter>> make_sharded_params(
    const std::vector<ShardSpec>& specs) {
  std::vector<std::unique_ptr<Parameter>> out;
  for (const ShardSpec& s : specs) {
    Layout layout{s.global_shape, s.placements};
    auto p = std::make_unique<Parameter>(
        s.name, layout.local_shape(), s.decay, InitSpec{});
    p->layout = layout;
    p->value.copy_(local_block(global_value(s), layout));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace ndt::test
