// shoal: one binary, one subcommand per role (docs/design.md). Errors from any
// input edge arrive here as shoal::Error and leave as one line + exit code 1.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "util/error.h"
#include "util/log.h"
#include "util/printable.h"

int main(int argc, char** argv) {
  CLI::App app{"shoal: one language model across the machines you own"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shoal 0.1.0");
  std::vector<std::pair<CLI::App*, shoal::cli::Command>> commands;
  auto add = [&](shoal::cli::Command (*adder)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    shoal::cli::Command run = adder(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(run));
  };
  add(shoal::cli::add_inspect_command);
  add(shoal::cli::add_run_command);
  add(shoal::cli::add_chat_command);
  add(shoal::cli::add_bench_command);
  add(shoal::cli::add_worker_command);
  add(shoal::cli::add_plan_command);
  add(shoal::cli::add_ping_command);
  add(shoal::cli::add_serve_command);
  add(shoal::cli::add_devices_command);
  add(shoal::cli::add_keygen_command);
  add(shoal::cli::add_template_command);
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::string& a : args)
    for (const shoal::cli::ShortAlias& alias : shoal::cli::kShortAliases)
      if (a == alias.short_name) a = alias.long_name;
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    // --help and --version leave through CLI11 with status 0; a bad value
    // is an error like any other: one line, status 1.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "error: %s (--help lists the options)\n", shoal::printable(e.what()).c_str());
    return 1;
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const std::exception& e) {
    // Messages quote files and arguments: nothing in them may act on the terminal.
    std::fprintf(stderr, "error: %s\n", shoal::printable(e.what(), true).c_str());
    return 1;
  }
  return 1;
}
