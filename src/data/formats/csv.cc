// CsvReader: RFC 4180 records split in place from a ByteReader buffer and converted per column.
// Thread-safety: one reader per thread.
#include "strata/data/csv.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "data/compression/byte_streams.h"
#include "strata/error.h"

namespace strata::data {

const char* csv_type_name(CsvType t) {
  switch (t) {
    case CsvType::kFloat32:
      return "float32";
    case CsvType::kInt32:
      return "int32";
    case CsvType::kInt64:
      return "int64";
    case CsvType::kString:
      return "string";
  }
  return "?";
}

namespace {
template <class T>
Tensor scalar_of(T v) {
  Tensor t = Tensor::empty({}, dtype_of<T>);
  *t.data<T>() = v;
  return t;
}
}  // namespace

CsvColumn CsvColumn::with_default(float v) { return {CsvType::kFloat32, scalar_of(v)}; }
CsvColumn CsvColumn::with_default(int32_t v) { return {CsvType::kInt32, scalar_of(v)}; }
CsvColumn CsvColumn::with_default(int64_t v) { return {CsvType::kInt64, scalar_of(v)}; }
CsvColumn CsvColumn::with_default(const std::string& v) { return {CsvType::kString, string_tensor(v)}; }

CsvReader::CsvReader(const std::string& path, std::vector<CsvColumn> columns, CsvOptions options)
    : in_(std::make_unique<detail::ByteReader>(path, options.compression, options.buffer_size)),
      columns_(std::move(columns)),
      options_(std::move(options)) {
  STRATA_CHECK(!columns_.empty(), InvalidArgument, "CsvDataset " << path << ": no columns given");
  STRATA_CHECK(options_.select_cols.empty() || options_.exclude_cols.empty(), InvalidArgument,
               "CsvDataset: give select_cols or exclude_cols, not both");
  STRATA_CHECK(options_.field_delim != '"' && options_.field_delim != '\n' && options_.field_delim != '\r',
               InvalidArgument, "CsvDataset: field_delim cannot be a quote or a line end");
  const auto check_sorted = [&](const std::vector<int64_t>& cols, const char* what) {
    for (size_t i = 0; i < cols.size(); ++i)
      STRATA_CHECK(cols[i] >= 0 && (i == 0 || cols[i] > cols[i - 1]), InvalidArgument,
                   "CsvDataset: " << what << " must be increasing and non-negative");
  };
  check_sorted(options_.select_cols, "select_cols");
  check_sorted(options_.exclude_cols, "exclude_cols");
  if (!options_.select_cols.empty()) {
    STRATA_CHECK(
        options_.select_cols.size() == columns_.size(), InvalidArgument,
        "CsvDataset: " << options_.select_cols.size() << " select_cols but " << columns_.size() << " column specs");
    selected_ = options_.select_cols;
  } else if (!options_.exclude_cols.empty()) {
    const int64_t total = static_cast<int64_t>(columns_.size() + options_.exclude_cols.size());
    for (int64_t c = 0; c < total; ++c)
      if (!std::binary_search(options_.exclude_cols.begin(), options_.exclude_cols.end(), c)) selected_.push_back(c);
    STRATA_CHECK(selected_.size() == columns_.size(), InvalidArgument,
                 "CsvDataset: exclude_cols " << options_.exclude_cols.size() << " reach past " << total << " columns");
  }
  for (size_t k = 0; k < columns_.size(); ++k) {
    const auto& d = columns_[k].default_value;
    if (!d) continue;
    const DType want = columns_[k].type == CsvType::kFloat32 ? DType::kFloat32
                       : columns_[k].type == CsvType::kInt32 ? DType::kInt32
                       : columns_[k].type == CsvType::kInt64 ? DType::kInt64
                                                             : DType::kUInt8;
    STRATA_CHECK(d->dtype() == want && (want == DType::kUInt8 ? d->rank() == 1 : d->numel() == 1), InvalidArgument,
                 "CsvDataset: the default of column " << k << " is " << d->str() << ", not a "
                                                      << csv_type_name(columns_[k].type));
  }
}

CsvReader::~CsvReader() = default;
CsvReader::CsvReader(CsvReader&&) noexcept = default;
CsvReader& CsvReader::operator=(CsvReader&&) noexcept = default;

uint64_t CsvReader::offset() const { return in_->position(); }

void CsvReader::seek(uint64_t offset, int64_t line) {
  in_->seek(offset);
  line_ = line;
  header_done_ = offset > 0 || !options_.header;
}

bool CsvReader::split_record() {
  detail::ByteReader& in = *in_;
  const char delim = options_.field_delim;
  const bool quotes = options_.use_quote_delim;
  for (;;) {
    fields_.clear();
    field_buf_.clear();
    if (in.ensure(1) == 0) return false;
    record_line_ = line_;
    size_t i = 0;
    size_t field_start = 0;
    bool in_quotes = false, quoted = false, closed = false, any = false;
    // Returns the byte at i, or -1 at the end of the stream.
    const auto peek = [&](size_t at) -> int {
      if (at >= in.available() && in.ensure(at + 1) <= at) return -1;
      return static_cast<unsigned char>(in.data()[at]);
    };
    const auto end_field = [&] {
      fields_.emplace_back(field_start, field_buf_.size() - field_start);
      field_start = field_buf_.size();
      quoted = closed = false;
    };
    const auto where = [&] { return "in the record at line " + std::to_string(record_line_) + " of " + in.path(); };
    for (;;) {
      const int c = peek(i);
      if (c < 0) {
        STRATA_CHECK(!in_quotes, DataCorrupt, "CSV: unterminated quoted field " << where());
        if (any) end_field();
        break;
      }
      if (in_quotes) {
        if (c == '"') {
          if (peek(i + 1) == '"') {
            field_buf_.push_back('"');
            i += 2;
          } else {
            in_quotes = false;
            closed = true;
            ++i;
          }
        } else {
          if (c == '\n') ++line_;
          field_buf_.push_back(static_cast<char>(c));
          ++i;
        }
        continue;
      }
      const bool crlf = c == '\r' && peek(i + 1) == '\n';
      if (c == '\n' || crlf) {
        i += crlf ? 2 : 1;
        ++line_;
        if (any) end_field();
        break;
      }
      any = true;
      if (c == delim) {
        end_field();
        ++i;
        continue;
      }
      STRATA_CHECK(
          !closed, DataCorrupt,
          "CSV: a quote inside a quoted field must be doubled (\"\") " << where() << ", field " << fields_.size());
      if (c == '"' && quotes) {
        STRATA_CHECK(!quoted && field_buf_.size() == field_start, DataCorrupt,
                     "CSV: an unquoted field cannot hold a quote " << where() << ", field " << fields_.size());
        in_quotes = quoted = true;
        ++i;
        continue;
      }
      field_buf_.push_back(static_cast<char>(c));
      ++i;
    }
    in.consume(i);
    if (fields_.empty()) continue;  // an empty line
    if (options_.header && !header_done_) {
      header_done_ = true;
      continue;
    }
    return true;
  }
}

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
}  // namespace

Tensor CsvReader::convert(size_t column, size_t field) const {
  const auto [start, length] = fields_[field];
  const std::string_view text(field_buf_.data() + start, length);
  const CsvColumn& spec = columns_[column];
  const auto where = [&] {
    return "column " + std::to_string(field) + " of the record at line " + std::to_string(record_line_) + " of " +
           in_->path();
  };
  if (text.empty() || (!options_.na_value.empty() && text == options_.na_value)) {
    STRATA_CHECK(spec.default_value, InvalidArgument, "CSV: " << where() << " is required (no default) but missing");
    return *spec.default_value;
  }
  const std::string_view t = trim(text);
  const auto bad = [&]() -> Tensor {
    STRATA_THROW(InvalidArgument,
                 "CSV: " << where() << " is not a valid " << csv_type_name(spec.type) << ": '" << text << "'");
  };
  switch (spec.type) {
    case CsvType::kFloat32: {
      float v = 0;
      const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
      if (r.ec != std::errc() || r.ptr != t.data() + t.size() || t.empty()) return bad();
      return scalar_of(v);
    }
    case CsvType::kInt32: {
      int32_t v = 0;
      const char* b = t.data() + (!t.empty() && t[0] == '+');
      const auto r = std::from_chars(b, t.data() + t.size(), v);
      if (r.ec != std::errc() || r.ptr != t.data() + t.size() || t.empty()) return bad();
      return scalar_of(v);
    }
    case CsvType::kInt64: {
      int64_t v = 0;
      const char* b = t.data() + (!t.empty() && t[0] == '+');
      const auto r = std::from_chars(b, t.data() + t.size(), v);
      if (r.ec != std::errc() || r.ptr != t.data() + t.size() || t.empty()) return bad();
      return scalar_of(v);
    }
    case CsvType::kString:
      return string_tensor(text);
  }
  return bad();
}

bool CsvReader::next(std::vector<Tensor>* row) {
  if (!split_record()) return false;
  const size_t n = fields_.size();
  row->resize(columns_.size());
  if (selected_.empty()) {
    STRATA_CHECK(n == columns_.size(), InvalidArgument,
                 "CSV: expected " << columns_.size() << " fields but the record at line " << record_line_ << " of "
                                  << in_->path() << " has " << n);
    for (size_t k = 0; k < n; ++k) (*row)[k] = convert(k, k);
  } else {
    const size_t need = static_cast<size_t>(selected_.back()) + 1;
    STRATA_CHECK(options_.exclude_cols.empty() ? n >= need : n == need, InvalidArgument,
                 "CSV: expected " << (options_.exclude_cols.empty() ? "at least " : "") << need
                                  << " fields but the record at line " << record_line_ << " of " << in_->path()
                                  << " has " << n);
    for (size_t k = 0; k < columns_.size(); ++k) (*row)[k] = convert(k, static_cast<size_t>(selected_[k]));
  }
  return true;
}

}  // namespace strata::data
