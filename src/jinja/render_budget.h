#pragma once
// What one render may spend: time, memory and stack. A template is hostile
// input (a GGUF from the internet, --chat-template-file), so every
// operation that loops, grows a value or recurses charges this budget as it
// goes, and the render stops with a RenderFault the moment one runs out —
// not after an operation that was already too big has finished.
//
// The budget is reachable from the thread that renders (RenderBudget::active),
// because values are made deep inside operations that know no interpreter:
// Value::from charges the bytes of every string, list and dict it makes and
// gives them back when the last copy goes, so what is counted is what the
// template holds alive at once. Values made before the render (its
// variables, the template's literals) are not counted: they are bounded by
// the request and the template's text.
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace shoal::jinja {

struct Limits;

class RenderBudget {
 public:
  // Installs itself as the thread's active budget until destroyed.
  explicit RenderBudget(const Limits& limits);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  // The budget of the render running on this thread, or nullptr.
  static RenderBudget* active();

  // Counts `units` of work (an evaluated node, an element visited, 256
  // bytes copied); the clock is read whenever another 4096 units are done,
  // so no loop, however its body is shaped, runs long unchecked.
  void work(uint64_t units);
  // Fails when `bytes` more held at once would pass the memory limit, before
  // anything is built: for an operation that knows its result's size.
  void reserve(uint64_t bytes) const;
  void hold(uint64_t bytes);     // bytes of a value now alive (fails over the limit)
  void release(uint64_t bytes);  // … and given back
  // Fails when a string being built passes the longest a template may make
  // (Limits::max_output_bytes).
  void check_length(uint64_t bytes) const;
  // Fails when the render's stack has grown past its share: every
  // recursion (statements, expressions, macro calls) passes here.
  void check_stack() const;

  uint64_t held() const { return held_; }

 private:
  std::chrono::steady_clock::time_point deadline_;
  double max_seconds_;
  uint64_t max_bytes_;
  uint64_t max_length_;
  uint64_t held_ = 0;
  uint64_t units_ = 0;
  uint64_t next_clock_check_ = 0;
  uintptr_t stack_floor_ = 0;  // the lowest frame address the render may reach
  RenderBudget* outer_;
};

// Shorthands for code that may run outside a render (then they do nothing).
inline void charge_work(uint64_t units) {
  if (RenderBudget* b = RenderBudget::active()) b->work(units);
}
inline void reserve_bytes(uint64_t bytes) {
  if (RenderBudget* b = RenderBudget::active()) b->reserve(bytes);
}
inline void check_length(uint64_t bytes) {
  if (RenderBudget* b = RenderBudget::active()) b->check_length(bytes);
}

}  // namespace shoal::jinja
