#pragma once
// Runs a parsed template against its variables, within limits: a hostile
// template (an endless loop, a gigabyte of output, unbounded recursion) stops
// with a TemplateError naming its line instead of taking the server down.
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>

#include "jinja/ast.h"
#include "jinja/render_budget.h"
#include "jinja/value.h"

namespace shoal::jinja {

struct Limits {
  double max_seconds = 5;
  size_t max_output_bytes = 16u << 20;  // also the longest string a template may build
  size_t max_memory_bytes = 32u << 20;  // strings, lists and dicts the template made, alive at once
  int max_call_depth = 100;              // macro calls within macro calls
  size_t max_range = 1u << 20;           // range()'s longest list
};

class Interpreter {
 public:
  Interpreter(const Limits& limits, std::unordered_map<std::string, Value> globals);
  // Empties the namespaces it made: `{% set ns.me = ns %}` is a cycle that
  // shared pointers alone would never free.
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::string render(const Body& body);

  // For builtins (filters, methods, globals).
  const Limits& limits() const { return limits_; }
  void check_size(size_t bytes) const;
  // Counts a step of work (render_budget.h).
  void step(uint64_t units = 1) { budget_.work(units); }
  Value call(const Value& callee, const Arguments& args);
  Value apply_filter(const std::string& name, const Value& input, const Arguments& args);
  // namespace() registers what it makes, for the destructor.
  void adopt_namespace(const Value& ns) { namespaces_.push_back(ns.dict); }

 private:
  enum class Flow { Normal, Break, Continue };
  struct Scope {
    std::unordered_map<std::string, Value> vars;
    std::shared_ptr<Scope> parent;
  };

  Limits limits_;
  // First, so that it is gone last: every value made in the render gives
  // its bytes back to it as it goes.
  RenderBudget budget_;
  int call_depth_ = 0;
  std::shared_ptr<Scope> root_;
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  uint64_t* capture_held_ = nullptr;  // bytes in the buffer capture() fills, counted as held
  std::vector<std::shared_ptr<Dict>> namespaces_;

  Flow exec(const Body& body);
  Flow exec_node(const Node& node);
  Flow exec_for(const Node& node);
  void exec_set(const Node& node);
  void define_macro(const Node& node);
  std::string capture(const Body& body);
  void write(const std::string& text);

  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Arguments eval_args(const Expr& e, size_t first);
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);
};

}  // namespace shoal::jinja
