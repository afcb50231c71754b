// GlooStore (comm/gloo_store.h): Gloo's rendezvous store interface forwarded to a strata Store.
// Thread-safety: as the wrapped Store.
#include "comm/gloo_store.h"

namespace strata::comm::detail {

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, std::string(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  store_->wait({key}, timeout_);  // blocks, bounded by our timeout rather than the wrapped store's
  const std::string value = store_->get(key);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { store_->wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace strata::comm::detail
