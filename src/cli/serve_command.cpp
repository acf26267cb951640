// shoal serve: the primary. Listens first, then loads the model (and streams
// its stages to the workers), so /health and /v1/cluster can show the
// loading; then serves the OpenAI API and the web UI until SIGINT/SIGTERM.
// stdout carries one line, "server listening on http://HOST:PORT", for
// scripts and tests that pass --port 0; everything else goes to stderr.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <thread>

#include "cli/common_options.h"
#include "cli/option_range.h"
#include "engine/scheduler.h"
#include "server/http_server.h"
#include "util/error.h"
#include "util/text_file.h"
#include "util/log.h"

namespace shoal::cli {
namespace {

struct ServeOptions {
  CommonOptions common;
  server::ServerOptions server;
  std::string api_key_file;
  std::string body_limit = "1M";
  double head_timeout_s = 10, body_timeout_s = 30;
  int n_predict = -1;
  std::string alias;  // the model's name in /v1/models
};

std::string read_api_key(const std::string& path) {
  std::string key = read_text_file(path, "the API key");
  // A trailing newline from `echo KEY > file` is not part of the key.
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ')) key.pop_back();
  while (!key.empty() && key.front() == ' ') key.erase(key.begin());
  if (key.empty()) fail("the API key file {} is empty", path);
  return key;
}

// Waits for SIGINT/SIGTERM (blocked in every thread, so only this wait sees
// them), waking every 100 ms to ask `give_up` whether to stop anyway.
int wait_for_signal(const sigset_t& signals, const std::function<bool()>& give_up) {
  const timespec tick{0, 100 * 1000 * 1000};
  for (;;) {
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig > 0) return sig;
    if (give_up()) return 0;
  }
}

void print_split(Engine& engine) {
  for (const auto& stage : engine.pipeline().stages())
    for (const StageDevice& d : stage->devices())
      std::fprintf(stderr, "  %-22s %-5s layers %d-%d  weights %.1f MiB  KV %.1f MiB%s\n", d.address.c_str(),
                   d.backend.c_str(), d.layer_begin, d.layer_end - 1, d.weight_bytes / 1048576.0,
                   d.kv_bytes / 1048576.0, d.remote ? fmt::format("  rtt {:.2f} ms", d.rtt_ms).c_str() : "");
}

int serve(ServeOptions& o) {
  set_verbosity(std::max(1, o.common.verbosity));
  if (!std::filesystem::is_regular_file(o.common.engine.model_path))
    fail("cannot open model file {}", o.common.engine.model_path);
  if (o.server.parallel < 1 || o.server.parallel > 256) fail("--parallel {} is out of range 1..256", o.server.parallel);
  server::ServerOptions& s = o.server;
  if (!o.api_key_file.empty()) s.api_key = read_api_key(o.api_key_file);
  else if (s.host != "127.0.0.1" && s.host != "localhost" && s.host != "::1")
    spdlog::warn("listening on {} without --api-key-file: anyone who can reach it can use the model", s.host);
  s.body_limit = parse_size(o.body_limit, "--body-limit");
  if (o.head_timeout_s < 0.1 || o.body_timeout_s < 0.1 || s.limits.max_connections < 1 || s.limits.max_per_address < 1)
    fail("the --http-* limits must be positive");
  s.limits.head_timeout_ms = static_cast<int>(o.head_timeout_s * 1000);
  s.limits.body_timeout_ms = static_cast<int>(o.body_timeout_s * 1000);
  if (s.body_limit < 1024) fail("--body-limit {} is too small (at least 1K)", o.body_limit);
  s.model_path = o.common.engine.model_path;
  s.alias = o.alias;
  s.workers = o.common.cluster.workers;
  s.defaults.sampling = o.common.sampling;
  s.defaults.max_tokens = o.n_predict;
  o.common.engine.n_seq = s.parallel;

  server::ServerState state;
  o.common.cluster.on_progress = [&state](const std::string& device, uint64_t sent, uint64_t total) {
    state.set_progress(device, sent, total);
  };
  StageBuilder builder = stage_builder(o.common);  // reads the cluster key now: a bad one fails before listening

  // Signals go to the wait below, not to whichever thread happens to run.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a dead server

  server::HttpServer http(s, state);
  const int port = http.bind();
  std::printf("server listening on http://%s:%d\n", s.host.c_str(), port);
  std::fflush(stdout);
  http.start();

  // The engine loads on its own thread; the HTTP threads answer meanwhile.
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Scheduler> scheduler;
  std::string load_error;
  std::atomic<bool> load_ended{false};
  std::thread loader([&] {
    try {
      auto t0 = std::chrono::steady_clock::now();
      engine = std::make_unique<Engine>(o.common.engine, builder);
      scheduler = std::make_unique<Scheduler>(*engine);
      scheduler->set_cluster_observer([&state](const ClusterEvent& e) {
        if (e.available) state.set_ready();
        else state.set_unavailable(e.reason);
      });
      http.attach(*engine, *scheduler);
      state.set_ready();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "model %s loaded in %.2f s: %d slots x %d tokens of context; serving\n",
                   http.model_id().c_str(), seconds, s.parallel, engine->n_ctx());
      print_split(*engine);
    } catch (const std::exception& e) {
      load_error = e.what();
    }
    load_ended = true;
  });

  const int sig = wait_for_signal(signals, [&] { return load_ended && !load_error.empty(); });
  if (!load_ended) {
    // The Engine cannot be interrupted mid-load; leave without waiting for it.
    std::fprintf(stderr, "stopped while loading\n");
    std::fflush(stderr);
    std::_Exit(128 + sig);
  }
  if (sig) {
    // A stop must be prompt in every state: whatever still holds on after
    // 1.5 s (a connection attempt inside its handshake deadline, a long
    // step) is left to the exit.
    std::thread([sig] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      std::fprintf(stderr, "stopped (signal %d) before a clean shutdown finished\n", sig);
      std::fflush(nullptr);
      std::_Exit(128 + sig);
    }).detach();
  }
  loader.join();
  if (sig) std::fprintf(stderr, "stopping (signal %d)\n", sig);
  http.stop();  // cancels what runs and joins the HTTP threads before the engine goes
  scheduler.reset();
  engine.reset();
  if (!load_error.empty()) fail("{}", load_error);
  return 0;
}

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "serve the model over an OpenAI-compatible HTTP API and a web UI");
  add_engine_options(*cmd, o->common);
  add_sampling_options(*cmd, o->common);
  add_cluster_options(*cmd, o->common);
  add_speculative_options(*cmd, o->common);
  cmd->add_option("--host", o->server.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->server.port, "port (0: any free port)")->capture_default_str()->check(port_number());
  cmd->add_option("--parallel,--np", o->server.parallel, "requests served at once (sequence slots)")
      ->capture_default_str()
      ->check(whole_number_in(1, 256));
  cmd->add_option("-a,--alias", o->alias, "the model's name in /v1/models (default: the file name); requests may name it anything");
  cmd->add_option("-n,--n-predict", o->n_predict, "default max_tokens for a request (-1: until the end)")
      ->capture_default_str()
      ->check(whole_number_in(-1, INT32_MAX));
  cmd->add_option("--api-key-file", o->api_key_file, "file holding the key that /v1/* requires as a Bearer token");
  cmd->add_option("--body-limit", o->body_limit, "largest request body (larger ones get 413)")
      ->capture_default_str()
      ->check(byte_size());
  server::HttpLimits& l = o->server.limits;
  cmd->add_option("--http-head-timeout", o->head_timeout_s, "seconds for a request's whole head (408 after)")
      ->capture_default_str()
      ->check(number_in(0.1, 3600));
  cmd->add_option("--http-body-timeout", o->body_timeout_s, "seconds for a request's whole body (408 after)")
      ->capture_default_str()
      ->check(number_in(0.1, 3600));
  cmd->add_option("--http-max-connections", l.max_connections, "connections open at once (503 over it)")
      ->capture_default_str()
      ->check(whole_number_in(1, 65536));
  cmd->add_option("--http-max-per-address", l.max_per_address, "connections from one client address (429 over it)")
      ->capture_default_str()
      ->check(whole_number_in(1, 65536));
  return [o] { return serve(*o); };
}

}  // namespace shoal::cli
