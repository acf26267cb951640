#include "jinja/render_budget.h"

#include <pthread.h>

#include <algorithm>

#include "jinja/error.h"
#include "jinja/interpreter.h"

namespace shoal::jinja {
namespace {

thread_local RenderBudget* active_budget = nullptr;

// Units of work between two looks at the clock (a look costs ~25 ns).
constexpr uint64_t kClockEvery = 4096;
// Stack left below the render's share for what runs after the last check
// (printing a value 256 levels deep, the formatting of an error).
constexpr uintptr_t kStackMargin = 256u << 10;
// A render needs far less; more would only let a hostile one go deeper.
constexpr uintptr_t kMostStack = 4u << 20;

// The lowest address this thread's stack reaches (glibc knows it, for the
// main thread as for the others); computed once per thread.
uintptr_t stack_low_end() {
  thread_local uintptr_t low = [] {
    pthread_attr_t attr;
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return uintptr_t{0};
    pthread_attr_getstack(&attr, &addr, &size);
    pthread_attr_destroy(&attr);
    return reinterpret_cast<uintptr_t>(addr);
  }();
  return low;
}

uintptr_t frame_address() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }

}  // namespace

RenderBudget::RenderBudget(const Limits& limits)
    : deadline_(std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(limits.max_seconds))),
      max_seconds_(limits.max_seconds),
      max_bytes_(limits.max_memory_bytes),
      max_length_(limits.max_output_bytes),
      next_clock_check_(kClockEvery),
      outer_(active_budget) {
  const uintptr_t here = frame_address();
  const uintptr_t low = stack_low_end();
  // Unknown bounds: assume the smallest stack a thread gets here (glibc's
  // default is 8 MiB; 1 MiB leaves room for any caller).
  const uintptr_t room = low != 0 && low < here ? here - low : (1u << 20);
  const uintptr_t share = room > 2 * kStackMargin ? std::min(room - kStackMargin, kMostStack) : room / 2;
  stack_floor_ = here - share;
  active_budget = this;
}

RenderBudget::~RenderBudget() { active_budget = outer_; }

RenderBudget* RenderBudget::active() { return active_budget; }

void RenderBudget::work(uint64_t units) {
  units_ += units;
  if (units_ < next_clock_check_) return;
  next_clock_check_ = units_ + kClockEvery;
  if (std::chrono::steady_clock::now() > deadline_)
    fault("rendering took over {} s: the template was stopped", max_seconds_);
}

void RenderBudget::reserve(uint64_t bytes) const {
  if (bytes > max_bytes_ || held_ > max_bytes_ - bytes)
    fault("the template's values would hold over {} MiB at once: the template was stopped", max_bytes_ >> 20);
}

void RenderBudget::hold(uint64_t bytes) {
  reserve(bytes);
  held_ += bytes;
  work(bytes / 256);  // making a value costs its bytes
}

void RenderBudget::release(uint64_t bytes) { held_ -= std::min(bytes, held_); }

void RenderBudget::check_length(uint64_t bytes) const {
  if (bytes > max_length_) fault("output over {} bytes: the template was stopped", max_length_);
}

void RenderBudget::check_stack() const {
  if (frame_address() < stack_floor_) fault("the template nests too deeply (statements, expressions or macro calls)");
}

}  // namespace shoal::jinja
