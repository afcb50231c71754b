// The gRPC side of JobCredentials (strata/cluster/job_credentials.h), for every gRPC server and client of strata
// (the coordination service in cluster; the ps and worker services in ps; private to those layers).
//
//   builder.AddListeningPort(address, server_credentials(*creds, address, "the ps at " + address), &port);
//   auto channel = grpc::CreateCustomChannel(address, channel_credentials(*creds, address, what), args);
//
// Per address (JobCredentials::check_address refuses what may not run):
//   TLS given                  SSL (client certificates required and verified when a CA is given)
//   loopback, with a secret    gRPC's local credentials (LOCAL_TCP: a server takes loopback peers only)
//   otherwise                  plaintext (loopback without a secret, or `insecure`)
// With a secret, every call carries x-strata-job-id (the job id) and x-strata-auth ("<unix ms>:<HMAC-SHA256 of job
// id, method and time>"), and the server's auth metadata processor refuses a call whose proof is missing, another
// job's, wrong or more than kMaxClockSkew old with UNAUTHENTICATED, before any handler runs.
//
// Thread-safety: pure functions; the credentials they return are used by gRPC from any thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "strata/cluster/job_credentials.h"

namespace strata::cluster {

// `what` names the service in its refusals ("the ps"; the caller's error adds the address it called) and in the
// address checks.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const JobCredentials& credentials,
                                                            const std::string& address, const std::string& what);
std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const JobCredentials& credentials,
                                                              const std::string& address, const std::string& what);

// The proof a call carries (exposed for tests): x-strata-auth's value for `method` at `unix_ms`.
std::string call_proof(const JobCredentials& credentials, const std::string& method, int64_t unix_ms);
// The same with the job id already derived (the plugin and the checker hold it: SHA-256 once, not per call).
std::string call_proof(const JobCredentials& credentials, const std::string& job_id, const std::string& method,
                       int64_t unix_ms);

}  // namespace strata::cluster
