#pragma once
// The parsed template: expressions and statements, each with the line it
// came from (errors name it).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace shoal::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,    // literal
    Name,       // name
    ListLit,    // args: the items
    DictLit,    // args: key, value, key, value, …
    Attr,       // args[0].name
    Item,       // args[0][args[1]]
    Slice,      // args[0][args[1]:args[2]:args[3]], a null part absent
    Call,       // args[0](args[1..], kwargs)
    Filter,     // args[0] | name(args[1..], kwargs)
    Test,       // args[0] is [not] name(args[1..]); negated for "is not"
    Unary,      // name: "-", "+", "not"; args[0]
    Binary,     // name: the operator, incl. "and", "or", "in", "not in", comparisons; args[0], args[1]
    Conditional,  // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line;
  int depth = 1;  // levels of expressions under and including this one (the parser bounds it)
  Value literal;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, FilterBlock, Plain };
  Kind kind;
  int line;
  std::string text;                    // Text; the set target's attribute (ns.attr); a macro's name
  ExprPtr expr;                        // Output; For: the iterable; Set: the value, or ns of ns.attr
  ExprPtr value;                       // Set ns.attr: the value
  ExprPtr condition;                   // For: the "if" filter
  std::vector<std::string> targets;    // For's loop names; Set's names; a macro's parameters
  std::vector<ExprPtr> defaults;       // a macro's parameter defaults (null: none)
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition or null for else, body)
  Body body;                           // For, SetBlock, Macro, FilterBlock (expr: the filter), Plain
  Body else_body;                      // For's else
  bool recursive = false;
};

}  // namespace shoal::jinja
