// Where a schedule waits for its sends: after the first instruction of the
// sender that happens after the matching receive has completed (a chain of
// messages leads from that receive to it), so the wait never waits for the
// peer, and every send's buffer lives for the same instructions in every
// run. A send with no such instruction is waited for just before
// kOptimizerStep.
//
// Example, 1f1b with P = 2 ranks and M = 2 micro-batches, rank 0:
//   L0 F0 SA0>1 L1 F1 SA1>1 RG0<1 WA0>1 B0 RG1<1 WA1>1 B1 RED OPT
// rank 1 received micro-batch 0's activation before it sent that
// micro-batch's gradient, so the send of SA0 is complete when RG0 is.
#pragma once

#include <vector>

#include "parallel/pipeline/instr.h"

namespace ndt {

// The lists (one per pipeline rank; they must run to their end without a
// deadlock, receives in the order of the sends) with a kWaitSendAct or
// kWaitSendGrad for each send.
std::vector<std::vector<Instr>> with_send_waits(
    const std::vector<std::vector<Instr>>& lists);

}  // namespace ndt
