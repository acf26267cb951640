#include "server/regex_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "server/json_schema_grammar.h"
#include "util/error.h"

namespace shoal::server {
namespace {

constexpr int kMaxRepeat = 1000;  // {n,m} bounds a pattern may ask for
constexpr int kMaxNesting = 64;   // groups inside groups

// A set of ASCII characters as ranges.
using Ranges = std::vector<std::pair<int, int>>;

// The GBNF for one character of the string's JSON text.
std::string json_char(unsigned char c) {
  std::string text;
  switch (c) {
    case '"': text = "\\\""; break;
    case '\\': text = "\\\\"; break;
    case '\n': text = "\\n"; break;
    case '\r': text = "\\r"; break;
    case '\t': text = "\\t"; break;
    case '\b': text = "\\b"; break;
    case '\f': text = "\\f"; break;
    default: text = c < 0x20 || c == 0x7F ? fmt::format("\\u{:04x}", c) : std::string(1, static_cast<char>(c));
  }
  return gbnf_literal(text);
}

// A class of ASCII characters as the JSON text each may be: the printable
// ones in one GBNF class, a quote and a backslash escaped, the controls
// among \t \n \r escaped (other controls are left out: never needed).
std::string class_gbnf(const Ranges& ranges) {
  std::vector<bool> in(128, false);
  for (const auto& [lo, hi] : ranges)
    for (int c = std::max(lo, 0); c <= std::min(hi, 127); ++c) in[c] = true;
  std::string cls;
  for (int c = 0x20; c < 0x7F;) {
    if (!in[c] || c == '"' || c == '\\') {
      ++c;
      continue;
    }
    int end = c;
    while (end + 1 < 0x7F && in[end + 1] && end + 1 != '"' && end + 1 != '\\') ++end;
    cls += end == c ? fmt::format("\\x{:02X}", c) : fmt::format("\\x{:02X}-\\x{:02X}", c, end);
    c = end + 1;
  }
  std::vector<std::string> alts;
  if (!cls.empty()) alts.push_back("[" + cls + "]");
  for (unsigned char c : {'"', '\\', '\t', '\n', '\r'})
    if (in[c]) alts.push_back(json_char(c));
  if (alts.empty()) fail("a class no character of a JSON string fits");
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

Ranges complement(const Ranges& ranges) {
  std::vector<bool> in(128, false);
  for (const auto& [lo, hi] : ranges)
    for (int c = lo; c <= hi; ++c) in[c] = true;
  Ranges out;
  for (int c = 0; c < 128; ++c)
    if (!in[c]) out.push_back({c, c});
  return out;
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}, {'\r', '\r'}, {'\f', '\f'}, {'\v', '\v'}};

class RegexParser {
 public:
  explicit RegexParser(const std::string& p) : p_(p) {}

  std::string parse() {
    if (p_.empty() || p_.front() != '^' || p_.back() != '$' || p_.size() < 2 || (p_.size() >= 3 && p_[p_.size() - 2] == '\\'))
      fail("'pattern' must be anchored as ^…$ to be held (as llama.cpp's converter wants)");
    at_ = 1;
    end_ = p_.size() - 1;
    std::string body = alternation(0);
    if (at_ != end_) fail("'pattern' has an unmatched ')' at {}", at_);
    return body.empty() ? "\"\"" : body;
  }

 private:
  const std::string& p_;
  size_t at_ = 0, end_ = 0;

  bool more() const { return at_ < end_; }

  std::string alternation(int depth) {
    if (depth > kMaxNesting) fail("'pattern' nests groups more than {} deep", kMaxNesting);
    std::vector<std::string> alts{sequence(depth)};
    while (more() && p_[at_] == '|') {
      ++at_;
      alts.push_back(sequence(depth));
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + (alts[i].empty() ? "\"\"" : alts[i]);
    return out + ")";
  }

  std::string sequence(int depth) {
    std::string out;
    while (more() && p_[at_] != '|' && p_[at_] != ')') {
      std::string item = atom(depth);
      item = quantified(item);
      out += (out.empty() ? "" : " ") + item;
    }
    return out;
  }

  std::string quantified(const std::string& item) {
    if (!more()) return item;
    const char q = p_[at_];
    std::string out;
    if (q == '?' || q == '*' || q == '+') {
      ++at_;
      out = "(" + item + ")" + q;
    } else if (q == '{') {
      const size_t close = p_.find('}', at_);
      if (close == std::string::npos || close >= end_) fail("'pattern' has a '{{' without its '}}'");
      const std::string inside = p_.substr(at_ + 1, close - at_ - 1);
      int lo = 0, hi = -1;
      const size_t comma = inside.find(',');
      auto number = [&](const std::string& s) {
        if (s.empty() || s.size() > 5 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
          fail("'pattern' has a repetition {{{}}} that is not {{n}}, {{n,}} or {{n,m}}", inside);
        const int v = std::stoi(s);
        if (v > kMaxRepeat) fail("'pattern' repeats {} times, more than the {} held here", v, kMaxRepeat);
        return v;
      };
      if (comma == std::string::npos) {
        lo = hi = number(inside);
      } else {
        lo = number(inside.substr(0, comma));
        if (comma + 1 < inside.size()) hi = number(inside.substr(comma + 1));
      }
      if (hi >= 0 && hi < lo) fail("'pattern' has a repetition {{{}}} whose maximum is below its minimum", inside);
      at_ = close + 1;
      out = hi < 0 ? fmt::format("({}){{{},}}", item, lo) : fmt::format("({}){{{},{}}}", item, lo, hi);
    } else {
      return item;
    }
    if (more() && (p_[at_] == '?' || p_[at_] == '+')) {  // lazy: the same strings; possessive: not held
      if (p_[at_] == '+') fail("'pattern' uses a possessive quantifier");
      ++at_;
    }
    if (more() && (p_[at_] == '?' || p_[at_] == '*' || p_[at_] == '+' || p_[at_] == '{'))
      fail("'pattern' has two quantifiers in a row at {}", at_);
    return out;
  }

  std::string atom(int depth) {
    const unsigned char c = static_cast<unsigned char>(p_[at_]);
    switch (c) {
      case '(': {
        ++at_;
        if (more() && p_[at_] == '?') {
          if (at_ + 1 < end_ && p_[at_ + 1] == ':') at_ += 2;
          else fail("'pattern' uses a (?…) group other than (?:…)");
        }
        std::string inner = alternation(depth + 1);
        if (!more() || p_[at_] != ')') fail("'pattern' has a '(' without its ')'");
        ++at_;
        return "(" + (inner.empty() ? "\"\"" : inner) + ")";
      }
      case '[': return char_class();
      case '.': ++at_; return class_gbnf(complement({{'\n', '\n'}, {'\r', '\r'}}));
      case '\\': return escape(false).first;
      case '^': case '$': fail("'pattern' has '{}' inside it: only ^ at the start and $ at the end are held", static_cast<char>(c));
      case '*': case '+': case '?': case '{': fail("'pattern' has a quantifier with nothing before it at {}", at_);
      default:
        ++at_;
        if (c < 0x80) return json_char(c);
        // A UTF-8 character, whole: GBNF literals take its bytes.
        {
          std::string bytes(1, static_cast<char>(c));
          while (more() && (static_cast<unsigned char>(p_[at_]) & 0xC0) == 0x80) bytes += p_[at_++];
          return gbnf_literal(bytes);
        }
    }
  }

  // After a backslash: a class (\d …) or one character. In a class, only
  // characters and the class escapes are allowed.
  std::pair<std::string, Ranges> escape(bool in_class) {
    ++at_;
    if (!more()) fail("'pattern' ends in a backslash");
    const char e = p_[at_++];
    auto cls = [&](const Ranges& r) { return std::pair<std::string, Ranges>{class_gbnf(r), r}; };
    switch (e) {
      case 'd': return cls(kDigit);
      case 'w': return cls(kWord);
      case 's': return cls(kSpace);
      case 'D': return cls(complement(kDigit));
      case 'W': return cls(complement(kWord));
      case 'S': return cls(complement(kSpace));
      case 'n': return cls({{'\n', '\n'}});
      case 't': return cls({{'\t', '\t'}});
      case 'r': return cls({{'\r', '\r'}});
      default: break;
    }
    const unsigned char ch = static_cast<unsigned char>(e);
    if (ch >= 0x80 || (std::isalnum(ch) && !in_class))
      fail("'pattern' uses the escape \\{} (not held here)", e);
    if (std::isalnum(ch)) fail("'pattern' uses the escape \\{} in a class (not held here)", e);
    return {json_char(ch), Ranges{{ch, ch}}};
  }

  std::string char_class() {
    ++at_;  // '['
    bool negated = false;
    if (more() && p_[at_] == '^') {
      negated = true;
      ++at_;
    }
    Ranges ranges;
    bool first = true;
    while (true) {
      if (!more()) fail("'pattern' has a '[' without its ']'");
      if (p_[at_] == ']' && !first) break;
      first = false;
      int lo;
      if (p_[at_] == '\\') {
        auto [gbnf, r] = escape(true);
        if (r.size() != 1 || r[0].first != r[0].second) {  // a class escape inside the class
          ranges.insert(ranges.end(), r.begin(), r.end());
          continue;
        }
        lo = r[0].first;
      } else {
        lo = static_cast<unsigned char>(p_[at_++]);
      }
      if (lo >= 0x80) fail("'pattern' has a non-ASCII character in a class (not held here)");
      int hi = lo;
      if (at_ + 1 < end_ && p_[at_] == '-' && p_[at_ + 1] != ']') {
        ++at_;
        if (p_[at_] == '\\') {
          auto [gbnf, r] = escape(true);
          if (r.size() != 1 || r[0].first != r[0].second) fail("'pattern' has a range ending in a class escape");
          hi = r[0].first;
        } else {
          hi = static_cast<unsigned char>(p_[at_++]);
        }
        if (hi >= 0x80) fail("'pattern' has a non-ASCII character in a class (not held here)");
        if (hi < lo) fail("'pattern' has a range {}-{} that runs backwards", static_cast<char>(lo), static_cast<char>(hi));
      }
      ranges.push_back({lo, hi});
    }
    ++at_;  // ']'
    return class_gbnf(negated ? complement(ranges) : ranges);
  }
};

}  // namespace

std::string regex_gbnf(const std::string& pattern) { return RegexParser(pattern).parse(); }

}  // namespace shoal::server
