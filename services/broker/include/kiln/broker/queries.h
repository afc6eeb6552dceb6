// The broker's own queries (REQUEST to service "broker", DESIGN §2): "status" (queues, workers, rejected
// messages), "job" (one job's state, attempt, error and result) and the blob store ("blob.put", "blob.get",
// "blob.has"). Over the job queue and its
// table; no socket.
#pragma once

#include <cstdint>

#include "kiln/broker/job_queue.h"
#include "kiln/proto/wire.h"

namespace kiln::broker {

// The REPLY to `request`; an unknown method is an error reply that names the ones there are.
proto::Reply answer_broker_query(const proto::Request& request, JobQueue& queue, int64_t rejected_frames);

}  // namespace kiln::broker
