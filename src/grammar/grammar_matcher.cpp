#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <unordered_map>

#include "util/error.h"

namespace shoal::grammar {
namespace {

// The least code point each UTF-8 length spells (shorter forms are overlong).
constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};

// Readings of the text at once: a grammar that needs more is ambiguous past
// use (each step costs time in proportion).
constexpr size_t kMaxStacks = 4096;
// Rule references followed before a character: a deeper chain is refused
// rather than allowed to exhaust the thread's stack.
constexpr int kMaxExpansion = 1000;

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  const Grammar& g = *grammar_;
  for (uint32_t alt : g.rules[g.root]) {
    Stack stack;
    if (g.symbols[alt].kind != Symbol::Kind::End) stack.push_back(alt);
    expand(std::move(stack), state_.stacks);
  }
}

// Replaces a rule reference on top by each of its alternatives, until every
// stack shows a character set (or is empty). Left recursion was refused by
// the parser, so this ends.
void GrammarMatcher::expand(Stack stack, std::vector<Stack>& out, int depth) const {
  const Grammar& g = *grammar_;
  if (!stack.empty() && g.symbols[stack.back()].kind == Symbol::Kind::Rule) {
    if (depth > kMaxExpansion)
      fail("the grammar nests rules more than {} deep before a character", kMaxExpansion);
    const uint32_t at = stack.back();
    stack.pop_back();
    if (g.symbols[at + 1].kind != Symbol::Kind::End) stack.push_back(at + 1);
    for (uint32_t alt : g.rules[g.symbols[at].rule]) {
      Stack next = stack;
      if (g.symbols[alt].kind != Symbol::Kind::End) next.push_back(alt);
      expand(std::move(next), out, depth + 1);
    }
    return;
  }
  if (std::find(out.begin(), out.end(), stack) != out.end()) return;
  if (out.size() >= kMaxStacks)
    fail("the grammar is too ambiguous: more than {} ways to read the text at once", kMaxStacks);
  out.push_back(std::move(stack));
}

void GrammarMatcher::advance_char(const std::vector<Stack>& from, uint32_t cp, std::vector<Stack>& to) const {
  const Grammar& g = *grammar_;
  for (const Stack& stack : from) {
    if (stack.empty()) continue;
    const uint32_t at = stack.back();
    if (!g.matches(g.symbols[at], cp)) continue;
    Stack next(stack.begin(), stack.end() - 1);
    if (g.symbols[at + 1].kind != Symbol::Kind::End) next.push_back(at + 1);
    expand(std::move(next), to);
  }
}

GrammarMatcher::Utf8Step GrammarMatcher::utf8_step(Utf8& u, uint8_t byte, uint32_t& cp) {
  if (u.need == 0) {
    if (byte < 0x80) {
      cp = byte;
      return Utf8Step::kComplete;
    }
    // 0xC0, 0xC1 start only overlong forms, above 0xF4 lies beyond U+10FFFF.
    const int need = byte >= 0xC2 && byte <= 0xDF ? 1 : (byte >> 4) == 0xE ? 2 : byte >= 0xF0 && byte <= 0xF4 ? 3 : 0;
    if (need == 0) return Utf8Step::kRefused;  // a continuation byte with nothing to continue, or not UTF-8
    u = {byte & (0x3Fu >> need), static_cast<uint8_t>(need), static_cast<uint8_t>(need + 1)};
    return Utf8Step::kPending;
  }
  if ((byte & 0xC0) != 0x80) return Utf8Step::kRefused;
  u.partial = (u.partial << 6) | (byte & 0x3Fu);
  --u.need;
  // An overlong form spells a character a shorter one spells ("c" as
  // C1 A3): the grammar must not take bytes that decode to a "c" but are
  // not one. Refused as soon as even the largest character the bytes so
  // far could still spell would fit in fewer bytes.
  const uint32_t shift = 6u * u.need;
  if (((u.partial << shift) | ((1u << shift) - 1)) < kLeast[u.length]) return Utf8Step::kRefused;
  if (u.need > 0) return Utf8Step::kPending;
  if (u.partial > 0x10FFFF || (u.partial >= 0xD800 && u.partial <= 0xDFFF)) return Utf8Step::kRefused;
  cp = u.partial;
  u = {};
  return Utf8Step::kComplete;
}

bool GrammarMatcher::may_continue(const std::vector<Stack>& stacks, const Utf8& u) const {
  const Grammar& g = *grammar_;
  const uint32_t shift = 6u * u.need;
  const uint32_t lo = std::max(u.partial << shift, kLeast[u.length]);
  const uint32_t hi = std::min((u.partial << shift) | ((1u << shift) - 1), 0x10FFFFu);
  return std::any_of(stacks.begin(), stacks.end(), [&](const Stack& s) {
    return !s.empty() && g.may_match(g.symbols[s.back()], lo, hi);
  });
}

bool GrammarMatcher::advance(State& state, uint8_t byte) const {
  uint32_t cp = 0;
  switch (utf8_step(state.utf8, byte, cp)) {
    case Utf8Step::kRefused: return false;
    case Utf8Step::kPending: return may_continue(state.stacks, state.utf8);
    case Utf8Step::kComplete: break;
  }
  std::vector<Stack> next;
  advance_char(state.stacks, cp, next);
  if (next.empty()) return false;
  state.stacks = std::move(next);
  return true;
}

bool GrammarMatcher::accept(std::string_view bytes) {
  State next = state_;
  for (char c : bytes) {
    if (!advance(next, static_cast<uint8_t>(c))) return false;
  }
  state_ = std::move(next);
  return true;
}

bool GrammarMatcher::accepting() const {
  return state_.utf8.need == 0 &&
         std::any_of(state_.stacks.begin(), state_.stacks.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarMatcher::finished() const {
  return state_.utf8.need == 0 &&
         std::all_of(state_.stacks.begin(), state_.stacks.end(), [](const Stack& s) { return s.empty(); });
}

// The trie walk visits hundreds of thousands of nodes where most tokens may
// follow (inside a string), but the sets of stacks it passes through are
// few: the string's again after each character. So each distinct set is
// stored once, with its moves by character filled in as first needed, and a
// half-read character is carried beside it as plain numbers: a node costs
// a table lookup or a little arithmetic.
class GrammarMatcher::Walk {
 public:
  Walk(const GrammarMatcher& matcher, const ByteTrie& trie, std::vector<uint8_t>& allowed)
      : matcher_(matcher), trie_(trie), allowed_(allowed) {}

  void run(const State& start) { visit(ByteTrie::kRoot, intern(start.stacks), start.utf8); }

 private:
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kRefused = -1;

  struct Set {
    std::vector<Stack> stacks;
    std::array<int32_t, 128> ascii;  // the set after each ASCII character
  };

  int32_t intern(std::vector<Stack> stacks) {
    std::string key;
    for (const Stack& stack : stacks) {
      const uint32_t n = static_cast<uint32_t>(stack.size());
      key.append(reinterpret_cast<const char*>(&n), sizeof n);
      key.append(reinterpret_cast<const char*>(stack.data()), stack.size() * sizeof(uint32_t));
    }
    const auto [it, added] = ids_.try_emplace(std::move(key), static_cast<int32_t>(sets_.size()));
    if (added) {
      sets_.push_back({std::move(stacks), {}});
      sets_.back().ascii.fill(kUnknown);
    }
    return it->second;
  }

  // Beyond ASCII there are tens of thousands of characters in a vocabulary,
  // but what a character does to a set depends only on which stacks take
  // it: the move is kept per (set, that choice).
  int32_t move(int32_t from, uint32_t cp) {
    const Set& set = sets_[static_cast<size_t>(from)];
    std::pair<int32_t, uint64_t> wide_key{from, 0};
    if (cp < 128) {
      if (set.ascii[cp] != kUnknown) return set.ascii[cp];
    } else if (set.stacks.size() <= 64) {
      const Grammar& g = *matcher_.grammar_;
      for (size_t i = 0; i < set.stacks.size(); ++i) {
        const Stack& s = set.stacks[i];
        if (!s.empty() && g.matches(g.symbols[s.back()], cp)) wide_key.second |= uint64_t{1} << i;
      }
      if (wide_key.second == 0) return kRefused;
      if (const auto it = wide_.find(wide_key); it != wide_.end()) return it->second;
    }
    std::vector<Stack> next;
    matcher_.advance_char(set.stacks, cp, next);
    const int32_t to = next.empty() ? kRefused : intern(std::move(next));
    if (cp < 128) {
      sets_[static_cast<size_t>(from)].ascii[cp] = to;  // re-indexed: intern may grow sets_
    } else if (sets_[static_cast<size_t>(from)].stacks.size() <= 64) {
      wide_[wide_key] = to;
    }
    return to;
  }

  void visit(uint32_t node, int32_t set, Utf8 utf8) {
    const ByteTrie::Node& n = trie_.node(node);
    for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
      const ByteTrie::Node& child = trie_.node(c);
      Utf8 u = utf8;
      uint32_t cp = 0;
      int32_t next = set;
      switch (utf8_step(u, child.byte, cp)) {
        case Utf8Step::kRefused: continue;
        case Utf8Step::kPending:
          if (!matcher_.may_continue(sets_[static_cast<size_t>(set)].stacks, u)) continue;
          break;
        case Utf8Step::kComplete:
          next = move(set, cp);
          if (next == kRefused) continue;
          break;
      }
      for (uint32_t t = child.first_token; t < child.first_token + child.n_tokens; ++t)
        allowed_[static_cast<size_t>(trie_.token(t))] = 1;
      if (child.n_children) visit(c, next, u);
    }
  }

  const GrammarMatcher& matcher_;
  const ByteTrie& trie_;
  std::vector<uint8_t>& allowed_;
  std::vector<Set> sets_;
  std::unordered_map<std::string, int32_t> ids_;
  std::map<std::pair<int32_t, uint64_t>, int32_t> wide_;  // (set, which stacks take a wide character) → set
};

void GrammarMatcher::allowed_tokens(const ByteTrie& trie, std::vector<uint8_t>& allowed) const {
  Walk(*this, trie, allowed).run(state_);
}

}  // namespace shoal::grammar
