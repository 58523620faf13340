// The `shardcheck` command line as a value: the CLI11 app with every subcommand registered,
// and parsing that stops before any action runs. main() and the command-line fuzz target
// (tests/fuzz/) share it, so the fuzzer parses exactly what users type.
//   CommandLine cl;
//   Parsed p = cl.parse(argc, argv, std::cout, std::cerr);
//   if (!p.action) return p.exit_code;   // help (0) or bad input (2), already printed
//   return (*p.action)();
#pragma once

#include <iosfwd>
#include <map>
#include <string>

#include "cli/commands.hpp"

namespace shardcheck::cli {

class CommandLine {
 public:
  CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  struct Parsed {
    int exit_code = kOk;             // when no action is to run: 0 after --help, 2 on bad input
    const Action* action = nullptr;  // the chosen subcommand's action, not yet run
    std::string command;             // its name
  };
  // Parses argv (argv[0] is the program name). Help goes to `out`, errors to `err`. A CLI11
  // app parses once: make a new CommandLine for another argv.
  Parsed parse(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

  CLI::App& app() { return app_; }

 private:
  CLI::App app_;
  std::map<std::string, Action> actions_;
};

}  // namespace shardcheck::cli
