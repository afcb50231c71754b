// The backend registry (strata/comm/backends.h), with gloo, mpi, nccl and local registered at first use.
// Thread-safety: one mutex guards the table; factories run outside it.
#include "strata/comm/backends.h"

#include <map>
#include <mutex>
#include <sstream>

#include "strata/comm/gloo.h"
#include "strata/comm/local.h"
#include "strata/comm/mpi.h"
#include "strata/comm/nccl.h"
#include "strata/error.h"

namespace strata::comm {

namespace {

struct Backend {
  BackendFactory factory;
  BackendTraits traits;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Backend> backends;  // GUARDED_BY(mu)
};

Registry& registry() {
  static Registry* r = [] {
    auto* made = new Registry;  // never destroyed: groups may be made while the program exits
    made->backends["gloo"] = {[](const GroupArgs& a) {
                                return make_gloo_communicator(a.store, a.rank, a.size,
                                                              {.timeout = a.timeout,
                                                               .connect_timeout = a.connect_timeout,
                                                               .hostname = a.hostname,
                                                               .prefix = a.prefix});
                              },
                              {.needs_store = true, .can_rebuild = true}};
    made->backends["mpi"] = {[](const GroupArgs& a) {
                               std::shared_ptr<Communicator> c = make_mpi_communicator({.timeout = a.timeout});
                               STRATA_CHECK(c->size() == a.size && c->rank() == a.rank, InvalidArgument,
                                            "mpi backend: MPI says rank " << c->rank() << " of " << c->size()
                                                                          << ", the group asks for rank " << a.rank
                                                                          << " of " << a.size);
                               return c;
                             },
                             {.needs_store = false, .can_rebuild = false}};
    made->backends["nccl"] = {
        [](const GroupArgs& a) {
          return make_nccl_communicator(
              a.store, a.rank, a.size,
              {.timeout = a.timeout, .connect_timeout = a.connect_timeout, .prefix = a.prefix, .device = a.device});
        },
        {.needs_store = true, .can_rebuild = true}};
    made->backends["local"] = {[](const GroupArgs& a) {
                                 STRATA_CHECK(a.size == 1 && a.rank == 0, InvalidArgument,
                                              "local backend: a group of processes needs gloo or mpi; 'local' is a "
                                              "group of one (asked for rank "
                                                  << a.rank << " of " << a.size << ")");
                                 return make_local_group(1)[0];
                               },
                               {.needs_store = false, .can_rebuild = true}};
    return made;
  }();
  return *r;
}

std::string choices(const std::map<std::string, Backend>& backends) {
  std::ostringstream out;
  for (const auto& [name, backend] : backends) out << (out.tellp() > 0 ? ", " : "") << name;
  return out.str();
}

const Backend& find(const std::map<std::string, Backend>& backends, const std::string& name) {
  const auto it = backends.find(name);
  STRATA_CHECK(it != backends.end(), InvalidArgument,
               "unknown communicator backend '" << name << "'; registered: " << choices(backends));
  return it->second;
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory, BackendTraits traits) {
  STRATA_CHECK(!name.empty(), InvalidArgument, "register_backend: the name is empty");
  STRATA_CHECK(factory != nullptr, InvalidArgument, "register_backend: backend '" << name << "' has no factory");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.backends[name] = {std::move(factory), traits};
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, backend] : r.backends) names.push_back(name);
  return names;
}

BackendTraits backend_traits(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return find(r.backends, name).traits;
}

std::shared_ptr<Communicator> make_communicator(const std::string& name, const GroupArgs& args) {
  Backend backend;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    backend = find(r.backends, name);
  }
  STRATA_CHECK(args.size >= 1 && args.rank >= 0 && args.rank < args.size, InvalidArgument,
               "backend '" << name << "': rank " << args.rank << " of a group of " << args.size);
  STRATA_CHECK(!backend.traits.needs_store || args.store != nullptr, InvalidArgument,
               "backend '" << name << "' needs a store for its ranks to meet");
  return backend.factory(args);
}

}  // namespace strata::comm
