// shoal bench: prompt processing (ppN) and generation (tgN) throughput,
// shaped like llama-bench's output so the two can be compared by scripts.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>

#include "cli/common_options.h"
#include "cli/option_range.h"
#include "engine/stage_report.h"
#include "engine/generator.h"
#include "util/error.h"
#include "util/log.h"
#include "util/text_file.h"

namespace shoal::cli {
namespace {

// The GPUs docs/architecture.md models ("What a GPU allows"): memory
// bandwidth and dense f16 matmul throughput, from their makers' sheets.
struct GpuRoof {
  const char* name;
  double bytes_per_s, flops_per_s;
};
constexpr GpuRoof kRoofs[] = {{"H100 SXM (3.35 TB/s, 989 TFLOP/s)", 3.35e12, 989e12},
                              {"RTX 4090 (1.01 TB/s, 165 TFLOP/s)", 1.008e12, 165.2e12}};

// -v on a GPU: what each kernel class read, wrote and computed per step
// (a decode token, or a prompt batch of `tokens`), and what those bytes
// and FLOPs allow at 80 % of each GPU's roof.
void print_traffic(const DeviceCounters& a, const DeviceCounters& b, double steps, int tokens) {
  double read = 0, written = 0, flops = 0;
  std::printf("  %-12s %10s %12s %12s %12s\n", "kernel class", "dispatches", "MB read", "MB written", "GFLOP");
  for (size_t k = 0; k < static_cast<size_t>(KernelClass::Count); ++k) {
    const KernelTraffic& x = a.kernels[k];
    const KernelTraffic& y = b.kernels[k];
    if (y.dispatches == x.dispatches) continue;
    const double r = (y.bytes_read - x.bytes_read) / steps, w = (y.bytes_written - x.bytes_written) / steps,
                 f = (y.flops - x.flops) / steps;
    read += r, written += w, flops += f;
    std::printf("  %-12s %10.4g %12.4g %12.4g %12.4g\n", kKernelClassNames[k], (y.dispatches - x.dispatches) / steps,
                r / 1e6, w / 1e6, f / 1e9);
  }
  std::printf("  %-12s %10s %12.4g %12.4g %12.4g\n", "total", "", read / 1e6, written / 1e6, flops / 1e9);
  for (const GpuRoof& g : kRoofs) {
    const double seconds = std::max((read + written) / (0.8 * g.bytes_per_s), flops / (0.8 * g.flops_per_s));
    std::printf("  at 80 %% of an %s: %.4g tok/s (%s-bound)\n", g.name, tokens / seconds,
                (read + written) / g.bytes_per_s > flops / g.flops_per_s ? "memory" : "compute");
  }
}

struct BenchOptions {
  CommonOptions common;
  int n_prompt = 512;
  int n_gen = 128;
  int n_depth = 0;
  int repetitions = 5;
  std::string output = "md";
  std::string prompt_file;  // speculative decoding: the prompt generated from
  bool chat = false;
};

// The speculative test's prompt without -f: a function and a request to
// rewrite it with one change (a reply that quotes most of its prompt).
constexpr const char* kEditPrompt = R"(Here is a Python function:

def parse_config(path):
    config = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, value = line.split("=", 1)
            config[key.strip()] = value.strip()
    return config

Rewrite the function so that it skips lines starting with ";" as well as "#". Show the whole function.
)";

// Speculative decoding's test: greedy generation of up to n_gen tokens from
// a real prompt, plainly and with guesses, alternated; the tokens must be the
// same. Seconds are the generation's (the prompt excluded).
struct SpecRow {
  std::vector<double> plain_seconds, spec_seconds;
  int tokens = 0;
  int drafted = 0, accepted = 0;
};

SpecRow time_speculative(Engine& engine, const BenchOptions& o) {
  std::string text = o.prompt_file.empty() ? kEditPrompt : read_text_file(o.prompt_file, "prompt");
  if (o.chat || o.prompt_file.empty())
    text = engine.chat_template().render({{"user", text}}, true, engine.options().reasoning);
  const std::vector<TokenId> prompt = engine.tokenizer().encode(text, true, true);
  if (static_cast<int>(prompt.size()) + o.n_gen >= engine.n_ctx())
    fail("the prompt ({} tokens) and -n {} do not fit the context of {} (-c)", prompt.size(), o.n_gen, engine.n_ctx());
  GenerationOptions gen;
  gen.max_tokens = o.n_gen;
  gen.sampling.temperature = 0.0f;
  SpecRow row;
  std::vector<TokenId> first;
  for (int r = 0; r < o.repetitions; ++r) {
    for (bool speculate : {r % 2 == 1, r % 2 == 0}) {
      engine.pipeline().truncate_sequence(0, 0);
      Generator g(engine.pipeline(), engine.tokenizer(), engine.n_ctx());
      if (speculate) g.set_drafter(engine.drafter(), engine.options().speculative);
      const GenerationResult res = g.generate(prompt, gen, {});
      if (first.empty()) first = res.tokens;
      if (res.tokens != first) fail("internal: the speculative run generated other tokens than the plain run");
      (speculate ? row.spec_seconds : row.plain_seconds).push_back(res.generation_seconds);
      row.tokens = static_cast<int>(res.tokens.size());
      if (speculate) {
        row.drafted += res.drafted;
        row.accepted += res.accepted;
      }
    }
  }
  return row;
}

struct BenchRow {
  int n_prompt = 0, n_gen = 0;
  std::vector<double> seconds;
  std::optional<DeviceCounters> device_before, device_after;  // the GPU's, around the runs
  double avg_ts() const { return mean(rates()); }
  double stddev_ts() const {
    auto r = rates();
    if (r.size() < 2) return 0.0;
    double m = mean(r), s = 0;
    for (double x : r) s += (x - m) * (x - m);
    return std::sqrt(s / (r.size() - 1));
  }
  std::vector<double> rates() const {
    std::vector<double> r;
    for (double s : seconds) r.push_back((n_prompt + n_gen) / s);
    return r;
  }
  static double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / v.size();
  }
};

// One timed run: a fresh sequence holding n_depth random tokens (not
// timed; llama-bench's -d), then n_prompt random tokens in batches, or n_gen
// tokens one at a time (as llama-bench does: no sampling in the loop).
double time_run(Engine& engine, int n_depth, int n_prompt, int n_gen, std::mt19937& rng) {
  Pipeline& p = engine.pipeline();
  p.truncate_sequence(0, 0);
  std::uniform_int_distribution<TokenId> pick(0, engine.config().n_vocab - 1);
  auto random_tokens = [&](int n) {
    std::vector<TokenId> tokens(n);
    for (auto& t : tokens) t = pick(rng);
    return tokens;
  };
  Generator g(p, engine.tokenizer(), engine.n_ctx());
  if (n_depth > 0) g.feed(random_tokens(n_depth), 0);
  auto t0 = std::chrono::steady_clock::now();
  if (n_prompt > 0) g.feed(random_tokens(n_prompt), n_depth);
  for (int i = 0; i < n_gen; ++i) {
    TokenId t[1] = {pick(rng)};
    g.feed(t, n_depth + i);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int bench(BenchOptions& o) {
  set_verbosity(o.common.verbosity);
  if (o.output != "md" && o.output != "json") fail("-o must be md or json, not '{}'", o.output);
  if (o.repetitions < 1) fail("-r must be at least 1");
  if (o.n_depth < 0 || o.n_prompt < 0 || o.n_gen < 0) fail("-d, -p and -n must not be negative");
  EngineOptions eo = o.common.engine;
  eo.n_ctx = std::max({eo.n_ctx, o.n_depth + o.n_prompt + 1, o.n_depth + o.n_gen + 1, 16});
  // The speculative test's prompt, whose length is known only once tokenized.
  if (eo.speculative.type != SpecType::None || !eo.speculative.draft_model.empty())
    eo.n_ctx = std::max(eo.n_ctx, 2048 + o.n_gen);
  Engine engine(eo, stage_builder(o.common));
  std::mt19937 rng(42);
  time_run(engine, 0, 0, 1, rng);  // warm-up: page in the weights
  engine.pipeline().clear_stage_times();

  std::vector<BenchRow> rows;
  if (o.n_prompt > 0) rows.push_back({o.n_prompt, 0, {}, {}, {}});
  // With speculative decoding the generation test runs on real text, with
  // and without guesses (below): random tokens say nothing about guessing.
  if (o.n_gen > 0 && !engine.drafter()) rows.push_back({0, o.n_gen, {}, {}, {}});
  Backend* gpu = engine.gpu_backend();
  for (auto& row : rows) {
    if (gpu) row.device_before = gpu->device_counters();
    for (int r = 0; r < o.repetitions; ++r)
      row.seconds.push_back(time_run(engine, o.n_depth, row.n_prompt, row.n_gen, rng));
    if (gpu) row.device_after = gpu->device_counters();
  }

  std::optional<SpecRow> spec;
  if (engine.drafter() && o.n_gen > 0) spec = time_speculative(engine, o);

  // On a cluster: the plan's prediction per stage beside what the tg steps took.
  if (engine.supervisor())
    std::fprintf(stderr, "%s", format_stage_reports(stage_reports(engine),
                                                    engine.supervisor()->status().predicted_token_ms).c_str());
  const auto& file = engine.file();
  size_t model_bytes = 0;
  int64_t n_params = 0;
  for (const auto& t : file.tensors()) {
    model_bytes += t.bytes;
    n_params += t.n_elements();
  }
  std::string filename = file.path().substr(file.path().find_last_of('/') + 1);
  // llama-bench's column: "CPU", "Vulkan", or both when -ngl splits the layers.
  std::string backend = "CPU";
  if (Backend* gpu = engine.gpu_backend()) {
    backend = engine.gpu_begin() == 0 ? "Vulkan" : fmt::format("Vulkan+CPU (ngl {})", engine.config().n_layer - engine.gpu_begin());
    if (o.output != "json") std::printf("Vulkan device: %s\n", gpu->name().c_str());
  }
  if (o.output == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& row : rows) {
      std::vector<double> ns;
      for (double s : row.seconds) ns.push_back(s * 1e9);
      double avg_ns = BenchRow::mean(ns);
      out.push_back({{"build_commit", "shoal"}, {"model_filename", filename}, {"model_type", engine.config().arch},
                     {"model_size", model_bytes}, {"model_n_params", n_params}, {"backend", backend},
                     {"n_batch", engine.n_batch()}, {"n_threads", engine.threads()}, {"n_prompt", row.n_prompt},
                     {"n_gen", row.n_gen}, {"n_depth", o.n_depth}, {"avg_ns", static_cast<int64_t>(avg_ns)},
                     {"avg_ts", row.avg_ts()},
                     {"stddev_ts", row.stddev_ts()}, {"samples_ts", row.rates()}});
    }
    if (spec) {
      const double n = spec->tokens;
      auto rates = [&](const std::vector<double>& secs) {
        std::vector<double> r;
        for (double t : secs) r.push_back(n / t);
        return r;
      };
      out.push_back({{"build_commit", "shoal"}, {"model_filename", filename}, {"test", "greedy"},
                     {"n_gen", spec->tokens}, {"spec_type", "none"}, {"avg_ts", BenchRow::mean(rates(spec->plain_seconds))},
                     {"samples_ts", rates(spec->plain_seconds)}});
      out.push_back({{"build_commit", "shoal"}, {"model_filename", filename}, {"test", "greedy"},
                     {"n_gen", spec->tokens}, {"spec_type", spec_type_name(engine.options().speculative.type)},
                     {"avg_ts", BenchRow::mean(rates(spec->spec_seconds))}, {"samples_ts", rates(spec->spec_seconds)},
                     {"drafted", spec->drafted}, {"accepted", spec->accepted}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("| model | size | params | backend | threads | test | t/s |\n");
  std::printf("| ----- | ---: | -----: | ------- | ------: | ---: | --: |\n");
  for (const auto& row : rows) {
    std::string test = row.n_prompt > 0 ? "pp" + std::to_string(row.n_prompt) : "tg" + std::to_string(row.n_gen);
    if (o.n_depth > 0) test += " @ d" + std::to_string(o.n_depth);  // llama-bench's spelling
    std::printf("| %s %s | %.2f MiB | %.2f M | %s | %d | %s | %.2f ± %.2f |\n", engine.config().arch.c_str(),
                filename.c_str(), model_bytes / 1048576.0, n_params / 1e6, backend.c_str(), engine.threads(),
                test.c_str(), row.avg_ts(), row.stddev_ts());
  }
  // -v: what the GPU did per generated token, and per prompt batch.
  for (const auto& row : rows) {
    if (o.common.verbosity < 1 || !row.device_before || !row.device_after) continue;
    const DeviceCounters& a = *row.device_before;
    const DeviceCounters& b = *row.device_after;
    const int per_run = row.n_prompt > 0 ? (row.n_prompt + engine.n_batch() - 1) / engine.n_batch() : row.n_gen;
    const double n = static_cast<double>(per_run) * o.repetitions;
    auto per = [&](uint64_t before, uint64_t after) { return fmt::format("{:.4g}", (after - before) / n); };
    std::printf("vulkan per %s: %s dispatches, %s barriers, %s submissions, %s host waits (%s copies, %s recorded, "
                "%s descriptor sets, %s driver allocations)\n",
                row.n_prompt > 0 ? "batch" : "token", per(a.dispatches, b.dispatches).c_str(),
                per(a.barriers, b.barriers).c_str(), per(a.submissions, b.submissions).c_str(),
                per(a.host_waits, b.host_waits).c_str(), per(a.copies, b.copies).c_str(),
                per(a.plans_recorded, b.plans_recorded).c_str(), per(a.descriptor_sets, b.descriptor_sets).c_str(),
                per(a.driver_allocations, b.driver_allocations).c_str());
    print_traffic(a, b, n, row.n_prompt > 0 ? std::min(row.n_prompt, engine.n_batch()) : 1);
  }
  if (spec) {
    const double n = spec->tokens;
    const double plain = n / BenchRow::mean(spec->plain_seconds), fast = n / BenchRow::mean(spec->spec_seconds);
    std::printf("\ngreedy generation of %d tokens from the prompt, %d runs each, alternated:\n", spec->tokens,
                o.repetitions);
    std::printf("| speculative | t/s | accepted |\n| ----------- | --: | -------: |\n");
    std::printf("| none | %.2f | |\n", plain);
    std::printf("| %s | %.2f | %d of %d (%.1f %%) |\n", spec_type_name(engine.options().speculative.type), fast,
                spec->accepted, spec->drafted, spec->drafted ? 100.0 * spec->accepted / spec->drafted : 0.0);
    std::printf("speed-up %.2fx, the same tokens\n", fast / plain);
  }
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "prompt and generation throughput, like llama-bench");
  add_engine_options(*cmd, o->common);
  add_cluster_options(*cmd, o->common);
  add_speculative_options(*cmd, o->common);
  cmd->add_option("-p,--n-prompt", o->n_prompt, "prompt tokens (pp test; 0 = skip)")
      ->capture_default_str()
      ->check(whole_number_in(0, 1 << 20));
  cmd->add_option("-n,--n-gen", o->n_gen, "generated tokens (tg test; 0 = skip)")
      ->capture_default_str()
      ->check(whole_number_in(0, 1 << 20));
  cmd->add_option("-d,--n-depth", o->n_depth, "tokens already in the context before each test (llama-bench -d)")
      ->check(whole_number_in(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", o->repetitions, "runs per test")->capture_default_str()->check(whole_number_in(1, 1000));
  cmd->add_option("-o,--output", o->output, "md or json")->capture_default_str();
  cmd->add_option("-f,--file", o->prompt_file,
                  "with speculative decoding: the prompt of the greedy test (default: a code edit, as a chat turn)");
  cmd->add_flag("--chat", o->chat, "wrap the -f prompt as one user turn in the model's chat template");
  return [o] { return bench(*o); };
}

}  // namespace shoal::cli
