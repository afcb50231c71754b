// The "gloo" backend: ranks are processes (or threads) connected by Gloo's TCP transport, bootstrapped through a
// strata Store (strata/comm/store.h).
//
//   auto store = comm::make_file_store("/tmp/job-42");              // or the coordination service's store
//   auto comm = comm::make_gloo_communicator(store, rank, size, {.timeout = std::chrono::seconds(30),
//                                                                .prefix = "epoch-0/dp"});
//   comm->all_reduce({grad_w, grad_b}, comm::ReduceOp::kMean)->wait();
//
// Every rank calls make_gloo_communicator with the same store, size and prefix; it returns once the full mesh of
// TCP connections is up (or throws Timeout naming the ranks that never came). Collectives (all_reduce, broadcast,
// all_gather, reduce_scatter, barrier; float32, bfloat16, int64) run on a worker thread per communicator, in issue
// order, with Gloo's options-style algorithms (ring all-reduce: every rank ends with the same bits); the options
// overloads set a per-call timeout (and all_reduce's compression: bfloat16 elements on the wire, half the bytes);
// new_group(ranks) connects a sub-group; send/recv match by source and tag. A collective that passes its timeout
// makes Gloo close every connection of the group: the collective fails with Timeout naming the ranks that had not
// entered it (each with the last collective and training step it reported, so a rank stuck between steps shows
// where it stands) and listing this rank's last collectives (seq, op, bytes, step, state), and the communicator is
// unusable from then on — build a new group under a fresh prefix. docs/comm.md has the details and the exact
// errors. The first communicator made sets SIGPIPE to ignored (unless the program handles it), so that a peer that
// dies mid-collective is an error here, not this process's death: Gloo writes to its sockets with write(2).
// Thread-safety: as every Communicator (strata/comm/communicator.h); make_gloo_communicator is safe from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "strata/comm/communicator.h"
#include "strata/comm/store.h"

namespace strata::comm {

struct GlooOptions {
  // Bound on every collective (Gloo's per-operation timeout), and on connecting the group unless
  // connect_timeout says otherwise.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  // Bound on connecting the group (0: `timeout`). A group whose collectives must fail fast (an elastic group's, bounded
  // by the heartbeat timeout) still needs room to connect on a loaded machine.
  std::chrono::milliseconds connect_timeout{0};
  // The address this rank listens on and announces to its peers.
  std::string hostname = "127.0.0.1";
  // The group's keys live under "<prefix>/" in the store. A group rebuilt after a failure needs a fresh prefix;
  // reusing one is InvalidArgument.
  std::string prefix = "gloo";
};

// This rank's end of a Gloo group of `size` ranks; blocks until every rank has connected.
std::shared_ptr<Communicator> make_gloo_communicator(std::shared_ptr<Store> store, int rank, int size,
                                                     GlooOptions options = {});

}  // namespace strata::comm
