// Embedding lookup and patchify: forward against reference indexing,
// finite differences for dtable and dimages, += for dtable with repeated
// ids, DataError on a bad id, and patches @ W^T == Conv2d(stride = P).
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "ops/ops.h"
#include "test_util.h"

namespace ndt {
namespace {

Tensor make_ids(std::initializer_list<int32_t> v) {
  Tensor t({static_cast<int64_t>(v.size())}, MemTag::kOther, DType::kI32);
  int64_t i = 0;
  for (int32_t x : v)
    t.data_i32()[i++] = x;
  return t;
}

TEST(Embedding, ForwardCopiesRows) {
  const int V = 6, C = 5;
  Tensor table = test::randn({V, C}, 1, "table");
  Tensor ids = make_ids({3, 0, 5, 3});
  Tensor y({4, C});
  ops::embedding_forward(y, ids, table);
  for (int n = 0; n < 4; ++n) {
    for (int c = 0; c < C; ++c) {
      EXPECT_EQ(y.data()[n * C + c], table.data()[ids.data_i32()[n] * C + c]);
    }
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int V = 6, C = 5;
  Tensor table = test::randn({V, C}, 2, "table");
  Tensor ids = make_ids({3, 0, 5, 3, 3, 1});  // repeats; ids 2, 4 unused
  Tensor r = test::randn({6, C}, 2, "r");
  Tensor y({6, C});
  auto loss = [&] {
    ops::embedding_forward(y, ids, table);
    return test::dot(y, r);
  };
  Tensor dtable = Tensor::zeros({V, C});
  ops::embedding_backward(dtable, r, ids);
  // Linear in the table: exact up to fp32 rounding; atol 1e-4, rtol 1e-3.
  EXPECT_LE(test::grad_check(table, dtable, loss, 1e-2, 1e-4, 1e-3), 1.0);
  // Second call adds each row of r onto the first result, in row order.
  Tensor expect = dtable.clone(MemTag::kOther);
  for (int n = 0; n < 6; ++n) {
    for (int c = 0; c < C; ++c) {
      expect.data()[ids.data_i32()[n] * C + c] += r.data()[n * C + c];
    }
  }
  ops::embedding_backward(dtable, r, ids);
  EXPECT_EQ(test::max_abs_diff(dtable, expect), 0.0);
}

TEST(Embedding, WideTableScatterMatchesReference) {
  // C = 700 spans several column stripes; N * C above the thread threshold.
  const int V = 50, C = 700, N = 64;
  Tensor ids({N}, MemTag::kOther, DType::kI32);
  for (int n = 0; n < N; ++n)
    ids.data_i32()[n] = (n * 13) % V;
  Tensor dy = test::randn({N, C}, 3, "dy");
  Tensor dtable = Tensor::zeros({V, C});
  ops::embedding_backward(dtable, dy, ids);
  Tensor expect = Tensor::zeros({V, C});
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      expect.data()[ids.data_i32()[n] * C + c] += dy.data()[n * C + c];
    }
  }
  EXPECT_EQ(test::max_abs_diff(dtable, expect), 0.0);  // same order of adds
}

TEST(Embedding, IdOutOfRangeIsDataError) {
  Tensor table = test::randn({4, 3}, 4, "table");
  Tensor y({3, 3}), dtable = Tensor::zeros({4, 3});
  for (int32_t bad : {-2, 4}) {
    Tensor ids = make_ids({1, bad, 0});
    try {
      ops::embedding_forward(y, ids, table);
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const DataError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("index 1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 4)"), std::string::npos) << msg;
    }
    EXPECT_THROW(ops::embedding_backward(dtable, y, ids), DataError);
  }
}

constexpr int kB = 2, kCin = 3, kH = 6, kW = 4, kP = 2;
constexpr int kGH = kH / kP, kGW = kW / kP, kD = kCin * kP * kP;

TEST(Patchify, ForwardLayoutAndConvEquivalence) {
  Tensor images = test::randn({kB, kCin, kH, kW}, 5, "images");
  Tensor patches({kB, kGH * kGW, kD});
  ops::patchify_forward(patches, images, kP);
  const float* im = images.data();
  for (int b = 0; b < kB; ++b) {
    for (int gy = 0; gy < kGH; ++gy) {
      for (int gx = 0; gx < kGW; ++gx) {
        for (int c = 0; c < kCin; ++c) {
          for (int py = 0; py < kP; ++py) {
            for (int px = 0; px < kP; ++px) {
              const int row = gy * kGW + gx, col = (c * kP + py) * kP + px;
              EXPECT_EQ(
                  patches.data()[(b * kGH * kGW + row) * kD + col],
                  im[((b * kCin + c) * kH + gy * kP + py) * kW + gx * kP + px]);
            }
          }
        }
      }
    }
  }
  // Linear on patches with weight [Dout, Cin*P*P] == Conv2d(kernel = stride
  // = P) with that weight viewed [Dout, Cin, P, P].
  const int Dout = 4;
  Tensor w = test::randn({Dout, kD}, 5, "w");
  Tensor y({kB, kGH * kGW, Dout});
  ops::linear_forward(y, patches, w, Tensor());
  Tensor conv({kB, kGH * kGW, Dout}, MemTag::kOther);
  for (int b = 0; b < kB; ++b) {
    for (int o = 0; o < Dout; ++o) {
      for (int gy = 0; gy < kGH; ++gy) {
        for (int gx = 0; gx < kGW; ++gx) {
          double acc = 0;
          for (int c = 0; c < kCin; ++c) {
            for (int ky = 0; ky < kP; ++ky) {
              for (int kx = 0; kx < kP; ++kx) {
                acc += double(w.data()[o * kD + (c * kP + ky) * kP + kx]) *
                       im[((b * kCin + c) * kH + gy * kP + ky) * kW + gx * kP +
                          kx];
              }
            }
          }
          conv.data()[(b * kGH * kGW + gy * kGW + gx) * Dout + o] =
              static_cast<float>(acc);
        }
      }
    }
  }
  // 12-term fp32 dot products: rtol 1e-5, atol 1e-6.
  EXPECT_LE(test::close_ratio(y, conv, 1e-6, 1e-5), 1.0);
}

TEST(Patchify, BackwardMatchesFiniteDifferences) {
  Tensor images = test::randn({kB, kCin, kH, kW}, 6, "images");
  Tensor r = test::randn({kB, kGH * kGW, kD}, 6, "r");
  Tensor patches({kB, kGH * kGW, kD});
  auto loss = [&] {
    ops::patchify_forward(patches, images, kP);
    return test::dot(patches, r);
  };
  Tensor dimages({kB, kCin, kH, kW});
  dimages.fill_(NAN);  // assigned: every element written
  ops::patchify_backward(dimages, r, kP);
  // A permutation: exact up to fp32 rounding; atol 1e-4, rtol 1e-3.
  EXPECT_LE(test::grad_check(images, dimages, loss, 1e-2, 1e-4, 1e-3), 1.0);
}

}  // namespace
}  // namespace ndt
