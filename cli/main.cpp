// `shardcheck`: the command line. Parses with CLI11 (cli/app.hpp), runs the chosen
// subcommand, and maps failures to the documented exit codes (2 bad input, 3 internal error).
#include <exception>
#include <iostream>

#include "cli/app.hpp"
#include "cli/invocation.hpp"
#include "reports/report_model.hpp"

int main(int argc, char** argv) {
  using namespace shardcheck::cli;
  // Reproducer lines name the command as it can be run from here.
  shardcheck::reports::set_command_name(invocation_name());
  CommandLine cl;
  const CommandLine::Parsed p = cl.parse(argc, argv, std::cout, std::cerr);
  if (!p.action) return p.exit_code;
  try {
    return (*p.action)();
  } catch (const std::exception& e) {
    std::cerr << "shardcheck: internal error: " << e.what() << "\n";
    return kInternalError;
  }
}
