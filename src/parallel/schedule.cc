// Pipeline schedules as data (strata/parallel/schedule.h): the generators, `check` (which executes the stages'
// lists with asynchronous sends and blocking receives) and the event simulation.
// Thread-safety: pure functions over values.
#include "strata/parallel/schedule.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <sstream>
#include <utility>

#include "strata/error.h"

namespace strata::parallel {

namespace {

constexpr int kActionKinds = 8;

bool is_receive(ActionKind kind) { return kind == ActionKind::kRecvActivation || kind == ActionKind::kRecvGradient; }
bool is_send(ActionKind kind) { return kind == ActionKind::kSendActivation || kind == ActionKind::kSendGradient; }

// Whether v's input comes from v - 1 on another stage (so v receives activations and sends gradients).
bool has_remote_previous(const Schedule& s, int v) { return v > 0 && s.stage_of(v - 1) != s.stage_of(v); }
// Whether v's output goes to v + 1 on another stage (so v sends activations and receives gradients).
bool has_remote_next(const Schedule& s, int v) {
  return v < s.virtual_stages() - 1 && s.stage_of(v + 1) != s.stage_of(v);
}

// The send a receive waits for: RA (v, m) <- SA (v - 1, m), RG (v, m) <- SG (v + 1, m).
Action matching_send(const Action& receive) {
  if (receive.kind == ActionKind::kRecvActivation) {
    return {ActionKind::kSendActivation, receive.virtual_stage - 1, receive.micro_batch};
  }
  return {ActionKind::kSendGradient, receive.virtual_stage + 1, receive.micro_batch};
}

// One slot per (kind, virtual stage, micro-batch) of a schedule, for counts, positions and times.
template <typename T>
class ActionTable {
 public:
  ActionTable(const Schedule& s, T initial)
      : virtual_stages_(s.virtual_stages()),
        micro_batches_(s.micro_batches),
        slots_(static_cast<size_t>(kActionKinds * virtual_stages_ * micro_batches_), initial) {}
  T& operator[](const Action& a) {
    return slots_[static_cast<size_t>((static_cast<int>(a.kind) * virtual_stages_ + a.virtual_stage) * micro_batches_ +
                                      a.micro_batch)];
  }

 private:
  int virtual_stages_;
  int micro_batches_;
  std::vector<T> slots_;
};

// Appends the compute `kind` of (v, m) to v's stage, with the receive it needs right before it and the send of its
// result right after it, so that an executor can run the list literally.
void append_compute(Schedule& s, ActionKind kind, int v, int m) {
  auto& list = s.actions[static_cast<size_t>(s.stage_of(v))];
  const auto append = [&](ActionKind k) { list.push_back({k, v, m}); };
  switch (kind) {
    case ActionKind::kForward:
      if (has_remote_previous(s, v)) append(ActionKind::kRecvActivation);
      append(kind);
      if (has_remote_next(s, v)) append(ActionKind::kSendActivation);
      return;
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
      if (has_remote_next(s, v)) append(ActionKind::kRecvGradient);
      append(kind);
      if (has_remote_previous(s, v)) append(ActionKind::kSendGradient);
      return;
    default:
      append(kind);
  }
}

void check_sizes(const char* who, int stages, int micro_batches) {
  STRATA_CHECK(stages >= 1, InvalidArgument, who << ": stages must be at least 1, got " << stages);
  STRATA_CHECK(micro_batches >= 1, InvalidArgument, who << ": micro_batches must be at least 1, got " << micro_batches);
}

Schedule empty_schedule(std::string name, int stages, int chunks, int micro_batches) {
  Schedule s;
  s.name = std::move(name);
  s.stages = stages;
  s.chunks = chunks;
  s.micro_batches = micro_batches;
  s.actions.resize(static_cast<size_t>(stages));
  return s;
}

// 1F1B's order on every stage: min(stages - s - 1, M) warm-up forwards, one forward and one backward at a time, then
// the remaining backwards. With `split_backward` (ZB-H1) each backward is an input-gradient pass, and stage s runs
// its weight-gradient passes s micro-batches late: micro-batch m's after micro-batch m + s's input gradient, and the
// last s at the end, where they fill the gaps that waiting for the next stage's gradients leaves in the drain.
Schedule one_forward_one_backward(const char* name, int stages, int micro_batches, bool split_backward) {
  check_sizes(name, stages, micro_batches);
  Schedule s = empty_schedule(name, stages, 1, micro_batches);
  for (int stage = 0; stage < stages; ++stage) {
    const int warmup = std::min(stages - stage - 1, micro_batches);
    std::deque<int> pending_weights;
    const auto backward = [&](int m, bool draining) {
      if (!split_backward) {
        append_compute(s, ActionKind::kBackward, stage, m);
        return;
      }
      append_compute(s, ActionKind::kBackwardInput, stage, m);
      pending_weights.push_back(m);
      if (draining || static_cast<int>(pending_weights.size()) > stage) {
        append_compute(s, ActionKind::kBackwardWeight, stage, pending_weights.front());
        pending_weights.pop_front();
      }
    };
    for (int m = 0; m < warmup; ++m) append_compute(s, ActionKind::kForward, stage, m);
    for (int m = 0; m < micro_batches - warmup; ++m) {
      append_compute(s, ActionKind::kForward, stage, warmup + m);
      backward(m, false);
    }
    for (int m = micro_batches - warmup; m < micro_batches; ++m) backward(m, true);
    for (int m : pending_weights) append_compute(s, ActionKind::kBackwardWeight, stage, m);
  }
  return s;
}

// "stage 1 action 4 (F v1 m2)"
std::string where(int stage, size_t index, const Action& a) {
  std::ostringstream out;
  out << "stage " << stage << " action " << index << " (" << to_string(a) << ")";
  return out.str();
}

// Shape, ranges, and each action on its virtual stage's stage.
void check_shape(const Schedule& s) {
  const std::string& name = s.name;
  STRATA_CHECK(s.stages >= 1, InvalidArgument,
               "schedule '" << name << "': stages must be at least 1, got " << s.stages);
  STRATA_CHECK(s.chunks >= 1, InvalidArgument,
               "schedule '" << name << "': chunks must be at least 1, got " << s.chunks);
  STRATA_CHECK(s.micro_batches >= 1, InvalidArgument,
               "schedule '" << name << "': micro_batches must be at least 1, got " << s.micro_batches);
  STRATA_CHECK(s.actions.size() == static_cast<size_t>(s.stages), InvalidArgument,
               "schedule '" << name << "': " << s.actions.size() << " action lists for " << s.stages << " stages");
  for (int stage = 0; stage < s.stages; ++stage) {
    const auto& list = s.actions[static_cast<size_t>(stage)];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      const int kind = static_cast<int>(a.kind);
      STRATA_CHECK(kind >= 0 && kind < kActionKinds, InvalidArgument,
                   "schedule '" << name << "': stage " << stage << " action " << i << " has unknown kind " << kind);
      STRATA_CHECK(a.virtual_stage >= 0 && a.virtual_stage < s.virtual_stages(), InvalidArgument,
                   "schedule '" << name << "': " << where(stage, i, a) << " names virtual stage " << a.virtual_stage
                                << ", outside 0.." << s.virtual_stages() - 1);
      STRATA_CHECK(a.micro_batch >= 0 && a.micro_batch < s.micro_batches, InvalidArgument,
                   "schedule '" << name << "': " << where(stage, i, a) << " names micro-batch " << a.micro_batch
                                << ", outside 0.." << s.micro_batches - 1);
      STRATA_CHECK(
          s.stage_of(a.virtual_stage) == stage, InvalidArgument,
          "schedule '" << name << "': " << where(stage, i, a) << " belongs on stage " << s.stage_of(a.virtual_stage));
    }
  }
}

// Every compute once (a backward as B, or as BI and BW), every needed send and receive once, nothing else.
void check_completeness(const Schedule& s) {
  ActionTable<int> count(s, 0);
  for (const auto& list : s.actions) {
    for (const Action& a : list) ++count[a];
  }
  const std::string& name = s.name;
  const auto expect_count = [&](ActionKind kind, int v, int m, int expected) {
    const Action a{kind, v, m};
    const int n = count[a];
    if (n == expected) return;
    STRATA_CHECK(n != 0, InvalidArgument, "schedule '" << name << "': " << to_string(a) << " is missing");
    STRATA_CHECK(expected != 0, InvalidArgument,
                 "schedule '" << name << "': unexpected " << to_string(a) << " (v" << v << " has no neighbour on "
                              << "another stage to " << (is_send(kind) ? "send to" : "receive from") << ")");
    STRATA_THROW(InvalidArgument, "schedule '" << name << "': " << to_string(a) << " appears " << n << " times");
  };
  for (int v = 0; v < s.virtual_stages(); ++v) {
    for (int m = 0; m < s.micro_batches; ++m) {
      expect_count(ActionKind::kForward, v, m, 1);
      const int whole = count[{ActionKind::kBackward, v, m}];
      const int input = count[{ActionKind::kBackwardInput, v, m}];
      const int weight = count[{ActionKind::kBackwardWeight, v, m}];
      STRATA_CHECK(whole + input + weight > 0, InvalidArgument,
                   "schedule '" << name << "': v" << v << " m" << m << " has no backward (B, or BI and BW)");
      STRATA_CHECK(whole == 0 || input + weight == 0, InvalidArgument,
                   "schedule '" << name << "': v" << v << " m" << m << " has both B and BI/BW");
      if (whole > 0) {
        expect_count(ActionKind::kBackward, v, m, 1);
      } else {
        expect_count(ActionKind::kBackwardInput, v, m, 1);
        expect_count(ActionKind::kBackwardWeight, v, m, 1);
      }
      const int previous_remote = has_remote_previous(s, v) ? 1 : 0;
      const int next_remote = has_remote_next(s, v) ? 1 : 0;
      expect_count(ActionKind::kRecvActivation, v, m, previous_remote);
      expect_count(ActionKind::kSendGradient, v, m, previous_remote);
      expect_count(ActionKind::kSendActivation, v, m, next_remote);
      expect_count(ActionKind::kRecvGradient, v, m, next_remote);
    }
  }
}

// The actions on a's own stage that must come before it: the receive or local compute that produces its input, the
// compute whose result it sends, the forward of a backward, the input gradient of a weight gradient.
std::vector<Action> local_prerequisites(const Schedule& s, const Action& a, ActionTable<int>& position) {
  const int v = a.virtual_stage;
  const int m = a.micro_batch;
  // B or BI, whichever the schedule has (check_completeness made sure there is exactly one).
  const auto input_backward = [&](int of) {
    const Action whole{ActionKind::kBackward, of, m};
    return position[whole] >= 0 ? whole : Action{ActionKind::kBackwardInput, of, m};
  };
  switch (a.kind) {
    case ActionKind::kForward:
      if (has_remote_previous(s, v)) return {{ActionKind::kRecvActivation, v, m}};
      if (v > 0) return {{ActionKind::kForward, v - 1, m}};
      return {};
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput: {
      std::vector<Action> needs{{ActionKind::kForward, v, m}};
      if (has_remote_next(s, v)) {
        needs.push_back({ActionKind::kRecvGradient, v, m});
      } else if (v < s.virtual_stages() - 1) {
        needs.push_back(input_backward(v + 1));
      }
      return needs;
    }
    case ActionKind::kBackwardWeight:
      return {{ActionKind::kBackwardInput, v, m}};
    case ActionKind::kSendActivation:
      return {{ActionKind::kForward, v, m}};
    case ActionKind::kSendGradient:
      return {input_backward(v)};
    default:  // receives wait on another stage
      return {};
  }
}

void check_order(const Schedule& s) {
  ActionTable<int> position(s, -1);
  for (const auto& list : s.actions) {
    for (size_t i = 0; i < list.size(); ++i) position[list[i]] = static_cast<int>(i);
  }
  for (int stage = 0; stage < s.stages; ++stage) {
    const auto& list = s.actions[static_cast<size_t>(stage)];
    for (size_t i = 0; i < list.size(); ++i) {
      for (const Action& needed : local_prerequisites(s, list[i], position)) {
        const int at = position[needed];
        STRATA_CHECK(at < static_cast<int>(i), InvalidArgument,
                     "schedule '" << s.name << "': " << where(stage, i, list[i]) << " comes before "
                                  << to_string(needed) << " (action " << at << "), which it needs");
      }
    }
  }
}

// Performs every stage's list in order, a receive only once its matching send has been performed, calling
// perform(stage, index) for each action as it is performed. Returns how far each stage got: the list's size, or the
// index of the receive it is blocked at.
template <typename Perform>
std::vector<size_t> execute(const Schedule& s, Perform&& perform) {
  ActionTable<char> sent(s, 0);
  std::vector<size_t> next(static_cast<size_t>(s.stages), 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int stage = 0; stage < s.stages; ++stage) {
      const auto& list = s.actions[static_cast<size_t>(stage)];
      size_t& i = next[static_cast<size_t>(stage)];
      for (; i < list.size(); ++i) {
        const Action& a = list[i];
        if (is_receive(a.kind) && !sent[matching_send(a)]) break;
        if (is_send(a.kind)) sent[a] = 1;
        perform(stage, i);
        progressed = true;
      }
    }
  }
  return next;
}

void check_deadlock_free(const Schedule& s) {
  const std::vector<size_t> reached = execute(s, [](int, size_t) {});
  std::ostringstream blocked;  // "stage 0 waits at action 2 (RG v0 m0), stage 1 at action 0 (RA v1 m0)"
  bool deadlocked = false;
  for (int stage = 0; stage < s.stages; ++stage) {
    const auto& list = s.actions[static_cast<size_t>(stage)];
    const size_t at = reached[static_cast<size_t>(stage)];
    if (at == list.size()) continue;
    blocked << (deadlocked ? ", stage " : "stage ") << stage << (deadlocked ? " at" : " waits at") << " action " << at
            << " (" << to_string(list[at]) << ")";
    deadlocked = true;
  }
  STRATA_CHECK(!deadlocked, InvalidArgument, "schedule '" << s.name << "' deadlocks: " << blocked.str());
}

}  // namespace

const char* action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "F";
    case ActionKind::kBackward:
      return "B";
    case ActionKind::kBackwardInput:
      return "BI";
    case ActionKind::kBackwardWeight:
      return "BW";
    case ActionKind::kSendActivation:
      return "SA";
    case ActionKind::kRecvActivation:
      return "RA";
    case ActionKind::kSendGradient:
      return "SG";
    case ActionKind::kRecvGradient:
      return "RG";
  }
  return "?";  // a value cast from outside the enum
}

std::string to_string(const Action& a) {
  std::ostringstream out;
  out << action_kind_name(a.kind) << " v" << a.virtual_stage << " m" << a.micro_batch;
  return out.str();
}

Schedule gpipe(int stages, int micro_batches) {
  check_sizes("gpipe", stages, micro_batches);
  Schedule s = empty_schedule("gpipe", stages, 1, micro_batches);
  for (int stage = 0; stage < stages; ++stage) {
    for (int m = 0; m < micro_batches; ++m) append_compute(s, ActionKind::kForward, stage, m);
    for (int m = 0; m < micro_batches; ++m) append_compute(s, ActionKind::kBackward, stage, m);
  }
  return s;
}

Schedule one_f_one_b(int stages, int micro_batches) {
  return one_forward_one_backward("1f1b", stages, micro_batches, /*split_backward=*/false);
}

Schedule zb_h1(int stages, int micro_batches) {
  return one_forward_one_backward("zb-h1", stages, micro_batches, /*split_backward=*/true);
}

// Megatron-LM's order. Each stage runs M * chunks forwards and as many backwards. Forwards go through micro-batches
// in groups of `stages`: group g's micro-batches on chunk 0, then on chunk 1, ..., then the next group; backwards
// likewise from the last chunk down. Stage s warms up with 2 (stages - s - 1) + (chunks - 1) * stages forwards (at
// most M * chunks), then alternates one forward and one backward, then drains the backwards.
Schedule interleaved_1f1b(int stages, int micro_batches, int chunks) {
  check_sizes("interleaved_1f1b", stages, micro_batches);
  STRATA_CHECK(chunks >= 2, InvalidArgument, "interleaved_1f1b: chunks must be at least 2, got " << chunks);
  STRATA_CHECK(
      micro_batches % stages == 0, InvalidArgument,
      "interleaved_1f1b: micro_batches (" << micro_batches << ") must be a multiple of stages (" << stages << ")");
  Schedule s = empty_schedule("interleaved", stages, chunks, micro_batches);
  const int per_stage = micro_batches * chunks;
  // The k-th forward or backward of a stage: its chunk (counted from the first for forwards) and its micro-batch.
  const auto chunk_of = [&](int k) { return k / stages % chunks; };
  const auto micro_batch_of = [&](int k) { return k / (stages * chunks) * stages + k % stages; };
  for (int stage = 0; stage < stages; ++stage) {
    const auto forward = [&](int k) {
      append_compute(s, ActionKind::kForward, chunk_of(k) * stages + stage, micro_batch_of(k));
    };
    const auto backward = [&](int k) {
      append_compute(s, ActionKind::kBackward, (chunks - 1 - chunk_of(k)) * stages + stage, micro_batch_of(k));
    };
    const int warmup = std::min(2 * (stages - stage - 1) + (chunks - 1) * stages, per_stage);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < per_stage - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = per_stage - warmup; k < per_stage; ++k) backward(k);
  }
  return s;
}

Schedule make_schedule(const std::string& name, int stages, int micro_batches, int chunks) {
  if (name == "interleaved") return interleaved_1f1b(stages, micro_batches, chunks == 0 ? 2 : chunks);
  const bool known = name == "gpipe" || name == "1f1b" || name == "zb-h1";
  STRATA_CHECK(known, InvalidArgument,
               "make_schedule: unknown schedule '" << name << "' (known: gpipe, 1f1b, interleaved, zb-h1)");
  STRATA_CHECK(chunks == 0 || chunks == 1, InvalidArgument,
               "make_schedule: '" << name << "' has one chunk per stage, got chunks " << chunks);
  if (name == "gpipe") return gpipe(stages, micro_batches);
  if (name == "1f1b") return one_f_one_b(stages, micro_batches);
  return zb_h1(stages, micro_batches);
}

void check(const Schedule& s) {
  check_shape(s);
  check_completeness(s);
  check_order(s);
  check_deadlock_free(s);
}

Simulation simulate(const Schedule& s, const ActionCosts& costs) {
  STRATA_CHECK(std::isfinite(costs.forward) && costs.forward > 0, InvalidArgument,
               "simulate: the forward cost must be positive, got " << costs.forward);
  STRATA_CHECK(std::isfinite(costs.backward_input) && std::isfinite(costs.backward_weight) &&
                   costs.backward_input >= 0 && costs.backward_weight >= 0,
               InvalidArgument,
               "simulate: backward costs must not be negative, got " << costs.backward_input << " and "
                                                                     << costs.backward_weight);
  check(s);
  Simulation sim;
  const auto stages = static_cast<size_t>(s.stages);
  sim.peak_activations.assign(stages, 0);
  sim.start.resize(stages);
  sim.end.resize(stages);
  for (size_t stage = 0; stage < stages; ++stage) {
    sim.start[stage].resize(s.actions[stage].size());
    sim.end[stage].resize(s.actions[stage].size());
  }
  std::vector<double> clock(stages, 0.0);
  std::vector<int> alive(stages, 0);
  double busy = 0;
  ActionTable<double> sent_at(s, 0.0);
  execute(s, [&](int stage_index, size_t i) {
    const auto stage = static_cast<size_t>(stage_index);
    const Action& a = s.actions[stage][i];
    double& now = clock[stage];
    double duration = 0;
    switch (a.kind) {
      case ActionKind::kRecvActivation:
      case ActionKind::kRecvGradient:
        now = std::max(now, sent_at[matching_send(a)]);
        break;
      case ActionKind::kSendActivation:
      case ActionKind::kSendGradient:
        sent_at[a] = now;
        break;
      case ActionKind::kForward:
        duration = costs.forward;
        sim.peak_activations[stage] = std::max(sim.peak_activations[stage], ++alive[stage]);
        break;
      case ActionKind::kBackward:
        duration = costs.backward_input + costs.backward_weight;
        --alive[stage];
        break;
      case ActionKind::kBackwardInput:
        duration = costs.backward_input;
        break;
      case ActionKind::kBackwardWeight:
        duration = costs.backward_weight;
        --alive[stage];
        break;
    }
    sim.start[stage][i] = now;
    now += duration;
    sim.end[stage][i] = now;
    busy += duration;
  });
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  sim.bubble_fraction = 1.0 - busy / (static_cast<double>(s.stages) * sim.makespan);
  return sim;
}

double pipeline_bubble_bound(int stages, int micro_batches) {
  check_sizes("pipeline_bubble_bound", stages, micro_batches);
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace strata::parallel
