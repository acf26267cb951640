#pragma once
// Options shared by the subcommands, spelled as llama.cpp spells them.
#include <memory>

#include "cli/commands.h"
#include "cluster/primary/cluster_stages.h"
#include "engine/engine.h"
#include "engine/sampler.h"

namespace shoal::cli {

struct CommonOptions {
  EngineOptions engine;
  SamplingParams sampling;
  ClusterOptions cluster;
  std::string key_file;
  std::string key_passphrase_file;
  double worker_timeout_s = 5.0;
  double discover_wait_s = 2.0;
  std::string local_mem = "0";
  std::string split_policy = "speed";  // --split: speed | memory
  std::string split_mode = "layer";    // -sm: layer | tensor
  int verbosity = 0;
};

// llama.cpp's multi-letter short options, which CLI11 cannot declare: main
// rewrites them to the long names before parsing.
struct ShortAlias {
  const char* short_name;
  const char* long_name;
};
inline constexpr ShortAlias kShortAliases[] = {
    {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-ngl", "--n-gpu-layers"}, {"-ub", "--ubatch-size"},
    {"-md", "--model-draft"}, {"-sm", "--split-mode"}};

// -m, -t, -c, -b, -ub, -v, -ctk, -ctv, --device, -ngl
void add_engine_options(CLI::App& cmd, CommonOptions& o);
// --device cpu|vulkan|vulkan:N, checked as it is parsed.
void add_device_option(CLI::App& cmd, std::string& device);
// --rpc/--workers, --key-file, --key-passphrase-file, --chain, --wire-dtype, --tensor-split,
// --worker-timeout, --mem
void add_cluster_options(CLI::App& cmd, CommonOptions& o);
// The key file read, the timeout and --mem parsed into o.cluster.
void resolve_cluster_options(CommonOptions& o);
// The stage builder the options ask for: every layer local without --rpc.
StageBuilder stage_builder(CommonOptions& o);
// Parses "8G", "512M", "1024" (bytes); throws shoal::Error.
uint64_t parse_size(const std::string& text, const char* flag);
// The check of a size option as it is parsed (parse_size's rules), so a bad
// one is refused before any file is opened.
CLI::Validator byte_size();

// Speculative decoding, as llama-server spells it: -md, --spec-type,
// --draft-max, --draft-min, --draft-p-min.
void add_speculative_options(CLI::App& cmd, CommonOptions& o);

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty, --seed
void add_sampling_options(CLI::App& cmd, CommonOptions& o);

}  // namespace shoal::cli
