// The Catch2 main, compiled once and shared by every test executable. A test spec that
// matches no test case is an error (exit 2), as `--warn NoTests` makes it: Catch2 v2 otherwise
// exits 0 on "No test cases matched", so a misspelt or split name passes having run nothing,
// under ctest (which also passes the flag) or run by hand.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  Catch::ConfigData& config = session.configData();
  config.warnings = static_cast<Catch::WarnAbout::What>(config.warnings | Catch::WarnAbout::NoTests);
  return session.run();
}
