// read_scalar_events: what EventFileWriter writes reads back (tags, steps, values, in order), other events are
// skipped, and damage is a DataCorrupt naming the file.
#include "io/event_file_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/event_writer.h"
#include "strata/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

struct Folder {
  fs::path dir = fs::temp_directory_path() / ("strata_event_file_reader_" + std::to_string(::getpid()));
  Folder() { fs::remove_all(dir); }
  ~Folder() { fs::remove_all(dir); }
};

TEST(EventFileReaderTest, ReadsBackTheScalarsEventFileWriterWrote) {
  Folder f;
  std::string path;
  {
    io::detail::EventFileWriter writer(f.dir.string());
    writer.add_scalars(0, {{"epoch_loss", 0.75f}, {"epoch_accuracy", 0.5f}});
    writer.add_scalars(1, {{"epoch_loss", 0.25f}, {"epoch_zero", 0.0f}});
    writer.add_scalars(-3, {{"negative_step", -1.5f}});
    writer.close();
    path = writer.path();
  }
  const std::vector<io::detail::ScalarEvent> events = io::detail::read_scalar_events(path);
  ASSERT_EQ(events.size(), 5u) << "the version event has no scalars";
  EXPECT_EQ(events[0].tag, "epoch_loss");
  EXPECT_EQ(events[0].step, 0);
  EXPECT_EQ(events[0].value, 0.75f);
  EXPECT_GT(events[0].wall_time, 1.7e9);
  EXPECT_EQ(events[1].tag, "epoch_accuracy");
  EXPECT_EQ(events[1].value, 0.5f);
  EXPECT_EQ(events[2].step, 1);
  EXPECT_EQ(events[2].value, 0.25f);
  EXPECT_EQ(events[3].tag, "epoch_zero");
  EXPECT_EQ(events[3].value, 0.0f);
  EXPECT_EQ(events[4].step, -3);
  EXPECT_EQ(events[4].value, -1.5f);
}

TEST(EventFileReaderTest, ADamagedRecordIsDataCorruptNamingTheFile) {
  Folder f;
  std::string path;
  {
    io::detail::EventFileWriter writer(f.dir.string());
    writer.add_scalars(0, {{"epoch_loss", 0.75f}});
    writer.close();
    path = writer.path();
  }
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-6, std::ios::end);
    file.put('\x55');
  }
  try {
    io::detail::read_scalar_events(path);
    FAIL() << "expected DataCorrupt";
  } catch (const DataCorrupt& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
