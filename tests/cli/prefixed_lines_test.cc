// Tests of PrefixedLines (cli/prefixed_lines.h): whole lines out, each prefixed, whatever pieces the bytes came in;
// an over-long line cut; the unfinished last line given at the end.
// Thread-safety: single-threaded.
#include "cli/prefixed_lines.h"

#include <gtest/gtest.h>

#include <string>

namespace strata::cli {
namespace {

std::string feed(PrefixedLines& lines, const std::string& bytes) {
  return lines.feed("[w:1] ", bytes.data(), bytes.size());
}

TEST(PrefixedLinesTest, WholeLinesOnlyWhateverThePieces) {
  PrefixedLines lines;
  EXPECT_EQ(feed(lines, "ab"), "");
  EXPECT_EQ(feed(lines, "c\nde"), "[w:1] abc\n");
  EXPECT_EQ(feed(lines, "\n\nf\n"), "[w:1] de\n[w:1] \n[w:1] f\n");
  EXPECT_EQ(lines.rest("[w:1] "), "");
}

TEST(PrefixedLinesTest, TheUnfinishedLineComesAtTheEnd) {
  PrefixedLines lines;
  EXPECT_EQ(feed(lines, "x\nlast words"), "[w:1] x\n");
  EXPECT_EQ(lines.rest("[w:1] "), "[w:1] last words\n");
  EXPECT_EQ(lines.rest("[w:1] "), "");
}

TEST(PrefixedLinesTest, ALineWithoutEndIsCut) {
  PrefixedLines lines;
  const std::string long_line(PrefixedLines::kMaxLine + 10, 'a');
  const std::string out = feed(lines, long_line);
  EXPECT_EQ(out, "[w:1] " + std::string(PrefixedLines::kMaxLine, 'a') + "\n");
  EXPECT_EQ(lines.rest("[w:1] "), "[w:1] " + std::string(10, 'a') + "\n");
}

}  // namespace
}  // namespace strata::cli
