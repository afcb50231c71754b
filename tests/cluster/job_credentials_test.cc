// JobCredentials: read from the environment and from a secret file (too short, readable by others, given twice, half
// a TLS pair: each refused with the fix named), the job id, and where a job may run without TLS (loopback) and where
// it must have it or say --insecure.
#include "strata/cluster/job_credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "io/io_test_util.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::cluster {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

const char* const kVariables[] = {"STRATA_JOB_SECRET", "STRATA_JOB_SECRET_FILE", "STRATA_TLS_CERT",
                                  "STRATA_TLS_KEY",    "STRATA_TLS_CA",          "STRATA_INSECURE"};

class JobCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVariables) ::unsetenv(v);
  }
  void TearDown() override { SetUp(); }
  std::string write_secret(const std::string& text, mode_t mode) {
    const std::string path = dir_ / "secret";
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }
  test::ScratchDir dir_;
};

TEST_F(JobCredentialsTest, NothingSetIsNoSecretAndNoTls) {
  const JobCredentials c = JobCredentials::from_environment();
  EXPECT_FALSE(c.has_secret());
  EXPECT_FALSE(c.tls());
  EXPECT_FALSE(c.insecure);
  EXPECT_EQ(c.job_id(), "");
}

TEST_F(JobCredentialsTest, TheSecretComesFromTheEnvironmentOrAFileOwnedByTheUser) {
  ::setenv("STRATA_JOB_SECRET", "0123456789abcdef0123", 1);
  EXPECT_EQ(JobCredentials::from_environment().secret, "0123456789abcdef0123");
  ::unsetenv("STRATA_JOB_SECRET");
  ::setenv("STRATA_JOB_SECRET_FILE", write_secret("  fedcba9876543210fedc\n", 0600).c_str(), 1);
  EXPECT_EQ(JobCredentials::from_environment().secret, "fedcba9876543210fedc");  // surrounding whitespace dropped
}

TEST_F(JobCredentialsTest, BadSecretsAreRefusedNamingTheFix) {
  ::setenv("STRATA_JOB_SECRET", "short", 1);
  test::expect_error_containing<InvalidArgument>([] { JobCredentials::from_environment(); },
                                                 {"STRATA_JOB_SECRET", "5 characters", "at least 16"});
  const std::string path = write_secret("0123456789abcdef0123", 0644);
  ::setenv("STRATA_JOB_SECRET_FILE", path.c_str(), 1);
  test::expect_error_containing<InvalidArgument>([] { JobCredentials::from_environment(); },
                                                 {"both STRATA_JOB_SECRET and STRATA_JOB_SECRET_FILE"});
  ::unsetenv("STRATA_JOB_SECRET");
  test::expect_error_containing<InvalidArgument>([] { JobCredentials::from_environment(); },
                                                 {"readable by others (mode 644)", "chmod 600"});
  test::expect_error_containing<IoError>([&] { JobCredentials::read_secret_file(dir_ / "missing"); },
                                         {"cannot be read"});
}

TEST_F(JobCredentialsTest, HalfATlsPairOrACaAloneIsRefused) {
  ::setenv("STRATA_TLS_CERT", "cert.pem", 1);
  test::expect_error_containing<InvalidArgument>([] { JobCredentials::from_environment(); },
                                                 {"--tls-cert and --tls-key", "only the certificate"});
  ::unsetenv("STRATA_TLS_CERT");
  ::setenv("STRATA_TLS_CA", "ca.pem", 1);
  test::expect_error_containing<InvalidArgument>([] { JobCredentials::from_environment(); }, {"--tls-ca"});
  ::unsetenv("STRATA_TLS_CA");
  ::setenv("STRATA_INSECURE", "yes", 1);
  test::expect_error_containing<InvalidArgument>([] { JobCredentials::from_environment(); }, {"STRATA_INSECURE"});
}

TEST_F(JobCredentialsTest, TheJobIdIsDerivedFromTheSecret) {
  const JobCredentials a{.secret = JobCredentials::generate_secret()};
  const JobCredentials b{.secret = JobCredentials::generate_secret()};
  EXPECT_EQ(a.secret.size(), 64u);
  EXPECT_NE(a.secret, b.secret);
  EXPECT_THAT(a.job_id(), MatchesRegex("[0-9a-f]{12}"));
  EXPECT_EQ(a.job_id(), JobCredentials{.secret = a.secret}.job_id());
  EXPECT_NE(a.job_id(), b.job_id());
  EXPECT_EQ(a.secret.find(a.job_id()), std::string::npos);
}

TEST_F(JobCredentialsTest, BeyondLoopbackAJobNeedsTlsAndACallerCheckOrInsecure) {
  const std::string secret = "0123456789abcdef0123";
  for (const std::string address : {"127.0.0.1:2222", "localhost:1", "[::1]:5", ":2222"}) {
    EXPECT_NO_THROW(JobCredentials{}.check_address(address, "the service")) << address;
  }
  test::expect_error_containing<InvalidArgument>(
      [] { JobCredentials{}.check_address("10.0.0.2:2222", "the ps at 10.0.0.2:2222"); },
      {"the ps at 10.0.0.2:2222 is beyond loopback", "anyone who reaches it could drive the job", "--tls-cert",
       "--insecure"});
  test::expect_error_containing<InvalidArgument>(
      [&] { JobCredentials{.secret = secret}.check_address("0.0.0.0:2222", "the worker"); },
      {"its calls would cross the network in clear"});
  test::expect_error_containing<InvalidArgument>(
      [] { JobCredentials{.tls_cert_file = "c", .tls_key_file = "k"}.check_address("10.0.0.2:1", "the service"); },
      {"authenticates no caller", "--tls-ca"});
  EXPECT_NO_THROW(JobCredentials{.insecure = true}.check_address("10.0.0.2:2222", "the service"));
  EXPECT_NO_THROW((JobCredentials{.secret = secret, .tls_cert_file = "c", .tls_key_file = "k"}.check_address(
      "10.0.0.2:2222", "the service")));
  EXPECT_NO_THROW((JobCredentials{.tls_cert_file = "c", .tls_key_file = "k", .tls_ca_file = "ca"}.check_address(
      "10.0.0.2:2222", "the service")));
}

}  // namespace
}  // namespace strata::cluster
