// CommObserver: a hook around the calls one ProcessGroup makes into its
// backend, for tools that watch communication (CommTimer in comm_timer.h)
// without wrapping or subclassing the group.
//
// The group calls before() / after() around: starting an operation (the
// *_async call, or the whole of barrier(), phase kStart), and every test()
// and wait() on the Work it returned (kTest / kWait). after() runs also
// when the backend throws. Calls rejected by the argument checks, split()
// and progress() are not observed. The calls of one group do not nest.
#pragma once

#include "comm/work.h"

namespace ndt {

enum class CommPhase { kStart, kTest, kWait };

class CommObserver {
 public:
  virtual ~CommObserver() = default;
  virtual void before(OpType op, CommPhase phase) = 0;
  virtual void after(OpType op, CommPhase phase) = 0;
};

}  // namespace ndt
