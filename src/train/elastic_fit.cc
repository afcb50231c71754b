// Model's training steps under an elastic MultiWorkerMirroredStrategy (strata/distribute/multi_worker.h): every
// step commits on every worker or on none; a step that did not commit leaves the model and the metrics as they
// were, the survivors regroup (a new membership epoch and communicator), and the step runs again on the same
// global batch split over them, so every example of the epoch is trained on once and the mathematics do not change.
// A restarted worker joins at a step boundary: the members admit it and the chief sends it the weights, the
// optimizer state and the input position, from which its fit goes on as from a checkpoint.
// Thread-safety: fit's driving thread (one local replica per worker, run on it).
#include <chrono>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "strata/distribute/input.h"
#include "strata/distribute/multi_worker.h"
#include "strata/error.h"
#include "strata/trace.h"
#include "strata/train/model.h"
#include "train/step_rows.h"
#include "train/worker_state.h"

namespace strata {

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

void Model::join_elastic_group(distribute::MultiWorkerMirroredStrategy& strategy) {
  STRATA_CHECK(built(), InvalidArgument,
               "elastic training: model '" << name() << "' must be built (build_for) before a restarted worker joins");
  trace::Span span("membership", "join");  // the new group, then the chief's state received
  strategy.join();
  const auto start = std::chrono::steady_clock::now();
  const int64_t sent = detail::broadcast_state_from_chief(*this);  // the weights and optimizer state, the members'
  const std::string bytes = strategy.all_gather_across_workers("")[0];
  FitPosition p = decode_position(bytes);
  p.metric_states = tracker_states();  // this worker's share so far: nothing
  set_resume_position(p);
  strategy.joined(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                  sent + static_cast<int64_t>(bytes.size()));
}

void Model::admit_elastic_joiners(distribute::MultiWorkerMirroredStrategy& strategy) {
  trace::Span span("membership", "admit joiners");  // the new group, then the state sent to the joiners
  strategy.admit_joiners();
  const auto start = std::chrono::steady_clock::now();
  const int64_t sent = detail::broadcast_state_from_chief(*this);
  std::string position;
  if (strategy.is_chief()) {
    position = encode_position(fit_state_.epochs_done, fit_state_.step_in_epoch, fit_state_.iterator_finished,
                               fit_state_.iterator != nullptr ? fit_state_.iterator->save_state() : "");
  }
  const std::string chiefs = strategy.all_gather_across_workers(position)[0];
  strategy.joined(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                  sent + static_cast<int64_t>(chiefs.size()));
}

void Model::elastic_train_steps(distribute::MultiWorkerMirroredStrategy& strategy, const distribute::StepGroup& steps) {
  STRATA_CHECK(steps.global.size() == steps.size(), InvalidArgument,
               "elastic training: every worker must read the same global batches (auto-shard policy DATA), so that "
               "the survivors of a lost worker can split its share among them; this dataset's workers read their "
               "own files");
  for (size_t k = 0; k < steps.size(); ++k) {
    const std::vector<std::vector<double>> before = tracker_states();
    data::Element batch = steps.batches[k][0];
    int fruitless = 0;  // regroups of this step that lost no member: a failure that is not a lost worker recurs
    for (;;) {
      strategy.begin_step();
      std::exception_ptr failure;
      try {
        strategy.run_replicas([&](int) {  // one replica per worker: on this thread, in its replica context
          detail::ScopedStepRows rows(steps.global_rows[k]);
          train_step(batch);
        });
      } catch (...) {
        failure = std::current_exception();
      }
      if (!failure) {
        if (!job_states_.empty()) committed_job_states_ = job_states_;
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
        set_tracker_states(job);
      } else {
        set_tracker_states(before);
      }
      job_states_ = committed_job_states_;
      batch = distribute::split_batch_share(steps.global[k], strategy.num_replicas_in_sync(), strategy.worker_index(),
                                            1)[0];
    }
  }
}

}  // namespace strata
