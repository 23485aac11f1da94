// BatchStrategy: a rule, beside the dynamic batcher's own, for which queued
// requests join the batch being formed (Triton's custom batching). The
// batcher calls BeginBatch() before it walks the queue for a batch,
// Include() for each request it would add (in queue order, after its own
// size and shape rules accepted it), and EndBatch() when the walk ends.
// All three run under the scheduler's lock, on whichever thread forms the
// batch. A request's view (RequestInfo::view) is what Include() may read of
// it; the caller keeps it alive while the request is queued.
#pragma once

#include "pyserver/scheduler.h"

namespace pyserver {

class BatchStrategy {
 public:
  virtual ~BatchStrategy() = default;
  virtual void BeginBatch() = 0;
  // Whether `request` joins the batch; false ends the batch before it.
  virtual bool Include(const QueuedRequest& request) = 0;
  virtual void EndBatch() = 0;
};

}  // namespace pyserver
