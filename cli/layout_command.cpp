// `shardcheck layout --shapes 5x4,2x6,3 --ranks 2 [--json]`: where each tensor of a group
// lands in the flat buffer, which rows each rank owns, and how much is gap and padding.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/base/text.hpp"
#include "core/layout/layout.hpp"

namespace shardcheck::cli {

namespace {

struct LayoutArgs {
  std::string shapes;
  int ranks = 1;
  bool json = false;
};

core::LocalRange rank_range(const core::GlobalLayout& l, int rank) {
  const core::Placement flat[] = {core::Placement::flat()};
  const int sizes[] = {l.ranks()};
  const int coords[] = {rank};
  return core::local_range(l, flat, sizes, coords);
}

void print_json(const core::GlobalLayout& l) {
  nlohmann::ordered_json j;
  j["size"] = l.size();
  j["chunk"] = l.chunk();
  j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& t : l.tensors()) {
    j["tensors"].push_back({{"shape", t.shape}, {"offset", t.offset}, {"numel", t.numel}, {"row", t.row}});
  }
  j["ranks"] = nlohmann::ordered_json::array();
  for (int r = 0; r < l.ranks(); ++r) {
    const core::LocalRange range = rank_range(l, r);
    auto owns = nlohmann::ordered_json::array();
    for (const auto& o : core::owned_rows(l, range)) {
      owns.push_back({{"tensor", o.tensor}, {"first_row", o.first_row}, {"rows", o.rows}});
    }
    j["ranks"].push_back({{"rank", r}, {"offset", range.offset}, {"numel", range.numel}, {"owns", owns}});
  }
  j["gap_elements"] = l.gap_elements();
  j["padding_elements"] = l.padding_elements();
  std::cout << j.dump(2) << "\n";
}

void print_text(const core::GlobalLayout& l) {
  std::cout << "layout of " << l.num_tensors() << " tensors over " << l.ranks() << " ranks: size " << l.size()
            << " elements, chunk " << l.chunk() << "\n\n";
  std::printf("%-7s %-14s %10s %10s %8s\n", "tensor", "shape", "offset", "numel", "row");
  for (int i = 0; i < l.num_tensors(); ++i) {
    const auto& t = l.tensor(i);
    std::printf("%-7d %-14s %10lld %10lld %8lld%s\n", i, core::to_string(t.shape).c_str(),
                static_cast<long long>(t.offset), static_cast<long long>(t.numel),
                static_cast<long long>(t.row), t.fragment ? "  fragment" : "");
  }
  std::printf("\n%-5s %10s %10s  %s\n", "rank", "offset", "numel", "owns");
  for (int r = 0; r < l.ranks(); ++r) {
    const core::LocalRange range = rank_range(l, r);
    std::string owns;
    for (const auto& o : core::owned_rows(l, range)) {
      if (!owns.empty()) owns += ", ";
      owns += "tensor " + std::to_string(o.tensor) + " rows " + std::to_string(o.first_row) + ".." +
              std::to_string(o.first_row + o.rows - 1);
    }
    std::printf("%-5d %10lld %10lld  %s\n", r, static_cast<long long>(range.offset),
                static_cast<long long>(range.numel), owns.empty() ? "(none)" : owns.c_str());
  }
  std::cout << "\nunused:";
  for (const auto& u : l.unused()) std::cout << " [" << u.begin << ", " << u.end << ")";
  std::cout << "\ngap elements: " << l.gap_elements() << ", padding elements: " << l.padding_elements()
            << "\n";
}

}  // namespace

Action add_layout_command(CLI::App& app) {
  auto args = std::make_shared<LayoutArgs>();
  CLI::App* cmd = app.add_subcommand("layout", "Show the global layout of a parameter group's flat buffer");
  cmd->footer(
      "Words in the output: a tensor's row is its size without its first dimension; the chunk is the least "
      "common multiple of the rows, so that rank boundaries fall on whole rows of every tensor; a fragment "
      "is "
      "a tensor smaller than one chunk, packed into a gap or at the end; gap and padding elements are never "
      "initialized.");
  cmd->add_option("--shapes", args->shapes, "Tensor shapes, comma-separated, dims joined by x (5x4,2x6,3)")
      ->required();
  cmd->add_option("--ranks", args->ranks, "Number of ranks D sharing the buffer")
      ->required()
      ->transform(in_range(1, core::GlobalLayout::kMaxRanks));
  cmd->add_flag("--json", args->json, "Print JSON instead of tables");
  return [args]() -> int {
    if (args->ranks < 1 || args->ranks > core::GlobalLayout::kMaxRanks) {
      std::cerr << "shardcheck layout: --ranks must be at least 1 and at most "
                << core::GlobalLayout::kMaxRanks << " (got " << args->ranks << ")\n";
      return kBadInput;
    }
    auto shapes = core::parse_shapes(args->shapes);
    if (!shapes) {
      std::cerr << "shardcheck layout: --shapes: " << core::printable(shapes.error().message()) << "\n";
      return kBadInput;
    }
    auto layout = core::GlobalLayout::create(std::move(shapes).value(), args->ranks);
    if (!layout) {
      std::cerr << "shardcheck layout: " << layout.error().message() << "\n";
      return kBadInput;
    }
    if (args->json) {
      print_json(*layout);
    } else {
      print_text(*layout);
    }
    return kOk;
  };
}

}  // namespace shardcheck::cli
