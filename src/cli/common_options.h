#pragma once
// Options shared by the subcommands, spelled as llama.cpp spells them.
#include <memory>

#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/sampler.h"

namespace shoal::cli {

struct CommonOptions {
  EngineOptions engine;
  SamplingParams sampling;
  int verbosity = 0;
};

// -m, -t, -c, -b, -v
void add_engine_options(CLI::App& cmd, CommonOptions& o);
// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty, --seed
void add_sampling_options(CLI::App& cmd, CommonOptions& o);

}  // namespace shoal::cli
