#include "parallel/pipeline/send_waits.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "base/check.h"

namespace ndt {
namespace {

bool is_send(Op op) {
  return op == Op::kSendAct || op == Op::kSendGrad;
}

bool is_recv(Op op) {
  return op == Op::kRecvAct || op == Op::kRecvGrad;
}

// Vector clocks: clock[q] = how many of rank q's instructions happened
// before (or are) this one.
using Clock = std::vector<int>;

}  // namespace

std::vector<std::vector<Instr>> with_send_waits(
    const std::vector<std::vector<Instr>>& lists) {
  const int P = static_cast<int>(lists.size());
  struct Message {
    int pc;
    Clock clock;
  };
  // Channel (from, to, activations or gradients), FIFO.
  std::vector<std::deque<Message>> channels(size_t(P) * P * 2);
  auto channel = [&](int from, int to, Op op) -> std::deque<Message>& {
    const bool act = op == Op::kSendAct || op == Op::kRecvAct;
    return channels[(size_t(from) * P + to) * 2 + (act ? 0 : 1)];
  };
  std::vector<std::vector<Clock>> after(P);  // [rank][pc]
  // The receive matching each send: [rank][pc] = (receiving rank, its pc).
  std::vector<std::vector<std::pair<int, int>>> match(P);
  std::vector<size_t> pc(P, 0);
  std::vector<Clock> clock(P, Clock(P, 0));
  for (int r = 0; r < P; ++r) {
    after[r].resize(lists[r].size());
    match[r].assign(lists[r].size(), {-1, -1});
  }
  bool running = true;
  while (running) {
    bool progress = false;
    running = false;
    for (int r = 0; r < P; ++r) {
      for (; pc[r] < lists[r].size(); ++pc[r]) {
        const Instr& in = lists[r][pc[r]];
        const int i = static_cast<int>(pc[r]);
        if (is_recv(in.op)) {
          std::deque<Message>& ch = channel(in.peer, r, in.op);
          if (ch.empty())
            break;
          const Message& msg = ch.front();
          for (int q = 0; q < P; ++q)
            clock[r][q] = std::max(clock[r][q], msg.clock[q]);
          match[in.peer][msg.pc] = {r, i};
          ch.pop_front();
        }
        clock[r][r] = i + 1;
        after[r][i] = clock[r];
        if (is_send(in.op))
          channel(r, in.peer, in.op).push_back({i, clock[r]});
        progress = true;
      }
      running |= pc[r] < lists[r].size();
    }
    NDT_ASSERT(!running || progress, "pipeline lists deadlock");
  }
  std::vector<std::vector<Instr>> out(P);
  for (int r = 0; r < P; ++r) {
    const std::vector<Instr>& list = lists[r];
    std::vector<std::vector<Instr>> waits(list.size());
    std::vector<Instr> last;  // before kOptimizerStep
    for (size_t s = 0; s < list.size(); ++s) {
      const Instr& in = list[s];
      if (!is_send(in.op))
        continue;
      const auto [q, j] = match[r][s];
      NDT_ASSERT(q >= 0, "send ", to_string(in), " is never received");
      const Instr wait{
          in.op == Op::kSendAct ? Op::kWaitSendAct : Op::kWaitSendGrad,
          in.mb,
          in.chunk,
          in.peer};
      size_t k = s + 1;
      while (k < list.size() && after[r][k][q] <= j)
        ++k;
      (k < list.size() ? waits[k] : last).push_back(wait);
    }
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].op == Op::kOptimizerStep)
        out[r].insert(out[r].end(), last.begin(), last.end());
      out[r].push_back(list[i]);
      out[r].insert(out[r].end(), waits[i].begin(), waits[i].end());
    }
  }
  return out;
}

}  // namespace ndt
