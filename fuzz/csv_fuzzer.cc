// Fuzzes CsvReader (src/data/csv.cc) on an untrusted file. Input: one mode byte, then the file. Mode bit 0: a header
// line; bit 1: quotes are plain bytes; bit 2: ';' separates fields; bit 3: select columns 0, 2, 3 and 5 (else the first
// four); bit 4: "NA" reads as missing; bit 5: the default 4 MiB read buffer (else 4 KiB, so records cross refills). The
// columns are float32, int32 (default 0), int64 and string (default "n/a").
#include <vector>

#include "fuzz_util.h"
#include "strata/data/csv.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  data::CsvOptions options;
  options.header = (mode & 1) != 0;
  options.use_quote_delim = (mode & 2) == 0;
  if (mode & 4) options.field_delim = ';';
  if (mode & 8) options.select_cols = {0, 2, 3, 5};
  if (mode & 16) options.na_value = "NA";
  if (!(mode & 32)) options.buffer_size = 4096;
  const std::string path = fuzz::write_scratch("input.csv", fuzz::as_view(data + 1, size - 1));
  try {
    data::CsvReader reader(
        path,
        {data::CsvColumn::required(data::CsvType::kFloat32), data::CsvColumn::with_default(0),
         data::CsvColumn::required(data::CsvType::kInt64), data::CsvColumn::with_default(std::string("n/a"))},
        options);
    std::vector<Tensor> row;
    while (reader.next(&row)) {
    }
  } catch (const Error&) {
  }
  return 0;
}
