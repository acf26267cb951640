#include "jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "jinja/error.h"
#include "util/utf8_append.h"

namespace shoal::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string rstrip(const std::string& s) {
  size_t n = s.size();
  while (n > 0 && is_space(s[n - 1])) --n;
  return s.substr(0, n);
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos_));
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : 0;
      std::string text = src_.substr(pos_, tag - pos_);
      if (sign == '-') {
        text = rstrip(text);
      } else if (sign != '+' && kind != '{') {
        size_t line_start = text.rfind('\n');
        line_start = line_start == std::string::npos ? 0 : line_start + 1;
        if ((line_start > 0 || line_starting) &&
            std::all_of(text.begin() + line_start, text.end(), is_space))
          text.resize(line_start);
      }
      emit_text(text);
      size_t inner = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        size_t end = src_.find("#}", inner);
        if (end == std::string::npos) throw TemplateError(at(tag, "unclosed comment"));
        pos_ = close_tag(end, 2, src_[end - 1], true);
      } else if (kind == '%' && is_raw(inner)) {
        lex_raw(tag);
      } else {
        lex_tag(tag, inner, kind == '%');
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back({Token::Kind::End, "", line_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  std::string src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  int line_ = 1;

  int line_of(size_t p) {
    if (p < line_pos_) {
      line_pos_ = 0;
      line_ = 1;
    }
    line_ += static_cast<int>(std::count(src_.begin() + line_pos_, src_.begin() + p, '\n'));
    line_pos_ = p;
    return line_;
  }

  std::string at(size_t p, const std::string& what) { return "template line " + std::to_string(line_of(p)) + ": " + what; }

  size_t find_tag(size_t from) {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1))
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    return std::string::npos;
  }

  void emit_text(const std::string& text) {
    if (!text.empty()) tokens_.push_back({Token::Kind::Text, text, line_of(pos_)});
  }

  // The position after a tag's closing delimiter at `end` (`width` long),
  // with `before` the character before it: "-" eats the whitespace after,
  // "+" keeps it, and a block or comment tag eats one newline (trim_blocks).
  size_t close_tag(size_t end, size_t width, char before, bool trims) {
    size_t p = end + width;
    if (before == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (before != '+' && trims && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  bool is_raw(size_t p) {
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    return src_.compare(p, 2, "%}") == 0;
  }

  void lex_raw(size_t tag) {
    size_t open_end = src_.find("%}", tag) + 2;
    size_t start = close_tag(open_end - 2, 2, src_[open_end - 3], true);
    for (size_t p = src_.find("{%", start); p != std::string::npos; p = src_.find("{%", p + 2)) {
      size_t q = p + 2;
      char sign = q < src_.size() ? src_[q] : 0;
      if (sign == '-' || sign == '+') ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      char before = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) before = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(start, p - start);
      if (sign == '-') text = rstrip(text);
      pos_ = start;
      emit_text(text);
      pos_ = close_tag(q, 2, before, true);
      return;
    }
    throw TemplateError(at(tag, "{% raw %} without {% endraw %}"));
  }

  void lex_tag(size_t tag, size_t p, bool block) {
    tokens_.push_back({block ? Token::Kind::BlockBegin : Token::Kind::VarBegin, "", line_of(tag)});
    int depth = 0;  // open brackets: a '}' inside a dict literal does not end the tag
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) throw TemplateError(at(tag, block ? "unclosed {% tag" : "unclosed {{ tag"));
      const char* close = block ? "%}" : "}}";
      if (depth == 0) {
        char c = src_[p];
        if ((c == '-' || c == '+') && src_.compare(p + 1, 2, close) == 0) {
          tokens_.push_back({block ? Token::Kind::BlockEnd : Token::Kind::VarEnd, "", line_of(p)});
          pos_ = close_tag(p + 1, 2, c, block);
          return;
        }
        if (src_.compare(p, 2, close) == 0) {
          tokens_.push_back({block ? Token::Kind::BlockEnd : Token::Kind::VarEnd, "", line_of(p)});
          pos_ = close_tag(p, 2, 0, block);
          return;
        }
      }
      p = lex_one(p, depth);
    }
  }

  size_t lex_one(size_t p, int& depth) {
    int line = line_of(p);
    char c = src_[p];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t q = p;
      while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
      tokens_.push_back({Token::Kind::Name, src_.substr(p, q - p), line});
      return q;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(p, line);
    if (c == '\'' || c == '"') return lex_string(p, line);
    static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : two)
      if (src_.compare(p, 2, op) == 0) {
        tokens_.push_back({Token::Kind::Op, op, line});
        return p + 2;
      }
    if (std::string("+-*/%~()[]{},.:|=<>;!").find(c) == std::string::npos)
      throw TemplateError(at(p, std::string("unexpected character '") + c + "'"));
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    tokens_.push_back({Token::Kind::Op, std::string(1, c), line});
    return p + 1;
  }

  size_t lex_number(size_t p, int line) {
    size_t q = p;
    auto digits = [&] {
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
    };
    digits();
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      is_float = true;
      ++q;
      digits();
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t e = q + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        q = e;
        digits();
      }
    }
    std::string text = src_.substr(p, q - p);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    tokens_.push_back({is_float ? Token::Kind::Float : Token::Kind::Int, text, line});
    return q;
  }

  // A Python string literal's escapes, as jinja2 decodes them.
  size_t lex_string(size_t p, int line) {
    char quote = src_[p];
    std::string out;
    size_t q = p + 1;
    while (true) {
      if (q >= src_.size()) throw TemplateError(at(p, "unterminated string"));
      char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) throw TemplateError(at(p, "unterminated string"));
      char e = src_[q + 1];
      q += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (q + n > src_.size()) throw TemplateError(at(p, "truncated escape in a string"));
          append_utf8(static_cast<uint32_t>(std::stoul(src_.substr(q, n), nullptr, 16)), out);
          q += n;
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    tokens_.push_back({Token::Kind::String, out, line});
    return q + 1;
  }
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r' && i + 1 < source.size() && source[i + 1] == '\n') continue;
    s += source[i];
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();  // keep_trailing_newline=False
  return Lexer(std::move(s)).run();
}

}  // namespace shoal::jinja
