// The job-credential flags of `strata train` and `strata launch` (security_flags.h).
// Thread-safety: see security_flags.h; setenv is called before the launcher starts any task or thread.
#include "cli/security_flags.h"

#include <cstdlib>

#include "strata/error.h"

namespace strata::cli {

void add_security_options(CLI::App* command, SecurityFlags& flags) {
  command->add_option("--job-secret-file", flags.job_secret_file,
                      "file holding the job secret (mode 600) every task's calls must prove; strata launch makes one "
                      "and hands it to its tasks (docs/cluster.md)");
  command->add_option("--tls-cert", flags.tls_cert, "TLS: this task's certificate (PEM); with --tls-key");
  command->add_option("--tls-key", flags.tls_key, "TLS: the key of --tls-cert (PEM)");
  command->add_option("--tls-ca", flags.tls_ca,
                      "TLS: the CA (PEM) that signed every task's certificate; servers then require client "
                      "certificates (mutual TLS)");
  command->add_flag("--insecure", flags.insecure,
                    "allow services and calls beyond loopback without TLS and without authentication");
}

namespace {
cluster::JobCredentials credentials_of(const SecurityFlags& flags) {
  cluster::JobCredentials c = cluster::JobCredentials::from_environment();
  if (!flags.job_secret_file.empty()) c.secret = cluster::JobCredentials::read_secret_file(flags.job_secret_file);
  if (!flags.tls_cert.empty()) c.tls_cert_file = flags.tls_cert;
  if (!flags.tls_key.empty()) c.tls_key_file = flags.tls_key;
  if (!flags.tls_ca.empty()) c.tls_ca_file = flags.tls_ca;
  c.insecure = c.insecure || flags.insecure;
  c.check();
  return c;
}

void set_or_clear(const char* name, const std::string& value) {
  if (value.empty()) {
    ::unsetenv(name);
  } else {
    ::setenv(name, value.c_str(), 1);
  }
}
}  // namespace

cluster::JobCredentials apply_security_flags(const SecurityFlags& flags) {
  cluster::JobCredentials c = credentials_of(flags);
  cluster::set_process_job_credentials(c);
  return c;
}

cluster::JobCredentials hand_credentials_to_tasks(const SecurityFlags& flags, bool generate) {
  cluster::JobCredentials c = credentials_of(flags);
  if (!c.has_secret() && generate) c.secret = cluster::JobCredentials::generate_secret();
  cluster::set_process_job_credentials(c);
  set_or_clear("STRATA_JOB_SECRET", c.secret);
  ::unsetenv("STRATA_JOB_SECRET_FILE");  // the secret itself is handed over: one way only
  set_or_clear("STRATA_TLS_CERT", c.tls_cert_file);
  set_or_clear("STRATA_TLS_KEY", c.tls_key_file);
  set_or_clear("STRATA_TLS_CA", c.tls_ca_file);
  set_or_clear("STRATA_INSECURE", c.insecure ? "1" : "");
  return c;
}

}  // namespace strata::cli
