#include "jinja/interpreter.h"

#include "jinja/builtins.h"
#include "jinja/error.h"

namespace shoal::jinja {

Interpreter::Interpreter(const Limits& limits, std::unordered_map<std::string, Value> globals)
    : limits_(limits), budget_(limits_) {
  root_ = std::make_shared<Scope>();
  root_->vars = builtin_globals();
  for (auto& [k, v] : globals) root_->vars[k] = std::move(v);
  scope_ = root_;
}

Interpreter::~Interpreter() {
  for (auto& ns : namespaces_) ns->items.clear();
}

std::string Interpreter::render(const Body& body) {
  std::string out;
  out_ = &out;
  exec(body);
  return out;
}

void Interpreter::check_size(size_t bytes) const { budget_.check_length(bytes); }

void Interpreter::write(const std::string& text) {
  check_size(out_->size() + text.size());
  step(text.size() / 256);
  if (capture_held_) {  // a buffer a macro or a block fills is memory the template holds
    budget_.hold(text.size());
    *capture_held_ += text.size();
  }
  *out_ += text;
}

std::string Interpreter::capture(const Body& body) {
  std::string buffer;
  uint64_t held = 0;
  std::string* saved = out_;
  uint64_t* saved_held = capture_held_;
  out_ = &buffer;
  capture_held_ = &held;
  auto restore = [&] {
    out_ = saved;
    capture_held_ = saved_held;
    budget_.release(held);
  };
  try {
    exec(body);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return buffer;
}

Interpreter::Flow Interpreter::exec(const Body& body) {
  for (const auto& node : body) {
    Flow flow;
    try {
      flow = exec_node(*node);
    } catch (const RenderFault& e) {
      throw TemplateError("template line " + std::to_string(node->line) + ": " + e.what());
    }
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_node(const Node& node) {
  step();
  budget_.check_stack();
  switch (node.kind) {
    case Node::Kind::Text: write(node.text); break;
    case Node::Kind::Output: write(to_str(eval(*node.expr))); break;
    case Node::Kind::If:
      for (const auto& [cond, body] : node.branches)
        if (!cond || eval(*cond).truthy()) return exec(body);
      break;
    case Node::Kind::For: return exec_for(node);
    case Node::Kind::Set: exec_set(node); break;
    case Node::Kind::SetBlock: {
      std::string text = capture(node.body);
      assign(node.targets[0], Value::from(std::move(text)));
      break;
    }
    case Node::Kind::Macro: define_macro(node); break;
    case Node::Kind::Break: return Flow::Break;
    case Node::Kind::Continue: return Flow::Continue;
    case Node::Kind::FilterBlock: {
      Value text = Value::from(capture(node.body));
      const Expr& f = *node.expr;
      write(to_str(apply_filter(f.name, text, eval_args(f, 1))));
      break;
    }
    case Node::Kind::Plain: return exec(node.body);
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_for(const Node& node) {
  List items = iterate(eval(*node.expr));
  auto outer = scope_;
  auto bind = [&](Scope& s, const Value& item) {
    if (node.targets.size() == 1) {
      s.vars[node.targets[0]] = item;
      return;
    }
    List parts = iterate(item);
    if (parts.size() != node.targets.size())
      fault("cannot unpack {} values into {} names", parts.size(), node.targets.size());
    for (size_t k = 0; k < parts.size(); ++k) s.vars[node.targets[k]] = parts[k];
  };
  if (node.condition) {  // {% for x in xs if cond %}: loop.* counts the kept items
    List kept;
    for (const auto& item : items) {
      step();
      auto probe = std::make_shared<Scope>();
      probe->parent = outer;
      bind(*probe, item);
      scope_ = probe;
      bool keep = false;
      try {
        keep = eval(*node.condition).truthy();
      } catch (...) {
        scope_ = outer;
        throw;
      }
      scope_ = outer;
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    return exec(node.else_body);
  }
  Flow result = Flow::Normal;
  for (size_t i = 0; i < items.size(); ++i) {
    step();
    auto iteration = std::make_shared<Scope>();
    iteration->parent = outer;
    bind(*iteration, items[i]);
    Dict loop;
    int64_t n = static_cast<int64_t>(items.size()), k = static_cast<int64_t>(i);
    loop.set("index", Value::from(k + 1));
    loop.set("index0", Value::from(k));
    loop.set("revindex", Value::from(n - k));
    loop.set("revindex0", Value::from(n - k - 1));
    loop.set("first", Value::from(i == 0));
    loop.set("last", Value::from(i + 1 == items.size()));
    loop.set("length", Value::from(n));
    loop.set("depth", Value::from(int64_t{1}));
    loop.set("depth0", Value::from(int64_t{0}));
    loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("previtem"));
    loop.set("nextitem", i + 1 < items.size() ? items[i + 1] : Value::undefined("nextitem"));
    loop.set("cycle", Value::from(Function([k](Interpreter&, const Arguments& a) {
      if (a.positional.empty()) fault("loop.cycle() needs at least one value");
      return a.positional[static_cast<size_t>(k) % a.positional.size()];
    })));
    iteration->vars["loop"] = Value::from(std::move(loop));
    scope_ = iteration;
    Flow flow;
    try {
      flow = exec(node.body);
    } catch (...) {
      scope_ = outer;
      throw;
    }
    scope_ = outer;
    if (flow == Flow::Break) break;
  }
  return result;
}

void Interpreter::exec_set(const Node& node) {
  if (!node.text.empty()) {  // set ns.attr = value
    Value ns = eval(*node.expr);
    if (ns.kind != Value::Kind::Namespace)
      fault("cannot assign attribute '{}' on a {} (only on a namespace)", node.text, ns.type_name());
    ns.dict->set(node.text, eval(*node.value));
    return;
  }
  Value value = eval(*node.value);
  if (node.targets.size() == 1) {
    assign(node.targets[0], std::move(value));
    return;
  }
  List parts = iterate(value);
  if (parts.size() != node.targets.size())
    fault("cannot unpack {} values into {} names", parts.size(), node.targets.size());
  for (size_t k = 0; k < parts.size(); ++k) assign(node.targets[k], parts[k]);
}

void Interpreter::define_macro(const Node& node) {
  const Node* macro = &node;
  assign(node.text, Value::from(Function([this, macro](Interpreter&, const Arguments& args) {
    if (call_depth_ >= limits_.max_call_depth)
      fault("macro calls nested deeper than {}: the template was stopped", limits_.max_call_depth);
    auto scope = std::make_shared<Scope>();
    scope->parent = root_;
    for (size_t k = 0; k < macro->targets.size(); ++k) {
      const Value* given = args.get(k, macro->targets[k].c_str());
      if (given) scope->vars[macro->targets[k]] = *given;
      else if (macro->defaults[k]) scope->vars[macro->targets[k]] = eval(*macro->defaults[k]);
      else scope->vars[macro->targets[k]] = Value::undefined(macro->targets[k]);
    }
    auto saved = scope_;
    scope_ = scope;
    ++call_depth_;
    std::string text;
    try {
      text = capture(macro->body);
    } catch (...) {
      scope_ = saved;
      --call_depth_;
      throw;
    }
    scope_ = saved;
    --call_depth_;
    return Value::from(std::move(text));
  })));
}

Value Interpreter::lookup(const std::string& name) const {
  for (const Scope* s = scope_.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  return Value::undefined(name);
}

void Interpreter::assign(const std::string& name, Value value) { scope_->vars[name] = std::move(value); }

Arguments Interpreter::eval_args(const Expr& e, size_t first) {
  Arguments a;
  for (size_t k = first; k < e.args.size(); ++k) a.positional.push_back(eval(*e.args[k]));
  for (const auto& [key, expr] : e.kwargs) a.keyword.emplace_back(key, eval(*expr));
  return a;
}

Value Interpreter::call(const Value& callee, const Arguments& args) {
  if (callee.kind != Value::Kind::Function) {
    if (callee.is_undefined()) fault("'{}' is undefined", callee.text());
    fault("'{}' object is not callable", callee.type_name());
  }
  return (*callee.function)(*this, args);
}

Value Interpreter::apply_filter(const std::string& name, const Value& input, const Arguments& args) {
  return apply_named_filter(*this, name, input, args);
}

Value Interpreter::eval(const Expr& e) {
  step();
  budget_.check_stack();
  switch (e.kind) {
    case Expr::Kind::Literal: return e.literal;
    case Expr::Kind::Name: return lookup(e.name);
    case Expr::Kind::ListLit: {
      List items;
      for (const auto& a : e.args) items.push_back(eval(*a));
      return Value::from(std::move(items));
    }
    case Expr::Kind::DictLit: {
      Dict d;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) d.set(eval(*e.args[k]), eval(*e.args[k + 1]));
      return Value::from(std::move(d));
    }
    case Expr::Kind::Attr: return get_attribute(*this, eval(*e.args[0]), e.name);
    case Expr::Kind::Item: return get_item(*this, eval(*e.args[0]), eval(*e.args[1]));
    case Expr::Kind::Slice: {
      auto part = [&](size_t k) { return e.args[k] ? eval(*e.args[k]) : Value::none(); };
      return get_slice(eval(*e.args[0]), part(1), part(2), part(3));
    }
    case Expr::Kind::Call: {
      Value callee = eval(*e.args[0]);
      if (callee.is_undefined() && e.args[0]->kind == Expr::Kind::Name) fault("'{}' is undefined", e.args[0]->name);
      return call(callee, eval_args(e, 1));
    }
    case Expr::Kind::Filter: return apply_filter(e.name, eval(*e.args[0]), eval_args(e, 1));
    case Expr::Kind::Test: {
      bool r = apply_test(*this, e.name, eval(*e.args[0]), eval_args(e, 1));
      return Value::from(e.negated ? !r : r);
    }
    case Expr::Kind::Unary: {
      Value v = eval(*e.args[0]);
      if (e.name == "not") return Value::from(!v.truthy());
      if (v.kind == Value::Kind::Float) return Value::from(e.name == "-" ? -v.number : v.number);
      if (v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool) {
        int64_t i = v.kind == Value::Kind::Bool ? v.boolean : v.integer;
        return Value::from(e.name == "-" ? -i : i);
      }
      fault("bad operand type for unary {}: '{}'", e.name, v.type_name());
    }
    case Expr::Kind::Binary: return eval_binary(e);
    case Expr::Kind::Conditional:
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      return e.args[2] ? eval(*e.args[2]) : Value::undefined();
  }
  return Value::undefined();
}

Value Interpreter::eval_binary(const Expr& e) {
  if (e.name == "and") {
    Value a = eval(*e.args[0]);
    return a.truthy() ? eval(*e.args[1]) : a;
  }
  if (e.name == "or") {
    Value a = eval(*e.args[0]);
    return a.truthy() ? a : eval(*e.args[1]);
  }
  Value a = eval(*e.args[0]);
  Value b = eval(*e.args[1]);
  return binary_op(*this, e.name, a, b);
}

}  // namespace shoal::jinja
