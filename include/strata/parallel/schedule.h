// Pipeline schedules as data: for each stage (a device, thread group or process), the ordered list of actions it
// performs in one training step of M micro-batches. The same list drives the thread and the process executors, and
// is checked before it runs: `check` proves it complete and deadlock-free, `simulate` gives its bubble and the
// activations each stage keeps alive.
//
// Model and stages. The model is cut into V = stages * chunks consecutive pieces, the virtual stages. Virtual stage
// v lives on stage v % stages, as chunk v / stages (chunks > 1 only for interleaved 1F1B, Narayanan et al. 2021).
// Micro-batch m flows forward through v = 0 .. V-1, and its gradient backward through V-1 .. 0; the last virtual
// stage computes the loss, so its backward needs nothing from another stage.
//
// Communication. Between consecutive virtual stages v and v+1 on different stages, forward activations travel with
// kSendActivation (on v's stage) / kRecvActivation (on v+1's), and gradients with kSendGradient (on v+1's stage) /
// kRecvGradient (on v's). An action names the virtual stage that performs it and the micro-batch. Sends are
// asynchronous (they never block); a receive blocks until its matching send has been issued. Consecutive virtual
// stages on the same stage (only when stages == 1) pass tensors locally: no send or receive.
//
// Backward. kBackward computes both the input and the weight gradient of (v, m). Zero-bubble schedules split it
// into kBackwardInput (the gradient sent to v-1) and kBackwardWeight (the weight gradient, which nothing waits for),
// as in Qi et al. 2024, "Zero Bubble Pipeline Parallelism".
//
// Thread-safety: value types and pure functions.
#pragma once

#include <string>
#include <vector>

namespace strata::parallel {

enum class ActionKind {
  kForward,
  kBackward,        // input and weight gradients together
  kBackwardInput,   // only the input gradient (zero-bubble schedules)
  kBackwardWeight,  // only the weight gradient; after the same (v, m)'s kBackwardInput
  kSendActivation,  // v's output for micro-batch m, to v + 1
  kRecvActivation,  // v's input for micro-batch m, from v - 1
  kSendGradient,    // the gradient of v's input for micro-batch m, to v - 1
  kRecvGradient,    // the gradient of v's output for micro-batch m, from v + 1
};

// "F", "B", "BI", "BW", "SA", "RA", "SG", "RG".
const char* action_kind_name(ActionKind kind);

struct Action {
  ActionKind kind;
  int virtual_stage = 0;  // the virtual stage performing the action (on stage virtual_stage % stages)
  int micro_batch = 0;
  bool operator==(const Action&) const = default;
};

// e.g. "F v1 m3".
std::string to_string(const Action& a);

struct Schedule {
  std::string name;  // "gpipe", "1f1b", "interleaved", "zb-h1", or anything for a hand-made one
  int stages = 1;
  int chunks = 1;  // virtual stages per stage
  int micro_batches = 1;
  std::vector<std::vector<Action>> actions;  // actions[s]: stage s's actions in the order it performs them

  int virtual_stages() const { return stages * chunks; }
  int stage_of(int virtual_stage) const { return virtual_stage % stages; }
};

// The schedules of the issue. InvalidArgument for stages < 1, micro_batches < 1, or what a schedule cannot do
// (interleaved needs chunks >= 2 and micro_batches a multiple of stages, as in Megatron-LM).
// GPipe (Huang et al. 2019): every forward, then every backward.
Schedule gpipe(int stages, int micro_batches);
// 1F1B, PipeDream-Flush (Narayanan et al. 2021): stage s runs min(stages - s - 1, M) warm-up forwards, then
// alternates one forward and one backward, then drains the backwards. At most min(stages - s, M) micro-batches'
// activations alive on stage s.
Schedule one_f_one_b(int stages, int micro_batches);
// Interleaved 1F1B (Megatron-LM): `chunks` model chunks per stage.
Schedule interleaved_1f1b(int stages, int micro_batches, int chunks);
// ZB-H1 (Qi et al. 2024): 1F1B's order with the backward split into input and weight gradients, stage s running its
// weight gradients s micro-batches late to fill the drain's bubble. The peak over stages is 1F1B's, min(stages, M)
// micro-batches, now reached on every stage: stage s keeps up to s of them only for their pending weight gradient
// (the paper's (p - i + 1) M_B + (i - 1) M_W on worker i; a weight gradient needs less memory than a backward).
Schedule zb_h1(int stages, int micro_batches);
// By name: "gpipe", "1f1b", "interleaved" (chunks 2 unless given), "zb-h1"; InvalidArgument listing the names.
Schedule make_schedule(const std::string& name, int stages, int micro_batches, int chunks = 0);

// Throws InvalidArgument unless `s` is a complete, consistent and deadlock-free schedule:
// - shape: stages, chunks, micro_batches >= 1, actions.size() == stages, every action on the stage of its virtual
//   stage, virtual stages and micro-batches in range;
// - completeness: every (v, m) is forwarded once, and backwarded once (kBackward, or kBackwardInput then
//   kBackwardWeight, never both); every needed send and receive exists exactly once, and no other;
// - order on a stage: a receive before the compute that uses it, a compute before the send of its result, a
//   forward before its backward;
// - no deadlock: executing every stage's list in order, with asynchronous sends and blocking receives, finishes.
// The message names the problem; a deadlock names each blocked stage and the receive it waits at, e.g.
// "schedule 'mine' deadlocks: stage 0 waits at action 2 (RG v0 m0), stage 1 at action 0 (RA v1 m0)".
void check(const Schedule& s);

// Durations of the compute actions in arbitrary units (communication is free in the simulation). kBackward takes
// backward_input + backward_weight.
struct ActionCosts {
  double forward = 1.0;
  double backward_input = 1.0;
  double backward_weight = 1.0;
};

struct Simulation {
  double makespan = 0;         // when the last stage finishes
  double bubble_fraction = 0;  // idle share of stages * makespan: 1 - sum(busy) / (stages * makespan)
  // Per stage: the most micro-batches whose activations are alive at once; (v, m)'s activations are alive from its
  // forward until its backward (until kBackwardWeight when split). Counted per virtual stage and summed over the
  // stage's chunks.
  std::vector<int> peak_activations;
  // Per stage, per action: start and end times, in the order of Schedule::actions (sends and receives take no time
  // and start when they can).
  std::vector<std::vector<double>> start, end;
};

// Runs `s` (which must pass `check`) in simulated time: each stage performs its actions in order, each compute
// action as soon as the stage is free and its inputs have arrived.
Simulation simulate(const Schedule& s, const ActionCosts& costs = {});

// The bubble fraction of GPipe and 1F1B with equal-cost stages: (stages - 1) / (micro_batches + stages - 1).
double pipeline_bubble_bound(int stages, int micro_batches);

}  // namespace strata::parallel
