// Error codes (strata/error.h): every class reports its own code, and make_error / throw_error / rethrow_copy build
// exactly that class back from (code, message), as errors crossing threads and RPCs need.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <typeindex>
#include <vector>

#include "strata/error.h"

namespace strata {
namespace {

// Each code with its class and name, written out here (not taken from the implementation).
struct Expected {
  ErrorCode code;
  std::type_index type;
  const char* name;
};
const std::vector<Expected>& expected() {
  static const std::vector<Expected> table = {
      {ErrorCode::kUnknown, typeid(Error), "Error"},
      {ErrorCode::kInvalidArgument, typeid(InvalidArgument), "InvalidArgument"},
      {ErrorCode::kShapeError, typeid(ShapeError), "ShapeError"},
      {ErrorCode::kIoError, typeid(IoError), "IoError"},
      {ErrorCode::kDataLoss, typeid(DataCorrupt), "DataCorrupt"},
      {ErrorCode::kDeadlineExceeded, typeid(Timeout), "Timeout"},
      {ErrorCode::kUnavailable, typeid(Unavailable), "Unavailable"},
      {ErrorCode::kUnauthenticated, typeid(Unauthenticated), "Unauthenticated"},
  };
  return table;
}

// The dynamic type of the strata::Error in `error`; typeid(void) when it holds something else.
std::type_index type_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return typeid(e);
  } catch (...) {
    return typeid(void);
  }
}

TEST(ErrorCodeTest, TheTableCoversEveryCodeOnce) {
  std::set<ErrorCode> listed(std::begin(kErrorCodes), std::end(kErrorCodes));
  EXPECT_EQ(listed.size(), std::size(kErrorCodes));
  EXPECT_EQ(listed.size(), expected().size());
  for (const Expected& e : expected()) EXPECT_TRUE(listed.count(e.code)) << e.name;
}

TEST(ErrorCodeTest, EveryClassReportsItsOwnCode) {
  EXPECT_EQ(Error("m").code(), ErrorCode::kUnknown);
  EXPECT_EQ(InvalidArgument("m").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ShapeError("m").code(), ErrorCode::kShapeError);
  EXPECT_EQ(IoError("m").code(), ErrorCode::kIoError);
  EXPECT_EQ(DataCorrupt("m").code(), ErrorCode::kDataLoss);
  EXPECT_EQ(Timeout("m").code(), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(Unavailable("m").code(), ErrorCode::kUnavailable);
  EXPECT_EQ(Unauthenticated("m").code(), ErrorCode::kUnauthenticated);
  // Through a reference to the base, as a catch (const Error&) sees it.
  const ShapeError shape("m");
  const Error& base = shape;
  EXPECT_EQ(base.code(), ErrorCode::kShapeError);
}

TEST(ErrorCodeTest, MakeErrorBuildsTheClassOfEveryCodeWithTheMessageAsGiven) {
  for (const Expected& e : expected()) {
    SCOPED_TRACE(e.name);
    const std::exception_ptr error = make_error(e.code, "the message");
    EXPECT_EQ(type_of(error), e.type);
    EXPECT_EQ(error_code_of(error), e.code);
    try {
      throw_error(e.code, "thrown");
    } catch (const Error& thrown) {
      EXPECT_EQ(std::type_index(typeid(thrown)), e.type);
      EXPECT_STREQ(thrown.what(), "thrown");
    }
  }
}

TEST(ErrorCodeTest, NamesRoundTripAndAnUnknownNameIsNone) {
  for (const Expected& e : expected()) {
    EXPECT_STREQ(error_code_name(e.code), e.name);
    EXPECT_EQ(error_code_from_name(e.name), e.code) << e.name;
  }
  EXPECT_EQ(error_code_from_name("NotFound"), std::nullopt);
  EXPECT_EQ(error_code_from_name(""), std::nullopt);
  EXPECT_EQ(error_code_from_name("timeout"), std::nullopt);  // names are exact
}

TEST(ErrorCodeTest, AnExceptionThatIsNotAStrataErrorIsUnknown) {
  EXPECT_EQ(error_code_of(std::make_exception_ptr(std::runtime_error("x"))), ErrorCode::kUnknown);
  EXPECT_EQ(error_code_of(std::make_exception_ptr(42)), ErrorCode::kUnknown);
}

TEST(ErrorCodeTest, RethrowCopyThrowsANewErrorOfTheSameClassAndMessage) {
  for (const Expected& e : expected()) {
    SCOPED_TRACE(e.name);
    const std::exception_ptr stored = make_error(e.code, "shared between threads");
    const Error* original = nullptr;
    try {
      std::rethrow_exception(stored);
    } catch (const Error& caught) {
      original = &caught;
    }
    try {
      rethrow_copy(stored);
    } catch (const Error& copy) {
      EXPECT_EQ(std::type_index(typeid(copy)), e.type);
      EXPECT_STREQ(copy.what(), "shared between threads");
      EXPECT_NE(&copy, original);  // a new object, not the stored one
    }
  }
  // Anything else is rethrown as it is.
  EXPECT_THROW(rethrow_copy(std::make_exception_ptr(std::out_of_range("r"))), std::out_of_range);
}

TEST(ErrorCodeTest, ThrowCodeAddsTheLocationLikeStrataThrow) {
  try {
    STRATA_THROW_CODE(ErrorCode::kDeadlineExceeded, "waited " << 5 << " s");
  } catch (const Timeout& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("waited 5 s [", 0), 0u) << what;
    EXPECT_NE(what.find("error_code_test.cc:"), std::string::npos) << what;
    return;
  }
  FAIL() << "expected a Timeout";
}

}  // namespace
}  // namespace strata
