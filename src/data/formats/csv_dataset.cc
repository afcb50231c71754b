// CsvDataset: a DatasetNode over CsvReader, reading the files in order on the caller's thread.
// Thread-safety: the node is immutable; an iterator is used by one thread.
#include "strata/data/csv.h"
#include "strata/error.h"

namespace strata::data {
namespace {

struct CsvConfig {
  std::vector<std::string> files;
  std::vector<CsvColumn> columns;
  CsvOptions options;
  std::shared_ptr<const std::vector<std::string>> names;
};

const char* kCsvState = "CsvDataset";

class CsvIterator : public IteratorImpl {
 public:
  explicit CsvIterator(std::shared_ptr<const CsvConfig> cfg) : cfg_(std::move(cfg)) {}

  std::optional<Element> next() override {
    while (file_ < static_cast<int64_t>(cfg_->files.size())) {
      if (!reader_) {
        reader_.emplace(cfg_->files[static_cast<size_t>(file_)], cfg_->columns, cfg_->options);
        if (offset_ > 0) reader_->seek(offset_, line_);
      }
      std::vector<Tensor> row;
      if (reader_->next(&row)) {
        offset_ = reader_->offset();
        line_ = reader_->line();
        return Element(std::move(row), cfg_->names);
      }
      reader_.reset();
      ++file_;
      offset_ = 0;
      line_ = 1;
    }
    return std::nullopt;
  }
  std::string save_state() const override {
    return StateWriter(kCsvState).put_int("file", file_).put_uint("offset", offset_).put_int("line", line_).str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, kCsvState);
    reader_.reset();
    file_ = r.get_int("file");
    offset_ = r.get_uint("offset");
    line_ = r.get_int("line");
  }

 private:
  std::shared_ptr<const CsvConfig> cfg_;
  int64_t file_ = 0;
  uint64_t offset_ = 0;
  int64_t line_ = 1;
  std::optional<CsvReader> reader_;
};

class CsvNode : public DatasetNode {
 public:
  explicit CsvNode(std::shared_ptr<const CsvConfig> cfg) : cfg_(std::move(cfg)) {}
  std::unique_ptr<IteratorImpl> make_iterator() const override { return std::make_unique<CsvIterator>(cfg_); }
  std::string name() const override { return "CsvDataset"; }
  std::optional<std::vector<std::string>> files() const override { return cfg_->files; }
  std::shared_ptr<const DatasetNode> with_files(std::vector<std::string> files) const override {
    auto cfg = std::make_shared<CsvConfig>(*cfg_);
    cfg->files = std::move(files);
    return std::make_shared<CsvNode>(std::move(cfg));
  }

 private:
  std::shared_ptr<const CsvConfig> cfg_;
};

}  // namespace

Dataset CsvDataset(std::vector<std::string> files, std::vector<CsvColumn> columns, CsvOptions options) {
  STRATA_CHECK(options.column_names.empty() || options.column_names.size() == columns.size(), InvalidArgument,
               "CsvDataset: " << options.column_names.size() << " column_names for " << columns.size() << " columns");
  auto cfg = std::make_shared<CsvConfig>();
  cfg->files = std::move(files);
  cfg->columns = std::move(columns);
  if (!options.column_names.empty())
    cfg->names = std::make_shared<const std::vector<std::string>>(options.column_names);
  cfg->options = std::move(options);
  return Dataset::from_node(std::make_shared<CsvNode>(std::move(cfg)));
}

}  // namespace strata::data
