// shoal worker: lend this machine to a primary.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "cli/common_options.h"
#include "cli/option_range.h"
#include "cluster/wire/cluster_key.h"
#include "cluster/worker/advertiser.h"
#include "cluster/worker/worker_server.h"
#include "util/error.h"
#include "util/log.h"

namespace shoal::cli {
namespace {

struct WorkerCliOptions {
  WorkerOptions worker;
  std::string mem = "0";
  std::string cache_max = "20G";
  std::string key_file;
  std::string key_passphrase_file;
  bool insecure = false;
  bool trusted_network = false;
  bool no_cache = false;
  bool advertise = false;
  int beacon_port = 50053;
  double timeout_s = 5.0;
  int verbosity = 1;
};

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

WorkerServer* g_server = nullptr;
void on_signal(int) {
  if (g_server) g_server->stop();
}

int run_worker(WorkerCliOptions& o) {
  set_verbosity(o.verbosity);
  WorkerOptions w = o.worker;
  w.key = wire::load_cluster_key(o.key_file, o.key_passphrase_file);
  if (!w.key && !is_loopback(w.host) && !o.insecure)
    fail("refusing to listen on {} without a cluster key: anyone who can reach it could use this machine. Pass "
         "--key-file (or set SHOAL_CLUSTER_KEY; `shoal keygen` makes one), or --insecure --trusted-network if "
         "every host that can reach it is yours",
         w.host);
  // --insecure alone also means plain frames with a key; an open worker is a
  // second, deliberate choice.
  if (!w.key && !is_loopback(w.host) && !o.trusted_network)
    fail("refusing to listen on {} with --insecure and no cluster key: anyone who can reach it could load stages "
         "and use this machine. Use a key (`shoal keygen`, then --key-file), or add --trusted-network to confirm "
         "that every host that can reach {} is yours",
         w.host, w.host);
  w.mem_limit = parse_size(o.mem, "--mem");
  w.plain_frames = o.insecure;
  if (!(o.timeout_s >= 0.1 && o.timeout_s <= 3600)) fail("--worker-timeout {} is out of range 0.1..3600", o.timeout_s);
  w.timeout_ms = static_cast<int>(o.timeout_s * 1000);
  if (o.no_cache) {
    w.cache_dir.clear();
  } else if (w.cache_dir.empty()) {
    const char* home = std::getenv("HOME");
    w.cache_dir = std::string(home ? home : "/tmp") + "/.cache/shoal/worker";
  }
  w.cache_max = parse_size(o.cache_max, "--cache-max");
  if (o.advertise && !w.key)
    fail("--advertise needs the cluster key (--key-file or SHOAL_CLUSTER_KEY): only key holders may hear of this worker");
  WorkerServer server(w);
  g_server = &server;
  std::unique_ptr<Advertiser> advertiser;
  if (o.advertise) advertiser = std::make_unique<Advertiser>(*w.key, w.host, server.port(), o.beacon_port);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  std::printf("worker listening on %s:%d (%s, %s)\n", w.host.c_str(), server.port(),
              w.key ? "cluster key required" : "no key", w.cache_dir.empty() ? "no cache" : w.cache_dir.c_str());
  std::fflush(stdout);
  server.run();
  advertiser.reset();
  server.close_sessions(std::chrono::seconds(2));
  // Sessions still busy after that (a long step) are left to the exit.
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace

Command add_worker_command(CLI::App& app) {
  auto o = std::make_shared<WorkerCliOptions>();
  auto* cmd = app.add_subcommand("worker", "lend this machine's CPU or GPU and memory to a primary");
  cmd->add_option("--host", o->worker.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->worker.port, "port (0: any free port)")->capture_default_str()->check(port_number());
  cmd->add_option("--mem", o->mem, "memory to lend, e.g. 8G (0: what is free)")->capture_default_str()->check(byte_size());
  cmd->add_option("--key-file", o->key_file, "cluster key file from `shoal keygen` (or set SHOAL_CLUSTER_KEY)");
  cmd->add_option("--key-passphrase-file", o->key_passphrase_file,
                  "file holding a passphrase the cluster key is derived from (or set SHOAL_CLUSTER_PASSPHRASE)");
  cmd->add_option("--cache-dir", o->worker.cache_dir, "weight cache (default ~/.cache/shoal/worker)");
  cmd->add_option("--cache-max", o->cache_max, "weight cache size limit")->capture_default_str()->check(byte_size());
  cmd->add_flag("--no-cache", o->no_cache, "keep no weights on disk");
  cmd->add_option("--models-dir", o->worker.models_dir, "GGUF files this machine already has");
  cmd->add_option("-t,--threads", o->worker.threads, "threads (default: physical cores)")->check(thread_count());
  add_device_option(*cmd, o->worker.device);
  cmd->add_option("--worker-timeout", o->timeout_s,
                  "seconds of silence after which the primary counts as gone (its stages are freed)")
      ->capture_default_str()
      ->check(number_in(0.1, 3600));
  cmd->add_option("--max-connections", o->worker.max_sessions, "authenticated connections at once")
      ->capture_default_str()
      ->check(whole_number_in(1, 4096));
  cmd->add_flag("--advertise", o->advertise, "announce this worker on the LAN (for a primary's --rpc auto)");
  cmd->add_option("--advertise-port", o->beacon_port, "UDP port the beacons go to")
      ->capture_default_str()
      ->check(whole_number_in(1, 65535));
  cmd->add_flag("--insecure", o->insecure,
                "a trusted network: allow a non-loopback address without a key, and plain frames with one");
  cmd->add_flag("--trusted-network", o->trusted_network,
                "with --insecure and no key on a non-loopback address: confirm that every host that can reach it "
                "is yours");
  cmd->add_flag("-v,--verbose", o->verbosity, "more log output");
  return [o] { return run_worker(*o); };
}

}  // namespace shoal::cli
