// Byte-level grammar: a recursive transition network (one automaton per rule, byte-range edges and
// rule-call edges) and the pushdown runtime that advances a set of parser threads byte by byte.
//
// Design (sources): XGrammar (Dong et al. 2024, "XGrammar: Flexible and Efficient Structured
// Generation Engine for Large Language Models"): byte-level pushdown automaton, persistent stack shared
// between parallel threads, rollback by keeping earlier states; llguidance (derivre lexer) for the idea
// of lexing at the byte level; classic RTN / Earley-style threads with hash-consed stacks.
//
// A thread is (node, stack): `node` a position inside a rule's automaton that consumes a byte;
// `stack` an id in a StackPool of return nodes. Epsilon moves are removed at build time; rule calls
// and rule ends are followed by `close()`. Grammars are immutable after GrammarBuilder::finish() and
// may be shared between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace quarry::engine::grammar {

/// Grammar construction error (unsatisfiable grammar, left recursion, size limits).
struct GrammarError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ByteEdge {
  std::uint8_t lo, hi;
  std::uint32_t to;
};
struct CallEdge {
  std::uint32_t rule;  ///< rule to enter
  std::uint32_t ret;   ///< node to continue at after the rule ends
};
struct GNode {
  std::vector<ByteEdge> bytes;  ///< sorted by lo after finish()
  std::vector<CallEdge> calls;
  std::vector<std::uint32_t> eps;  ///< empty after finish()
  bool final = false;              ///< the rule may end here
  /// Grounded value this node lies in (grounding.hpp SourceKind: 0 free, 1 copy, 2 number, 3 date):
  /// the nodes of a grounded string's body (from just after its opening quote) or of a grounded number.
  std::uint8_t source = 0;
};
struct GRule {
  std::string name;
  std::uint32_t start = 0;
};

/// Immutable byte-level grammar.
class Grammar {
 public:
  std::vector<GNode> nodes;
  std::vector<GRule> rules;
  std::uint32_t root = 0;  ///< root rule id

  std::size_t num_byte_edges() const;
  std::size_t num_call_edges() const;
  /// Human-readable listing (one line per node), for debugging and `quarry schema compile -v`.
  std::string to_string() const;
};

/// Builds a Grammar from Thompson fragments. Every fragment belongs to the rule whose body it ends up
/// in; a fragment must be used once (build it again for repetition).
class GrammarBuilder {
 public:
  struct Frag {
    std::uint32_t in, out;
  };
  std::uint32_t add_rule(std::string name);
  void set_body(std::uint32_t rule, Frag body);
  std::uint32_t node();
  Frag empty();
  Frag bytes(std::uint8_t lo, std::uint8_t hi);
  Frag literal(std::string_view s);
  Frag call(std::uint32_t rule);
  Frag seq(const std::vector<Frag>& parts);
  Frag alt(const std::vector<Frag>& parts);
  Frag star(Frag f);
  Frag opt(Frag f);
  /// A fragment that accepts nothing (its out node is unreachable).
  Frag never();
  void eps(std::uint32_t from, std::uint32_t to) { g_.nodes[from].eps.push_back(to); }
  /// Tags node k as part of a grounded value (GNode::source). Kept by finish(); nodes with different
  /// tags are never merged.
  void set_source(std::uint32_t k, std::uint8_t kind) { g_.nodes[k].source = kind; }
  std::size_t num_nodes() const { return g_.nodes.size(); }

  /// Removes epsilon moves, prunes everything that cannot complete (empty languages), checks for left
  /// recursion. Throws GrammarError if the root rule accepts nothing or a rule can call itself
  /// without consuming a byte.
  std::shared_ptr<const Grammar> finish(std::uint32_t root_rule);

 private:
  static void merge_equivalent_nodes(Grammar& g);
  Grammar g_;
};

/// Hash-consed persistent stacks of return nodes; id 0 is the empty stack.
class StackPool {
 public:
  StackPool();
  std::uint32_t push(std::uint32_t parent, std::uint32_t ret);
  std::uint32_t parent(std::uint32_t id) const { return e_[id].parent; }
  std::uint32_t top(std::uint32_t id) const { return e_[id].ret; }
  std::uint32_t depth(std::uint32_t id) const { return e_[id].depth; }
  /// Content hash (equal stacks in different pools have equal hashes).
  std::uint64_t hash(std::uint32_t id) const { return e_[id].hash; }
  std::size_t size() const { return e_.size(); }

  static constexpr std::uint32_t kMaxDepth = 4096;

 private:
  struct E {
    std::uint32_t parent, ret, depth;
    std::uint64_t hash;
  };
  std::vector<E> e_;
  std::unordered_map<std::uint64_t, std::uint32_t> index_;
};

struct Thread {
  std::uint32_t node, stack;
  bool operator==(const Thread& o) const { return node == o.node && stack == o.stack; }
  bool operator<(const Thread& o) const { return node != o.node ? node < o.node : stack < o.stack; }
};

/// The parser state after some bytes: the threads waiting for a byte (sorted, unique) and whether
/// the root rule may end here.
struct ParseState {
  std::vector<Thread> threads;
  bool can_end = false;
  bool dead() const { return threads.empty() && !can_end; }
};

/// Advances parse states over one grammar. Holds scratch buffers (not thread-safe; one per matcher).
class Parser {
 public:
  explicit Parser(const Grammar& g) : g_(&g) {}
  const Grammar& grammar() const { return *g_; }
  StackPool& pool() { return pool_; }

  /// The state before any byte.
  ParseState initial();
  /// Follows calls and rule ends from `seeds` into `out` (out.threads sorted, unique).
  void close(std::vector<Thread>& seeds, ParseState& out);
  /// out = state after byte b from `in`; returns !out.dead().
  bool advance(const ParseState& in, std::uint8_t b, ParseState& out);
  /// The set of bytes some thread can consume (256-bit set as 8 words).
  void next_bytes(const ParseState& s, std::uint32_t words[8]) const;

 private:
  const Grammar* g_;
  StackPool pool_;
  std::vector<Thread> seeds_, work_, seen_;
};

}  // namespace quarry::engine::grammar
