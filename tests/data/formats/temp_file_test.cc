// Files published only once complete (io/atomic_file.h's publish_temp_file, TFRecordWriterOptions::atomic): the target
// appears at close() with every record, never before; a writer destroyed unfinished or failing part-way
// (a write past a file-size cap, as on a full disk) leaves the target as it was and no temporary file.
#include "io/atomic_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "data/dataset_test_util.h"
#include "strata/data/tfrecord.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::data {
namespace {

using test::file_bytes;
using test::file_names;
using test::put_bytes;

class TempFileTest : public test::ScratchDirTest {
 protected:
  TempFileTest() : ScratchDirTest("strata_temp_file_") {}
};

std::vector<std::string> read_all(const std::string& path, Compression c) {
  TFRecordReader reader(path, {.compression = c});
  std::vector<std::string> out;
  std::string record;
  while (reader.read(&record)) out.push_back(record);
  return out;
}

std::vector<std::string> some_records(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("record " + std::to_string(i) + std::string(100 + i % 50, 'a' + i % 7));
  return out;
}

TEST_F(TempFileTest, TemporaryNamesAreBesideTheTargetAndUnique) {
  const std::string a = io::detail::temp_name_for(path("out.tfrecord")),
                    b = io::detail::temp_name_for(path("out.tfrecord"));
  const std::string prefix = path("out.tfrecord") + ".tmp-" + std::to_string(::getpid()) + "-";
  EXPECT_EQ(a.rfind(prefix, 0), 0u) << a;
  EXPECT_EQ(b.rfind(prefix, 0), 0u) << b;
  EXPECT_NE(a, b);
}

TEST_F(TempFileTest, AnAtomicWriterPublishesTheFileOnlyWhenClosed) {
  const auto records = some_records(300);
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(compression_name(c));
    const std::string target = path("out");
    TFRecordWriter w(target, {.compression = c, .atomic = true});
    for (const auto& r : records) w.write(r);
    w.flush();
    // Written (and flushed) but not closed: only the temporary file is there.
    const auto during = file_names(dir_);
    ASSERT_EQ(during.size(), 1u);
    EXPECT_EQ(during[0].rfind("out.tmp-", 0), 0u) << during[0];
    w.close();
    EXPECT_EQ(file_names(dir_), std::vector<std::string>{"out"});
    EXPECT_EQ(read_all(target, c), records);
    std::filesystem::remove(target);
  }
}

TEST_F(TempFileTest, AWriterDestroyedUnfinishedLeavesTheTargetAsItWas) {
  put_bytes(path("out"), "the previous file");
  for (Compression c : {Compression::kNone, Compression::kGzip}) {
    SCOPED_TRACE(compression_name(c));
    {
      TFRecordWriter w(path("out"), {.compression = c, .atomic = true});
      for (const auto& r : some_records(50)) w.write(r);
      w.flush();
    }  // no close(): an exception on the way out, say
    EXPECT_EQ(file_names(dir_), std::vector<std::string>{"out"});
    EXPECT_EQ(file_bytes(path("out")), "the previous file");
  }
  // Not atomic, the destructor finishes the file in place (as before).
  {
    TFRecordWriter w(path("out"));
    w.write("kept");
  }
  EXPECT_EQ(read_all(path("out"), Compression::kNone), std::vector<std::string>{"kept"});
}

TEST_F(TempFileTest, AWriteThatFailsPartWayLeavesNoFile) {
  const auto records = some_records(400);  // ~60 KB
  for (Compression c : {Compression::kNone, Compression::kGzip}) {
    SCOPED_TRACE(compression_name(c));
    for (bool atomic : {false, true}) {
      SCOPED_TRACE(atomic ? "atomic" : "in place");
      std::string error;
      try {
        test::FileSizeLimit cap(1000);
        TFRecordWriter w(path("out"), {.compression = c, .atomic = atomic});
        for (const auto& r : records) w.write(r);
        w.close();
      } catch (const IoError& e) {
        error = e.what();
      }
      EXPECT_NE(error.find(path("out")), std::string::npos) << error;
      if (!atomic) {  // what the in-place writer leaves: a truncated file under the final name
        EXPECT_EQ(file_names(dir_), std::vector<std::string>{"out"});
        EXPECT_EQ(std::filesystem::file_size(path("out")), 1000u);
        std::filesystem::remove(path("out"));
        continue;
      }
      EXPECT_TRUE(file_names(dir_).empty()) << file_names(dir_)[0];
    }
  }
}

TEST_F(TempFileTest, PublishingRenamesOverTheTargetOrRemovesTheTemporaryFile) {
  put_bytes(path("t"), "new");
  put_bytes(path("target"), "old");
  io::detail::publish_temp_file(path("t"), path("target"));
  EXPECT_EQ(file_names(dir_), std::vector<std::string>{"target"});
  EXPECT_EQ(file_bytes(path("target")), "new");
  // A rename that cannot be done (the target is a non-empty directory): IoError naming both, and no
  // temporary file left behind.
  std::filesystem::create_directories(dir_ / "busy" / "inside");
  put_bytes(path("t"), "new");
  const std::string msg = test::message_of<IoError>([&] { io::detail::publish_temp_file(path("t"), path("busy")); });
  EXPECT_NE(msg.find(path("t")), std::string::npos) << msg;
  EXPECT_NE(msg.find(path("busy")), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(path("t")));
}

}  // namespace
}  // namespace strata::data
