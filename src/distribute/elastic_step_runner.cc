// ElasticStepRunner (elastic_step_runner.h): steps that commit everywhere or nowhere, regroups and joins.
// Thread-safety: fit's driving thread.
#include "distribute/elastic_step_runner.h"

#include <chrono>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "strata/distribute/input.h"
#include "strata/error.h"
#include "strata/trace.h"

namespace strata::distribute {

namespace {

// Whether `error`, thrown by a training step, may come from a worker lost during it: a collective that failed or
// timed out, a peer unavailable, or a step the group discarded. Anything else (a bad shape, a NaN check) fails
// the same way on every attempt and ends fit.
bool from_the_group(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Timeout&) {
    return true;
  } catch (const Unavailable&) {
    return true;
  } catch (const InvalidArgument&) {
    return false;
  } catch (const Error& e) {  // a Gloo failure other than a timeout (e.g. a peer that closed its connections)
    return std::string(e.what()).find("gloo") != std::string::npos;
  } catch (...) {
    return false;
  }
}

// fit's position at a step boundary as the chief sends it to a joiner: "epochs_done step_in_epoch finished\n"
// then the input iterator's state.
std::string encode_position(int64_t epochs_done, int64_t step_in_epoch, bool finished, const std::string& input) {
  return std::to_string(epochs_done) + " " + std::to_string(step_in_epoch) + " " + (finished ? "1" : "0") + "\n" +
         input;
}

FitPosition decode_position(const std::string& bytes) {
  const size_t newline = bytes.find('\n');
  STRATA_CHECK(newline != std::string::npos, DataCorrupt, "elastic join: the chief's fit position is malformed");
  std::istringstream head(bytes.substr(0, newline));
  FitPosition p;
  int finished = 0;
  head >> p.epochs_done >> p.step_in_epoch >> finished;
  STRATA_CHECK(!head.fail(), DataCorrupt, "elastic join: the chief's fit position is malformed");
  p.input_finished = finished != 0;
  p.input_state = bytes.substr(newline + 1);
  return p;
}

}  // namespace

void ElasticStepRunner::begin_fit(FitPosition& resume, bool /*requested*/) {
  if (!strategy_.joining()) return;  // a worker that started with the job
  STRATA_CHECK(program_.program_built(), InvalidArgument,
               "elastic training: model '" << program_.program_name()
                                           << "' must be built (build_for) before a restarted worker joins");
  trace::Span span("membership", "join");  // the new group, then the chief's state received
  strategy_.join();
  const auto start = std::chrono::steady_clock::now();
  const int64_t sent = program_.broadcast_state_from_chief();  // the weights and optimizer state, the members'
  const std::string bytes = strategy_.all_gather_across_workers("")[0];
  resume = decode_position(bytes);
  resume.metric_states = program_.tracker_states();  // this worker's share so far: nothing
  strategy_.joined(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                   sent + static_cast<int64_t>(bytes.size()));
}

void ElasticStepRunner::begin_epoch(int64_t, int64_t) { committed_job_states_.clear(); }

void ElasticStepRunner::end_group() {
  if (!strategy_.join_pending()) return;
  trace::Span span("membership", "admit joiners");  // the new group, then the state sent to the joiners
  strategy_.admit_joiners();
  const auto start = std::chrono::steady_clock::now();
  const int64_t sent = program_.broadcast_state_from_chief();
  std::string position;
  if (strategy_.is_chief()) {
    const FitPosition p = program_.fit_position();
    position = encode_position(p.epochs_done, p.step_in_epoch, p.input_finished, p.input_state);
  }
  const std::string chiefs = strategy_.all_gather_across_workers(position)[0];
  strategy_.joined(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                   sent + static_cast<int64_t>(chiefs.size()));
}

void ElasticStepRunner::run_steps(const StepGroup& steps) {
  MultiWorkerMirroredStrategy& strategy = strategy_;
  STRATA_CHECK(steps.global.size() == steps.size(), InvalidArgument,
               "elastic training: every worker must read the same global batches (auto-shard policy DATA), so that "
               "the survivors of a lost worker can split its share among them; this dataset's workers read their "
               "own files");
  for (size_t k = 0; k < steps.size(); ++k) {
    const std::vector<std::vector<double>> before = program_.tracker_states();
    data::Element batch = steps.batches[k][0];
    int fruitless = 0;  // regroups of this step that lost no member: a failure that is not a lost worker recurs
    for (;;) {
      strategy.begin_step();
      std::exception_ptr failure;
      try {
        strategy.run_replicas([&](int) {  // one replica per worker: on this thread, in its replica context
          ScopedStepRows rows(steps.global_rows[k]);
          program_.train_step(batch);
        });
      } catch (...) {
        failure = std::current_exception();
      }
      if (!failure) {
        if (!program_.job_tracker_states().empty()) committed_job_states_ = program_.job_tracker_states();
        break;
      }
      if (!from_the_group(failure)) std::rethrow_exception(failure);
      if (strategy.num_replicas_in_sync() > 1) strategy.commit_step(false);  // nothing if the aggregator voted
      // Unavailable below min_workers: fit ends, a relaunch resumes from the last backup.
      if (strategy.regroup().left.empty() && ++fruitless >= 2) std::rethrow_exception(failure);
      // The metrics as the job's stood after the last committed step: the chief holds them, the others count anew
      // (the lost worker's share of them lives on in the job's sums every survivor kept).
      if (!committed_job_states_.empty()) {
        std::vector<std::vector<double>> job = before;
        size_t at = 0;
        for (auto& state : job) {
          for (double& v : state) v = strategy.is_chief() ? committed_job_states_[at++] : (at++, 0.0);
        }
        program_.set_tracker_states(job);
      } else {
        program_.set_tracker_states(before);
      }
      program_.set_job_tracker_states(committed_job_states_);
      batch = split_batch_share(steps.global[k], strategy.num_replicas_in_sync(), strategy.worker_index(), 1)[0];
    }
  }
}

}  // namespace strata::distribute
