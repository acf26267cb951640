#include "cluster/primary/planner.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cluster/primary/cost_model.h"
#include "util/error.h"

namespace shoal {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Rounded up for what is needed, down for what is offered, so the message
// never says "0 MiB missing" when something is.
uint64_t mib_up(uint64_t bytes) { return (bytes + (1u << 20) - 1) >> 20; }
uint64_t mib_down(uint64_t bytes) { return bytes >> 20; }
int64_t mib_down_signed(int64_t bytes) { return bytes < 0 ? -static_cast<int64_t>(mib_up(-bytes)) : bytes >> 20; }

// Everything the split needs, computed once.
class Layout {
 public:
  explicit Layout(const PlanInput& in) : in_(in), n_layers_(static_cast<int>(in.layer_bytes.size())) {
    prefix_.assign(n_layers_ + 1, 0);
    kv_prefix_.assign(n_layers_ + 1, 0);
    for (int l = 0; l < n_layers_; ++l) {
      prefix_[l + 1] = prefix_[l] + in.layer_bytes[l];
      kv_prefix_[l + 1] = kv_prefix_[l] + (l < static_cast<int>(in.layer_kv_bytes.size()) ? in.layer_kv_bytes[l] : 0);
    }
    for (size_t d = 0; d < in.devices.size(); ++d) {
      // Signed: a device may offer less than the reserve (or the primary's share).
      int64_t u = static_cast<int64_t>(in.devices[d].free_memory) - static_cast<int64_t>(in.reserve_bytes);
      if (d == 0) u -= static_cast<int64_t>(in.primary_bytes);
      usable_.push_back(u);
    }
  }

  int n_layers() const { return n_layers_; }
  int n_devices() const { return static_cast<int>(usable_.size()); }
  int64_t usable(int d) const { return usable_[d]; }
  // Weights + KV of layers [a, b).
  uint64_t cost(int a, int b) const { return weights(a, b) + kv(a, b); }
  uint64_t weights(int a, int b) const { return prefix_[b] - prefix_[a]; }
  uint64_t kv(int a, int b) const { return kv_prefix_[b] - kv_prefix_[a]; }
  bool fits(int d, int a, int b) const {
    return a == b || (usable_[d] > 0 && cost(a, b) <= static_cast<uint64_t>(usable_[d]));
  }
  // The furthest end e >= a such that [a, e) fits on device d.
  int max_end(int d, int a) const {
    int e = a;
    while (e < n_layers_ && fits(d, a, e + 1)) ++e;
    return e;
  }
  // The smallest start s <= e such that [s, e) fits on device d.
  int min_start(int d, int e) const {
    int s = e;
    while (s > 0 && fits(d, s - 1, e)) --s;
    return s;
  }

 private:
  const PlanInput& in_;
  int n_layers_;
  std::vector<uint64_t> prefix_;     // weight bytes of layers [0, l)
  std::vector<uint64_t> kv_prefix_;  // KV bytes of layers [0, l)
  std::vector<int64_t> usable_;
};

// Splits n_layers in proportion to `weights` (largest remainder; ties to the
// earlier device). A zero weight gets zero layers, always.
std::vector<int> proportional_counts(int n_layers, const std::vector<double>& weights) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int> counts(weights.size(), 0);
  std::vector<std::pair<double, int>> remainders;
  int given = 0;
  for (size_t d = 0; d < weights.size(); ++d) {
    if (weights[d] <= 0) continue;
    const double exact = n_layers * (weights[d] / total);
    counts[d] = static_cast<int>(std::floor(exact));
    given += counts[d];
    remainders.emplace_back(exact - counts[d], static_cast<int>(d));
  }
  std::stable_sort(remainders.begin(), remainders.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < n_layers; ++given, ++i) ++counts[remainders[i % remainders.size()].second];
  return counts;
}

std::string device_summary(const PlanInput& in, const Layout& layout) {
  std::string s;
  for (int d = 0; d < layout.n_devices(); ++d) {
    if (d) s += ", ";
    s += fmt::format("{}: {} MiB free of which {} usable", in.devices[d].address, mib_down(in.devices[d].free_memory),
                     std::max<int64_t>(0, mib_down_signed(layout.usable(d))));
  }
  return s;
}

[[noreturn]] void fail_does_not_fit(const PlanInput& in, const Layout& layout) {
  const uint64_t need = layout.cost(0, layout.n_layers()) + in.primary_bytes;
  // What the devices offer before the primary's share is taken off device 0.
  uint64_t offer = 0;
  for (const DeviceInfo& dev : in.devices)
    offer += dev.free_memory > in.reserve_bytes ? dev.free_memory - in.reserve_bytes : 0;
  if (need > offer)
    fail("model needs {} MiB for {} layers + KV and {} MiB on the primary (embedding, head, buffers); "
         "devices offer {} MiB: {} MiB missing ({}; reserve {} MiB each)",
         mib_up(need), layout.n_layers(), mib_up(in.primary_bytes), mib_down(offer), mib_up(need - offer),
         device_summary(in, layout), mib_up(in.reserve_bytes));
  if (layout.usable(0) < 0)
    fail("the primary ({}) needs {} MiB for embedding, head and buffers but has {} MiB free ({} MiB reserve)",
         in.devices[0].address, mib_up(in.primary_bytes), mib_down(in.devices[0].free_memory),
         mib_up(in.reserve_bytes));
  // Enough bytes in total, but layers are indivisible: what is left on each
  // device is too small for the next layer.
  uint64_t largest = 0;
  for (int l = 0; l < layout.n_layers(); ++l) largest = std::max(largest, layout.cost(l, l + 1));
  fail("model needs {} MiB for {} layers + KV and the primary's share; devices offer {} MiB in total, but no "
       "split into whole layers fits (largest layer + KV {} MiB; {}; reserve {} MiB each)",
       mib_up(need), layout.n_layers(), mib_down(offer), mib_up(largest), device_summary(in, layout),
       mib_up(in.reserve_bytes));
}

// Boundaries b[0..D]: device d holds [b[d], b[d+1]). Start from the
// proportional targets and move each boundary the least needed so that
// every device fits, keeping contiguity in device order.
std::vector<int> repair(const Layout& layout, const std::vector<int>& counts) {
  const int D = layout.n_devices(), L = layout.n_layers();
  // lo[d]: the smallest start for device d such that [lo[d], L) fits on
  // devices d..D-1 (packing from the back). Feasible iff lo[0] == 0.
  std::vector<int> lo(D + 1, L);
  for (int d = D - 1; d >= 0; --d) lo[d] = layout.min_start(d, lo[d + 1]);
  if (lo[0] != 0) return {};
  std::vector<int> b(D + 1, 0);
  b[D] = L;
  int target = 0;
  for (int d = 1; d < D; ++d) {
    target += counts[d - 1];
    // Device d-1 starts at b[d-1] >= lo[d-1], so it can always reach lo[d]:
    // the interval below is never empty.
    const int low = std::max(b[d - 1], lo[d]);
    const int high = layout.max_end(d - 1, b[d - 1]);
    b[d] = std::clamp(target, low, std::max(low, high));
  }
  return b;
}

std::vector<int> split_by_proportions(const Layout& layout, const std::vector<double>& weights) {
  const std::vector<int> counts = proportional_counts(layout.n_layers(), weights);
  std::vector<int> b(counts.size() + 1, 0);
  for (size_t d = 0; d < counts.size(); ++d) b[d + 1] = b[d] + counts[d];
  return b;
}

void check_tensor_split(const PlanInput& in) {
  if (in.tensor_split.size() != in.devices.size())
    fail("--tensor-split has {} values but there are {} devices (local + {} workers)", in.tensor_split.size(),
         in.devices.size(), in.devices.size() - 1);
  double total = 0;
  for (double v : in.tensor_split) {
    if (!std::isfinite(v) || v < 0) fail("--tensor-split values must be finite and >= 0, got {}", v);
    total += v;
  }
  if (total <= 0) fail("--tensor-split is all zeros: no device would hold a layer");
}

// The split with the least predicted decode time (cost_model.h) among the
// contiguous ones that fit, each device in `must_hold` keeping a layer:
// best[d][e] is the least time for layers [0, e) on devices 0..d-1.
std::vector<int> split_by_speed(const PlanInput& in, const Layout& layout, const std::vector<bool>& must_hold) {
  const int D = layout.n_devices(), L = layout.n_layers();
  std::vector<uint64_t> read(L + 1, 0);
  std::vector<int> recurrent(L + 1, 0);
  for (int l = 0; l < L; ++l) {
    read[l + 1] = read[l] + decode_read_bytes(in, l, l + 1);
    recurrent[l + 1] = recurrent[l] + recurrent_layers(in, l, l + 1);
  }
  constexpr double kNone = 1e300;
  std::vector<std::vector<double>> best(D + 1, std::vector<double>(L + 1, kNone));
  std::vector<std::vector<int>> from(D + 1, std::vector<int>(L + 1, -1));
  best[0][0] = 0;
  for (int d = 0; d < D; ++d) {
    for (int a = 0; a <= L; ++a) {
      if (best[d][a] >= kNone) continue;
      const int last = layout.max_end(d, a);
      for (int e = must_hold[d] ? a + 1 : a; e <= last; ++e) {
        const double t =
            best[d][a] + stage_decode_ms(in, d, read[e] - read[a], e - a, recurrent[e] - recurrent[a], in.relay);
        if (t < best[d + 1][e]) best[d + 1][e] = t, from[d + 1][e] = a;
      }
    }
  }
  if (best[D][L] >= kNone) return {};
  std::vector<int> b(D + 1, L);
  for (int d = D; d > 0; --d) b[d - 1] = from[d][b[d]];
  return b;
}

// Moves each boundary that would cut layers kept together
// (PlanInput::kept_together_from) down to their first: the device after it
// takes them all, and the layers before them are shared again among the
// devices before it that held layers, in proportion to what they held.
// False when that cannot fit.
bool keep_together(const PlanInput& input, const Layout& layout, std::vector<int>& bounds) {
  const int first = input.kept_together_from, L = layout.n_layers();
  if (first < 0) return true;
  const std::vector<int> before = bounds;
  bool moved = false;
  for (size_t d = 1; d + 1 < bounds.size(); ++d)
    if (bounds[d] > first && bounds[d] < L) bounds[d] = first, moved = true;
  if (!moved) return true;
  int tail = 0;  // the device that now holds the kept layers
  while (bounds[tail + 1] < L) ++tail;
  std::vector<double> held(tail);
  for (int d = 0; d < tail; ++d) held[d] = before[d + 1] - before[d];
  if (tail > 0 && std::accumulate(held.begin(), held.end(), 0.0) > 0) {
    const std::vector<int> counts = proportional_counts(bounds[tail], held);
    std::vector<int> spread = bounds;
    for (int d = 0; d < tail; ++d) spread[d + 1] = spread[d] + counts[d];
    bool fits = true;
    for (int d = 0; d < tail; ++d) fits = fits && layout.fits(d, spread[d], spread[d + 1]);
    if (fits) bounds = spread;
  }
  for (int d = 0; d < layout.n_devices(); ++d)
    if (!layout.fits(d, bounds[d], bounds[d + 1])) return false;
  return true;
}

[[noreturn]] void fail_apart(const PlanInput& input, const Layout& layout) {
  fail("layers {}-{} read one another's KV cache and stay on one device, but no split gives any device room for "
       "them ({} MiB with their KV)",
       input.kept_together_from, layout.n_layers() - 1, mib_up(layout.cost(input.kept_together_from, layout.n_layers())));
}

void fill_stages(const PlanInput& input, const Layout& layout, const std::vector<int>& bounds, Plan& plan) {
  plan.stages.clear();
  for (int d = 0; d < layout.n_devices(); ++d) {
    StageAssignment s;
    s.device = d;
    s.layer_begin = bounds[d];
    s.layer_end = bounds[d + 1];
    s.weight_bytes = layout.weights(s.layer_begin, s.layer_end);
    s.kv_bytes = layout.kv(s.layer_begin, s.layer_end);
    const uint64_t used = s.weight_bytes + s.kv_bytes + (d == 0 ? input.primary_bytes : 0);
    s.free_after = input.devices[d].free_memory > used ? input.devices[d].free_memory - used : 0;
    plan.stages.push_back(s);
  }
  const Prediction p = predict(plan, input, input.relay);
  for (size_t i = 0; i < plan.stages.size(); ++i) plan.stages[i].predicted_ms = p.stage_ms[i];
  plan.predicted_head_ms = p.head_ms;
  plan.predicted_token_ms = p.token_ms;
  plan.predicted_tok_s = p.tok_s;
}

}  // namespace

Plan make_plan(const PlanInput& input) {
  if (input.devices.empty()) fail("no devices to plan for");
  const Layout layout(input);
  const int D = layout.n_devices();

  std::vector<int> bounds;
  if (!input.tensor_split.empty()) {
    check_tensor_split(input);
    bounds = split_by_proportions(layout, input.tensor_split);
    keep_together(input, layout, bounds);  // what does not fit is said below
    // The user chose the split: report every device it overfills, do not move layers.
    std::string over;
    for (int d = 0; d < D; ++d) {
      const int64_t extra = d == 0 ? static_cast<int64_t>(input.primary_bytes) : 0;
      if (layout.fits(d, bounds[d], bounds[d + 1]) && (d != 0 || layout.usable(0) >= 0)) continue;
      const uint64_t needed = layout.cost(bounds[d], bounds[d + 1]) + extra;
      const std::string what = bounds[d] == bounds[d + 1]
                                   ? std::string("no layers")
                                   : fmt::format("layers {}-{} + KV", bounds[d], bounds[d + 1] - 1);
      over += fmt::format("{}{}: needs {} MiB ({}{}) but has {} MiB available", over.empty() ? "" : "; ",
                          input.devices[d].address, mib_up(needed), what, d == 0 ? " + embedding and head" : "",
                          std::max<int64_t>(0, mib_down_signed(layout.usable(d) + extra)));
    }
    if (!over.empty()) fail("--tensor-split does not fit: {}", over);
  } else {
    // The primary must hold the embedding and head even with no layers.
    if (layout.usable(0) < 0) fail_does_not_fit(input, layout);
    std::vector<double> weights(D);
    for (int d = 0; d < D; ++d) weights[d] = static_cast<double>(std::max<int64_t>(0, layout.usable(d)));
    if (std::accumulate(weights.begin(), weights.end(), 0.0) <= 0) fail_does_not_fit(input, layout);
    bounds = repair(layout, proportional_counts(layout.n_layers(), weights));
    if (bounds.empty()) fail_does_not_fit(input, layout);
    if (!keep_together(input, layout, bounds)) fail_apart(input, layout);
  }

  Plan plan;
  fill_stages(input, layout, bounds, plan);
  // A split by speed needs every device's speed: a GPU's is not measured
  // (yet), and a guess must not move layers off it.
  const bool speeds_known = std::all_of(input.devices.begin(), input.devices.end(),
                                        [](const DeviceInfo& d) { return d.matvec_gbps > 0; });
  if (input.split == SplitPolicy::speed && input.tensor_split.empty() && speeds_known) {
    // Every device the memory split gives a layer keeps one, unless the
    // input lets the slow ones go.
    std::vector<bool> must_hold(D);
    for (int d = 0; d < D; ++d) must_hold[d] = input.keep_every_device && bounds[d + 1] > bounds[d];
    std::vector<int> fast = split_by_speed(input, layout, must_hold);
    if (!fast.empty() && !keep_together(input, layout, fast)) fast.clear();
    // Keeping layers together shares the ones before them out again, which
    // may leave a device that must hold one with none: then not by speed.
    for (int d = 0; d < D && !fast.empty(); ++d)
      if (must_hold[d] && fast[d + 1] == fast[d]) fast.clear();
    Plan by_speed;
    if (!fast.empty()) fill_stages(input, layout, fast, by_speed);
    if (!fast.empty() && by_speed.predicted_token_ms < (1.0 - kSpeedSplitGain) * plan.predicted_token_ms) {
      by_speed.split = SplitPolicy::speed;
      by_speed.memory_split_token_ms = plan.predicted_token_ms;
      return by_speed;
    }
  }
  return plan;
}

std::string format_plan(const Plan& plan, const PlanInput& input) {
  std::string out = fmt::format("{:<22} {:<20} {:<14} {:>12} {:>9} {:>15} {:>10}\n", "device", "backend", "layers",
                                "weights MiB", "KV MiB", "free MiB after", "decode ms");
  for (const StageAssignment& s : plan.stages) {
    const DeviceInfo& dev = input.devices[s.device];
    const int n = s.layer_end - s.layer_begin;
    // Inclusive ranges, as people count layers: "0-14 (15)".
    const std::string layers = n ? fmt::format("{}-{} ({})", s.layer_begin, s.layer_end - 1, n) : "none";
    out += fmt::format("{:<22} {:<20} {:<14} {:>12.1f} {:>9.1f} {:>15} {:>10.2f}\n", dev.address, dev.backend,
                       layers, s.weight_bytes / kMiB, s.kv_bytes / kMiB, mib_down(s.free_after), s.predicted_ms);
  }
  if (!plan.stages.empty())
    out += fmt::format("primary ({}) also holds {:.1f} MiB: embedding, output head and buffers ({:.2f} ms a step)\n",
                       input.devices[0].address, input.primary_bytes / kMiB, plan.predicted_head_ms);
  if (plan.split == SplitPolicy::speed)
    out += fmt::format("split by speed: {:.2f} ms/token predicted, against {:.2f} by memory alone\n",
                       plan.predicted_token_ms, plan.memory_split_token_ms);
  out += fmt::format("predicted decode: {:.2f} ms/token ({:.1f} tok/s)\n", plan.predicted_token_ms,
                     plan.predicted_tok_s);
  return out;
}

}  // namespace shoal
