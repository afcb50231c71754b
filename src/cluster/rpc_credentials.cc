// gRPC credentials from JobCredentials (rpc_credentials.h): the call proof (an HMAC-SHA256 keyed by the job secret),
// the client plugin that attaches it, the server processor that checks it, and the transport per address.
// Thread-safety: see rpc_credentials.h; the plugin and processor hold only constants.
#include "cluster/rpc_credentials.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "cluster/hex_digits.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/error.h"

namespace strata::cluster {
namespace {

constexpr char kJobIdKey[] = "x-strata-job-id";
constexpr char kProofKey[] = "x-strata-auth";
// A proof older (or newer) than this is refused: a recorded call cannot be replayed later.
constexpr std::chrono::minutes kMaxClockSkew{5};

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string read_pem(const std::string& path, const char* flag) {
  std::ifstream in(path);
  STRATA_CHECK(in.good(), IoError, "TLS: cannot read " << flag << " file '" << path << "'");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string to_string(grpc::string_ref s) { return std::string(s.data(), s.size()); }

// The method of a call's ":path" ("/strata.cluster.Coordination/Set" -> "Set").
std::string method_of_path(const std::string& path) { return path.substr(path.rfind('/') + 1); }

class ProofPlugin final : public grpc::MetadataCredentialsPlugin {
 public:
  explicit ProofPlugin(JobCredentials credentials) : credentials_(std::move(credentials)), job_id_(credentials_.job_id()) {}
  bool IsBlocking() const override { return false; }
  const char* GetType() const override { return "strata-job-secret"; }
  grpc::Status GetMetadata(grpc::string_ref, grpc::string_ref method_name, const grpc::AuthContext&,
                           std::multimap<std::string, std::string>* metadata) override {
    const int64_t now = unix_ms_now();
    metadata->emplace(kJobIdKey, job_id_);
    metadata->emplace(kProofKey,
                      std::to_string(now) + ":" + call_proof(credentials_, job_id_, to_string(method_name), now));
    return grpc::Status::OK;
  }

 private:
  const JobCredentials credentials_;
  const std::string job_id_;
};

class ProofChecker final : public grpc::AuthMetadataProcessor {
 public:
  ProofChecker(JobCredentials credentials, std::string what)
      : credentials_(std::move(credentials)), job_id_(credentials_.job_id()), what_(std::move(what)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata*, OutputMetadata*) override {
    const auto find = [&](const char* key) {
      const auto it = metadata.find(key);
      return it == metadata.end() ? std::string() : to_string(it->second);
    };
    const std::string job = find(kJobIdKey), proof = find(kProofKey), method = method_of_path(find(":path"));
    const std::string self = what_ + " (job " + job_id_ + ")";
    if (job.empty() || proof.empty()) {
      return refuse(self + " takes only calls that carry the job's secret; this " + method +
                    " call carried none (a task of the job gets it from strata launch, or from --job-secret-file "
                    "or STRATA_JOB_SECRET)");
    }
    if (job != job_id_) {
      return refuse(self + " was called (" + method + ") by a task of another job (job " + job +
                    "): two jobs' addresses crossed; give each job its own ports");
    }
    const size_t colon = proof.find(':');
    int64_t sent = 0;
    try {
      sent = std::stoll(proof.substr(0, colon));
    } catch (const std::exception&) {
      return refuse(self + ": the " + method + " call's proof is malformed");
    }
    const int64_t skew = std::llabs(unix_ms_now() - sent);
    if (skew > std::chrono::duration_cast<std::chrono::milliseconds>(kMaxClockSkew).count()) {
      return refuse(self + ": the " + method + " call's proof is " + std::to_string(skew / 1000) +
                    " s from this machine's clock (more than " + std::to_string(kMaxClockSkew.count()) +
                    " min): a replayed call, or clocks apart");
    }
    const std::string expected = call_proof(credentials_, job_id_, method, sent);
    const std::string given = colon == std::string::npos ? "" : proof.substr(colon + 1);
    if (given.size() != expected.size() || CRYPTO_memcmp(given.data(), expected.data(), expected.size()) != 0) {
      return refuse(self + ": the " + method + " call's proof does not match the job's secret (a wrong secret)");
    }
    return grpc::Status::OK;
  }

 private:
  static grpc::Status refuse(const std::string& why) { return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, why); }

  const JobCredentials credentials_;
  const std::string job_id_;
  const std::string what_;
};

bool on_loopback(const std::string& address) { return is_loopback_host(host_of_address(address)); }

}  // namespace

std::string call_proof(const JobCredentials& credentials, const std::string& method, int64_t unix_ms) {
  return call_proof(credentials, credentials.job_id(), method, unix_ms);
}

std::string call_proof(const JobCredentials& credentials, const std::string& job_id, const std::string& method,
                       int64_t unix_ms) {
  const std::string message = job_id + "\n" + method + "\n" + std::to_string(unix_ms);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  STRATA_CHECK(HMAC(EVP_sha256(), credentials.secret.data(), static_cast<int>(credentials.secret.size()),
                    reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &n) != nullptr,
               Error, "HMAC-SHA256 of a call failed");
  return detail::hex_digits(digest, n);
}

std::shared_ptr<grpc::ServerCredentials> server_credentials(const JobCredentials& credentials,
                                                            const std::string& address, const std::string& what) {
  credentials.check_address(address, what + " at " + address);
  std::shared_ptr<grpc::ServerCredentials> out;
  if (credentials.tls()) {
    grpc::SslServerCredentialsOptions options(credentials.tls_ca_file.empty()
                                                  ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    if (!credentials.tls_ca_file.empty()) options.pem_root_certs = read_pem(credentials.tls_ca_file, "--tls-ca");
    options.pem_key_cert_pairs.push_back({read_pem(credentials.tls_key_file, "--tls-key"),
                                          read_pem(credentials.tls_cert_file, "--tls-cert")});
    out = grpc::SslServerCredentials(options);
  } else if (credentials.has_secret() && on_loopback(address)) {
    out = grpc::experimental::LocalServerCredentials(LOCAL_TCP);
  } else {
    return grpc::InsecureServerCredentials();  // loopback without a secret, or beyond it when insecure
  }
  if (credentials.has_secret()) out->SetAuthMetadataProcessor(std::make_shared<ProofChecker>(credentials, what));
  return out;
}

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const JobCredentials& credentials,
                                                              const std::string& address, const std::string& what) {
  credentials.check_address(address, what + " at " + address);
  std::shared_ptr<grpc::ChannelCredentials> transport;
  if (credentials.tls()) {
    grpc::SslCredentialsOptions options;
    if (!credentials.tls_ca_file.empty()) options.pem_root_certs = read_pem(credentials.tls_ca_file, "--tls-ca");
    options.pem_private_key = read_pem(credentials.tls_key_file, "--tls-key");
    options.pem_cert_chain = read_pem(credentials.tls_cert_file, "--tls-cert");
    transport = grpc::SslCredentials(options);
  } else if (credentials.has_secret() && on_loopback(address)) {
    transport = grpc::experimental::LocalCredentials(LOCAL_TCP);
  } else {
    return grpc::InsecureChannelCredentials();
  }
  if (!credentials.has_secret()) return transport;
  // GRPC_SECURITY_NONE: local credentials on loopback rate as no security; the proof travels there all the same.
  return grpc::CompositeChannelCredentials(
      transport, grpc::experimental::MetadataCredentialsFromPlugin(std::make_unique<ProofPlugin>(credentials),
                                                                   GRPC_SECURITY_NONE));
}

}  // namespace strata::cluster
