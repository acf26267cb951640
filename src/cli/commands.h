#pragma once
// Each subcommand registers its options on the CLI11 app and returns the
// function that runs it after parsing.
#include <CLI/CLI.hpp>

#include <functional>

namespace shoal::cli {

using Command = std::function<int()>;

Command add_inspect_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_chat_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_worker_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_ping_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_keygen_command(CLI::App& app);
Command add_template_command(CLI::App& app);

}  // namespace shoal::cli
