// Pipeline schedules as data: every generator passes `check` and puts each receive right before its compute and each
// send right after it; `simulate` gives the bubbles and activation peaks of the papers (GPipe and 1F1B at the bound,
// Megatron's interleaving dividing the bubble by the chunks, ZB-H1 a third of 1F1B's); `check` rejects broken
// schedules with messages that name the problem.
#include "strata/parallel/schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "strata/error.h"
#include "test_util.h"

namespace strata::parallel {
namespace {

using ::testing::HasSubstr;

constexpr ActionKind kAllKinds[] = {
    ActionKind::kForward,        ActionKind::kBackward,       ActionKind::kBackwardInput, ActionKind::kBackwardWeight,
    ActionKind::kSendActivation, ActionKind::kRecvActivation, ActionKind::kSendGradient,  ActionKind::kRecvGradient,
};

// "RA v1 m0, F v1 m0" -> the actions, the inverse of `listing`.
std::vector<Action> parse_actions(const std::string& text) {
  std::vector<Action> actions;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::istringstream fields(item);
    std::string kind, v, m;
    fields >> kind >> v >> m;
    const auto* found = std::find_if(std::begin(kAllKinds), std::end(kAllKinds),
                                     [&](ActionKind k) { return kind == action_kind_name(k); });
    EXPECT_NE(found, std::end(kAllKinds)) << "unknown kind " << kind;
    actions.push_back({*found, std::stoi(v.substr(1)), std::stoi(m.substr(1))});
  }
  return actions;
}

std::string listing(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) out += (out.empty() ? "" : ", ") + to_string(a);
  return out;
}

std::string check_error(const Schedule& s) {
  return test::message_of<InvalidArgument>([&] { check(s); });
}

// Every schedule the generators make for stages 1..5 and micro-batches 1..9 (interleaved with chunks 2 and 3 where
// micro-batches is a multiple of stages).
std::vector<Schedule> generated_schedules() {
  std::vector<Schedule> all;
  for (int stages = 1; stages <= 5; ++stages) {
    for (int micro_batches = 1; micro_batches <= 9; ++micro_batches) {
      all.push_back(gpipe(stages, micro_batches));
      all.push_back(one_f_one_b(stages, micro_batches));
      all.push_back(zb_h1(stages, micro_batches));
      if (micro_batches % stages != 0) continue;
      for (int chunks : {2, 3}) all.push_back(interleaved_1f1b(stages, micro_batches, chunks));
    }
  }
  return all;
}

std::string describe(const Schedule& s) {
  std::ostringstream out;
  out << s.name << " stages " << s.stages << " micro_batches " << s.micro_batches << " chunks " << s.chunks;
  return out.str();
}

TEST(ScheduleTest, EveryGeneratedSchedulePassesCheck) {
  for (const Schedule& s : generated_schedules()) {
    SCOPED_TRACE(describe(s));
    EXPECT_NO_THROW(check(s));
  }
}

TEST(ScheduleTest, ReceivesComeRightBeforeTheirComputeAndSendsRightAfter) {
  const auto is_input_backward = [](ActionKind k) {
    return k == ActionKind::kBackward || k == ActionKind::kBackwardInput;
  };
  for (const Schedule& s : generated_schedules()) {
    SCOPED_TRACE(describe(s));
    int transfers = 0;
    for (const auto& list : s.actions) {
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        const auto same_pair = [&](const Action& b) {
          return b.virtual_stage == a.virtual_stage && b.micro_batch == a.micro_batch;
        };
        switch (a.kind) {
          case ActionKind::kRecvActivation:
            ASSERT_LT(i + 1, list.size());
            EXPECT_EQ(list[i + 1], (Action{ActionKind::kForward, a.virtual_stage, a.micro_batch}));
            break;
          case ActionKind::kRecvGradient:
            ASSERT_LT(i + 1, list.size());
            EXPECT_TRUE(is_input_backward(list[i + 1].kind) && same_pair(list[i + 1])) << to_string(list[i + 1]);
            break;
          case ActionKind::kSendActivation:
            ASSERT_GT(i, 0u);
            EXPECT_EQ(list[i - 1], (Action{ActionKind::kForward, a.virtual_stage, a.micro_batch}));
            break;
          case ActionKind::kSendGradient:
            ASSERT_GT(i, 0u);
            EXPECT_TRUE(is_input_backward(list[i - 1].kind) && same_pair(list[i - 1])) << to_string(list[i - 1]);
            break;
          default:
            continue;
        }
        ++transfers;
      }
    }
    // Per micro-batch, each boundary between consecutive virtual stages carries SA, RA, SG and RG; with one stage,
    // tensors stay local.
    const int boundaries = s.stages == 1 ? 0 : s.virtual_stages() - 1;
    EXPECT_EQ(transfers, 4 * boundaries * s.micro_batches);
  }
}

TEST(ScheduleTest, OrdersOnTwoStages) {
  const Schedule g = gpipe(2, 2);
  EXPECT_EQ(listing(g.actions[0]), "F v0 m0, SA v0 m0, F v0 m1, SA v0 m1, RG v0 m0, B v0 m0, RG v0 m1, B v0 m1");
  EXPECT_EQ(listing(g.actions[1]), "RA v1 m0, F v1 m0, RA v1 m1, F v1 m1, B v1 m0, SG v1 m0, B v1 m1, SG v1 m1");

  // Stage 0 warms up with one forward; the last stage runs each backward right after its forward.
  const Schedule o = one_f_one_b(2, 3);
  EXPECT_EQ(listing(o.actions[0]),
            "F v0 m0, SA v0 m0, F v0 m1, SA v0 m1, RG v0 m0, B v0 m0, F v0 m2, SA v0 m2, RG v0 m1, B v0 m1, "
            "RG v0 m2, B v0 m2");
  EXPECT_EQ(listing(o.actions[1]),
            "RA v1 m0, F v1 m0, B v1 m0, SG v1 m0, RA v1 m1, F v1 m1, B v1 m1, SG v1 m1, RA v1 m2, F v1 m2, "
            "B v1 m2, SG v1 m2");

  // ZB-H1: 1F1B's order; stage 1 runs each weight gradient one micro-batch late, the last one at the end.
  const Schedule z = zb_h1(2, 3);
  EXPECT_EQ(listing(z.actions[0]),
            "F v0 m0, SA v0 m0, F v0 m1, SA v0 m1, RG v0 m0, BI v0 m0, BW v0 m0, F v0 m2, SA v0 m2, RG v0 m1, "
            "BI v0 m1, BW v0 m1, RG v0 m2, BI v0 m2, BW v0 m2");
  EXPECT_EQ(listing(z.actions[1]),
            "RA v1 m0, F v1 m0, BI v1 m0, SG v1 m0, RA v1 m1, F v1 m1, BI v1 m1, SG v1 m1, BW v1 m0, RA v1 m2, "
            "F v1 m2, BI v1 m2, SG v1 m2, BW v1 m1, BW v1 m2");

  // Interleaved, 2 chunks: virtual stages 0 and 2 on stage 0, 1 and 3 on stage 1; stage 0 warms up with all four
  // forwards (2 (stages - 1) + (chunks - 1) stages), stage 1 with its first chunk's two.
  const Schedule i = interleaved_1f1b(2, 2, 2);
  EXPECT_EQ(listing(i.actions[0]),
            "F v0 m0, SA v0 m0, F v0 m1, SA v0 m1, RA v2 m0, F v2 m0, SA v2 m0, RA v2 m1, F v2 m1, SA v2 m1, "
            "RG v2 m0, B v2 m0, SG v2 m0, RG v2 m1, B v2 m1, SG v2 m1, RG v0 m0, B v0 m0, RG v0 m1, B v0 m1");
  EXPECT_EQ(listing(i.actions[1]),
            "RA v1 m0, F v1 m0, SA v1 m0, RA v1 m1, F v1 m1, SA v1 m1, RA v3 m0, F v3 m0, B v3 m0, SG v3 m0, "
            "RA v3 m1, F v3 m1, B v3 m1, SG v3 m1, RG v1 m0, B v1 m0, SG v1 m0, RG v1 m1, B v1 m1, SG v1 m1");
}

TEST(ScheduleTest, OneStageRunsItsChunksLocally) {
  EXPECT_EQ(listing(one_f_one_b(1, 2).actions[0]), "F v0 m0, B v0 m0, F v0 m1, B v0 m1");
  EXPECT_EQ(listing(zb_h1(1, 2).actions[0]), "F v0 m0, BI v0 m0, BW v0 m0, F v0 m1, BI v0 m1, BW v0 m1");
  EXPECT_EQ(listing(interleaved_1f1b(1, 2, 2).actions[0]),
            "F v0 m0, F v1 m0, B v1 m0, F v0 m1, B v0 m0, F v1 m1, B v1 m1, B v0 m1");
}

TEST(ScheduleTest, SimulatedTimesOfOneMicroBatchOnTwoStages) {
  const Simulation sim = simulate(one_f_one_b(2, 1));
  // Stage 0: F v0 m0, SA v0 m0, RG v0 m0, B v0 m0; stage 1: RA v1 m0, F v1 m0, B v1 m0, SG v1 m0.
  EXPECT_EQ(sim.start[0], (std::vector<double>{0, 1, 4, 4}));
  EXPECT_EQ(sim.end[0], (std::vector<double>{1, 1, 4, 6}));
  EXPECT_EQ(sim.start[1], (std::vector<double>{1, 1, 2, 4}));
  EXPECT_EQ(sim.end[1], (std::vector<double>{1, 2, 4, 4}));
  EXPECT_EQ(sim.makespan, 6);
  EXPECT_DOUBLE_EQ(sim.bubble_fraction, 0.5);
  EXPECT_EQ(sim.peak_activations, (std::vector<int>{1, 1}));
}

TEST(ScheduleTest, GPipeAndOneFOneBBubblesAreTheBound) {
  // (stages - 1) / (M + stages - 1) whatever the costs: the makespan is (M + stages - 1) (F + B) (micro-batch 0's
  // forward and backward through every stage, plus M - 1 more of one stage's work), of which a stage is busy M (F + B).
  const ActionCosts costs[] = {{},
                               {.forward = 2.0},
                               {.forward = 1.0, .backward_input = 0.5, .backward_weight = 0.5},
                               {.forward = 1.0, .backward_input = 3.0, .backward_weight = 0.0}};
  for (int stages = 1; stages <= 5; ++stages) {
    for (int micro_batches = 1; micro_batches <= 9; ++micro_batches) {
      for (const ActionCosts& c : costs) {
        SCOPED_TRACE(testing::Message() << "stages " << stages << " micro_batches " << micro_batches << " forward "
                                        << c.forward << " backward " << c.backward_input << "+" << c.backward_weight);
        const double bound = pipeline_bubble_bound(stages, micro_batches);
        EXPECT_NEAR(simulate(gpipe(stages, micro_batches), c).bubble_fraction, bound, 1e-9);
        EXPECT_NEAR(simulate(one_f_one_b(stages, micro_batches), c).bubble_fraction, bound, 1e-9);
      }
    }
  }
  EXPECT_DOUBLE_EQ(pipeline_bubble_bound(4, 8), 3.0 / 11.0);
  EXPECT_EQ(pipeline_bubble_bound(1, 5), 0.0);
}

TEST(ScheduleTest, InterleavingDividesTheBubbleByTheChunks) {
  // Megatron-LM's figure: the idle time per stage shrinks from (stages - 1) (F + B) to (stages - 1) (F + B) / chunks,
  // where F + B is a whole stage's work per micro-batch, so the fraction is ((S - 1) / C) / (M + (S - 1) / C).
  for (int stages = 2; stages <= 5; ++stages) {
    for (int micro_batches = stages; micro_batches <= 10; micro_batches += stages) {
      for (int chunks : {2, 3}) {
        SCOPED_TRACE(testing::Message() << "stages " << stages << " micro_batches " << micro_batches << " chunks "
                                        << chunks);
        const double interleaved = simulate(interleaved_1f1b(stages, micro_batches, chunks)).bubble_fraction;
        const double idle_per_micro_batch = static_cast<double>(stages - 1) / chunks;
        EXPECT_NEAR(interleaved, idle_per_micro_batch / (micro_batches + idle_per_micro_batch), 1e-9);
        EXPECT_LT(interleaved, simulate(one_f_one_b(stages, micro_batches)).bubble_fraction);
      }
    }
  }
}

TEST(ScheduleTest, ZbH1LeavesAThirdOfOneFOneBsBubble) {
  // Qi et al. 2024, section 2.1: with the input-gradient chain (F + BI per stage) on the critical path and the
  // deferred weight gradients filling the drain, each stage idles (stages - 1) (F + BI - BW), against 1F1B's
  // (stages - 1) (F + BI + BW): a third of it when F = BI = BW. The makespan is M (F + BI + BW) plus that idle time,
  // for M >= stages and BW <= min(F, BI) (beyond that the weight gradients no longer fit the drain's gaps).
  const ActionCosts costs[] = {{},
                               {.forward = 2.0},
                               {.forward = 1.0, .backward_input = 0.5, .backward_weight = 0.5},
                               {.forward = 3.0, .backward_input = 2.0, .backward_weight = 1.0}};
  for (int stages = 2; stages <= 5; ++stages) {
    for (int micro_batches = stages; micro_batches <= 9; ++micro_batches) {
      for (const ActionCosts& c : costs) {
        SCOPED_TRACE(testing::Message() << "stages " << stages << " micro_batches " << micro_batches << " forward "
                                        << c.forward << " backward " << c.backward_input << "+" << c.backward_weight);
        const double work = c.forward + c.backward_input + c.backward_weight;
        const Simulation zb = simulate(zb_h1(stages, micro_batches), c);
        const double idle = (stages - 1) * (c.forward + c.backward_input - c.backward_weight);
        EXPECT_NEAR(zb.makespan, micro_batches * work + idle, 1e-9);
        EXPECT_LT(zb.bubble_fraction, simulate(one_f_one_b(stages, micro_batches), c).bubble_fraction);
      }
    }
  }
  // Equal costs: a third of 1F1B's idle time per stage.
  const double busy = 8 * 3.0;
  EXPECT_NEAR(simulate(zb_h1(4, 8)).makespan - busy, (simulate(one_f_one_b(4, 8)).makespan - busy) / 3, 1e-9);
  // Fewer micro-batches than stages still gain.
  for (int micro_batches = 1; micro_batches < 5; ++micro_batches) {
    EXPECT_LT(simulate(zb_h1(5, micro_batches)).bubble_fraction,
              simulate(one_f_one_b(5, micro_batches)).bubble_fraction)
        << micro_batches;
  }
}

TEST(ScheduleTest, PeakActivations) {
  for (int stages = 1; stages <= 5; ++stages) {
    for (int micro_batches = 1; micro_batches <= 9; ++micro_batches) {
      SCOPED_TRACE(testing::Message() << "stages " << stages << " micro_batches " << micro_batches);
      const auto gpipe_peak = simulate(gpipe(stages, micro_batches)).peak_activations;
      const auto one_f_one_b_peak = simulate(one_f_one_b(stages, micro_batches)).peak_activations;
      const auto zb_peak = simulate(zb_h1(stages, micro_batches)).peak_activations;
      for (int s = 0; s < stages; ++s) {
        EXPECT_EQ(gpipe_peak[s], micro_batches) << "stage " << s;
        EXPECT_EQ(one_f_one_b_peak[s], std::min(stages - s, micro_batches)) << "stage " << s;
        // ZB-H1 keeps 1F1B's first-stage peak on every stage: stage s holds up to s micro-batches whose input
        // gradient is done and weight gradient pending.
        EXPECT_EQ(zb_peak[s], std::min(stages, micro_batches)) << "stage " << s;
      }
      EXPECT_EQ(*std::max_element(zb_peak.begin(), zb_peak.end()),
                *std::max_element(one_f_one_b_peak.begin(), one_f_one_b_peak.end()));
      if (micro_batches % stages != 0) continue;
      for (int chunks : {2, 3}) {
        // Megatron's warm-up plus the forward of the first steady step, counted in chunks.
        const auto peak = simulate(interleaved_1f1b(stages, micro_batches, chunks)).peak_activations;
        for (int s = 0; s < stages; ++s) {
          EXPECT_EQ(peak[s], std::min(2 * (stages - s - 1) + (chunks - 1) * stages + 1, micro_batches * chunks))
              << "stage " << s << " chunks " << chunks;
        }
      }
    }
  }
}

// Stage 0 waits for the gradient of micro-batch 0 before it sends micro-batch 0's activation; stage 1 waits for it.
Schedule deadlocking_schedule() {
  Schedule s;
  s.name = "mine";
  s.stages = 2;
  s.micro_batches = 2;
  s.actions = {
      parse_actions("F v0 m0, F v0 m1, RG v0 m0, SA v0 m0, SA v0 m1, B v0 m0, RG v0 m1, B v0 m1"),
      parse_actions("RA v1 m0, F v1 m0, B v1 m0, SG v1 m0, RA v1 m1, F v1 m1, B v1 m1, SG v1 m1"),
  };
  return s;
}

TEST(ScheduleCheckTest, NamesEachBlockedStageOfADeadlock) {
  EXPECT_THAT(check_error(deadlocking_schedule()),
              HasSubstr("schedule 'mine' deadlocks: stage 0 waits at action 2 (RG v0 m0), stage 1 at action 0 "
                        "(RA v1 m0)"));
}

// Removes the first occurrence of `a` from stage `stage` of `s`.
void erase(Schedule& s, int stage, const Action& a) {
  auto& list = s.actions[stage];
  const auto at = std::find(list.begin(), list.end(), a);
  ASSERT_NE(at, list.end()) << to_string(a);
  list.erase(at);
}

TEST(ScheduleCheckTest, RejectsAMissingBackward) {
  Schedule s = one_f_one_b(2, 2);
  erase(s, 1, {ActionKind::kBackward, 1, 1});
  EXPECT_THAT(check_error(s), HasSubstr("schedule '1f1b': v1 m1 has no backward (B, or BI and BW)"));

  Schedule split = zb_h1(2, 2);
  erase(split, 0, {ActionKind::kBackwardWeight, 0, 1});
  EXPECT_THAT(check_error(split), HasSubstr("schedule 'zb-h1': BW v0 m1 is missing"));
}

TEST(ScheduleCheckTest, RejectsADuplicatedForward) {
  Schedule s = one_f_one_b(2, 2);
  s.actions[0].push_back({ActionKind::kForward, 0, 1});
  EXPECT_THAT(check_error(s), HasSubstr("schedule '1f1b': F v0 m1 appears 2 times"));
}

TEST(ScheduleCheckTest, RejectsBothAWholeAndASplitBackward) {
  Schedule s = one_f_one_b(1, 1);
  s.actions[0].push_back({ActionKind::kBackwardInput, 0, 0});
  EXPECT_THAT(check_error(s), HasSubstr("schedule '1f1b': v0 m0 has both B and BI/BW"));
}

TEST(ScheduleCheckTest, RejectsAReceiveAfterTheComputeThatNeedsIt) {
  Schedule s = one_f_one_b(2, 2);
  ASSERT_EQ(listing({s.actions[1][0], s.actions[1][1]}), "RA v1 m0, F v1 m0");
  std::swap(s.actions[1][0], s.actions[1][1]);
  EXPECT_THAT(
      check_error(s),
      HasSubstr("schedule '1f1b': stage 1 action 0 (F v1 m0) comes before RA v1 m0 (action 1), which it needs"));
}

TEST(ScheduleCheckTest, RejectsAWeightGradientBeforeItsInputGradient) {
  Schedule s = zb_h1(1, 1);
  ASSERT_EQ(listing(s.actions[0]), "F v0 m0, BI v0 m0, BW v0 m0");
  std::swap(s.actions[0][1], s.actions[0][2]);
  EXPECT_THAT(check_error(s),
              HasSubstr("schedule 'zb-h1': stage 0 action 1 (BW v0 m0) comes before BI v0 m0 (action 2), which it "
                        "needs"));
}

TEST(ScheduleCheckTest, RejectsAnActionOnTheWrongStage) {
  Schedule s = one_f_one_b(2, 2);
  s.actions[0].push_back({ActionKind::kForward, 1, 0});
  EXPECT_THAT(check_error(s), HasSubstr("schedule '1f1b': stage 0 action 8 (F v1 m0) belongs on stage 1"));
}

TEST(ScheduleCheckTest, RejectsAMissingSendAndAnUnneededReceive) {
  Schedule s = one_f_one_b(2, 2);
  erase(s, 0, {ActionKind::kSendActivation, 0, 1});
  EXPECT_THAT(check_error(s), HasSubstr("schedule '1f1b': SA v0 m1 is missing"));

  Schedule extra = one_f_one_b(2, 2);
  extra.actions[0].insert(extra.actions[0].begin(), {ActionKind::kRecvActivation, 0, 0});
  EXPECT_THAT(check_error(extra),
              HasSubstr("schedule '1f1b': unexpected RA v0 m0 (v0 has no neighbour on another stage to receive from)"));
}

TEST(ScheduleCheckTest, RejectsABadShape) {
  Schedule s = one_f_one_b(2, 2);
  s.actions.pop_back();
  EXPECT_THAT(check_error(s), HasSubstr("schedule '1f1b': 1 action lists for 2 stages"));

  Schedule out_of_range = one_f_one_b(2, 2);
  out_of_range.actions[1].push_back({ActionKind::kForward, 3, 0});
  EXPECT_THAT(check_error(out_of_range),
              HasSubstr("schedule '1f1b': stage 1 action 8 (F v3 m0) names virtual stage 3, outside 0..1"));
}

TEST(ScheduleTest, Names) {
  std::string names;
  for (ActionKind k : kAllKinds) names += std::string(action_kind_name(k)) + " ";
  EXPECT_EQ(names, "F B BI BW SA RA SG RG ");
  EXPECT_EQ(to_string({ActionKind::kForward, 1, 3}), "F v1 m3");
  EXPECT_EQ(to_string({ActionKind::kRecvGradient, 0, 12}), "RG v0 m12");
  EXPECT_EQ(listing(parse_actions("SG v2 m1, BW v0 m0")), "SG v2 m1, BW v0 m0");

  for (const char* name : {"gpipe", "1f1b", "zb-h1", "interleaved"}) {
    const Schedule s = make_schedule(name, 2, 4);
    EXPECT_EQ(s.name, name);
    EXPECT_EQ(s.stages, 2);
    EXPECT_EQ(s.micro_batches, 4);
    EXPECT_EQ(s.chunks, s.name == "interleaved" ? 2 : 1);
  }
  EXPECT_EQ(make_schedule("interleaved", 2, 4, 3).chunks, 3);
  EXPECT_EQ(make_schedule("1f1b", 2, 4, 1).actions, one_f_one_b(2, 4).actions);
  EXPECT_THAT(test::message_of<InvalidArgument>([] { make_schedule("pipedream", 2, 4); }),
              HasSubstr("make_schedule: unknown schedule 'pipedream' (known: gpipe, 1f1b, interleaved, zb-h1)"));
  EXPECT_THAT(test::message_of<InvalidArgument>([] { make_schedule("gpipe", 2, 4, 2); }),
              HasSubstr("make_schedule: 'gpipe' has one chunk per stage, got chunks 2"));
}

TEST(ScheduleTest, GeneratorsRejectWhatTheyCannotDo) {
  EXPECT_THAT(test::message_of<InvalidArgument>([] { gpipe(0, 4); }),
              HasSubstr("gpipe: stages must be at least 1, got 0"));
  EXPECT_THAT(test::message_of<InvalidArgument>([] { one_f_one_b(2, 0); }),
              HasSubstr("1f1b: micro_batches must be at least 1, got 0"));
  EXPECT_THAT(test::message_of<InvalidArgument>([] { zb_h1(-1, 2); }),
              HasSubstr("zb-h1: stages must be at least 1, got -1"));
  EXPECT_THAT(test::message_of<InvalidArgument>([] { interleaved_1f1b(2, 4, 1); }),
              HasSubstr("interleaved_1f1b: chunks must be at least 2, got 1"));
  EXPECT_THAT(test::message_of<InvalidArgument>([] { interleaved_1f1b(4, 6, 2); }),
              HasSubstr("interleaved_1f1b: micro_batches (6) must be a multiple of stages (4)"));
  EXPECT_THAT(test::message_of<InvalidArgument>([] { pipeline_bubble_bound(2, 0); }),
              HasSubstr("pipeline_bubble_bound: micro_batches must be at least 1, got 0"));
  EXPECT_THAT(test::message_of<InvalidArgument>([] { simulate(gpipe(2, 2), {.forward = 0}); }),
              HasSubstr("simulate: the forward cost must be positive, got 0"));
  // simulate checks what it runs.
  EXPECT_THAT(test::message_of<InvalidArgument>([] { simulate(deadlocking_schedule()); }), HasSubstr("deadlocks"));
}

}  // namespace
}  // namespace strata::parallel
