#pragma once
// A cluster described in a file instead of connected to: `shoal plan
// --cluster FILE`. TOML, because people write it by hand: comments, no
// quoting of keys, no trailing-comma traps. Each [[device]] is a catalogue
// name (data/devices.toml, embedded at build time) or explicit numbers, and
// all but the first (the primary) have a link to it:
//
//   [[device]]
//   name = "spark"
//   catalogue = "dgx-spark"            # or memory_gb, bandwidth_gbps, decode_efficiency
//   link = { gbit = 10, rtt_ms = 0.15 }
//
// The devices become the planner's DeviceInfo: free memory = memory less
// reserve_gb (default 4, for the operating system), decode speed =
// bandwidth x decode_efficiency, prompt speed = prefill_tflops, a fixed
// step_overhead_ms per step where the catalogue measured one (and
// recurrent_layer_ms per Gated DeltaNet layer), the link's
// speed and round trip.
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "cluster/device_info.h"

namespace shoal {

// Throws shoal::Error naming the file, the device and the key at fault.
std::vector<DeviceInfo> load_described_cluster(const std::string& path);
// The same from text (source names it in messages).
std::vector<DeviceInfo> parse_described_cluster(const std::string& text, const std::string& source);
// The devices of an array of [[device]] tables (also the published
// measurements' rows); source names the file in messages.
std::vector<DeviceInfo> described_devices(const toml::array* devices, const std::string& source);
}  // namespace shoal
