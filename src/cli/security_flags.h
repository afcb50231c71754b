// The flags that say how a job's tasks prove themselves to each other's services (strata/cluster/job_credentials.h):
//   --job-secret-file FILE   the job secret (jobs started by TF_CONFIG, mpirun or SLURM; `strata launch` makes one)
//   --tls-cert F --tls-key F [--tls-ca F]   TLS for every service and call (mutual with a CA)
//   --insecure               run without authentication on addresses beyond loopback
// `strata train` and `strata launch` take them; the launcher hands them to its tasks in their environment
// (STRATA_JOB_SECRET, STRATA_TLS_*, STRATA_INSECURE), never on a command line.
//
// Thread-safety: used by the thread that runs the command, before any service starts.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "strata/cluster/job_credentials.h"

namespace strata::cli {

struct SecurityFlags {
  std::string job_secret_file;
  std::string tls_cert, tls_key, tls_ca;
  bool insecure = false;
};

void add_security_options(CLI::App* command, SecurityFlags& flags);

// The environment's credentials with the flags over them (InvalidArgument / IoError as JobCredentials says), made
// the process's (set_process_job_credentials).
cluster::JobCredentials apply_security_flags(const SecurityFlags& flags);

// For `strata launch`: as apply_security_flags, and when no secret was given a fresh one (generate_secret) unless
// `generate` is false; then the credentials are put in this process's environment, which its tasks inherit.
cluster::JobCredentials hand_credentials_to_tasks(const SecurityFlags& flags, bool generate);

}  // namespace strata::cli
