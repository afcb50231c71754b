// Two parameter servers on 127.0.0.1 (ports the OS picks) and a client of each, for the tests of training through
// them; with their counts summed over both.
// Thread-safety: the servers serve any number of clients at once; the object itself is used by one test thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/ps/server.h"

namespace strata::ps {

struct PsCluster {
  ParameterServer servers[2];
  std::vector<std::shared_ptr<ParameterServerClient>> clients;
  PsCluster() {
    for (ParameterServer& s : servers) {
      s.start("127.0.0.1:0");
      clients.push_back(std::make_shared<ParameterServerClient>("127.0.0.1:" + std::to_string(s.port())));
    }
  }
  int64_t applied() const { return servers[0].pushes_applied() + servers[1].pushes_applied(); }
  int64_t dropped() const { return servers[0].pushes_dropped() + servers[1].pushes_dropped(); }
  int64_t rows_pulled() const { return servers[0].rows_pulled() + servers[1].rows_pulled(); }
  int64_t rows_pushed() const { return servers[0].rows_pushed() + servers[1].rows_pushed(); }
};

}  // namespace strata::ps
