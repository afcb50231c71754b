// JobCredentials (strata/cluster/job_credentials.h): reading them from the environment, checking them, the job id,
// and the process's credentials.
// Thread-safety: see the header; the process's credentials are guarded by a mutex.
#include "strata/cluster/job_credentials.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "cluster/hex_digits.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/error.h"

namespace strata::cluster {
namespace {

constexpr size_t kMinSecretLength = 16;


std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string trimmed(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

void check_secret(const std::string& secret, const std::string& from) {
  STRATA_CHECK(secret.size() >= kMinSecretLength, InvalidArgument,
               "the job secret from " << from << " has " << secret.size() << " characters; it needs at least "
                                      << kMinSecretLength << " (strata launch makes one of 64)");
}

std::mutex process_mu;
std::shared_ptr<const JobCredentials> process_credentials;  // GUARDED_BY(process_mu)

}  // namespace

std::string JobCredentials::read_secret_file(const std::string& path) {
  struct stat st {};
  STRATA_CHECK(::stat(path.c_str(), &st) == 0, IoError, "job secret file '" << path << "' cannot be read");
  STRATA_CHECK((st.st_mode & 077) == 0, InvalidArgument,
               "job secret file '" << path << "' is readable by others (mode " << std::oct << (st.st_mode & 0777)
                                   << "): anyone who reads it can drive the job; chmod 600 '" << path << "'");
  std::ifstream in(path);
  STRATA_CHECK(in.good(), IoError, "job secret file '" << path << "' cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  std::string secret = trimmed(text.str());
  check_secret(secret, "file '" + path + "'");
  return secret;
}

std::string JobCredentials::generate_secret() {
  unsigned char bytes[32];
  STRATA_CHECK(RAND_bytes(bytes, sizeof bytes) == 1, Error, "could not draw a job secret from the OS's generator");
  return detail::hex_digits(bytes, sizeof bytes);
}

JobCredentials JobCredentials::from_environment() {
  JobCredentials c;
  const std::string secret = env("STRATA_JOB_SECRET"), secret_file = env("STRATA_JOB_SECRET_FILE");
  STRATA_CHECK(secret.empty() || secret_file.empty(), InvalidArgument,
               "both STRATA_JOB_SECRET and STRATA_JOB_SECRET_FILE are set: give the job secret one way");
  if (!secret.empty()) {
    check_secret(secret, "STRATA_JOB_SECRET");
    c.secret = secret;
  } else if (!secret_file.empty()) {
    c.secret = read_secret_file(secret_file);
  }
  c.tls_cert_file = env("STRATA_TLS_CERT");
  c.tls_key_file = env("STRATA_TLS_KEY");
  c.tls_ca_file = env("STRATA_TLS_CA");
  const std::string insecure = env("STRATA_INSECURE");
  STRATA_CHECK(insecure.empty() || insecure == "0" || insecure == "1", InvalidArgument,
               "STRATA_INSECURE is '" << insecure << "'; it is 1 (run unauthenticated beyond loopback) or 0");
  c.insecure = insecure == "1";
  c.check();
  return c;
}

void JobCredentials::check() const {
  STRATA_CHECK(tls_cert_file.empty() == tls_key_file.empty(), InvalidArgument,
               "TLS needs a certificate and its key together (--tls-cert and --tls-key); got only the "
                   << (tls_cert_file.empty() ? "key" : "certificate"));
  STRATA_CHECK(tls_ca_file.empty() || tls(), InvalidArgument,
               "a TLS CA (--tls-ca) was given without this task's own certificate and key (--tls-cert, --tls-key)");
  if (has_secret()) check_secret(secret, "the job's credentials");
}

std::string JobCredentials::job_id() const {
  if (secret.empty()) return "";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  STRATA_CHECK(EVP_Digest(secret.data(), secret.size(), digest, &n, EVP_sha256(), nullptr) == 1, Error,
               "SHA-256 of the job secret failed");
  return detail::hex_digits(digest, n).substr(0, 12);
}

void JobCredentials::check_address(const std::string& address, const std::string& what) const {
  if (is_loopback_host(host_of_address(address)) || insecure) return;
  STRATA_CHECK(tls(), InvalidArgument,
               what << " is beyond loopback, and the job has no TLS: "
                    << (has_secret() ? "its calls would cross the network in clear"
                                     : "anyone who reaches it could drive the job")
                    << ". Give --tls-cert, --tls-key and --tls-ca (docs/cluster.md), or --insecure to run "
                       "unauthenticated");
  STRATA_CHECK(has_secret() || !tls_ca_file.empty(), InvalidArgument,
               what << " is beyond loopback, and the job's TLS authenticates no caller: give a job secret "
                       "(--job-secret-file) or a CA for mutual TLS (--tls-ca), or --insecure");
}

std::string host_of_address(const std::string& address) {
  const std::string full = listen_address(address);  // a bare port is 127.0.0.1's
  if (!full.empty() && full.front() == '[') return full.substr(0, full.find(']') + 1);
  return full.substr(0, full.rfind(':'));
}

bool is_loopback_host(const std::string& host) {
  return host.empty() || host == "localhost" || host.rfind("127.", 0) == 0 || host == "[::1]" || host == "::1";
}

std::shared_ptr<const JobCredentials> process_job_credentials() {
  std::lock_guard<std::mutex> lock(process_mu);
  if (!process_credentials) process_credentials = std::make_shared<const JobCredentials>(JobCredentials::from_environment());
  return process_credentials;
}

void set_process_job_credentials(JobCredentials credentials) {
  credentials.check();
  std::lock_guard<std::mutex> lock(process_mu);
  process_credentials = std::make_shared<const JobCredentials>(std::move(credentials));
}

}  // namespace strata::cluster
