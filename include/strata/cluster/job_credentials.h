// JobCredentials: what proves that a call to one of a job's services (the coordination service, a ps, a worker)
// comes from the job, and how the calls travel.
//
//   JobCredentials c = JobCredentials::from_environment();   // what `strata launch` hands its tasks
//   c.job_id();                                               // "3f9a0c1e22b7": derived from the secret
//
// - A job secret (at least 16 characters): every call carries an HMAC-SHA256 over the job id, the method and the
//   time, keyed by the secret (the secret itself never travels); every service checks it and refuses a call without
//   it, with another job's, or with a wrong one (Unauthenticated) before the call does anything. The job id travels
//   in clear, so a task that reached another job's service is told so.
// - TLS, when a certificate and key are given: calls are encrypted and the server proves itself against the CA;
//   given a CA, a server also asks every client for a certificate signed by it (mutual TLS).
// - Where calls may go without a secret or without TLS: on loopback (127.x, localhost, [::1]), calls travel in clear
//   and, with a secret, are authenticated (gRPC's local credentials: a loopback server takes no other peers). A job
//   whose addresses go beyond loopback needs TLS (with a secret, or mutual TLS), or `insecure`: it refuses to start
//   otherwise, saying so (the habit of Jupyter and Ray: no unauthenticated service on a network unless asked).
//
// The process's credentials (process_job_credentials) are what every service and client of strata uses unless it
// is given its own: the environment's, or what the CLI set from its flags before starting anything.
//
// Environment: STRATA_JOB_SECRET (the secret: how `strata launch` hands it over, never on a command line),
// STRATA_JOB_SECRET_FILE (a file holding it, readable by its owner only), STRATA_TLS_CERT, STRATA_TLS_KEY,
// STRATA_TLS_CA (PEM files), STRATA_INSECURE=1.
//
// Thread-safety: JobCredentials is a value. process_job_credentials may be called from any thread;
// set_process_job_credentials is meant for the CLI, before any service starts.
#pragma once

#include <memory>
#include <string>

namespace strata::cluster {

struct JobCredentials {
  std::string secret;  // empty: none
  // TLS: PEM files. cert and key together; ca to verify the peers (and, on a server, to require client certs).
  std::string tls_cert_file, tls_key_file, tls_ca_file;
  // Run without authentication on addresses beyond loopback.
  bool insecure = false;

  // From the environment variables above. InvalidArgument for a secret too short, both a secret and a secret file,
  // a secret file readable by others, half a TLS pair; IoError for a file that cannot be read.
  static JobCredentials from_environment();
  // The secret held in `path` (one line; surrounding whitespace dropped), checked as above.
  static std::string read_secret_file(const std::string& path);
  // A fresh random secret (32 bytes from the OS's generator, as hex): what `strata launch` makes for each job.
  static std::string generate_secret();

  bool has_secret() const { return !secret.empty(); }
  bool tls() const { return !tls_cert_file.empty(); }
  // The job's id: the first 12 hex digits of SHA-256 of the secret ("" without one). Not secret.
  std::string job_id() const;
  // InvalidArgument unless the fields fit together (see from_environment).
  void check() const;
  // InvalidArgument unless a service may listen at, or a client call, `address` ("host:port") with these
  // credentials: beyond loopback only with TLS (and a secret or mutual TLS), or `insecure`. `what` names the address
  // in the message ("the coordination service at 10.0.0.2:2222").
  void check_address(const std::string& address, const std::string& what) const;
};

// True for 127.x.x.x, localhost, [::1] and an empty host (which strata binds to 127.0.0.1).
bool is_loopback_host(const std::string& host);
// The host of "host:port", "[v6]:port" or a bare port (127.0.0.1), any port (0 included) accepted.
std::string host_of_address(const std::string& address);

// The process's credentials: those given to set_process_job_credentials, else the environment's (read once).
std::shared_ptr<const JobCredentials> process_job_credentials();
void set_process_job_credentials(JobCredentials credentials);

}  // namespace strata::cluster
