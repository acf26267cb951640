#include "grammar/gbnf_parser.h"

#include <map>

#include "util/error.h"

namespace shoal::grammar {
namespace {

constexpr size_t kMaxText = 1 << 20;        // bytes of GBNF
constexpr size_t kMaxSymbols = 1 << 20;     // after repetitions are written out
constexpr uint32_t kMaxRepeat = 10000;      // x{m,n}: m, n at most this
constexpr int kMaxNesting = 256;            // parentheses inside parentheses

using Sequence = std::vector<Symbol>;
using Alternatives = std::vector<Sequence>;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Grammar parse() {
    if (text_.size() > kMaxText) fail("grammar: {} bytes, more than the {} allowed", text_.size(), kMaxText);
    skip_space();
    if (at_end()) fail("grammar: empty (it needs at least a `root ::= …` rule)");
    while (!at_end()) {
      const size_t start = pos_;
      const std::string name = parse_name();
      skip_space();
      if (!text_.substr(pos_).starts_with("::=")) error(pos_, "expected '::=' after the rule name '{}'", name);
      pos_ += 3;
      const uint32_t id = rule_id(name);
      if (defined_[id]) error(start, "the rule '{}' is defined twice", name);
      defined_[id] = true;
      rules_[id] = parse_alternatives(0);
      skip_space();
      if (!at_end() && !starts_rule()) error(pos_, "unexpected '{}'", text_[pos_]);
    }
    for (uint32_t r = 0; r < rules_.size(); ++r) {
      if (!defined_[r]) error(first_use_[r], "the rule '{}' is used but never defined", names_[r]);
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) fail("grammar: no `root` rule (where the output starts)");
    refuse_left_recursion();
    return flatten(root->second);
  }

 private:
  template <typename... Args>
  [[noreturn]] void error(size_t at, fmt::format_string<Args...> format, Args&&... args) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    fail("grammar line {}, column {}: {}", line, column, fmt::format(format, std::forward<Args>(args)...));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  void skip_space() {
    while (!at_end()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(text_[pos_])) ++pos_;
    if (pos_ == start) {
      if (at_end()) error(pos_, "expected a rule name at the end of the grammar");
      error(pos_, "expected a rule name, found '{}'", text_[pos_]);
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  // Whether the text here reads `name ::=` (the next rule begins).
  bool starts_rule() {
    const size_t saved = pos_;
    bool found = false;
    if (!at_end() && is_name_char(text_[pos_])) {
      while (!at_end() && is_name_char(text_[pos_])) ++pos_;
      skip_space();
      found = text_.substr(pos_).starts_with("::=");
    }
    pos_ = saved;
    return found;
  }

  uint32_t rule_id(const std::string& name) {
    auto [it, added] = ids_.try_emplace(name, static_cast<uint32_t>(rules_.size()));
    if (added) new_rule(name, pos_);
    return it->second;
  }

  uint32_t new_rule(const std::string& name, size_t at) {
    rules_.emplace_back();
    names_.push_back(name);
    defined_.push_back(false);
    first_use_.push_back(at);
    return static_cast<uint32_t>(rules_.size() - 1);
  }

  // A rule of its own for a group or a repetition, named after its owner.
  uint32_t helper_rule(Alternatives alternatives) {
    const uint32_t id = new_rule(fmt::format("_{}", rules_.size()), pos_);
    defined_[id] = true;
    rules_[id] = std::move(alternatives);
    return id;
  }

  Alternatives parse_alternatives(int depth) {
    if (depth > kMaxNesting) error(pos_, "parentheses nested more than {} deep", kMaxNesting);
    Alternatives alternatives;
    alternatives.push_back(parse_sequence(depth));
    while (!at_end() && text_[pos_] == '|') {
      ++pos_;
      alternatives.push_back(parse_sequence(depth));
    }
    return alternatives;
  }

  Sequence parse_sequence(int depth) {
    Sequence sequence;
    for (;;) {
      skip_space();
      if (at_end()) break;
      const char c = text_[pos_];
      if (c == '|' || c == ')') break;
      if (is_name_char(c) && starts_rule()) break;
      Sequence item = parse_item(depth);
      item = parse_repetition(std::move(item));
      sequence.insert(sequence.end(), item.begin(), item.end());
      count_ += item.size();
      if (count_ > kMaxSymbols) error(pos_, "more than {} symbols once repetitions are written out", kMaxSymbols);
    }
    return sequence;
  }

  Sequence parse_item(int depth) {
    const size_t start = pos_;
    const char c = text_[pos_];
    if (c == '"') {
      ++pos_;
      Sequence literal;
      for (;;) {
        if (at_end()) error(start, "a string that is never closed");
        if (text_[pos_] == '"') break;
        const uint32_t cp = parse_char();
        literal.push_back(chars({{cp, cp}}, false));
      }
      ++pos_;
      return literal;
    }
    if (c == '[') {
      ++pos_;
      const bool negated = !at_end() && text_[pos_] == '^';
      if (negated) ++pos_;
      std::vector<CharRange> set;
      for (;;) {
        if (at_end()) error(start, "a character class that is never closed");
        if (text_[pos_] == ']') break;
        const uint32_t lo = parse_char();
        uint32_t hi = lo;
        if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
          ++pos_;
          hi = parse_char();
          if (hi < lo) error(start, "a character range that runs backwards (U+{:04X}-U+{:04X})", lo, hi);
        }
        set.push_back({lo, hi});
      }
      ++pos_;
      return {chars(std::move(set), negated)};
    }
    if (c == '.') {
      ++pos_;
      return {chars({}, true)};
    }
    if (c == '(') {
      ++pos_;
      Alternatives inner = parse_alternatives(depth + 1);
      skip_space();
      if (at_end() || text_[pos_] != ')') error(start, "a '(' that is never closed");
      ++pos_;
      return {reference(helper_rule(std::move(inner)))};
    }
    if (is_name_char(c)) {
      const size_t at = pos_;
      const std::string name = parse_name();
      const uint32_t id = rule_id(name);
      if (!defined_[id] && first_use_[id] > at) first_use_[id] = at;
      return {reference(id)};
    }
    if (c == '<') error(pos_, "token references (<[id]>) are not supported");
    error(pos_, "unexpected '{}'", c);
  }

  // The postfix after an item, if any, written out as rules:
  //   x* → R ::= x R |      x+ → x R      x? → R ::= x |
  //   x{m,n} → m copies of x, then n - m nested optional copies.
  Sequence parse_repetition(Sequence item) {
    if (at_end()) return item;
    const char c = text_[pos_];
    uint32_t min = 0, max = 0;
    bool unbounded = false;
    if (c == '*') {
      unbounded = true;
    } else if (c == '+') {
      min = 1;
      unbounded = true;
    } else if (c == '?') {
      max = 1;
    } else if (c == '{') {
      const size_t start = pos_;
      ++pos_;
      skip_space();
      min = parse_count(start, 0);
      skip_space();
      if (!at_end() && text_[pos_] == ',') {
        ++pos_;
        skip_space();
        if (!at_end() && text_[pos_] == '}') {
          unbounded = true;
        } else {
          max = parse_count(start, 1);
        }
      } else {
        max = min;
      }
      skip_space();
      if (at_end() || text_[pos_] != '}') error(start, "a repetition '{{' that is never closed");
      if (!unbounded && max < min) error(start, "a repetition {{{},{}}} whose maximum is below its minimum", min, max);
      if (min > kMaxRepeat || max > kMaxRepeat) error(start, "a repetition above {}", kMaxRepeat);
    } else {
      return item;
    }
    ++pos_;
    if (item.size() != 1) item = {reference(helper_rule({std::move(item)}))};
    const Symbol x = item[0];
    Sequence out(min, x);
    if (unbounded) {
      const uint32_t star = helper_rule({});
      rules_[star] = {{x, reference(star)}, {}};
      out.push_back(reference(star));
    } else if (max > min) {
      uint32_t tail = helper_rule({{x}, {}});
      for (uint32_t i = min + 1; i < max; ++i) tail = helper_rule({{x, reference(tail)}, {}});
      out.push_back(reference(tail));
    }
    return out;
  }

  uint32_t parse_count(size_t start, int which) {
    if (at_end() || text_[pos_] < '0' || text_[pos_] > '9') {
      if (which == 0 && !at_end() && text_[pos_] == ',') return 0;  // x{,n}
      error(start, "a repetition count must be a number");
    }
    uint64_t n = 0;
    while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      n = n * 10 + static_cast<uint64_t>(text_[pos_] - '0');
      if (n > kMaxRepeat) error(start, "a repetition above {}", kMaxRepeat);
      ++pos_;
    }
    return static_cast<uint32_t>(n);
  }

  // One character of a literal or a class: an escape or a UTF-8 code point.
  uint32_t parse_char() {
    const size_t start = pos_;
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\\') {
      if (pos_ + 1 >= text_.size()) error(start, "a '\\' at the end of the grammar");
      const char e = text_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/': return static_cast<uint8_t>(e);
        case 'x': return parse_hex(start, 2);
        case 'u': return parse_hex(start, 4);
        case 'U': return parse_hex(start, 8);
        default: error(start, "unknown escape '\\{}'", e);
      }
    }
    if (c == '\n' || c == '\r') error(start, "a line break inside a string or class (write \\n)");
    // UTF-8: the grammar is over code points.
    int need = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (need < 0) error(start, "invalid UTF-8");
    uint32_t cp = need == 0 ? c : c & (0x3F >> need);
    ++pos_;
    for (; need > 0; --need, ++pos_) {
      if (at_end() || (static_cast<unsigned char>(text_[pos_]) & 0xC0) != 0x80) error(start, "invalid UTF-8");
      cp = (cp << 6) | (static_cast<unsigned char>(text_[pos_]) & 0x3F);
    }
    return cp;
  }

  uint32_t parse_hex(size_t start, int digits) {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      if (at_end()) error(start, "an escape with fewer than {} hex digits", digits);
      const char h = text_[pos_];
      int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) error(start, "an escape with fewer than {} hex digits", digits);
      value = value * 16 + static_cast<uint32_t>(d);
    }
    if (value > 0x10FFFF) error(start, "U+{:X} is beyond Unicode", value);
    return value;
  }

  Symbol chars(std::vector<CharRange> set, bool negated) {
    Symbol s;
    s.kind = Symbol::Kind::Chars;
    s.negated = negated;
    s.first = static_cast<uint32_t>(ranges_.size());
    s.count = static_cast<uint32_t>(set.size());
    ranges_.insert(ranges_.end(), set.begin(), set.end());
    return s;
  }

  static Symbol reference(uint32_t rule) {
    Symbol s;
    s.kind = Symbol::Kind::Rule;
    s.rule = rule;
    return s;
  }

  // A rule that reaches itself before reading any character would make the
  // matcher expand forever: find it now and name it.
  void refuse_left_recursion() {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Sequence& alt : rules_[r]) {
          bool all = true;
          for (const Symbol& s : alt) all = all && s.kind == Symbol::Kind::Rule && nullable[s.rule];
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<uint32_t>> left(n);  // rules reachable before a character
    for (size_t r = 0; r < n; ++r) {
      for (const Sequence& alt : rules_[r]) {
        for (const Symbol& s : alt) {
          if (s.kind != Symbol::Kind::Rule) break;
          left[r].push_back(s.rule);
          if (!nullable[s.rule]) break;
        }
      }
    }
    // Depth first without recursion: a chain of a hundred thousand rules
    // must not overflow the stack.
    std::vector<uint8_t> mark(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;  // rule, next edge to follow
    for (uint32_t start = 0; start < n; ++start) {
      if (mark[start] != 0) continue;
      mark[start] = 1;
      path.push_back({start, 0});
      while (!path.empty()) {
        auto& [r, edge] = path.back();
        if (edge == left[r].size()) {
          mark[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t s = left[r][edge++];
        if (mark[s] == 1)
          fail("grammar: the rule '{}' is left-recursive (it can reach itself before reading a character)",
               display_name(s));
        if (mark[s] == 0) {
          mark[s] = 1;
          path.push_back({s, 0});
        }
      }
    }
  }

  // A made-up rule is shown by the named rule it came from where possible.
  std::string display_name(uint32_t r) const {
    if (!names_[r].starts_with("_")) return names_[r];
    for (uint32_t owner = 0; owner < rules_.size(); ++owner) {
      if (names_[owner].starts_with("_")) continue;
      for (const Sequence& alt : rules_[owner])
        for (const Symbol& s : alt)
          if (s.kind == Symbol::Kind::Rule && s.rule == r) return names_[owner];
    }
    return names_[r];
  }

  Grammar flatten(uint32_t root) {
    Grammar g;
    g.ranges = std::move(ranges_);
    g.names = std::move(names_);
    g.root = root;
    g.rules.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Sequence& alt : rules_[r]) {
        g.rules[r].push_back(static_cast<uint32_t>(g.symbols.size()));
        g.symbols.insert(g.symbols.end(), alt.begin(), alt.end());
        g.symbols.push_back(Symbol{});
      }
    }
    return g;
  }

  std::string_view text_;
  size_t pos_ = 0;
  size_t count_ = 0;
  std::vector<Alternatives> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  std::map<std::string, uint32_t, std::less<>> ids_;
  std::vector<CharRange> ranges_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text) { return Parser(text).parse(); }

}  // namespace shoal::grammar
