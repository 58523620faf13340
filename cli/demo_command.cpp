// `shardcheck demo`: what `make demo` runs. Shows the global layout of the DESIGN examples.
#include <iostream>

#include "cli/commands.hpp"
#include "core/layout.hpp"

namespace shardcheck::cli {

Action add_demo_command(CLI::App& app) {
  app.add_subcommand("demo", "Run the demonstration");
  return []() -> int {
    for (const char* shapes : {"5x4,2x6,3", "4x4,1x6"}) {
      auto layout = core::GlobalLayout::create(core::parse_shapes(shapes).value(), 2).value();
      std::cout << "shapes " << shapes << " over 2 ranks: offsets";
      for (const auto& t : layout.tensors()) std::cout << " " << t.offset;
      std::cout << ", size " << layout.size() << "\n";
    }
    return kOk;
  };
}

}  // namespace shardcheck::cli
