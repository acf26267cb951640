#include "cli/common_options.h"

namespace shoal::cli {

void add_engine_options(CLI::App& cmd, CommonOptions& o) {
  cmd.add_option("-m,--model", o.engine.model_path, "GGUF model file")->required();
  cmd.add_option("-t,--threads", o.engine.threads, "threads (default: physical cores)");
  cmd.add_option("-c,--ctx-size", o.engine.n_ctx, "context size in tokens (default: min(training, 4096))");
  cmd.add_option("-b,--batch-size", o.engine.n_batch, "most tokens per forward pass")->capture_default_str();
  cmd.add_flag("-v,--verbose", o.verbosity, "more log output (repeat for debug)");
}

void add_sampling_options(CLI::App& cmd, CommonOptions& o) {
  SamplingParams& s = o.sampling;
  cmd.add_option("--temp", s.temperature, "temperature; 0 = greedy")->capture_default_str();
  cmd.add_option("--top-k", s.top_k, "top-k sampling; 0 = off")->capture_default_str();
  cmd.add_option("--top-p", s.top_p, "top-p (nucleus) sampling; 1 = off")->capture_default_str();
  cmd.add_option("--min-p", s.min_p, "min-p sampling; 0 = off")->capture_default_str();
  cmd.add_option("--repeat-penalty", s.repeat_penalty, "penalise repeated tokens; 1 = off")->capture_default_str();
  cmd.add_option("--repeat-last-n", s.repeat_last_n, "tokens the penalties look back at")->capture_default_str();
  cmd.add_option("--presence-penalty", s.presence_penalty, "OpenAI presence penalty")->capture_default_str();
  cmd.add_option("--frequency-penalty", s.frequency_penalty, "OpenAI frequency penalty")->capture_default_str();
  cmd.add_option("-s,--seed", s.seed, "random seed (default: random)");
}

}  // namespace shoal::cli
