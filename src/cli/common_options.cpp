#include "cli/common_options.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "cli/option_range.h"

#include "cluster/wire/cluster_key.h"
#include "backend/device_choice.h"
#include "model/kv_cache.h"
#include "util/error.h"

namespace shoal::cli {

void add_engine_options(CLI::App& cmd, CommonOptions& o) {
  cmd.add_option("-m,--model", o.engine.model_path, "GGUF model file")->required();
  cmd.add_option("-t,--threads", o.engine.threads, "threads (default: physical cores)")->check(thread_count());
  cmd.add_option("-c,--ctx-size", o.engine.n_ctx, "context size in tokens (default: min(training, 4096))")
      ->check(whole_number_in(8, 1 << 20));  // the Engine's range
  cmd.add_option("-b,--batch-size", o.engine.n_batch, "most tokens per forward pass")
      ->capture_default_str()
      ->check(whole_number_in(1, 4096));
  cmd.add_option("--ubatch-size", o.engine.n_ubatch,
                 "-ub: on a cluster, a prompt flows through the stages in micro-batches of this many tokens so that "
                 "every machine works at once (0: each stage takes the whole batch in turn)")
      ->capture_default_str()
      ->check(whole_number_in(0, 4096));
  cmd.add_flag("-v,--verbose", o.verbosity, "more log output (repeat for debug)");
  cmd.add_option("--chat-template", o.engine.chat_template,
                 "a built-in chat format instead of the model's template: " + ChatTemplate::known_names());
  cmd.add_option("--chat-template-file", o.engine.chat_template_file,
                 "a Jinja chat template file instead of the model's");
  cmd.add_option_function<std::string>(
         "--reasoning",
         [&o](const std::string& v) { o.engine.reasoning = v == "on"; },
         "thinking models (Qwen3): on = think first (the API returns it as reasoning_content), off = answer directly")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_str("on");
  DType* kv_types[] = {&o.engine.kv_types.k, &o.engine.kv_types.v};  // in kShortAliases' order
  for (int i = 0; i < 2; ++i) {
    const ShortAlias& alias = kShortAliases[i];
    cmd.add_option_function<std::string>(
           alias.long_name, [type = kv_types[i]](const std::string& v) { *type = parse_kv_type(v); },
           fmt::format("{}: the KV cache's {} type, f32, f16 or q8_0 (q8_0: half the memory of f16, a little less "
                       "exact)",
                       alias.short_name, i == 0 ? "K" : "V"))
        ->check(CLI::IsMember({"f32", "f16", "q8_0"}))
        ->default_str("f16");
  }
  add_device_option(cmd, o.engine.device);
  cmd.add_option("--n-gpu-layers,--gpu-layers", o.engine.gpu_layers,
                 "-ngl: how many of the last layers run on the --device GPU; the rest on this CPU (default: all)")
      ->check(whole_number_in(-1, 4096));
}

void add_device_option(CLI::App& cmd, std::string& device) {
  cmd.add_option("--device", device, "where the layers run: cpu, vulkan or vulkan:N (`shoal devices` lists them)")
      ->check([](const std::string& v) {
        try {
          parse_device(v);
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      })
      ->capture_default_str();
}

void add_cluster_options(CLI::App& cmd, CommonOptions& o) {
  cmd.add_option("--rpc,--workers", o.cluster.workers,
                 "workers as host:port,host:port,... ('auto': those advertising on the LAN with our key)")
      ->delimiter(',');
  cmd.add_option("--discover-port", o.cluster.beacon_port, "UDP port of the workers' beacons")
      ->capture_default_str()
      ->check(whole_number_in(1, 65535));
  cmd.add_option("--discover-wait", o.discover_wait_s, "seconds to listen for beacons before the first plan")
      ->capture_default_str()
      ->check(number_in(0, 600));
  cmd.add_option("--key-file", o.key_file, "cluster key file from `shoal keygen` (or set SHOAL_CLUSTER_KEY)");
  cmd.add_option("--key-passphrase-file", o.key_passphrase_file,
                 "file holding a passphrase the cluster key is derived from (or set SHOAL_CLUSTER_PASSPHRASE)");
  cmd.add_flag("--chain", o.cluster.chain, "forward activations worker to worker instead of via the primary");
  cmd.add_option("--wire-dtype", o.cluster.wire_dtype, "activations on the wire: f32, f16, bf16 or q8_0")
      ->capture_default_str();
  cmd.add_option("--tensor-split,--ts", o.cluster.tensor_split,
                 "layer proportions per device, local first then --rpc order (e.g. 3,1); with -sm tensor, the "
                 "members' shares of every matmul's rows (as llama.cpp's -sm row)")
      ->delimiter(',')
      ->check(number_in(0, 1e6));
  cmd.add_option("--prefill-on", o.cluster.prefill_on,
                 "run prompts on these workers (host:port of --rpc; every layer, split among them by memory) and "
                 "decode on the plan's stages, each prompt's cache moved there once it is done; 'auto': on the "
                 "worker the cost model predicts faster for a prompt of half the context, if one is")
      ->delimiter(',');
  cmd.add_option("--split", o.split_policy,
                 "without --tensor-split: 'speed' (the split with the least predicted decode time that fits, when "
                 "10% faster than by memory; a slow device keeps one layer) or 'memory' (in proportion to free "
                 "memory, as llama.cpp)")
      ->capture_default_str();
  cmd.add_option("--split-mode", o.split_mode,
                 "-sm: 'layer': each device runs its own layers; 'tensor': the workers run every layer together, each a "
                 "share of every matmul (the same bits as one machine; pays on fast links); 'auto': the one predicted "
                 "faster")
      ->capture_default_str();
  cmd.add_option("--group-size", o.cluster.group_size,
                 "with -sm tensor: workers per tensor group, taken in --rpc order; the groups split the layers "
                 "among them (a pipeline of groups; 0: one group of every worker)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  cmd.add_option("--worker-timeout", o.worker_timeout_s,
                 "seconds of silence after which a worker counts as lost (it is re-planned around)")
      ->capture_default_str()
      ->check(number_in(0.1, 3600));
  cmd.add_flag("--insecure", o.cluster.insecure,
               "plain frames to the workers (a trusted network; they must run with --insecure too)");
  cmd.add_option("--mem", o.local_mem, "memory the primary's own CPU may hold, e.g. 8G (0: what is free)")
      ->capture_default_str()
      ->check(byte_size());
}

void resolve_cluster_options(CommonOptions& o) {
  // "auto" among the workers: find them by their beacons.
  auto& w = o.cluster.workers;
  if (std::erase(w, std::string("auto")) > 0) o.cluster.discover = true;
  if (!(o.discover_wait_s >= 0 && o.discover_wait_s <= 600)) fail("--discover-wait {} is out of range 0..600", o.discover_wait_s);
  o.cluster.discover_wait_ms = static_cast<int>(o.discover_wait_s * 1000);
  if (!(o.worker_timeout_s >= 0.1 && o.worker_timeout_s <= 3600))
    fail("--worker-timeout {} is out of range 0.1..3600", o.worker_timeout_s);
  for (size_t i = 0; i < w.size(); ++i)
    if (std::find(w.begin(), w.begin() + i, w[i]) != w.begin() + i)
      fail("--rpc names {} twice: each worker once", w[i]);
  o.cluster.timeout_ms = static_cast<int>(o.worker_timeout_s * 1000);
  o.cluster.local_mem = parse_size(o.local_mem, "--mem");
  if (o.split_policy == "speed") o.cluster.split = SplitPolicy::speed;
  else if (o.split_policy == "memory") o.cluster.split = SplitPolicy::memory;
  else fail("--split must be 'speed' or 'memory', not '{}'", o.split_policy);
  if (o.split_mode == "layer") o.cluster.split_mode = SplitMode::layer;
  else if (o.split_mode == "tensor") o.cluster.split_mode = SplitMode::tensor;
  else if (o.split_mode == "auto") o.cluster.split_mode = SplitMode::automatic;
  else fail("--split-mode must be 'layer', 'tensor' or 'auto', not '{}'", o.split_mode);
  if (o.cluster.split_mode != SplitMode::layer && o.cluster.chain)
    fail("--chain and --split-mode {} do not go together: a tensor group's members trade with each other directly",
         o.split_mode);
  o.cluster.key = wire::load_cluster_key(o.key_file, o.key_passphrase_file);
}

StageBuilder stage_builder(CommonOptions& o) {
  resolve_cluster_options(o);
  if (o.cluster.workers.empty() && o.cluster.tensor_split.empty() && !o.cluster.discover) return {};
  return cluster_stage_builder(o.cluster);
}

uint64_t parse_size(const std::string& text, const char* flag) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    fail("{}: bad size '{}': expected a number with an optional K, M, G or T suffix", flag, text);
  }
  std::string suffix = text.substr(used);
  double scale = 1;
  if (suffix == "K" || suffix == "KiB" || suffix == "k") scale = 1024.0;
  else if (suffix == "M" || suffix == "MiB") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!suffix.empty()) fail("{}: bad size '{}': unknown suffix '{}'", flag, text, suffix);
  if (!std::isfinite(value) || value < 0 || value * scale > 1e18)
    fail("{}: bad size '{}': expected a number from 0 to 1e18 bytes", flag, text);
  return static_cast<uint64_t>(value * scale);
}

CLI::Validator byte_size() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          parse_size(text, "");
          return "";
        } catch (const Error& e) {
          return std::string(e.what()).substr(2);  // parse_size's words, after its empty flag
        }
      },
      "SIZE");
}

void add_speculative_options(CLI::App& cmd, CommonOptions& o) {
  SpeculativeOptions& s = o.engine.speculative;
  // llama-server's names, the earlier ones and those of its 2026 releases (--spec-draft-*).
  cmd.add_option("--model-draft,--spec-draft-model", s.draft_model,
                 "-md: a draft model for speculative decoding, a small GGUF with the same vocabulary (run here)");
  cmd.add_option_function<std::string>(
         "--spec-type", [&s](const std::string& v) { s.type = parse_spec_type(v); },
         "speculative decoding: none, ngram (guesses from the prompt and the text so far; also ngram-simple), "
         "draft (-md; also draft-simple) or mtp (the model's own multi-token-prediction layers; also draft-mtp)")
      ->check(CLI::IsMember({"none", "ngram", "ngram-simple", "draft", "draft-simple", "mtp", "draft-mtp"}))
      ->default_str("none (draft with -md)");
  cmd.add_option("--draft-max,--draft,--draft-n,--spec-draft-n-max", s.draft_max,
                 "most tokens guessed per step (a sequence's guess starts at 4 and doubles while it is right)")
      ->capture_default_str()
      ->check(whole_number_in(1, 64));
  cmd.add_option("--draft-min,--draft-n-min,--spec-draft-n-min", s.draft_min,
                 "fewer tokens guessed than this: none are checked")
      ->capture_default_str()
      ->check(whole_number_in(0, 64));
  cmd.add_option("--draft-p-min,--spec-draft-p-min", s.draft_p_min,
                 "the draft model stops guessing where its top token's probability is below this")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0));
}

void add_sampling_options(CLI::App& cmd, CommonOptions& o) {
  SamplingParams& s = o.sampling;
  // The ranges the API takes for the same parameters (openai_request.cpp).
  cmd.add_option("--temp", s.temperature, "temperature; 0 = greedy")->capture_default_str()->check(number_in(0, 100));
  cmd.add_option("--top-k", s.top_k, "top-k sampling; 0 = off")
      ->capture_default_str()
      ->check(whole_number_in(0, INT32_MAX));
  cmd.add_option("--top-p", s.top_p, "top-p (nucleus) sampling; 1 = off")->capture_default_str()->check(number_in(0, 1));
  cmd.add_option("--min-p", s.min_p, "min-p sampling; 0 = off")->capture_default_str()->check(number_in(0, 1));
  cmd.add_option("--repeat-penalty", s.repeat_penalty, "penalise repeated tokens; 1 = off")
      ->capture_default_str()
      ->check(number_in(0.01, 100));
  cmd.add_option("--repeat-last-n", s.repeat_last_n, "tokens the penalties look back at (-1: all)")
      ->capture_default_str()
      ->check(whole_number_in(-1, INT32_MAX));
  cmd.add_option("--presence-penalty", s.presence_penalty, "OpenAI presence penalty")
      ->capture_default_str()
      ->check(number_in(-2, 2));
  cmd.add_option("--frequency-penalty", s.frequency_penalty, "OpenAI frequency penalty")
      ->capture_default_str()
      ->check(number_in(-2, 2));
  cmd.add_option("-s,--seed", s.seed, "random seed (default: random)");
}

}  // namespace shoal::cli
