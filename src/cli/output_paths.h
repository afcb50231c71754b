// The CLI's checks of the paths a command will write (before it starts its work): io's, shared with fit's
// callbacks (see io/output_paths.h).
// Thread-safety: plain functions; each touches only the path it is given.
#pragma once

#include "io/output_paths.h"

namespace strata::cli {

using io::check_output_directory;
using io::check_output_file;

}  // namespace strata::cli
