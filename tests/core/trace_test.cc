// strata/trace.h: what a trace keeps (the step window, the cap), how threads and processes are named, and that the
// file is the Chrome trace-event JSON that Perfetto reads.
#include "strata/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "strata/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

struct TraceFile {
  fs::path path = fs::temp_directory_path() / ("strata_trace_test_" + std::to_string(::getpid()) + ".json");
  ~TraceFile() { fs::remove(path); }
  nlohmann::json read() const {
    std::ifstream in(path);
    return nlohmann::json::parse(in);  // throws on anything that is not JSON
  }
};

std::vector<nlohmann::json> events_of(const nlohmann::json& trace, const std::string& phase) {
  std::vector<nlohmann::json> out;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == phase) out.push_back(e);
  return out;
}

TEST(TraceTest, KeepsOnlyTheSpansOfTheStepWindow) {
  TraceFile file;
  trace::start(
      {.path = file.path.string(), .first_step = 2, .end_step = 4, .process_id = 3, .process_name = "worker:3"});
  for (int64_t step = 0; step < 6; ++step) {
    trace::set_step(step);
    trace::Span span("compute", "forward", /*bytes=*/step * 10);
  }
  trace::set_step(trace::kNoStep);
  { trace::Span after("compute", "backward"); }
  EXPECT_FALSE(trace::recording());
  EXPECT_EQ(trace::stop(), 2);
  const nlohmann::json trace = file.read();
  const auto spans = events_of(trace, "X");
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0]["name"], "forward");
  EXPECT_EQ(spans[0]["cat"], "compute");
  EXPECT_EQ(spans[0]["args"]["step"], 2);
  EXPECT_EQ(spans[0]["args"]["bytes"], 20);
  EXPECT_EQ(spans[1]["args"]["step"], 3);
  EXPECT_EQ(spans[0]["pid"], 3);
  EXPECT_GE(spans[0]["dur"].get<double>(), 0);
  EXPECT_GE(spans[1]["ts"].get<double>(), spans[0]["ts"].get<double>() + spans[0]["dur"].get<double>());
  const auto names = events_of(trace, "M");
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0]["name"], "process_name");
  EXPECT_EQ(names[0]["args"]["name"], "worker:3");
}

TEST(TraceTest, NamesEachThreadsRowAndKeepsSpansOfEveryThread) {
  TraceFile file;
  trace::start({.path = file.path.string(), .first_step = 0, .end_step = 1});
  trace::set_step(0);
  int64_t main_thread = 0, other_thread = 0;
  trace::name_thread("training loop");
  { trace::Span span("compute", "forward"); }
  std::thread([] {
    trace::name_thread("gloo worker");
    const auto begin = std::chrono::steady_clock::now();
    trace::add_span("comm", "all_reduce", begin, begin + std::chrono::microseconds(5), 64);
  }).join();
  trace::instant("membership", "worker:2 left");
  trace::set_step(trace::kNoStep);
  EXPECT_EQ(trace::stop(), 3);
  const nlohmann::json trace = file.read();
  for (const auto& e : events_of(trace, "M")) {
    if (e["name"] != "thread_name") continue;
    if (e["args"]["name"] == "training loop") main_thread = e["tid"];
    if (e["args"]["name"] == "gloo worker") other_thread = e["tid"];
  }
  ASSERT_NE(main_thread, 0);
  ASSERT_NE(other_thread, 0);
  EXPECT_NE(main_thread, other_thread);
  const auto spans = events_of(trace, "X");
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0]["tid"], main_thread);
  EXPECT_EQ(spans[1]["tid"], other_thread);
  EXPECT_EQ(spans[1]["name"], "all_reduce");
  const auto instants = events_of(trace, "i");
  ASSERT_EQ(instants.size(), 1u);
  EXPECT_EQ(instants[0]["name"], "worker:2 left");
}

TEST(TraceTest, StopsKeepingSpansAtItsCapAndSaysHowManyItDropped) {
  TraceFile file;
  trace::start({.path = file.path.string(), .first_step = 0, .end_step = 10, .max_events = 5});
  trace::set_step(0);
  for (int i = 0; i < 12; ++i) trace::Span span("compute", "forward");
  trace::set_step(trace::kNoStep);
  EXPECT_EQ(trace::stop(), 5);
  const nlohmann::json trace = file.read();
  EXPECT_EQ(events_of(trace, "X").size(), 5u);
  EXPECT_EQ(trace["otherData"]["dropped_spans"], 7);
}

TEST(TraceTest, WithoutATraceNothingIsRecordedOrWritten) {
  trace::set_step(0);
  EXPECT_FALSE(trace::recording());
  { trace::Span span("compute", "forward"); }
  EXPECT_EQ(trace::stop(), 0);
  trace::set_step(trace::kNoStep);
}

TEST(TraceTest, RejectsAnEmptyWindowOrPathAndAFolderThatIsNotThere) {
  EXPECT_THROW(trace::start({.path = ""}), InvalidArgument);
  EXPECT_THROW(trace::start({.path = "/tmp/x.json", .first_step = 5, .end_step = 5}), InvalidArgument);
  EXPECT_THROW(trace::start({.path = "/tmp/x.json", .max_events = 0}), InvalidArgument);
  trace::start({.path = "/nonexistent-strata-folder/trace.json"});
  EXPECT_THROW(trace::stop(), IoError);
  EXPECT_EQ(trace::stop(), 0);  // the failed stop ended the trace
}

TEST(TraceTest, CommunicationSecondsAccumulate) {
  const double before = trace::communication_seconds();
  trace::add_communication_seconds(0.25);
  EXPECT_NEAR(trace::communication_seconds() - before, 0.25, 1e-9);
}

}  // namespace
}  // namespace strata
