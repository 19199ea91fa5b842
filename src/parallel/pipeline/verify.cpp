// A discrete-event simulation of all pipeline ranks. Each rank has a clock;
// forwards and backwards advance it by t_f / t_b; sends are free and never
// block (the message carries the sender's clock); a receive blocks until the
// oldest message on its (sender, receiver, kind) channel exists and then
// moves the clock to max(clock, message time); a send's wait blocks until
// the peer has received the message. Loads, waits, kReduceGrads and
// kOptimizerStep take no time. The simulation sweeps the ranks, running each as
// far as it can, until all lists are done or a sweep makes no progress
// (deadlock). Every rule of verify.h is checked when the instruction runs,
// so the first violation names the instruction that broke it.
#include "parallel/pipeline/verify.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <iomanip>
#include <optional>
#include <sstream>

#include "base/check.h"

namespace ndt {

namespace {

enum class Kind { kAct = 0, kGrad = 1 };

struct Message {
  int mb;
  int chunk;      // the sender's chunk
  double time;    // sender's clock at the send
  int sender_pc;  // for "never received" errors
};

struct Cell {
  double start;
  int length;
  std::string label;
};

struct RankState {
  size_t pc = 0;
  double clock = 0;
  double busy = 0;
  int in_flight = 0;
  int peak = 0;
  int backwards = 0;
  bool reduced = false;
  bool stepped = false;
  // Indexed by mb * V + chunk.
  std::vector<bool> forward_done, backward_done;
  std::vector<bool> act_received, grad_received, act_sent, grad_sent;
  std::vector<bool> act_waited, grad_waited;
  bool wait_blocked = false;  // the current instruction, a wait, blocked
  std::vector<bool> loaded;   // per micro-batch
  std::vector<Cell> cells;
};

enum class Progress { kRan, kBlocked, kFailed };

class Simulator {
 public:
  Simulator(const Schedule& s, int t_f, int t_b)
      : s_(s),
        P_(s.ranks),
        M_(s.microbatches),
        V_(s.chunks),
        t_f_(t_f),
        t_b_(t_b) {}

  ScheduleReport run();

 private:
  Progress step(int r);
  Progress run_compute(int r, const Instr& in);
  Progress run_send(int r, const Instr& in, Kind kind);
  Progress run_recv(int r, const Instr& in, Kind kind);
  Progress run_wait(int r, const Instr& in, Kind kind);
  // Records the first violation; "rank r instr i 'X': what".
  Progress fail(int r, const std::string& what);
  bool fail_at_end(const std::string& what);

  int idx(int mb, int chunk) const {
    return mb * V_ + chunk;
  }
  int last_stage() const {
    return P_ * V_ - 1;
  }
  std::deque<Message>& channel(int from, int to, Kind kind) {
    return channels_[(from * P_ + to) * 2 + static_cast<int>(kind)];
  }

  const Schedule& s_;
  const int P_, M_, V_, t_f_, t_b_;
  std::vector<RankState> ranks_;
  std::vector<std::deque<Message>> channels_;
  ScheduleReport report_;
};

Progress Simulator::fail(int r, const std::string& what) {
  const size_t pc = ranks_[r].pc;
  report_.ok = false;
  report_.error = detail::str_cat(
      "rank ",
      r,
      " instr ",
      pc,
      " '",
      to_string(s_.instrs[r][pc]),
      "': ",
      what);
  return Progress::kFailed;
}

bool Simulator::fail_at_end(const std::string& what) {
  report_.ok = false;
  report_.error = what;
  return false;
}

Progress Simulator::run_compute(int r, const Instr& in) {
  RankState& st = ranks_[r];
  const int vs = virtual_stage(r, in.chunk, P_);
  const int i = idx(in.mb, in.chunk);
  const bool forward = in.op == Op::kForward;
  if (forward) {
    if (st.forward_done[i])
      return fail(r, "second forward of this micro-batch and chunk");
    // The loss head reads the targets in its forward, so the last virtual
    // stage needs them as early as the first needs the inputs.
    if ((vs == 0 || vs == last_stage()) && !st.loaded[in.mb])
      return fail(r, "forward before the micro-batch's kLoadMicroBatch");
    if (vs > 0 && !st.act_received[i])
      return fail(r, "forward before receiving its input (kRecvAct)");
    st.forward_done[i] = true;
    st.peak = std::max(st.peak, ++st.in_flight);
    if (st.in_flight > s_.max_in_flight[r])
      return fail(
          r,
          detail::str_cat(
              st.in_flight,
              " (micro-batch, chunk) pairs in flight, more than the claimed "
              "max_in_flight ",
              s_.max_in_flight[r]));
  } else {
    if (!st.forward_done[i])
      return fail(r, "backward before its forward");
    if (st.backward_done[i])
      return fail(r, "second backward of this micro-batch and chunk");
    if (st.reduced)
      return fail(r, "backward after kReduceGrads");
    if (vs < last_stage() && !st.grad_received[i])
      return fail(r, "backward before receiving its gradient (kRecvGrad)");
    st.backward_done[i] = true;
    --st.in_flight;
    ++st.backwards;
  }
  const int length = forward ? t_f_ : t_b_;
  st.cells.push_back(
      {st.clock, length, to_string(Instr{in.op, in.mb, in.chunk, -1})});
  st.clock += length;
  st.busy += length;
  return Progress::kRan;
}

// An activation goes from virtual stage vs to vs + 1, a gradient from vs to
// vs - 1; the peer must be the rank holding that neighbour.
Progress Simulator::run_send(int r, const Instr& in, Kind kind) {
  RankState& st = ranks_[r];
  const int vs = virtual_stage(r, in.chunk, P_);
  const int i = idx(in.mb, in.chunk);
  const bool act = kind == Kind::kAct;
  const int to_stage = act ? vs + 1 : vs - 1;
  if (to_stage < 0 || to_stage > last_stage())
    return fail(
        r,
        detail::str_cat(
            "send from virtual stage ", vs, " which has no such neighbour"));
  if (in.peer != to_stage % P_)
    return fail(
        r,
        detail::str_cat(
            "peer ",
            in.peer,
            " is not rank ",
            to_stage % P_,
            " of virtual stage ",
            to_stage));
  if (act ? !st.forward_done[i] : !st.backward_done[i])
    return fail(r, "send before the compute that produces it");
  std::vector<bool>& sent = act ? st.act_sent : st.grad_sent;
  if (sent[i])
    return fail(r, "sent twice");
  sent[i] = true;
  channel(r, in.peer, kind)
      .push_back({in.mb, in.chunk, st.clock, static_cast<int>(st.pc)});
  return Progress::kRan;
}

Progress Simulator::run_recv(int r, const Instr& in, Kind kind) {
  RankState& st = ranks_[r];
  const int vs = virtual_stage(r, in.chunk, P_);
  const int i = idx(in.mb, in.chunk);
  const bool act = kind == Kind::kAct;
  const int from_stage = act ? vs - 1 : vs + 1;
  if (from_stage < 0 || from_stage > last_stage())
    return fail(
        r,
        detail::str_cat(
            "receive into virtual stage ", vs, " which has no such neighbour"));
  if (in.peer != from_stage % P_)
    return fail(
        r,
        detail::str_cat(
            "peer ",
            in.peer,
            " is not rank ",
            from_stage % P_,
            " of virtual stage ",
            from_stage));
  std::vector<bool>& received = act ? st.act_received : st.grad_received;
  if (received[i])
    return fail(r, "received twice");
  std::deque<Message>& ch = channel(in.peer, r, kind);
  if (ch.empty())
    return Progress::kBlocked;
  const Message& msg = ch.front();
  const int from_chunk = from_stage / P_;
  if (msg.mb != in.mb || msg.chunk != from_chunk) {
    const Instr sent{act ? Op::kSendAct : Op::kSendGrad, msg.mb, msg.chunk, r};
    return fail(
        r,
        detail::str_cat(
            "breaks FIFO order: the oldest message on the channel from rank ",
            in.peer,
            " is '",
            to_string(sent),
            "'"));
  }
  st.clock = std::max(st.clock, msg.time);
  ch.pop_front();
  received[i] = true;
  return Progress::kRan;
}

// A send's wait: after the send, once; it blocks until the peer has
// received the message.
Progress Simulator::run_wait(int r, const Instr& in, Kind kind) {
  RankState& st = ranks_[r];
  const int vs = virtual_stage(r, in.chunk, P_);
  const int i = idx(in.mb, in.chunk);
  const bool act = kind == Kind::kAct;
  if (!(act ? st.act_sent : st.grad_sent)[i])
    return fail(r, "wait before its send");
  std::vector<bool>& waited = act ? st.act_waited : st.grad_waited;
  if (waited[i])
    return fail(r, "waited for twice");
  const int to_stage = act ? vs + 1 : vs - 1;
  if (in.peer != to_stage % P_)
    return fail(
        r,
        detail::str_cat(
            "peer ", in.peer, " is not the send's, rank ", to_stage % P_));
  const RankState& peer = ranks_[in.peer];
  if (!(act ? peer.act_received
            : peer.grad_received)[idx(in.mb, to_stage / P_)]) {
    if (!st.wait_blocked && !st.reduced) {
      st.wait_blocked = true;
      ++report_.peer_waits;
    }
    return Progress::kBlocked;
  }
  st.wait_blocked = false;
  waited[i] = true;
  return Progress::kRan;
}

Progress Simulator::step(int r) {
  RankState& st = ranks_[r];
  const Instr& in = s_.instrs[r][st.pc];
  // Field ranges first, so the handlers below can index freely.
  const bool has_mb = in.op != Op::kReduceGrads && in.op != Op::kOptimizerStep;
  const bool has_chunk = has_mb && in.op != Op::kLoadMicroBatch;
  if (has_mb && (in.mb < 0 || in.mb >= M_))
    return fail(r, detail::str_cat("micro-batch outside [0, ", M_, ")"));
  if (has_chunk && (in.chunk < 0 || in.chunk >= V_))
    return fail(r, detail::str_cat("chunk outside [0, ", V_, ")"));

  Progress p = Progress::kRan;
  switch (in.op) {
    case Op::kLoadMicroBatch:
      if (r != 0 && r != last_stage() % P_)
        return fail(
            r, "load on a rank holding neither the first nor the last stage");
      if (st.loaded[in.mb])
        return fail(r, "micro-batch loaded twice");
      st.loaded[in.mb] = true;
      break;
    case Op::kForward:
    case Op::kBackward:
      p = run_compute(r, in);
      break;
    case Op::kSendAct:
      p = run_send(r, in, Kind::kAct);
      break;
    case Op::kSendGrad:
      p = run_send(r, in, Kind::kGrad);
      break;
    case Op::kRecvAct:
      p = run_recv(r, in, Kind::kAct);
      break;
    case Op::kRecvGrad:
      p = run_recv(r, in, Kind::kGrad);
      break;
    case Op::kWaitSendAct:
      p = run_wait(r, in, Kind::kAct);
      break;
    case Op::kWaitSendGrad:
      p = run_wait(r, in, Kind::kGrad);
      break;
    case Op::kReduceGrads:
      if (st.reduced)
        return fail(r, "second kReduceGrads");
      if (st.backwards != M_ * V_)
        return fail(
            r,
            detail::str_cat(
                "kReduceGrads before the rank's last backward (",
                st.backwards,
                " of ",
                M_ * V_,
                " done)"));
      st.reduced = true;
      break;
    case Op::kOptimizerStep:
      if (!st.reduced)
        return fail(r, "kOptimizerStep before kReduceGrads");
      if (st.pc + 1 != s_.instrs[r].size())
        return fail(r, "kOptimizerStep is not the last instruction");
      st.stepped = true;
      break;
  }
  if (p == Progress::kRan)
    ++st.pc;
  return p;
}

ScheduleReport Simulator::run() {
  report_.ok = true;
  if (P_ < 1 || M_ < 1 || V_ < 1) {
    fail_at_end(detail::str_cat(
        "bad sizes P=", P_, " M=", M_, " V=", V_, " (each must be >= 1)"));
    return report_;
  }
  if (static_cast<int>(s_.instrs.size()) != P_ ||
      static_cast<int>(s_.max_in_flight.size()) != P_) {
    fail_at_end(detail::str_cat(
        "schedule has ",
        s_.instrs.size(),
        " instruction lists and ",
        s_.max_in_flight.size(),
        " max_in_flight entries for ",
        P_,
        " ranks"));
    return report_;
  }
  if (t_f_ < 1 || t_b_ < 1) {
    fail_at_end(detail::str_cat(
        "t_f (", t_f_, ") and t_b (", t_b_, ") must be integers >= 1"));
    return report_;
  }
  ranks_.resize(P_);
  for (RankState& st : ranks_) {
    const size_t n = static_cast<size_t>(M_) * V_;
    st.forward_done.assign(n, false);
    st.backward_done.assign(n, false);
    st.act_received.assign(n, false);
    st.grad_received.assign(n, false);
    st.act_sent.assign(n, false);
    st.grad_sent.assign(n, false);
    st.act_waited.assign(n, false);
    st.grad_waited.assign(n, false);
    st.loaded.assign(M_, false);
  }
  channels_.assign(static_cast<size_t>(P_) * P_ * 2, {});

  bool running = true;
  while (running && report_.ok) {
    bool progress = false;
    running = false;
    for (int r = 0; r < P_ && report_.ok; ++r) {
      RankState& st = ranks_[r];
      while (st.pc < s_.instrs[r].size()) {
        const Progress p = step(r);
        if (p != Progress::kRan)
          break;
        progress = true;
      }
      running |= st.pc < s_.instrs[r].size();
    }
    if (running && !progress && report_.ok) {
      std::ostringstream os;
      os << "deadlock:";
      const char* sep = " ";
      for (int r = 0; r < P_; ++r) {
        const RankState& st = ranks_[r];
        if (st.pc < s_.instrs[r].size()) {
          os << sep << "rank " << r << " blocked at instr " << st.pc << " '"
             << to_string(s_.instrs[r][st.pc]) << "'";
          sep = "; ";
        }
      }
      fail_at_end(os.str());
    }
  }

  // End of the step: everything ran, every message was taken.
  for (int r = 0; r < P_ && report_.ok; ++r) {
    const RankState& st = ranks_[r];
    for (int m = 0; m < M_ && report_.ok; ++m) {
      for (int c = 0; c < V_ && report_.ok; ++c) {
        if (!st.forward_done[idx(m, c)] || !st.backward_done[idx(m, c)]) {
          const Op missing =
              st.forward_done[idx(m, c)] ? Op::kBackward : Op::kForward;
          fail_at_end(detail::str_cat(
              "rank ",
              r,
              ": no '",
              to_string(Instr{missing, m, c, -1}),
              "' in the list"));
        }
      }
    }
    if (report_.ok && !st.stepped)
      fail_at_end(detail::str_cat(
          "rank ", r, ": list does not end with kOptimizerStep"));
  }
  for (int from = 0; from < P_ && report_.ok; ++from) {
    for (int to = 0; to < P_ && report_.ok; ++to) {
      for (Kind kind : {Kind::kAct, Kind::kGrad}) {
        const std::deque<Message>& ch = channel(from, to, kind);
        if (!ch.empty() && report_.ok) {
          const Message& msg = ch.front();
          fail_at_end(detail::str_cat(
              "rank ",
              from,
              " instr ",
              msg.sender_pc,
              " '",
              to_string(s_.instrs[from][msg.sender_pc]),
              "': message never received by rank ",
              to));
        }
      }
    }
  }

  // Timing and the grid, also for a failed run (shows how far it got).
  double busy = 0;
  for (const RankState& st : ranks_) {
    report_.peak_in_flight.push_back(st.peak);
    report_.makespan = std::max(report_.makespan, st.clock);
    busy += st.busy;
  }
  report_.bubble =
      report_.makespan > 0
          ? 1.0 - busy / (static_cast<double>(P_) * report_.makespan)
          : 0.0;
  const int width = static_cast<int>(std::ceil(report_.makespan));
  report_.grid.assign(P_, std::vector<std::string>(width));
  for (int r = 0; r < P_; ++r) {
    for (const Cell& cell : ranks_[r].cells) {
      const int t0 = static_cast<int>(cell.start);
      for (int t = t0; t < t0 + cell.length; ++t)
        report_.grid[r][t] = cell.label;
    }
  }
  return report_;
}

}  // namespace

ScheduleReport verify_schedule(const Schedule& schedule, int t_f, int t_b) {
  return Simulator(schedule, t_f, t_b).run();
}

std::string render_grid(
    const Schedule& schedule, const ScheduleReport& report) {
  size_t cell_width = 1;
  for (const auto& row : report.grid)
    for (const std::string& cell : row)
      cell_width = std::max(cell_width, cell.size());
  const int rank_width =
      static_cast<int>(std::to_string(std::max(schedule.ranks - 1, 0)).size());

  std::ostringstream os;
  os << to_string(schedule.kind) << " P=" << schedule.ranks
     << " M=" << schedule.microbatches << " V=" << schedule.chunks << "\n";
  for (size_t r = 0; r < report.grid.size(); ++r) {
    std::ostringstream line;
    line << "rank " << std::setw(rank_width) << r << " |";
    for (const std::string& cell : report.grid[r])
      line << " " << std::left << std::setw(static_cast<int>(cell_width))
           << (cell.empty() ? "." : cell) << std::right;
    std::string text = line.str();
    text.erase(text.find_last_not_of(' ') + 1);
    os << text << "\n";
  }
  const double theory =
      static_cast<double>(schedule.ranks - 1) /
      (schedule.chunks * schedule.microbatches + schedule.ranks - 1);
  os << std::fixed << std::setprecision(3) << "bubble " << report.bubble
     << " (theory " << theory << ")\n";
  if (!report.ok)
    os << "error: " << report.error << "\n";
  return os.str();
}

}  // namespace ndt
