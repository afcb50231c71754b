// .npz archives (see strata/io/npz.h): libzip finds, inflates and CRC-checks the members; npy_reader.h parses each.
// Thread-safety: an NpzFile's archive is used by one thread at a time.
#include "strata/io/npz.h"

#include <zip.h>

#include <algorithm>

#include "io/npy_reader.h"
#include "strata/error.h"

namespace strata::io {

namespace {
constexpr char kSuffix[] = ".npy";
constexpr size_t kSuffixSize = 4;

std::string zip_error_text(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  std::string text = zip_error_strerror(&error);
  zip_error_fini(&error);
  return text;
}
}  // namespace

struct NpzFile::Rep {
  std::string path;
  zip_t* archive = nullptr;
  std::vector<std::string> keys;
  std::vector<zip_uint64_t> indices;  // the member of each key

  ~Rep() {
    if (archive != nullptr) zip_discard(archive);  // opened read-only: nothing to write back
  }

  zip_uint64_t index_of(const std::string& key) const {
    const auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      std::string names;
      for (const std::string& k : keys) names += (names.empty() ? "" : ", ") + k;
      STRATA_THROW(InvalidArgument, path << ": no array '" << key << "' in the archive; it holds "
                                         << (names.empty() ? "none" : names));
    }
    return indices[static_cast<size_t>(it - keys.begin())];
  }

  // Opens the member of `key` and passes its bytes (as npy_reader's ReadFn) and size to `use`. With `whole`, the
  // member is then read to its end, where libzip checks its CRC.
  template <class F>
  auto with_member(const std::string& key, bool whole, F&& use) {
    const zip_uint64_t index = index_of(key);
    const std::string name = path + ":" + key + kSuffix;
    zip_stat_t stat;
    zip_stat_init(&stat);
    STRATA_CHECK(zip_stat_index(archive, index, 0, &stat) == 0 && (stat.valid & ZIP_STAT_SIZE) != 0, DataCorrupt,
                 name << ": cannot read its size: " << zip_strerror(archive));
    zip_file_t* file = zip_fopen_index(archive, index, 0);
    STRATA_CHECK(file != nullptr, DataCorrupt, name << ": cannot open it: " << zip_strerror(archive));
    struct Closer {
      zip_file_t* f;
      ~Closer() { zip_fclose(f); }
    } closer{file};
    auto read = [file, &name](void* dst, uint64_t n) -> uint64_t {
      uint64_t done = 0;
      while (done < n) {
        const zip_int64_t got = zip_fread(file, static_cast<char*>(dst) + done, n - done);
        STRATA_CHECK(got >= 0, DataCorrupt, name << ": " << zip_file_strerror(file));
        if (got == 0) break;
        done += static_cast<uint64_t>(got);
      }
      return done;
    };
    auto result = use(std::function<uint64_t(void*, uint64_t)>(read), static_cast<uint64_t>(stat.size), name);
    if (whole) {
      char extra = 0;
      STRATA_CHECK(read(&extra, 1) == 0, DataCorrupt, name << ": longer than its size in the archive");
    }
    return result;
  }
};

NpzFile::NpzFile(const std::string& path) : rep_(std::make_unique<Rep>()) {
  rep_->path = path;
  int error = 0;
  rep_->archive = zip_open(path.c_str(), ZIP_RDONLY, &error);
  if (rep_->archive == nullptr) {
    if (error == ZIP_ER_OPEN || error == ZIP_ER_NOENT || error == ZIP_ER_READ) {
      STRATA_THROW(IoError, "cannot open '" << path << "': " << zip_error_text(error));
    }
    STRATA_THROW(DataCorrupt, path << ": not an .npz file (a zip archive): " << zip_error_text(error));
  }
  const zip_int64_t entries = zip_get_num_entries(rep_->archive, 0);
  for (zip_int64_t i = 0; i < entries; ++i) {
    const char* name = zip_get_name(rep_->archive, static_cast<zip_uint64_t>(i), 0);
    STRATA_CHECK(name != nullptr, DataCorrupt, path << ": member " << i << " has no name");
    const std::string member = name;
    if (member.size() <= kSuffixSize || member.compare(member.size() - kSuffixSize, kSuffixSize, kSuffix) != 0) {
      continue;
    }
    rep_->keys.push_back(member.substr(0, member.size() - kSuffixSize));
    rep_->indices.push_back(static_cast<zip_uint64_t>(i));
  }
}

NpzFile::NpzFile(NpzFile&&) noexcept = default;
NpzFile& NpzFile::operator=(NpzFile&&) noexcept = default;
NpzFile::~NpzFile() = default;

const std::string& NpzFile::path() const { return rep_->path; }
const std::vector<std::string>& NpzFile::keys() const { return rep_->keys; }
bool NpzFile::has(const std::string& key) const {
  return std::find(rep_->keys.begin(), rep_->keys.end(), key) != rep_->keys.end();
}

NpyInfo NpzFile::info(const std::string& key) {
  return rep_->with_member(key, false, [](const auto& read, uint64_t size, const std::string& name) {
    return detail::read_npy_info(read, size, name);
  });
}

Tensor NpzFile::read(const std::string& key) {
  return rep_->with_member(key, true, [](const auto& read, uint64_t size, const std::string& name) {
    return detail::read_npy(read, size, name);
  });
}

}  // namespace strata::io
