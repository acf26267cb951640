#include "jinja/parser.h"

#include <algorithm>

#include "jinja/error.h"
#include "jinja/lexer.h"

namespace shoal::jinja {
namespace {

// Deeper nesting than any real template, shallow enough for the stack.
constexpr int kMaxNesting = 200;
// How deep one expression's tree may go. Chains (a + b + …, x|f|g…, a.b.c…,
// p and q and …) are parsed in loops but make a tree as deep as they are
// long, which evaluating and freeing walk recursively: 10,000 terms would
// take the stack. Real templates stay under 40.
constexpr int kMaxExpressionDepth = 256;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;

  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.error("nesting deeper than " + std::to_string(kMaxNesting));
    }
    ~Nest() { --p.depth_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  [[noreturn]] void error(const std::string& what) const {
    throw TemplateError("template line " + std::to_string(cur().line) + ": " + what);
  }
  bool is_op(const char* op) const { return cur().kind == Token::Kind::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Token::Kind::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', got '" + describe() + "'");
  }
  std::string expect_name() {
    if (cur().kind != Token::Kind::Name) error("expected a name, got '" + describe() + "'");
    return t_[i_++].text;
  }
  void expect_block_end() {
    if (cur().kind != Token::Kind::BlockEnd) error("expected the end of the tag, got '" + describe() + "'");
    ++i_;
  }
  std::string describe() const {
    switch (cur().kind) {
      case Token::Kind::BlockEnd: return "%}";
      case Token::Kind::VarEnd: return "}}";
      case Token::Kind::End: return "end of template";
      default: return cur().text;
    }
  }

  // Statements up to a {% tag %} named in `ends`; `end` gets the tag's name
  // (its tag is left open: the caller reads the rest).
  Body parse_body(const std::vector<std::string>& ends, std::string& end) {
    Nest nest(*this);
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.kind == Token::Kind::End) {
        if (!ends.empty()) error("missing {% " + ends.back() + " %}");
        return body;
      }
      if (tok.kind == Token::Kind::Text) {
        auto n = node(Node::Kind::Text);
        n->text = tok.text;
        body.push_back(std::move(n));
        ++i_;
      } else if (tok.kind == Token::Kind::VarBegin) {
        auto n = node(Node::Kind::Output);
        ++i_;
        n->expr = parse_tuple(true);
        if (cur().kind != Token::Kind::VarEnd) error("expected '}}', got '" + describe() + "'");
        ++i_;
        body.push_back(std::move(n));
      } else if (tok.kind == Token::Kind::BlockBegin) {
        ++i_;
        if (cur().kind == Token::Kind::Name &&
            std::find(ends.begin(), ends.end(), cur().text) != ends.end()) {
          end = cur().text;
          ++i_;
          return body;
        }
        body.push_back(parse_statement());
      } else {
        error("unexpected '" + describe() + "'");
      }
    }
  }

  NodePtr node(Node::Kind kind) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = cur().line;
    return n;
  }

  NodePtr parse_statement() {
    std::string keyword = cur().kind == Token::Kind::Name ? cur().text : describe();
    if (keyword == "if") return parse_if();
    if (keyword == "for") return parse_for();
    if (keyword == "set") return parse_set();
    if (keyword == "macro") return parse_macro();
    if (keyword == "break" || keyword == "continue") {
      auto n = node(keyword == "break" ? Node::Kind::Break : Node::Kind::Continue);
      ++i_;
      expect_block_end();
      return n;
    }
    if (keyword == "filter") {
      auto n = node(Node::Kind::FilterBlock);
      ++i_;
      n->expr = parse_filter_call(nullptr);
      expect_block_end();
      std::string end;
      n->body = parse_body({"endfilter"}, end);
      expect_block_end();
      return n;
    }
    if (keyword == "generation") {  // Hugging Face's marker of the assistant's text: rendered as is
      auto n = node(Node::Kind::Plain);
      ++i_;
      expect_block_end();
      std::string end;
      n->body = parse_body({"endgeneration"}, end);
      expect_block_end();
      return n;
    }
    error("unknown tag '" + keyword + "'");
  }

  NodePtr parse_if() {
    auto n = node(Node::Kind::If);
    ++i_;
    while (true) {
      ExprPtr cond = parse_tuple(false);
      expect_block_end();
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, end);
      n->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        Body else_body = parse_body({"endif"}, end);
        n->branches.emplace_back(nullptr, std::move(else_body));
      }
      expect_block_end();
      return n;
    }
  }

  NodePtr parse_for() {
    auto n = node(Node::Kind::For);
    ++i_;
    bool paren = skip_op("(");
    do {
      n->targets.push_back(expect_name());
    } while (skip_op(","));
    if (paren) expect_op(")");
    if (!skip_name("in")) error("expected 'in' in a for loop");
    n->expr = parse_tuple(false, /*with_condexpr=*/false);
    if (skip_name("if")) n->condition = parse_tuple(false);
    if (skip_name("recursive")) n->recursive = true;
    expect_block_end();
    std::string end;
    n->body = parse_body({"else", "endfor"}, end);
    if (end == "else") {
      expect_block_end();
      n->else_body = parse_body({"endfor"}, end);
    }
    expect_block_end();
    return n;
  }

  NodePtr parse_set() {
    auto n = node(Node::Kind::Set);
    ++i_;
    std::string first = expect_name();
    if (skip_op(".")) {  // set ns.attr = value
      auto ns = std::make_unique<Expr>();
      ns->kind = Expr::Kind::Name;
      ns->line = n->line;
      ns->name = first;
      n->expr = std::move(ns);
      n->text = expect_name();
      expect_op("=");
      n->value = parse_tuple(false);
      expect_block_end();
      return n;
    }
    n->targets.push_back(first);
    while (skip_op(",")) n->targets.push_back(expect_name());
    if (cur().kind == Token::Kind::BlockEnd) {  // {% set x %}…{% endset %}
      n->kind = Node::Kind::SetBlock;
      ++i_;
      std::string end;
      n->body = parse_body({"endset"}, end);
      expect_block_end();
      return n;
    }
    expect_op("=");
    n->value = parse_tuple(false);
    expect_block_end();
    return n;
  }

  NodePtr parse_macro() {
    auto n = node(Node::Kind::Macro);
    ++i_;
    n->text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      n->targets.push_back(expect_name());
      n->defaults.push_back(skip_op("=") ? parse_expression() : nullptr);
      if (!skip_op(",")) break;
    }
    expect_op(")");
    expect_block_end();
    std::string end;
    n->body = parse_body({"endmacro"}, end);
    if (cur().kind == Token::Kind::Name) ++i_;  // {% endmacro name %}
    expect_block_end();
    return n;
  }

  // An expression's depth from its parts, refused past the bound before
  // the tree can grow deeper.
  ExprPtr sealed(ExprPtr e) {
    int deepest = 0;
    for (const auto& a : e->args)
      if (a) deepest = std::max(deepest, a->depth);
    for (const auto& [k, a] : e->kwargs)
      if (a) deepest = std::max(deepest, a->depth);
    e->depth = deepest + 1;
    if (e->depth > kMaxExpressionDepth)
      throw TemplateError("template line " + std::to_string(e->line) + ": an expression nested or chained deeper than " +
                          std::to_string(kMaxExpressionDepth));
    return e;
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // An expression, or several separated by commas (a tuple, kept as a list).
  ExprPtr parse_tuple(bool /*in_output*/, bool with_condexpr = true) {
    int line = cur().line;
    ExprPtr first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto list = make(Expr::Kind::ListLit, line);
    list->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind == Token::Kind::BlockEnd || cur().kind == Token::Kind::VarEnd || is_op(")")) break;
      list->args.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return sealed(std::move(list));
  }

  ExprPtr parse_expression() {
    Nest nest(*this);
    int line = cur().line;
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      auto c = make(Expr::Kind::Conditional, line);
      c->args.push_back(std::move(expr));
      c->args.push_back(parse_or());
      c->args.push_back(skip_name("else") ? parse_expression() : nullptr);
      expr = sealed(std::move(c));
    }
    return expr;
  }

  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
    auto b = make(Expr::Kind::Binary, line);
    b->name = op;
    b->args.push_back(std::move(left));
    b->args.push_back(std::move(right));
    return sealed(std::move(b));
  }

  ExprPtr parse_or() {
    int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary("or", std::move(left), parse_and(), line);
    return left;
  }
  ExprPtr parse_and() {
    int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary("and", std::move(left), parse_not(), line);
    return left;
  }
  ExprPtr parse_not() {
    Nest nest(*this);
    if (is_name("not")) {
      auto u = make(Expr::Kind::Unary, cur().line);
      ++i_;
      u->name = "not";
      u->args.push_back(parse_not());
      return sealed(std::move(u));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr left = parse_math1();
    while (true) {
      std::string op;
      if (cur().kind == Token::Kind::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        ++i_;
      } else if (is_name("in")) {
        op = "in";
        ++i_;
      } else if (is_name("not") && peek().kind == Token::Kind::Name && peek().text == "in") {
        op = "not in";
        i_ += 2;
      } else {
        return left;
      }
      left = binary(op, std::move(left), parse_math1(), line);
    }
  }
  ExprPtr parse_math1() {
    int line = cur().line;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = t_[i_++].text;
      left = binary(op, std::move(left), parse_concat(), line);
    }
    return left;
  }
  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr left = parse_math2();
    while (skip_op("~")) left = binary("~", std::move(left), parse_math2(), line);
    return left;
  }
  ExprPtr parse_math2() {
    int line = cur().line;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = t_[i_++].text;
      left = binary(op, std::move(left), parse_pow(), line);
    }
    return left;
  }
  ExprPtr parse_pow() {
    int line = cur().line;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) left = binary("**", std::move(left), parse_unary(true), line);
    return left;
  }
  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(Expr::Kind::Unary, cur().line);
      node->name = t_[i_++].text;
      node->args.push_back(parse_unary(false));
      node = sealed(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filters(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    int line = tok.line;
    switch (tok.kind) {
      case Token::Kind::Name: {
        ++i_;
        auto e = make(Expr::Kind::Literal, line);
        if (tok.text == "true" || tok.text == "True") e->literal = Value::from(true);
        else if (tok.text == "false" || tok.text == "False") e->literal = Value::from(false);
        else if (tok.text == "none" || tok.text == "None") e->literal = Value::none();
        else {
          e->kind = Expr::Kind::Name;
          e->name = tok.text;
        }
        return e;
      }
      case Token::Kind::String: {
        std::string s;
        while (cur().kind == Token::Kind::String) s += t_[i_++].text;  // "a" "b" is "ab"
        auto e = make(Expr::Kind::Literal, line);
        e->literal = Value::from(std::move(s));
        return e;
      }
      case Token::Kind::Int: {
        ++i_;
        auto e = make(Expr::Kind::Literal, line);
        try {
          e->literal = Value::from(static_cast<int64_t>(std::stoll(tok.text)));
        } catch (const std::exception&) {
          error("integer out of range: " + tok.text);
        }
        return e;
      }
      case Token::Kind::Float: {
        ++i_;
        auto e = make(Expr::Kind::Literal, line);
        e->literal = Value::from(std::stod(tok.text));
        return e;
      }
      default: break;
    }
    if (skip_op("(")) {
      if (skip_op(")")) return make(Expr::Kind::ListLit, line);
      ExprPtr inner = parse_tuple(false);
      expect_op(")");
      return inner;
    }
    if (skip_op("[")) {
      auto e = make(Expr::Kind::ListLit, line);
      while (!is_op("]")) {
        e->args.push_back(parse_expression());
        if (!skip_op(",")) break;
      }
      expect_op("]");
      return sealed(std::move(e));
    }
    if (skip_op("{")) {
      auto e = make(Expr::Kind::DictLit, line);
      while (!is_op("}")) {
        e->args.push_back(parse_expression());
        expect_op(":");
        e->args.push_back(parse_expression());
        if (!skip_op(",")) break;
      }
      expect_op("}");
      return sealed(std::move(e));
    }
    error("unexpected '" + describe() + "'");
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (cur().kind == Token::Kind::Name && peek().kind == Token::Kind::Op && peek().text == "=") {
        std::string key = t_[i_].text;
        i_ += 2;
        call.kwargs.emplace_back(key, parse_expression());
      } else {
        call.args.push_back(parse_expression());
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      int line = cur().line;
      if (skip_op(".")) {
        auto e = make(Expr::Kind::Attr, line);
        if (cur().kind == Token::Kind::Int) {  // x.0 is x[0]
          e->kind = Expr::Kind::Item;
          auto idx = make(Expr::Kind::Literal, line);
          idx->literal = Value::from(static_cast<int64_t>(std::stoll(t_[i_++].text)));
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(idx));
        } else {
          e->name = expect_name();
          e->args.push_back(std::move(node));
        }
        node = sealed(std::move(e));
      } else if (skip_op("[")) {
        node = parse_subscript(std::move(node), line);
      } else if (is_op("(")) {
        auto call = make(Expr::Kind::Call, line);
        call->args.push_back(std::move(node));
        parse_call_args(*call);
        node = sealed(std::move(call));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object, int line) {
    ExprPtr parts[3];
    bool slice = false;
    for (int part = 0; part < 3; ++part) {
      if (!is_op(":") && !is_op("]")) parts[part] = parse_expression();
      if (part < 2 && skip_op(":")) {
        slice = true;
        continue;
      }
      break;
    }
    expect_op("]");
    auto e = make(slice ? Expr::Kind::Slice : Expr::Kind::Item, line);
    e->args.push_back(std::move(object));
    if (slice)
      for (auto& p : parts) e->args.push_back(std::move(p));
    else
      e->args.push_back(std::move(parts[0]));
    return sealed(std::move(e));
  }

  ExprPtr parse_filter_call(ExprPtr input) {
    auto f = make(Expr::Kind::Filter, cur().line);
    f->name = expect_name();
    while (skip_op(".")) f->name += "." + expect_name();
    f->args.push_back(std::move(input));
    if (is_op("(")) parse_call_args(*f);
    return sealed(std::move(f));
  }

  ExprPtr parse_filters(ExprPtr node) {
    while (true) {
      if (skip_op("|")) {
        node = parse_filter_call(std::move(node));
      } else if (is_name("is")) {
        auto t = make(Expr::Kind::Test, cur().line);
        ++i_;
        t->negated = skip_name("not");
        t->name = expect_name();
        t->args.push_back(std::move(node));
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().kind == Token::Kind::Name || cur().kind == Token::Kind::String ||
                    cur().kind == Token::Kind::Int || cur().kind == Token::Kind::Float || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          t->args.push_back(parse_postfix(parse_primary()));  // "is divisibleby 3"
        }
        node = sealed(std::move(t));
      } else if (is_op("(")) {
        auto call = make(Expr::Kind::Call, cur().line);
        call->args.push_back(std::move(node));
        parse_call_args(*call);
        node = sealed(std::move(call));
      } else {
        return node;
      }
    }
  }
};

}  // namespace

Body parse(const std::string& source) {
  try {
    return Parser(tokenize(source)).parse_template();
  } catch (const TemplateError&) {
    throw;
  } catch (const std::exception& e) {
    throw TemplateError(std::string("template: ") + e.what());
  }
}

}  // namespace shoal::jinja
