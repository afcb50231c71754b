// Tagging a task's output when several tasks share one terminal or log untagged: under mpirun and srun
// every rank writes to the same place, so each line of this process's stdout and stderr is prefixed with
// its task as `strata launch` prefixes its tasks' lines ("[worker:1] ..."). A forked helper process reads
// both streams through pipes and writes whole, prefixed lines to the original ones, so that lines of two
// ranks never interleave mid-line, the progress bar (which sees a pipe, not mpirun's pseudo-terminal) prints
// a line per epoch instead of carriage returns, and whatever the process wrote before a crash still
// arrives (the helper drains the pipes until they close).
// Thread-safety: start before any other thread exists (the helper is forked); finish on the main thread.
#pragma once

#include <string>

namespace strata::cli {

// The task's tag under mpirun (OMPI_COMM_WORLD_SIZE > 1) or an srun step of more than one task:
// "worker:1"; "" when the output is not shared (a single process, or `strata launch`, which tags itself).
std::string shared_output_tag();

// Starts tagging this process's stdout and stderr with "[TAG] " when shared_output_tag() is not empty.
// Returns whether it did. Failing to start (no pipe or fork) leaves the output as it was.
bool start_tagged_output();
// Flushes, closes the tagged streams and waits for the helper to write the last lines. Idempotent.
void finish_tagged_output();

}  // namespace strata::cli
