#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "util/error.h"

namespace shoal::grammar {
namespace {

// The least code point each UTF-8 length spells (shorter forms are overlong).
constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};

// Readings of the text at once: a grammar that needs more is ambiguous past
// use (each step costs time in proportion).
constexpr size_t kMaxStacks = 4096;
// Positions on one stack: rule references followed before a character
// (each leaves its continuation behind); a deeper chain is refused.
constexpr size_t kMaxStackDepth = 1000;

struct StackHash {
  size_t operator()(const std::vector<uint32_t>& s) const {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
    for (uint32_t x : s) h = (h ^ x) * 0x100000001B3ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

}  // namespace

void GrammarMatcher::Work::charge(uint64_t steps) {
  done_ += steps;
  if (done_ > kWorkPerToken)
    fail("the grammar is too costly to follow: over {} steps of expansion for one token (rules that branch into "
         "the same rules many ways over)",
         kWorkPerToken);
}

// Replaces the rule reference on top of each stack by each of its
// alternatives, until every stack shows a character set (or is empty). A
// stack met before in this expansion (the same positions reached another
// way) is not expanded again: `a ::= b | b`, forty rules deep, is forty
// steps, not 2^40. Left recursion was refused by the parser, so it ends.
class GrammarMatcher::Expansion {
 public:
  Expansion(const Grammar& g, std::vector<Stack>& out, Work& work) : g_(g), out_(out), work_(work) {
    for (const Stack& s : out_) seen_.insert(s);
  }

  void add(Stack stack) {
    todo_.push_back(std::move(stack));
    while (!todo_.empty()) {
      Stack s = std::move(todo_.back());
      todo_.pop_back();
      work_.charge(1 + s.size() / 16);
      if (!seen_.insert(s).second) continue;
      if (s.empty() || g_.symbols[s.back()].kind != Symbol::Kind::Rule) {
        if (out_.size() >= kMaxStacks)
          fail("the grammar is too ambiguous: more than {} ways to read the text at once", kMaxStacks);
        out_.push_back(std::move(s));
        continue;
      }
      if (s.size() >= kMaxStackDepth)
        fail("the grammar nests rules more than {} deep before a character", kMaxStackDepth);
      const uint32_t at = s.back();
      s.pop_back();
      if (g_.symbols[at + 1].kind != Symbol::Kind::End) s.push_back(at + 1);
      const auto& alts = g_.rules[g_.symbols[at].rule];
      // In reverse, so that the first alternative is expanded first (the
      // order of the stacks, and so of nothing a user sees, but kept stable).
      for (auto alt = alts.rbegin(); alt != alts.rend(); ++alt) {
        Stack next = s;
        if (g_.symbols[*alt].kind != Symbol::Kind::End) next.push_back(*alt);
        todo_.push_back(std::move(next));
      }
    }
  }

 private:
  const Grammar& g_;
  std::vector<Stack>& out_;
  Work& work_;
  std::vector<Stack> todo_;
  std::unordered_set<Stack, StackHash> seen_;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  const Grammar& g = *grammar_;
  Work work;
  Expansion expansion(g, state_.stacks, work);
  for (uint32_t alt : g.rules[g.root]) {
    Stack stack;
    if (g.symbols[alt].kind != Symbol::Kind::End) stack.push_back(alt);
    expansion.add(std::move(stack));
  }
}

void GrammarMatcher::advance_char(const std::vector<Stack>& from, uint32_t cp, std::vector<Stack>& to,
                                  Work& work) const {
  const Grammar& g = *grammar_;
  Expansion expansion(g, to, work);
  for (const Stack& stack : from) {
    if (stack.empty()) continue;
    const uint32_t at = stack.back();
    if (!g.matches(g.symbols[at], cp)) continue;
    Stack next(stack.begin(), stack.end() - 1);
    if (g.symbols[at + 1].kind != Symbol::Kind::End) next.push_back(at + 1);
    expansion.add(std::move(next));
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

bool GrammarMatcher::advance(State& state, uint8_t byte, Work& work) const {
  uint32_t cp = 0;
  switch (utf8_step(state.utf8, byte, cp)) {
    case Utf8Step::kRefused: return false;
    case Utf8Step::kPending: return may_continue(state.stacks, state.utf8);
    case Utf8Step::kComplete: break;
  }
  std::vector<Stack> next;
  advance_char(state.stacks, cp, next, work);
  if (next.empty()) return false;
  state.stacks = std::move(next);
  return true;
}

bool GrammarMatcher::accept(std::string_view bytes) {
  State next = state_;
  Work work;
  for (char c : bytes) {
    if (!advance(next, static_cast<uint8_t>(c), work)) return false;
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
    matcher_.advance_char(set.stacks, cp, next, work_);
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
          work_.charge(sets_[static_cast<size_t>(set)].stacks.size() / 64);  // a large set costs a scan
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
  GrammarMatcher::Work work_;  // one mask is one token's work
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
