// `shardcheck` and `shardcheck-gpu`: the command line. Parses with CLI11 (cli/app.hpp), runs
// the chosen subcommand, and maps failures to the documented exit codes (2 bad input, 3
// internal error). `shardcheck-gpu` installs the GPU and MPI backends first; `shardcheck`
// hands it what needs them (run/backends.hpp).
#include <exception>
#include <iostream>

#include "cli/app.hpp"
#include "cli/invocation.hpp"
#include "cli/output_paths.hpp"
#include "reports/report_model.hpp"
#include "run/backends.hpp"
#ifdef SHARDCHECK_WITH_BACKENDS
#include "run/install_backends.hpp"
#endif

int main(int argc, char** argv) {
  using namespace shardcheck::cli;
  // Output nothing can read is bad input, refused before any work (/dev/full), and a write
  // to it that fails on the way is one too: a caller must not take a lost output for a pass.
  if (!stdout_writable()) return kBadInput;
  shardcheck::run::remember_command_line(argc, argv);
  // Reproducer lines name the command as it can be run from here: the one the user ran.
  const std::string handed = shardcheck::run::handed_command_name();
  shardcheck::reports::set_command_name(handed.empty() ? invocation_name() : handed);
#ifdef SHARDCHECK_WITH_BACKENDS
  shardcheck::run::install_backends();
#else
  // One of several processes of a launch: the binary with MPI serves it, from the start.
  if (shardcheck::run::launched_as_several() && shardcheck::run::can_hand_off())
    return shardcheck::run::hand_off("an MPI launch");
#endif
  CommandLine cl;
  const CommandLine::Parsed p = cl.parse(argc, argv, std::cout, std::cerr);
  int code = p.exit_code;
  if (p.action) {
    try {
      code = (*p.action)();
    } catch (const std::exception& e) {
      std::cerr << "shardcheck: internal error: " << e.what() << "\n";
      code = kInternalError;
    }
  }
  if (!stdout_flushed() && code != kInternalError) code = kBadInput;
  return code;
}
