#include "parallel/pipeline/executor.h"

#include <algorithm>
#include <string>

#include "base/activity.h"
#include "base/check.h"
#include "base/error.h"
#include "base/fault.h"

namespace ndt {
namespace {

// Message tags: one FIFO channel per direction and kind (instr.h).
constexpr int kTagAct = 1;
constexpr int kTagGrad = 2;
constexpr int kTagEval = 3;

bool is_compute(Op op) {
  return op == Op::kForward || op == Op::kBackward;
}

}  // namespace

PipelineExecutor::PipelineExecutor(
    Model& model,
    ProcessGroup& group,
    std::vector<ModuleRange> chunks,
    int virtual_stages,
    std::function<Shape(const Shape&)> local_activation,
    std::function<SampleRows(int64_t)> sample_rows,
    GradSync* grad_sync,
    bool recompute,
    Tracer& tracer,
    std::function<void()> optimizer_step)
    : model_(model),
      group_(group),
      chunks_(std::move(chunks)),
      virtual_stages_(virtual_stages),
      local_activation_(std::move(local_activation)),
      sample_rows_(std::move(sample_rows)),
      grad_sync_(grad_sync),
      recompute_(recompute),
      tracer_(tracer),
      optimizer_step_(std::move(optimizer_step)) {
  NDT_ASSERT(
      virtual_stages_ == group_.size() * static_cast<int>(chunks_.size()));
}

int PipelineExecutor::virtual_stage(int chunk) const {
  return ndt::virtual_stage(group_.rank(), chunk, group_.size());
}

// The activation entering (output = false) or leaving chunk c, per
// micro-batch.
Shape PipelineExecutor::act_shape(int chunk, bool output) const {
  const ModuleRange& r = chunks_.at(chunk);
  Shape s = model_.sample_shapes.at(output ? r.last : r.first - 1);
  s.insert(s.begin(), mbs_);
  return local_activation_ ? local_activation_(s) : s;
}

PipelineExecutor::Slot& PipelineExecutor::slot(const Instr& in) {
  return slots_.at(in.mb).at(in.chunk);
}

std::string PipelineExecutor::label(const Instr& in, int index) const {
  const std::string where =
      virtual_stages_ == 1
          ? "step " + std::to_string(batch_ ? batch_->step : -1)
          : "pipeline stage " + std::to_string(group_.rank()) + " of " +
                std::to_string(group_.size());
  return where + ", instruction " + std::to_string(index) + " '" +
         to_string(in) + "' (" + to_string(in.op) + ")";
}

void PipelineExecutor::fail(
    const Instr& in, int index, const char* what) const {
  throw CommError(label(in, index) + ": " + what);
}

void PipelineExecutor::post_send(
    const Instr& in, int index, const Tensor& t, int tag) {
  NDT_ASSERT(t.defined(), "nothing to send for ", to_string(in));
  PendingSend p;
  p.buffer = t;
  p.instr = in;
  p.index = index;
  try {
    p.work = group_.send_async(t.data(), t.numel(), in.peer, tag);
  } catch (const CommError& e) {
    fail(in, index, e.what());
  }
  sends_.push_back(std::move(p));
}

void PipelineExecutor::post_recv(
    const Instr& in, int index, Tensor& dst, Shape shape, int tag) {
  dst = Tensor(shape, MemTag::kActs);
  Slot& s = slot(in);
  try {
    s.recv = group_.recv_async(dst.data(), dst.numel(), in.peer, tag);
  } catch (const CommError& e) {
    fail(in, index, e.what());
  }
}

void PipelineExecutor::wait_recv(Slot& s, const Instr& in, int index) {
  try {
    s.recv->wait();
  } catch (const CommError& e) {
    fail(in, index, e.what());
  }
  s.recv.reset();
}

// The pending send that `in` (a kWaitSend*) names: waited for, released.
void PipelineExecutor::wait_send(const Instr& in) {
  const Instr send{
      in.op == Op::kWaitSendAct ? Op::kSendAct : Op::kSendGrad,
      in.mb,
      in.chunk,
      in.peer};
  const auto p =
      std::find_if(sends_.begin(), sends_.end(), [&](const PendingSend& x) {
        return x.instr == send;
      });
  NDT_ASSERT(p != sends_.end(), to_string(in), ": its send was not posted");
  try {
    p->work->wait();
  } catch (const CommError& e) {
    fail(p->instr, p->index, e.what());
  }
  sends_.erase(p);
}

void PipelineExecutor::wait_sends() {
  for (PendingSend& p : sends_) {
    try {
      p.work->wait();
    } catch (const CommError& e) {
      fail(p.instr, p.index, e.what());
    }
  }
  sends_.clear();
}

void PipelineExecutor::run(
    const std::vector<Instr>& instrs,
    int microbatches,
    const PipelineBatch& batch,
    LossStats& stats) {
  NDT_ASSERT(batch.input.dim(0) % microbatches == 0);
  batch_ = &batch;
  stats_ = &stats;
  mbs_ = batch.input.dim(0) / microbatches;
  mine_ = sample_rows_ ? sample_rows_(mbs_) : SampleRows{0, mbs_};
  const int V = static_cast<int>(chunks_.size());
  slots_.resize(microbatches);
  for (auto& row : slots_)
    row.resize(V);
  mb_input_.assign(microbatches, Tensor());
  mb_targets_.assign(microbatches, Tensor());
  // Data-parallel buckets launch with the backward of each chunk's last
  // micro-batch.
  last_backward_mb_.assign(V, -1);
  for (const Instr& in : instrs) {
    if (in.op == Op::kBackward)
      last_backward_mb_[in.chunk] = in.mb;
  }
  timing_ = PipelineTiming();
  timing_.start = tracer_.now();
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Instr& in = instrs[i];
    set_activity(label(in, static_cast<int>(i)));
    const double t0 = tracer_.now();
    execute(in, static_cast<int>(i));
    const double t1 = tracer_.now();
    if (is_compute(in.op)) {
      timing_.busy += t1 - t0;
      timing_.end = t1;
    }
    tracer_.add({in.op, in.mb, in.chunk, in.peer, batch.step, t0, t1});
    // Pending sends advance only inside calls into the backend: one
    // between instructions keeps them moving (their buffers still go at
    // their waits).
    if (!sends_.empty()) {
      try {
        group_.progress();
      } catch (const CommError& e) {
        fail(in, static_cast<int>(i), e.what());
      }
    }
  }
  wait_sends();
  batch_ = nullptr;
  stats_ = nullptr;
}

void PipelineExecutor::execute(const Instr& in, int index) {
  const PipelineBatch& b = *batch_;
  switch (in.op) {
    case Op::kLoadMicroBatch: {
      const int64_t first = in.mb * mbs_ + mine_.first;
      mb_input_.at(in.mb) = b.input.rows(first, mine_.count);
      mb_targets_.at(in.mb) = b.targets.rows(first, mine_.count);
      return;
    }
    case Op::kForward: {
      Slot& s = slot(in);
      const int vs = virtual_stage(in.chunk);
      Tensor x = vs == 0 ? mb_input_.at(in.mb) : s.act_in;
      NDT_ASSERT(x.defined(), to_string(in), ": input not loaded/received");
      s.ctx.run.training = true;
      s.ctx.run.seed = b.seed;
      s.ctx.run.step = b.step;
      s.ctx.run.sample_offset = b.sample_offset + in.mb * mbs_ + mine_.first;
      const ModuleRange& r = chunks_[in.chunk];
      try {
        // Collectives inside forward (tensor parallelism; ZeRO stage 3
        // gathers the parameters a module reads).
        s.act_out = model_.forward_range(
            r.first,
            r.last,
            x,
            vs == virtual_stages_ - 1 ? mb_targets_.at(in.mb) : Tensor(),
            s.ctx,
            *stats_,
            recompute_);
      } catch (const CommError& e) {
        fail(in, index, e.what());
      }
      s.act_in = Tensor();  // kept by the modules that need it
      return;
    }
    case Op::kBackward: {
      Slot& s = slot(in);
      const ModuleRange& r = chunks_[in.chunk];
      if (grad_sync_)
        grad_sync_->begin_backward(in.mb == last_backward_mb_[in.chunk]);
      float scale = b.loss_scale;
      if (NDT_FAULT(kPpDropMicrobatch) && in.mb == 0 &&
          virtual_stage(in.chunk) == virtual_stages_ - 1)
        scale = 0;
      try {
        // Collectives inside backward (tensor parallelism; ZeRO stages 2
        // and 3 wait for a reduce before reusing a gradient slot, stage 3
        // gathers parameters).
        s.grad_in =
            model_.backward_range(r.first, r.last, s.grad_out, s.ctx, scale);
      } catch (const CommError& e) {
        fail(in, index, e.what());
      }
      s.grad_out = Tensor();
      s.ctx.clear();  // this pair's activations are no longer needed
      return;
    }
    case Op::kSendAct: {
      Slot& s = slot(in);
      post_send(in, index, s.act_out, kTagAct);
      s.act_out = Tensor();  // the pending send keeps it until done
      return;
    }
    case Op::kRecvAct: {
      Slot& s = slot(in);
      post_recv(in, index, s.act_in, act_shape(in.chunk, false), kTagAct);
      wait_recv(s, in, index);
      return;
    }
    case Op::kSendGrad: {
      Slot& s = slot(in);
      post_send(in, index, s.grad_in, kTagGrad);
      s.grad_in = Tensor();
      return;
    }
    case Op::kRecvGrad: {
      Slot& s = slot(in);
      post_recv(in, index, s.grad_out, act_shape(in.chunk, true), kTagGrad);
      wait_recv(s, in, index);
      return;
    }
    case Op::kWaitSendAct:
    case Op::kWaitSendGrad:
      wait_send(in);
      return;
    case Op::kReduceGrads: {
      if (grad_sync_) {
        try {
          grad_sync_->finish();
        } catch (const CommError& e) {
          fail(in, index, e.what());
        }
      }
      return;
    }
    case Op::kOptimizerStep: {
      wait_sends();
      try {
        optimizer_step_();
      } catch (const CommError& e) {
        fail(in, index, e.what());
      }
      return;
    }
  }
  NDT_ASSERT(false, "invalid Op ", static_cast<int>(in.op));
}

void PipelineExecutor::forward_eval(
    const Tensor& input,
    const Tensor& targets,
    uint64_t seed,
    int64_t step,
    LossStats& stats) {
  mbs_ = input.dim(0);
  const SampleRows mine =
      sample_rows_ ? sample_rows_(mbs_) : SampleRows{0, mbs_};
  const Tensor my_input = input.rows(mine.first, mine.count);
  const Tensor my_targets = targets.rows(mine.first, mine.count);
  if (virtual_stages_ == 1) {  // no pipeline: the model's own forward
    Context ctx;
    ctx.run.training = false;
    ctx.run.seed = seed;
    ctx.run.step = step;
    model_.forward_eval(my_input, my_targets, ctx, stats);
    return;
  }
  const int P = group_.size();
  const int V = static_cast<int>(chunks_.size());
  Context ctx;
  ctx.run.training = false;
  ctx.run.seed = seed;
  ctx.run.step = step;
  for (int c = 0; c < V; ++c) {
    const int vs = virtual_stage(c);
    // Instructions only for error messages.
    Instr recv{Op::kRecvAct, 0, c, (vs - 1 + P) % P};
    Instr send{Op::kSendAct, 0, c, (vs + 1) % P};
    Tensor x = my_input;
    if (vs > 0) {
      x = Tensor(act_shape(c, false), MemTag::kActs);
      try {
        group_.recv(x.data(), x.numel(), recv.peer, kTagEval);
      } catch (const CommError& e) {
        fail(recv, -1, e.what());
      }
    }
    const ModuleRange& r = chunks_[c];
    Tensor y = model_.forward_range(
        r.first,
        r.last,
        x,
        vs == virtual_stages_ - 1 ? my_targets : Tensor(),
        ctx,
        stats);
    ctx.clear();
    if (vs < virtual_stages_ - 1) {
      try {
        group_.send(y.data(), y.numel(), send.peer, kTagEval);
      } catch (const CommError& e) {
        fail(send, -1, e.what());
      }
    }
  }
}

}  // namespace ndt
