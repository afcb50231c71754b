// Helpers shared by the test suites: reproducible random tensors, elementwise comparison, exception messages,
// free 127.0.0.1 ports, helper processes.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "strata/random.h"
#include "strata/tensor.h"

extern char** environ;

namespace strata::test {

// A float32 tensor of `shape`, uniform in [low, high), the same for the same seed everywhere.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, float low = -1.0f, float high = 1.0f) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  gen.fill_uniform(t.data<float>(), t.numel(), low, high);
  return t;
}

// Same shape and every float element within `tol`; a failure names the first element that differs.
inline void expect_near(const Tensor& a, const Tensor& b, float tol = 1e-5f) {
  ASSERT_EQ(a.shape(), b.shape());
  const auto va = a.to_vector<float>(), vb = b.to_vector<float>();
  for (size_t i = 0; i < va.size(); ++i) ASSERT_NEAR(va[i], vb[i], tol) << "element " << i;
}

// The largest elementwise difference between a and b (host tensors of one size) relative to b's largest magnitude (the
// difference itself when b is all zeros): how far a lower-precision result is from its reference.
inline double relative_difference(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  EXPECT_EQ(va.size(), vb.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) {
    diff = std::max(diff, std::fabs(va[i] - vb[i]));
    scale = std::max(scale, std::fabs(vb[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// The message of the E that f() throws; a test failure when it throws nothing.
template <class E, class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

// Expects f() to throw an E whose message contains every one of `parts`.
template <class E, class F>
void expect_error_containing(F f, std::initializer_list<std::string> parts) {
  const std::string message = message_of<E>(f);
  for (const auto& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' is not in: " << message;
  }
}

// A TCP port on 127.0.0.1 that was free a moment ago (the OS picked it), for a cluster spec a test writes. Never
// one it returned before in this process: a port just closed may be picked again at once, and two tasks of one
// cluster spec given the same port fail ("tasks ps:0 and ps:1 both use address ...").
inline int free_port() {
  static std::mutex mu;
  static std::set<int> given;
  const std::lock_guard<std::mutex> lock(mu);
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    const int port = ntohs(addr.sin_port);
    if (given.insert(port).second) return port;
  }
}

// This test binary run again as a helper process that runs only the test `test_name` ("Suite.Name"), with
// `variable` ("NAME=value") added to its environment (the helper test skips itself when NAME is absent). Killed with
// SIGKILL and reaped on every path.
class HelperProcess {
 public:
  HelperProcess(const std::string& test_name, const std::string& variable) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back(variable);
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe", filter = "--gtest_filter=" + test_name;
    char* argv[] = {exe.data(), filter.data(), nullptr};
    EXPECT_EQ(::posix_spawn(&pid_, exe.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  }
  ~HelperProcess() { kill(); }
  HelperProcess(const HelperProcess&) = delete;
  HelperProcess& operator=(const HelperProcess&) = delete;
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace strata::test
