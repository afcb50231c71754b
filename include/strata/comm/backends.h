// The registry of communicator backends, by name (c10d's Backend.register_backend): how a group of processes gets
// its communicator without naming a factory. Built in: "gloo" (TCP, rendezvous through a Store), "mpi" (under
// mpirun; the store is unused), "nccl" (Unavailable without the CUDA build), and "local" (a group of one: a single
// worker). A program may register its own.
//
//   comm::GroupArgs args{.store = client, .rank = 1, .size = 4, .timeout = std::chrono::seconds(30), .prefix = "dp"};
//   std::shared_ptr<comm::Communicator> c = comm::make_communicator("gloo", args);
//   if (comm::backend_traits("gloo").can_rebuild) { ... }   // a new group under a fresh prefix after a loss
//
// Thread-safety: every function may be called from any thread; registering while another thread makes a group
// of the same name is safe (the registry is locked), and a factory runs outside the lock.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/comm/communicator.h"
#include "strata/comm/store.h"

namespace strata::comm {

// What every backend is given to make one rank's end of a group.
struct GroupArgs {
  std::shared_ptr<Store> store;  // where the ranks meet (gloo, nccl); may be null for mpi and local
  int rank = 0;
  int size = 1;
  // Bound on every collective, and on connecting the group unless connect_timeout says otherwise.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds connect_timeout{0};  // 0: timeout
  std::string hostname = "127.0.0.1";  // the address this rank listens on (gloo)
  std::string prefix = "group";        // the group's keys in the store; a rebuilt group needs a fresh one
  int device = -1;                     // the GPU of a GPU backend (nccl: NcclOptions::device); -1 its choice
};

struct BackendTraits {
  // Whether the ranks meet through GroupArgs::store (else the launcher placed them: mpi).
  bool needs_store = true;
  // Whether a group can be made again, of other members, under a fresh prefix after one was lost (an elastic group
  // regroups so); MPI's world cannot lose a rank and go on.
  bool can_rebuild = true;
};

using BackendFactory = std::function<std::shared_ptr<Communicator>(const GroupArgs& args)>;

// Registers (or replaces) the backend `name`. InvalidArgument for an empty name or a null factory.
void register_backend(const std::string& name, BackendFactory factory, BackendTraits traits = {});
// The backends registered, sorted.
std::vector<std::string> backend_names();
// InvalidArgument naming the choices when `name` is not registered.
BackendTraits backend_traits(const std::string& name);
// This rank's end of a group on backend `name`; InvalidArgument naming the choices when it is not registered, and
// whatever the backend throws (Timeout naming the ranks that never came, Unavailable for a backend this build or
// launch cannot run).
std::shared_ptr<Communicator> make_communicator(const std::string& name, const GroupArgs& args);

}  // namespace strata::comm
