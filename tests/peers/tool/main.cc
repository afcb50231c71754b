// peers_tool: strata's side of the compatibility tests against the real TensorFlow, Keras, TensorBoard and safetensors
// (tests/peers/test_*.py). `peers_tool SUBCOMMAND` reads one JSON request on stdin, does the work with strata's own
// library code and prints one JSON answer on stdout (the subcommands: commands.h; their requests:
// tests/peers/peers_tool.py). An error prints "peers_tool SUBCOMMAND: <message>" on stderr and exits with status 1.
// Thread-safety: a single-threaded program.
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <string>

#include "commands.h"

int main(int argc, char** argv) {
  using strata::peers::json;
  static const std::map<std::string, json (*)(const json&)> kSubcommands = {
      {"tfrecord-write", strata::peers::tfrecord_write},
      {"tfrecord-read", strata::peers::tfrecord_read},
      {"events-write", strata::peers::events_write},
      {"events-fit", strata::peers::events_fit},
      {"safetensors-write", strata::peers::safetensors_write},
      {"safetensors-read", strata::peers::safetensors_read},
      {"schedule", strata::peers::schedule_values},
      {"optimizer", strata::peers::optimizer_steps},
      {"onnx-functional", strata::peers::onnx_functional},
      {"onnx-attention", strata::peers::onnx_attention},
      {"tf-config", strata::peers::tf_config},
      {"partition", strata::peers::partition},
  };
  const auto command = argc == 2 ? kSubcommands.find(argv[1]) : kSubcommands.end();
  if (command == kSubcommands.end()) {
    std::cerr << "usage: peers_tool SUBCOMMAND < request.json; the subcommands:";
    for (const auto& [name, run] : kSubcommands) std::cerr << ' ' << name;
    std::cerr << '\n';
    return 2;
  }
  try {
    const json answer = command->second(json::parse(std::cin));
    std::cout << answer.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    return std::cout.flush() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "peers_tool " << argv[1] << ": " << e.what() << '\n';
    return 1;
  }
}
