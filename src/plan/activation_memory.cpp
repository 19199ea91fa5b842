#include "plan/activation_memory.h"

#include <algorithm>
#include <functional>
#include <initializer_list>

#include "base/check.h"
#include "nn/seq_split.h"
#include "parallel/pipeline/schedules.h"
#include "parallel/ring_attention.h"
#include "plan/divide.h"
#include "plan/pipeline_comm.h"
#include "tensor/memory.h"

namespace ndt {
namespace {

// Bytes of an fp32 tensor of `elements` in the allocator's size classes.
int64_t fp32_bytes(int64_t elements) {
  return static_cast<int64_t>(mem_block_bytes(4 * size_t(elements)));
}

// The attention core of a block on one rank, in elements: its input
// q|k|v and output, and the scores it saves (the probabilities of the
// serial core, of ring self-attention and of Ulysses' serial core on its
// head split; ring attention's log-sum-exp, one per row and head);
// ring_tile and ring_tiles: the score tiles ring attention's backward
// holds at once (a thread's two [q_len, block] tiles, per thread).
struct CoreShape {
  SpAttention kind = SpAttention::kRsa;  // kRsa also for the serial core
  int64_t qkv = 0, out = 0, scores = 0;
  int64_t ring_tile = 0, ring_tiles = 0;
};

// The attention core of a block on one rank: the serial core (sp = 1)
// or parallel.sp_attention's over sp, on `samples` samples and `heads`
// heads of the mode; rows = samples x T_local tokens of width c.
CoreShape core_shape(
    const ParallelConfig& parallel,
    int64_t samples,
    int64_t heads,
    int64_t T,
    int64_t rows,
    int64_t c) {
  const int64_t Tl = divide(T, parallel.sp, "tokens");
  CoreShape a;
  a.kind = parallel.sp > 1 ? parallel.sp_attention : SpAttention::kRsa;
  a.qkv = rows * 3 * c;
  a.out = rows * c;
  a.scores = a.kind == SpAttention::kRing ? samples * heads * Tl
                                          : samples * heads * Tl * T;
  return a;
}

}  // namespace

std::vector<int64_t> block_activation_tensors(
    const ModelShape& shape,
    const ParallelConfig& parallel,
    int heads,
    int64_t samples) {
  const int64_t T = shape.tokens_per_sample;
  const int64_t N = samples * divide(T, parallel.sp, "tokens");
  const int64_t C = shape.dim, F = shape.mlp_dim, H = heads;
  const int tp = shape.tp;
  std::vector<int64_t> t;
  const auto add = [&t](std::initializer_list<int64_t> sizes) {
    for (int64_t n : sizes)
      t.push_back(n);
  };
  if (tp == 1 || shape.tp_mode == TpMode::k1d) {
    const int64_t c = divide(C, tp, "width"), f = divide(F, tp, "MLP");
    const CoreShape a =
        core_shape(parallel, samples, divide(H, tp, "heads"), T, N, c);
    // h and y on my tokens under tp_seq; h1 and h2 all-gathered there.
    const int64_t n = parallel.tp_seq && tp > 1 ? divide(N, tp, "tokens") : N;
    add({N * C, n * C, N * C, n * C});            // h1, h, h2, y
    add({n, n, n, n});                            // LayerNorm stats
    add({a.qkv, a.scores, a.out, N * f, N * f});  // core, fc1 x2
    return t;
  }
  const int q = shape.tp_side;
  if (shape.tp_mode == TpMode::k3d) {
    const int64_t p = q, pp = int64_t{q} * q;
    const int64_t r = divide(N, pp, "rows"), c = C / p, f = F / p;
    const CoreShape a = core_shape(
        parallel,
        divide(samples, pp, "samples"),
        divide(H, p, "heads"),
        T,
        r,
        c);
    add({p * r * c, 3 * C / p * c});              // qkv's X', W'
    add({p * r * c, C / p * c});                  // proj's
    add({p * r * c, F / p * c});                  // fc1's
    add({p * r * f, C / p * f});                  // fc2's
    add({r, r, r, r});                            // LayerNorm stats
    add({a.qkv, a.scores, r * c, r * f, r * c});  // core, h, fc1 pre, y
    if (a.kind == SpAttention::kRing)
      add({a.out});  // the ring core keeps its output; proj a gathered copy
    return t;
  }
  const int64_t d = shape.tp_mode == TpMode::k2p5d ? parallel.tp_depth : 1;
  const int64_t r = divide(N, q * d, "rows"), c = C / q, f = F / q;
  const CoreShape a = core_shape(
      parallel,
      divide(samples, q * d, "samples"),
      divide(H, q, "heads"),
      T,
      r,
      c);
  add({r * c, r * c, r * c, r * c});            // h1, h, h2, y
  add({r, r, r, r});                            // LayerNorm stats
  add({a.qkv, a.scores, a.out, r * f, r * f});  // core, fc1 x2
  return t;
}

int64_t block_activation_bytes(
    const ModelShape& shape,
    const ParallelConfig& parallel,
    int heads,
    int64_t samples) {
  int64_t bytes = 0;
  for (int64_t n : block_activation_tensors(shape, parallel, heads, samples))
    bytes += fp32_bytes(n);
  return bytes;
}

namespace {

// The live activation bytes of one rank as the step allocates and frees
// them, in the allocator's size classes; peak() is the largest sum seen.
class LiveBytes {
 public:
  void alloc(int64_t elements) {
    now_ += fp32_bytes(elements);
    peak_ = std::max(peak_, now_);
  }
  void free(int64_t elements) {
    now_ -= fp32_bytes(elements);
  }
  void add_bytes(int64_t b) {
    now_ += b;
    peak_ = std::max(peak_, now_);
  }
  void sub_bytes(int64_t b) {
    now_ -= b;
  }
  int64_t peak() const {
    return peak_;
  }
  int64_t now() const {
    return now_;
  }
  void reset_peak() {
    peak_ = now_;
  }

 private:
  int64_t now_ = 0, peak_ = 0;
};

// The serial core's backward (ring self-attention's allocates alike):
// dqkv and d(scores), then the saved qkv and scores go with d(scores).
void scores_backward(LiveBytes& m, const CoreShape& a) {
  m.alloc(a.qkv);
  m.alloc(a.scores);
  m.free(a.qkv);
  m.free(a.scores);
  m.free(a.scores);
}

// The attention core's backward from its dout to its dqkv.
void core_backward(LiveBytes& m, const CoreShape& a) {
  switch (a.kind) {
    case SpAttention::kRsa:
      scores_backward(m, a);
      return;
    case SpAttention::kUlysses:
      // dout to the head split, the serial core's backward there, then
      // its dqkv back to my tokens.
      m.alloc(a.out);
      scores_backward(m, a);
      m.free(a.out);
      m.alloc(a.qkv);
      m.free(a.qkv);
      return;
    case SpAttention::kRing:
      // D (one per row and head), dqkv, each thread's score tiles; then
      // the saved qkv, output and log-sum-exp go, and D.
      m.alloc(a.scores);
      m.alloc(a.qkv);
      for (int64_t i = 0; i < a.ring_tiles; ++i)
        m.alloc(a.ring_tile);
      for (int64_t i = 0; i < a.ring_tiles; ++i)
        m.free(a.ring_tile);
      m.free(a.qkv);
      m.free(a.out);
      m.free(a.scores);
      m.free(a.scores);
      return;
  }
}

// Whether the core keeps its output to its backward (ring attention),
// so that proj's backward releasing its saved input frees nothing there.
bool core_holds_output(const CoreShape& a) {
  return a.kind == SpAttention::kRing;
}

// One mode's step from the last block's fc2 on, in four pieces:
// forward_tail, the rest of a block's forward (it allocates the
// block's tail_saved tensors, the output among them, and leaves the
// output live); head_forward, the LM head's forward (what it keeps stays
// live); head_backward, its backward (it frees the last block's output
// and leaves the block's dy live); block_backward, the block's backward
// as far as its peak.
struct StepPieces {
  std::vector<int64_t> tail_saved;  // elements; the block's output first
  std::function<void()> forward_tail, head_forward, head_backward,
      block_backward;
};

// Serial and 1D: n my tokens (N/tp under tp_seq), the linears' rows N.
StepPieces pieces_1d(
    LiveBytes& m,
    int64_t N,
    int64_t n,
    int64_t C,
    int64_t c,
    int64_t f,
    int64_t v,
    const CoreShape& a,
    int tp,
    bool seq,
    bool drop) {
  const bool split = tp > 1;
  // Dropout's output [n, C] replaces its input.
  const auto dropout_forward = [&m, n, C, drop] {
    if (drop) {
      m.alloc(n * C);
      m.free(n * C);
    }
  };
  // Input gradient of a column-parallel linear: its local dx [N, C], then
  // the all-reduce [N, C] or reduce-scatter [n, C] of it.
  const auto column_dx = [&m, N, n, C, split](int64_t saved_x) {
    m.free(saved_x);
    if (split) {
      m.alloc(n * C);
      m.free(N * C);
    }
  };
  // LayerNorm backward on my tokens: under tp_seq the gradient sum parks
  // the weight and bias gradients [2C].
  const auto layernorm_dx = [&m, n, C, seq](int64_t x) {
    if (seq)
      m.alloc(2 * C);
    m.alloc(n * C);
    m.free(x);
    m.free(n);
    m.free(n);
    if (seq)
      m.free(2 * C);
  };
  // Row-parallel linear backward to its dx [N, in]: under tp_seq its bias
  // contribution [C] and the all-gathered dy [N, C] come first.
  const auto row_dx = [&m, N, C, seq](int64_t in, int64_t saved_x) {
    if (seq) {
      m.alloc(C);
      m.free(C);
      m.alloc(N * C);
    }
    m.alloc(N * in);
    if (saved_x > 0)
      m.free(saved_x);
    if (seq)
      m.free(N * C);
  };
  StepPieces s;
  s.tail_saved = {n * C};
  // The attention branch's output a [n, C] is live (a local of the
  // block's forward) beside fc2's output (row-parallel: the partial
  // [N, C], then its all-reduce or reduce-scatter), its dropout and the
  // block's output y.
  s.forward_tail = [=, &m] {
    m.alloc(n * C);  // a
    if (split) {
      m.alloc(N * C);
      m.alloc(n * C);
      m.free(N * C);
    } else {
      m.alloc(N * C);
    }
    dropout_forward();
    m.alloc(n * C);  // y
    m.free(n * C);
    m.free(n * C);
  };
  s.head_forward = [=, &m] {
    // LM head forward: LayerNorm on my tokens, then the logits.
    m.alloc(n * C);
    m.alloc(n);
    m.alloc(n);
    if (!split) {
      m.alloc(N * v);  // logits
      m.alloc(N);      // losses
      m.alloc(N * v);  // probabilities
      m.free(N);
      m.free(N * v);
    } else {
      if (seq)
        m.alloc(N * C);  // all-gathered LayerNorm output
      m.alloc(N * v);    // logits, then probabilities in place
      if (seq)
        m.free(n * C);
    }
  };
  s.head_backward = [=, &m] {
    // LM head backward: dh [N, C], its reduction, the LayerNorm's dx.
    m.alloc(N * C);
    m.free(N * C);  // the (gathered) LayerNorm output
    if (split)
      m.alloc(n * C);
    layernorm_dx(n * C);  // frees the last block's output
    if (split)
      m.free(n * C);
    m.free(N * C);
    m.free(N * v);
  };
  // dy [n, C] stays live to the block's end.
  s.block_backward = [=, &m] {
    if (drop)
      m.alloc(n * C);
    row_dx(f, N * f);  // fc2: frees its input, fc1's output
    if (drop)
      m.free(n * C);
    m.alloc(N * C);  // fc1: dx, then d(pre-GELU)
    m.alloc(N * f);
    m.free(N * f);  // pre-GELU
    m.free(N * f);  // d(pre-GELU)
    column_dx(N * C);
    m.free(N * f);        // fc2's dx
    layernorm_dx(n * C);  // ln2: frees h
    m.free(n * C);        // fc1's dx
    m.alloc(n * C);       // dh
    m.free(n * C);        // ln2's dx
    if (drop)
      m.alloc(n * C);
    row_dx(c, core_holds_output(a) ? 0 : a.out);  // proj
    if (drop)
      m.free(n * C);
    core_backward(m, a);
    m.free(N * c);   // proj's dx
    m.alloc(N * C);  // qkv's dx
    column_dx(N * C);
  };
  return s;
}

// The ViT's classifier head on one rank, forward and backward: it frees
// the last block's output (own) and leaves that block's dy (own) live.
// The head reads its input [R, w] (B samples, R / B tokens each, w of the
// C features): the block's output, or the last of the gathered copies the
// layouts make of it (tp_seq's all-gather of my tokens over tp, then
// sequence parallelism's of every rank's tokens over sp). Under sp only
// sp rank 0 runs it (root); the others take their tokens of the
// broadcast dx. Pooling by the class token copies its row [B, w] and keeps
// no token after the forward; mean pooling keeps the LayerNorm's input
// (every token) to its backward. The linear keeps its input [B, w], or
// under 2D, 2.5D and 3D (grid) its features all-gathered to [B, C].
struct VitHead {
  bool cls = false, grid = false, root = true;
  int64_t B = 0, R = 0, w = 0, C = 0, K = 0, own = 0;
  std::vector<int64_t> gathers;  // in the order made
};

// The head's input (the last gathered copy, or the block's output) and
// whether it keeps it to its backward (the mean's LayerNorm on sp rank 0).
int64_t vit_head_input(const VitHead& h) {
  return h.gathers.empty() ? h.own : h.gathers.back();
}

bool vit_head_keeps_input(const VitHead& h) {
  return h.root && !h.cls;
}

void vit_head_forward(LiveBytes& m, const VitHead& h) {
  const int64_t B = h.B, R = h.R, w = h.w, C = h.C, K = h.K;
  for (int64_t g : h.gathers)
    m.alloc(g);
  const bool keeps_input = vit_head_keeps_input(h);
  if (h.root) {
    if (h.cls) {
      m.alloc(B * w);  // the class token's row
      m.alloc(B * w);  // LayerNorm's output and statistics
      m.alloc(B);
      m.alloc(B);
    } else {
      m.alloc(R * w);  // LayerNorm on every token
      m.alloc(R);
      m.alloc(R);
      m.alloc(B * w);  // the mean
      m.free(R * w);
    }
    if (h.grid)
      m.alloc(B * C);  // the linear's gathered input
    m.alloc(B * K);    // logits, losses, probabilities
    m.alloc(B);
    m.alloc(B * K);
    m.free(B);
    m.free(B * K);
    if (h.grid)
      m.free(B * w);  // the linear's input, copied
  }
  // The gathered copies go with the forward, the last one unless the
  // LayerNorm keeps it; then the block's output, likewise.
  for (size_t i = h.gathers.size(); i-- > 0;) {
    if (!(keeps_input && i + 1 == h.gathers.size()))
      m.free(h.gathers[i]);
  }
  if (!(keeps_input && h.gathers.empty()))
    m.free(h.own);
}

void vit_head_backward(LiveBytes& m, const VitHead& h) {
  const int64_t B = h.B, R = h.R, w = h.w, C = h.C, K = h.K;
  const int64_t in = vit_head_input(h);
  if (h.root) {
    // Backward: the linear's dx and its saved input.
    if (h.grid) {
      m.alloc(B * C);
      m.free(B * C);
      m.alloc(B * w);
      m.free(B * C);
    } else {
      m.alloc(B * w);
      m.free(B * w);
    }
    if (h.cls) {
      m.alloc(B * w);  // LayerNorm's dx; its input and statistics go
      m.free(B * w);
      m.free(B);
      m.free(B);
      m.free(B * w);   // the linear's dx
      m.alloc(R * w);  // dx: the class token's row, zeros elsewhere
      m.free(B * w);   // LayerNorm's dx
    } else {
      m.alloc(R * w);  // the mean's dx
      m.alloc(R * w);  // LayerNorm's dx; its input and statistics go
      m.free(in);
      m.free(R);
      m.free(R);
      m.free(R * w);  // the mean's dx
      m.free(B * w);  // the linear's dx
    }
    m.free(B * K);  // the probabilities, d(logits) in place
  } else {
    m.alloc(in);  // the broadcast dx
  }
  // Back through the gathers: each takes my part of the dx before it.
  for (size_t i = h.gathers.size(); i-- > 0;) {
    m.alloc(i > 0 ? h.gathers[i - 1] : h.own);
    m.free(h.gathers[i]);
  }
}

// 2D, 2.5D and 3D from the LM head's backward on: r rows and c, f, v
// columns of each block; linear_dx(in, out, gelu, held) is the mode's
// linear backward to its dx [r, in], releasing its saved input (held: the
// attention core still holds that input, 2D's proj under ring attention).
// The head's part frees the last block's output and leaves its dy [r, c]
// live.
using LinearDx = std::function<void(int64_t, int64_t, bool, bool)>;

void grid_layernorm_dx(LiveBytes& m, int64_t r, int64_t c) {
  m.alloc(r * c);
  m.free(r * c);  // its input
  m.free(r);
  m.free(r);
}

void grid_head_backward(
    LiveBytes& m, int64_t r, int64_t c, int64_t v, const LinearDx& linear_dx) {
  linear_dx(c, v, false, false);  // LM head
  grid_layernorm_dx(m, r, c);     // frees the last block's output
  m.free(r * c);
  m.free(r * v);
}

void grid_block_backward(
    LiveBytes& m,
    int64_t r,
    int64_t c,
    int64_t f,
    const CoreShape& a,
    bool drop,
    const LinearDx& linear_dx) {
  if (drop)
    m.alloc(r * c);
  linear_dx(f, c, false, false);  // fc2
  if (drop)
    m.free(r * c);
  linear_dx(c, f, true, false);  // fc1
  m.free(r * f);
  grid_layernorm_dx(m, r, c);  // ln2: frees h
  m.free(r * c);
  m.alloc(r * c);  // dh
  m.free(r * c);
  if (drop)
    m.alloc(r * c);
  linear_dx(c, c, false, core_holds_output(a));  // proj
  if (drop)
    m.free(r * c);
  core_backward(m, a);
  m.free(r * c);
  linear_dx(c, 3 * c, false, false);  // qkv
}

// 2D and 2.5D. A SUMMA linear's backward holds its weight-gradient part
// [out, in], then dx and the partial product it reduces [r, in]; it saved
// its input [r, in] (and, with GELU, the product before it [r, out]).
StepPieces pieces_2d(
    LiveBytes& m,
    int64_t r,
    int64_t c,
    int64_t f,
    int64_t v,
    const CoreShape& a,
    bool drop) {
  const LinearDx linear_dx =
      [&m, r](int64_t in, int64_t out, bool gelu, bool held) {
        if (gelu)
          m.alloc(r * out);  // d(pre-GELU)
        m.alloc(out * in);
        m.alloc(r * in);
        m.alloc(r * in);
        if (!held)
          m.free(r * in);  // its input
        if (gelu)
          m.free(r * out);  // pre-GELU
        m.free(r * in);
        m.free(out * in);
        if (gelu)
          m.free(r * out);
      };
  StepPieces s;
  s.tail_saved = {r * c};
  s.forward_tail = [=, &m] {
    m.alloc(r * c);  // a, fc2's output, dropout, y
    m.alloc(r * c);
    if (drop) {
      m.alloc(r * c);
      m.free(r * c);
    }
    m.alloc(r * c);
    m.free(r * c);
    m.free(r * c);
  };
  s.head_forward = [=, &m] {
    m.alloc(r * c);  // LayerNorm, logits
    m.alloc(r);
    m.alloc(r);
    m.alloc(r * v);
  };
  s.head_backward = [=, &m] { grid_head_backward(m, r, c, v, linear_dx); };
  s.block_backward = [=, &m] {
    grid_block_backward(m, r, c, f, a, drop, linear_dx);
  };
  return s;
}

// 3D: a linear keeps its all-gathered input X' [p r, in] and weight W'
// [out, in] to its backward; dx [r, in] comes out of a reduce-scatter.
StepPieces pieces_3d(
    LiveBytes& m,
    int64_t p,
    int64_t r,
    int64_t c,
    int64_t f,
    int64_t v,
    const CoreShape& a,
    bool drop) {
  // Its input X' is a gathered copy: the core's output is another tensor.
  const LinearDx linear_dx = [&m, p, r](
                                 int64_t in, int64_t out, bool gelu, bool) {
    if (gelu)
      m.alloc(r * out);  // d(pre-GELU)
    m.alloc(r * in);
    m.free(p * r * in);
    m.free(out * in);
    if (gelu) {
      m.free(r * out);  // pre-GELU
      m.free(r * out);
    }
  };
  StepPieces s;
  s.tail_saved = {r * c, p * r * f, c * f};  // y, fc2's X' and W'
  // a [r, c] and fc1's output [r, f] are live while fc2 gathers X' and W'
  // and reduce-scatters its output.
  s.forward_tail = [=, &m] {
    m.alloc(r * c);
    m.alloc(r * f);
    m.alloc(p * r * f);
    m.alloc(c * f);
    m.alloc(r * c);
    m.free(r * f);
    if (drop) {
      m.alloc(r * c);
      m.free(r * c);
    }
    m.alloc(r * c);  // y
    m.free(r * c);
    m.free(r * c);
  };
  s.head_forward = [=, &m] {
    m.alloc(r * c);  // LayerNorm
    m.alloc(r);
    m.alloc(r);
    m.alloc(p * r * c);  // X', W', logits
    m.alloc(v * c);
    m.alloc(r * v);
    m.alloc(r);  // the target's side (int32)
    m.free(r * c);
    m.free(r);
  };
  s.head_backward = [=, &m] { grid_head_backward(m, r, c, v, linear_dx); };
  s.block_backward = [=, &m] {
    grid_block_backward(m, r, c, f, a, drop, linear_dx);
  };
  return s;
}

// One chunk's activations on one rank per micro-batch, in bytes: the
// input it receives (held from its receive to its backward's end; 0 on
// virtual stage 0); its output (0 on the last virtual stage), of which
// `sent` goes at its send's wait (all of it, or none where a layer keeps
// the output to its backward); what its forward keeps beside them to its
// backward's end; and the peaks of its forward and backward above the
// live bytes before each. Gradients mirror them: the output's arrives
// before the backward and goes with it, the input's leaves with the
// backward and goes at its send's wait.
struct ChunkActs {
  int64_t in = 0, out = 0, sent = 0, held = 0, fwd_peak = 0, bwd_peak = 0;
};

// The activation peak of one rank's instruction list.
int64_t schedule_peak(
    const std::vector<Instr>& list, const std::vector<ChunkActs>& chunks) {
  int64_t live = 0, peak = 0;
  for (const Instr& in : list) {
    switch (in.op) {
      case Op::kRecvAct:
        live += chunks.at(in.chunk).in;
        break;
      case Op::kForward:
        peak = std::max(peak, live + chunks.at(in.chunk).fwd_peak);
        live += chunks.at(in.chunk).held + chunks.at(in.chunk).sent;
        break;
      case Op::kWaitSendAct:
        live -= chunks.at(in.chunk).sent;
        break;
      case Op::kRecvGrad:
        live += chunks.at(in.chunk).out;
        break;
      case Op::kBackward:
        // The input goes and its gradient comes: the same size.
        peak = std::max(peak, live + chunks.at(in.chunk).bwd_peak);
        live -= chunks.at(in.chunk).held + chunks.at(in.chunk).out;
        break;
      case Op::kWaitSendGrad:
        live -= chunks.at(in.chunk).in;
        break;
      case Op::kLoadMicroBatch:
      case Op::kSendAct:
      case Op::kSendGrad:
      case Op::kReduceGrads:
      case Op::kOptimizerStep:
        break;
    }
    peak = std::max(peak, live);
  }
  return peak;
}

// The activation peak of pipeline rank pp_rank's step, each of its chunks'
// from chunk(its modules); in one stage the engine's micro-batches one by
// one.
int64_t step_peak(
    const ModelShape& shape,
    const ParallelConfig& parallel,
    int pp_rank,
    const std::function<ChunkActs(const ModuleRange&)>& chunk) {
  if (parallel.pp == 1) {
    const Schedule one =
        make_schedule(PipeSchedule::kNaive, 1, parallel.microbatches, 1);
    return schedule_peak(one.instrs.front(), {chunk({0, shape.head()})});
  }
  std::vector<ChunkActs> acts;
  for (const ModuleRange& r :
       pipeline_chunks(shape, pipeline_layout(parallel), pp_rank))
    acts.push_back(chunk(r));
  const Schedule s = make_schedule(
      parallel.schedule,
      parallel.pp,
      parallel.microbatches,
      parallel.pp_chunks);
  return schedule_peak(s.instrs.at(pp_rank), acts);
}

// Tensors held by reference counts, as Tensor's storage is: a tensor's
// bytes go when its last holder lets go.
class Held {
 public:
  explicit Held(LiveBytes& m) : m_(m) {}
  int make(int64_t elements) {
    m_.alloc(elements);
    return adopt(elements);
  }
  // A tensor allocated outside what is measured, one holder.
  int adopt(int64_t elements) {
    t_.push_back({elements, 1});
    return static_cast<int>(t_.size()) - 1;
  }
  void hold(int id) {
    ++t_.at(id).refs;
  }
  int64_t refs(int id) const {
    return t_.at(id).refs;
  }
  void drop(int id) {
    if (--t_.at(id).refs == 0)
      m_.free(t_[id].elements);
  }

 private:
  struct T {
    int64_t elements, refs;
  };
  LiveBytes& m_;
  std::vector<T> t_;
};

// The MLP's modules [lo, hi] (Model's numbering: a chunk of a pipeline,
// or the whole model) on B samples, as Model runs them: its hidden
// linears (each keeps its input, and ReLU's output or GELU's product
// before it) and dropout layers, on the last chunk the classifier head (a
// linear that keeps its input; logits, losses, probabilities), then
// backward; under recompute each module keeps only its input between its
// forward and the forward its backward runs again. On the first chunk the
// input layer's output is the batch itself, not an activation; on the
// others the received input is the executor's until the forward ends and
// the received gradient until the backward ends.
ChunkActs mlp_chunk(
    const ModelShape& shape, int64_t B, bool recompute, int lo, int hi) {
  const bool first = lo == 0, last = hi == shape.head();
  LiveBytes m;
  Held t(m);
  const int none = -1;
  struct Module {
    bool linear;
    int64_t in, out;
    std::vector<int> saved;
    int input = -1;  // recompute: the module's input
  };
  std::vector<Module> mods;
  int64_t width = shape.modules.front().sample_out.at(0), in_width = width;
  for (int i = 1; i < shape.head(); ++i) {
    const ModuleShape& mod = shape.modules[i];
    const int64_t out = mod.sample_out.at(0);
    if (i == lo)
      in_width = width;
    if (i >= lo && i <= hi)
      mods.push_back({mod.kind == ModuleKind::kLinear, width, out, {}, none});
    if (i <= hi)
      width = out;
  }
  ChunkActs a;
  a.in = first ? 0 : fp32_bytes(B * in_width);
  a.out = last ? 0 : fp32_bytes(B * width);
  // A module's forward from input x: its output; what it saves.
  const auto forward = [&](Module& b, int x) {
    const int y = t.make(B * b.out);
    if (!b.linear)
      return y;
    if (x != none) {
      t.hold(x);
      b.saved.push_back(x);
    }
    if (shape.act == Act::kRelu) {
      t.hold(y);
      b.saved.push_back(y);
    } else if (shape.act == Act::kGelu) {
      b.saved.push_back(t.make(B * b.out));  // before the GELU
    }
    return y;
  };
  const auto clear = [&](Module& b) {
    for (int id : b.saved)
      t.drop(id);
    b.saved.clear();
  };
  const int received = first ? none : t.adopt(B * in_width);
  int x = received;
  if (x != none)
    t.hold(x);
  for (Module& b : mods) {
    const int y = forward(b, x);
    if (recompute) {
      clear(b);
      if (x != none)
        t.hold(x);
      b.input = x;
    }
    if (x != none)
      t.drop(x);
    x = y;
  }
  if (received != none)
    t.drop(received);
  // The head: its linear keeps its input (the forward lets go of it);
  // logits, losses, probabilities.
  int probs = none;
  if (last) {
    const int64_t K = shape.classes;
    const int logits = t.make(B * K);
    const int losses = t.make(B);
    probs = t.make(B * K);
    t.drop(losses);
    t.drop(logits);
  }
  // The output leaves with its send, unless its layer keeps it (ReLU).
  if (!last) {
    a.sent = a.out;
    if (t.refs(x) > 1) {
      a.sent = 0;
      t.drop(x);
    }
  }
  a.fwd_peak = m.peak();
  a.held = m.now() - a.sent;
  m.sub_bytes(a.sent);
  m.reset_peak();
  const int64_t base = m.now();
  // Backward: on the last chunk d(logits) in place over the probabilities
  // and the linear's dx (none when its input is the batch), then its
  // input; on the others from the received gradient.
  int g = none;
  if (last) {
    g = first && mods.empty() ? none : t.make(B * width);
    if (x != none)
      t.drop(x);
    t.drop(probs);
  } else {
    g = t.adopt(B * width);
    t.hold(g);
  }
  for (size_t i = mods.size(); i-- > 0;) {
    Module& b = mods[i];
    if (recompute) {
      const int again = forward(b, b.input);
      t.drop(again);
      if (b.input != none)
        t.drop(b.input);
    }
    // The first module's input (the batch) needs no gradient.
    const int dx = i > 0 || !first ? t.make(B * b.in) : none;
    if (b.linear && shape.act != Act::kNone) {
      const int dpre = t.make(B * b.out);
      clear(b);
      t.drop(dpre);
    } else {
      clear(b);
    }
    if (g != none)
      t.drop(g);
    g = dx;
  }
  a.bwd_peak = m.peak() - base;
  return a;
}

}  // namespace

bool step_activation_modelled(const ParallelConfig& parallel) {
  // Threads' replicas share one process and its ledger.
  return parallel.dp_mode == DpMode::kMpi || parallel.dp == 1;
}

int64_t step_activation_bytes(
    const ModelShape& shape,
    const ParallelConfig& parallel,
    int heads,
    int64_t samples,
    float dropout,
    int threads,
    int sp_rank,
    int pp_rank) {
  NDT_CHECK(
      step_activation_modelled(parallel),
      ConfigError,
      "the plan's step activation model covers one replica per process, "
      "not parallel.dp=",
      parallel.dp,
      " and parallel.dp_mode=",
      to_string(parallel.dp_mode));
  const bool recompute = parallel.recompute == Recompute::kBlock;
  if (shape.kind == ModelKind::kMlp) {
    return step_peak(shape, parallel, pp_rank, [&](const ModuleRange& r) {
      return mlp_chunk(shape, samples, recompute, r.first, r.last);
    });
  }
  const int64_t T = shape.tokens_per_sample;
  const int64_t N = samples * divide(T, parallel.sp, "tokens");
  const int64_t C = shape.dim, F = shape.mlp_dim, V = shape.vocab;
  const int tp = shape.tp;
  const bool drop = dropout > 0;
  // The core of the mode's samples and heads on its r rows of c columns;
  // ring attention's backward tiles: a run of my tokens per tile's
  // queries (the causal GPT's split is zig-zag, the ViT's contiguous:
  // sequence_split); each thread holds its own where there are (sample,
  // head) pairs for all.
  const auto core = [&](int64_t core_samples, int64_t split, int64_t r) {
    CoreShape a =
        core_shape(parallel, core_samples, heads / split, T, r, C / split);
    if (a.kind == SpAttention::kRing) {
      const SeqShard shard(
          shape.kind == ModelKind::kGpt ? SeqSplit::kZigzag
                                        : SeqSplit::kContiguous,
          T,
          0,
          parallel.sp);
      a.ring_tile = 2 * std::max<int64_t>(shard.runs().front().length, 1) *
                    RingAttention::kDefaultBlock;
      const int64_t pairs = core_samples * (heads / split);
      a.ring_tiles = pairs > 1 && pairs >= threads ? threads : 1;
    }
    return a;
  };
  const bool vit = shape.kind == ModelKind::kVit;
  const bool cls = shape.pool == HeadPool::kCls;
  int64_t embed_samples = samples;  // the input layer's: the mode's block
  VitHead h;
  LiveBytes m;
  StepPieces s;
  if (tp == 1 || shape.tp_mode == TpMode::k1d) {
    const bool seq = parallel.tp_seq && tp > 1;
    const int64_t n = seq ? divide(N, tp, "tokens") : N;
    s = pieces_1d(
        m,
        N,
        n,
        C,
        C / tp,
        F / tp,
        V / tp,
        core(samples, tp, N),
        tp,
        seq,
        drop);
    h.own = n * C;
    if (seq)
      h.gathers.push_back(N * C);
  } else if (shape.tp_mode == TpMode::k3d) {
    const int64_t q = shape.tp_side;
    const int64_t r = divide(N, q * q, "rows");
    embed_samples = samples / (q * q);
    s = pieces_3d(
        m, q, r, C / q, F / q, V / q, core(embed_samples, q, r), drop);
    h.grid = true;
    h.own = r * (C / q);
  } else {
    const int64_t q = shape.tp_side;
    const int64_t d = shape.tp_mode == TpMode::k2p5d ? parallel.tp_depth : 1;
    const int64_t r = divide(N, q * d, "rows");
    embed_samples = samples / (q * d);
    s = pieces_2d(m, r, C / q, F / q, V / q, core(embed_samples, q, r), drop);
    h.grid = true;
    h.own = r * (C / q);
  }
  if (vit) {
    // The head's samples and width: the mode's; under sp every token,
    // gathered over sp, and run on sp rank 0.
    h.cls = cls;
    h.B = embed_samples;
    h.w = h.grid ? C / shape.tp_side : C;
    h.C = C;
    h.K = shape.classes;
    h.R = h.B * T;
    if (parallel.sp > 1)
      h.gathers.push_back(h.R * h.w);
    h.root = sp_rank == 0;
    s.head_forward = [&m, h] { vit_head_forward(m, h); };
    s.head_backward = [&m, h] { vit_head_backward(m, h); };
  }
  const int64_t block = block_activation_bytes(shape, parallel, heads, samples);
  const int64_t io = s.tail_saved.front();  // a block's input or output
  // Up to the last block's fc2: what forward_tail allocates again.
  const auto before_tail = [&] {
    for (int64_t e : s.tail_saved)
      m.free(e);
  };
  // A chunk's blocks (with the input layer first, the head last),
  // measured from zero each pass.
  const auto chunk = [&](const ModuleRange& r) {
    const bool first = r.first == 0, last = r.last == shape.head();
    const int64_t k =
        std::min(r.last, shape.head() - 1) - std::max(r.first, 1) + 1;
    ChunkActs a;
    a.in = first ? 0 : fp32_bytes(io);
    a.out = a.sent = last ? 0 : fp32_bytes(io);
    m = LiveBytes();
    if (first) {
      // The ViT's patch embedding keeps its patches [B, NP, Ch P^2]; the
      // embedding's output is block 1's input.
      if (vit)
        m.alloc(embed_samples * (T - (cls ? 1 : 0)) * shape.patch_inputs);
      m.alloc(io);
    }
    if (!recompute) {
      // Every block's forward state; then the last block's tail.
      m.add_bytes(k * block);
      before_tail();
      s.forward_tail();
    } else {
      // Recompute: the forward keeps each block's input and output only
      // (the last one the head's input, or the chunk's output); each
      // block's saved tensors live while it runs.
      for (int64_t i = 1; i < k; ++i)
        m.alloc(io);
      m.add_bytes(block);
      before_tail();
      s.forward_tail();
      m.sub_bytes(block - fp32_bytes(io));
    }
    if (last)
      s.head_forward();
    a.fwd_peak = m.peak();
    a.held = m.now() - a.sent;
    // Backward: the head's, then the last block's (under recompute from
    // its forward again) as far as its peak: the chunk's, every earlier
    // block's state still held.
    m = LiveBytes();
    if (last)
      s.head_backward();
    if (recompute) {
      m.add_bytes(block);
      before_tail();
      s.forward_tail();
      m.free(io);  // the recomputed output, unused
    }
    s.block_backward();
    a.bwd_peak = m.peak();
    return a;
  };
  return step_peak(shape, parallel, pp_rank, chunk);
}

}  // namespace ndt
