// GlooStore: gloo::rendezvous::Store over a strata Store, so that Gloo's connectFullMesh bootstraps through our
// stores (in-memory, file, the coordination service). Every wait is bounded: get blocks until the key exists
// for at most the adapter's timeout, and the timed wait is overridden (Gloo's base class ignores its timeout).
// A key that never comes is strata's Timeout (from the wrapped store) naming the keys still missing.
// Thread-safety: as the wrapped Store (every strata Store may be used from many threads).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "strata/comm/store.h"

namespace strata::comm::detail {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<comm::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  const std::shared_ptr<comm::Store> store_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace strata::comm::detail
