// Byte-level grammar: builder (Thompson fragments, epsilon removal, pruning, left-recursion check)
// and the pushdown runtime. See grammar.hpp.
#include "engine/grammar/grammar.hpp"

#include <algorithm>
#include <array>
#include <sstream>

namespace quarry::engine::grammar {

std::size_t Grammar::num_byte_edges() const {
  std::size_t n = 0;
  for (const auto& nd : nodes) n += nd.bytes.size();
  return n;
}
std::size_t Grammar::num_call_edges() const {
  std::size_t n = 0;
  for (const auto& nd : nodes) n += nd.calls.size();
  return n;
}

std::string Grammar::to_string() const {
  std::ostringstream o;
  for (std::size_t r = 0; r < rules.size(); ++r)
    o << "rule " << r << " " << rules[r].name << " start=" << rules[r].start << (r == root ? " (root)" : "") << "\n";
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    if (n.bytes.empty() && n.calls.empty() && !n.final) continue;
    o << "  n" << i << (n.final ? " final" : "") << ":";
    for (const auto& e : n.bytes) {
      o << " [" << int(e.lo);
      if (e.hi != e.lo) o << "-" << int(e.hi);
      o << "]->" << e.to;
    }
    for (const auto& c : n.calls) o << " call " << rules[c.rule].name << "->" << c.ret;
    o << "\n";
  }
  return o.str();
}

// ---------------------------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------------------------

std::uint32_t GrammarBuilder::add_rule(std::string name) {
  g_.rules.push_back({std::move(name), 0});
  return static_cast<std::uint32_t>(g_.rules.size() - 1);
}

void GrammarBuilder::set_body(std::uint32_t rule, Frag body) {
  g_.rules[rule].start = body.in;
  g_.nodes[body.out].final = true;
}

std::uint32_t GrammarBuilder::node() {
  if (g_.nodes.size() >= 20'000'000) throw GrammarError("grammar too large (over 20M nodes)");
  g_.nodes.emplace_back();
  return static_cast<std::uint32_t>(g_.nodes.size() - 1);
}

GrammarBuilder::Frag GrammarBuilder::empty() {
  std::uint32_t a = node();
  return {a, a};
}

GrammarBuilder::Frag GrammarBuilder::never() { return {node(), node()}; }

GrammarBuilder::Frag GrammarBuilder::bytes(std::uint8_t lo, std::uint8_t hi) {
  std::uint32_t a = node(), b = node();
  g_.nodes[a].bytes.push_back({lo, hi, b});
  return {a, b};
}

GrammarBuilder::Frag GrammarBuilder::literal(std::string_view s) {
  std::uint32_t a = node(), cur = a;
  for (char c : s) {
    std::uint32_t nx = node();
    auto b = static_cast<std::uint8_t>(c);
    g_.nodes[cur].bytes.push_back({b, b, nx});
    cur = nx;
  }
  return {a, cur};
}

GrammarBuilder::Frag GrammarBuilder::call(std::uint32_t rule) {
  std::uint32_t a = node(), b = node();
  g_.nodes[a].calls.push_back({rule, b});
  return {a, b};
}

GrammarBuilder::Frag GrammarBuilder::seq(const std::vector<Frag>& parts) {
  if (parts.empty()) return empty();
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) eps(parts[i].out, parts[i + 1].in);
  return {parts.front().in, parts.back().out};
}

GrammarBuilder::Frag GrammarBuilder::alt(const std::vector<Frag>& parts) {
  std::uint32_t a = node(), b = node();
  for (const Frag& f : parts) {
    eps(a, f.in);
    eps(f.out, b);
  }
  return {a, b};
}

GrammarBuilder::Frag GrammarBuilder::star(Frag f) {
  std::uint32_t a = node(), b = node();
  eps(a, f.in);
  eps(a, b);
  eps(f.out, f.in);
  eps(f.out, b);
  return {a, b};
}

GrammarBuilder::Frag GrammarBuilder::opt(Frag f) {
  std::uint32_t a = node(), b = node();
  eps(a, f.in);
  eps(a, b);
  eps(f.out, b);
  return {a, b};
}

std::shared_ptr<const Grammar> GrammarBuilder::finish(std::uint32_t root_rule) {
  Grammar& g = g_;
  g.root = root_rule;
  const std::size_t n = g.nodes.size();
  // 1. Epsilon removal: each node takes the edges of its epsilon closure.
  {
    std::vector<GNode> out(n);
    std::vector<std::uint32_t> mark(n, UINT32_MAX), stack;
    for (std::uint32_t i = 0; i < n; ++i) {
      stack.assign(1, i);
      mark[i] = i;
      GNode& o = out[i];
      o.source = g.nodes[i].source;
      while (!stack.empty()) {
        std::uint32_t s = stack.back();
        stack.pop_back();
        const GNode& src = g.nodes[s];
        o.bytes.insert(o.bytes.end(), src.bytes.begin(), src.bytes.end());
        o.calls.insert(o.calls.end(), src.calls.begin(), src.calls.end());
        o.final = o.final || src.final;
        for (std::uint32_t t : src.eps)
          if (mark[t] != i) { mark[t] = i; stack.push_back(t); }
      }
    }
    g.nodes = std::move(out);
  }
  // 2. Co-reachability (worklist over reverse edges): a node is live if it can reach the end of its
  // rule; a rule is productive if its start is live; a call edge counts once its rule is productive
  // and its return node is live.
  std::vector<char> live(n, 0), productive(g.rules.size(), 0);
  {
    std::vector<std::vector<std::uint32_t>> rev(n), callers(g.rules.size());
    std::vector<std::vector<std::uint32_t>> starts_of(n);
    for (std::uint32_t k = 0; k < n; ++k) {
      for (const auto& e : g.nodes[k].bytes) rev[e.to].push_back(k);
      for (const auto& c : g.nodes[k].calls) {
        rev[c.ret].push_back(k);
        callers[c.rule].push_back(k);
      }
    }
    for (std::uint32_t r = 0; r < g.rules.size(); ++r) starts_of[g.rules[r].start].push_back(r);
    auto node_live = [&](std::uint32_t k) {
      const GNode& nd = g.nodes[k];
      if (nd.final) return true;
      for (const auto& e : nd.bytes) if (live[e.to]) return true;
      for (const auto& c : nd.calls) if (productive[c.rule] && live[c.ret]) return true;
      return false;
    };
    std::vector<std::uint32_t> work;
    for (std::uint32_t k = 0; k < n; ++k)
      if (g.nodes[k].final) { live[k] = 1; work.push_back(k); }
    while (!work.empty()) {
      std::uint32_t k = work.back();
      work.pop_back();
      for (std::uint32_t r : starts_of[k]) {
        if (productive[r]) continue;
        productive[r] = 1;
        for (std::uint32_t c : callers[r])
          if (!live[c] && node_live(c)) { live[c] = 1; work.push_back(c); }
      }
      for (std::uint32_t p : rev[k])
        if (!live[p] && node_live(p)) { live[p] = 1; work.push_back(p); }
    }
  }
  if (!productive[root_rule]) throw GrammarError("the schema accepts no JSON value (unsatisfiable)");
  // 3. Prune dead edges; sort and merge byte edges; dedupe calls.
  for (auto& nd : g.nodes) {
    std::erase_if(nd.bytes, [&](const ByteEdge& e) { return !live[e.to]; });
    std::erase_if(nd.calls, [&](const CallEdge& c) { return !productive[c.rule] || !live[c.ret]; });
    std::sort(nd.bytes.begin(), nd.bytes.end(), [](const ByteEdge& a, const ByteEdge& b) {
      return a.lo != b.lo ? a.lo < b.lo : a.to < b.to;
    });
    std::sort(nd.calls.begin(), nd.calls.end(), [](const CallEdge& a, const CallEdge& b) {
      return a.rule != b.rule ? a.rule < b.rule : a.ret < b.ret;
    });
    nd.calls.erase(std::unique(nd.calls.begin(), nd.calls.end(),
                               [](const CallEdge& a, const CallEdge& b) { return a.rule == b.rule && a.ret == b.ret; }),
                   nd.calls.end());
    std::vector<ByteEdge> merged;
    for (const auto& e : nd.bytes) {
      if (!merged.empty() && merged.back().to == e.to && merged.back().hi + 1 >= e.lo && merged.back().lo <= e.lo) {
        merged.back().hi = std::max(merged.back().hi, e.hi);
      } else if (!merged.empty() && merged.back().to == e.to && merged.back().lo == e.lo) {
        merged.back().hi = std::max(merged.back().hi, e.hi);
      } else {
        merged.push_back(e);
      }
    }
    nd.bytes = std::move(merged);
  }
  // 4. Left recursion: a rule that reaches a call to itself without consuming a byte.
  std::vector<char> nullable(g.rules.size(), 0), nnull(n, 0);
  {
    std::vector<std::vector<std::uint32_t>> rev(n), callers(g.rules.size()), starts_of(n);
    for (std::uint32_t k = 0; k < n; ++k)
      for (const auto& c : g.nodes[k].calls) {
        rev[c.ret].push_back(k);
        callers[c.rule].push_back(k);
      }
    for (std::uint32_t r = 0; r < g.rules.size(); ++r) starts_of[g.rules[r].start].push_back(r);
    auto node_null = [&](std::uint32_t k) {
      const GNode& nd = g.nodes[k];
      if (nd.final) return true;
      for (const auto& c : nd.calls) if (nullable[c.rule] && nnull[c.ret]) return true;
      return false;
    };
    std::vector<std::uint32_t> work;
    for (std::uint32_t k = 0; k < n; ++k)
      if (g.nodes[k].final) { nnull[k] = 1; work.push_back(k); }
    while (!work.empty()) {
      std::uint32_t k = work.back();
      work.pop_back();
      for (std::uint32_t r : starts_of[k]) {
        if (nullable[r]) continue;
        nullable[r] = 1;
        for (std::uint32_t c : callers[r])
          if (!nnull[c] && node_null(c)) { nnull[c] = 1; work.push_back(c); }
      }
      for (std::uint32_t p : rev[k])
        if (!nnull[p] && node_null(p)) { nnull[p] = 1; work.push_back(p); }
    }
  }
  std::vector<std::vector<std::uint32_t>> first_calls(g.rules.size());
  for (std::uint32_t r = 0; r < g.rules.size(); ++r) {
    if (!productive[r]) continue;
    std::vector<std::uint32_t> st{g.rules[r].start};
    std::unordered_map<std::uint32_t, char> seen{{g.rules[r].start, 1}};
    while (!st.empty()) {
      std::uint32_t s = st.back();
      st.pop_back();
      for (const auto& c : g.nodes[s].calls) {
        first_calls[r].push_back(c.rule);
        if (nullable[c.rule] && !seen.count(c.ret)) { seen[c.ret] = 1; st.push_back(c.ret); }
      }
    }
  }
  std::vector<int> color(g.rules.size(), 0);
  std::vector<std::pair<std::uint32_t, std::size_t>> dfs;
  for (std::uint32_t r0 = 0; r0 < g.rules.size(); ++r0) {
    if (color[r0]) continue;
    dfs.push_back({r0, 0});
    color[r0] = 1;
    while (!dfs.empty()) {
      auto& [r, k] = dfs.back();
      if (k < first_calls[r].size()) {
        std::uint32_t t = first_calls[r][k++];
        if (color[t] == 1)
          throw GrammarError("left recursion: rule '" + g.rules[t].name +
                             "' can reach itself without consuming input (a $ref cycle with no object/array in between)");
        if (color[t] == 0) { color[t] = 1; dfs.push_back({t, 0}); }
      } else {
        color[r] = 2;
        dfs.pop_back();
      }
    }
  }
  // 5. Merge equivalent nodes (Moore's partition refinement of a bisimulation): two nodes are
  // equivalent when both are final or neither, they call the same rules with equivalent return
  // nodes and they reach equivalent nodes on the same bytes. The lowered string and number automata
  // repeat such nodes per byte class and per branch; merging them gives fewer distinct parser
  // threads and states and fewer per-node mask tables.
  merge_equivalent_nodes(g);
  return std::make_shared<const Grammar>(std::move(g_));
}

void GrammarBuilder::merge_equivalent_nodes(Grammar& g) {
  // One pass in reverse topological order of the strongly connected components of the node graph
  // (edges: byte targets and call return nodes; Tarjan's algorithm emits an SCC after every SCC it
  // reaches). A node outside any cycle gets the class of its signature (finality, byte ranges per
  // target class, calls with the return class), all of whose targets are classified already: the
  // acyclic part is minimised exactly, as in Revuz's linear minimisation of acyclic automata. Nodes
  // on a cycle keep a class of their own (sound, not minimal; Moore's iteration to a fixpoint cost
  // up to 80 ms per schema on long length-counter chains).
  const std::size_t n = g.nodes.size();
  std::vector<std::uint32_t> cls(n, UINT32_MAX);
  std::uint32_t num_classes = 0;
  // Signatures in one flat pool, found by hash with chaining (no allocation per node).
  std::vector<std::uint32_t> sig, pool, sig_off, sig_len, chain;
  std::unordered_map<std::uint64_t, std::uint32_t> by_hash;  // hash -> latest class with it
  by_hash.reserve(n);
  auto new_class = [&](std::uint32_t off, std::uint32_t len, std::uint32_t next) {
    sig_off.push_back(off);
    sig_len.push_back(len);
    chain.push_back(next);
    return num_classes++;
  };
  std::vector<std::array<std::uint32_t, 3>> edges;  // (class, lo, hi)
  std::vector<std::pair<std::uint32_t, std::uint32_t>> calls;
  auto classify = [&](std::uint32_t k) {
    const GNode& nd = g.nodes[k];
    sig.clear();
    auto put = [&](std::uint32_t v) { sig.push_back(v); };
    put((nd.final ? 1u : 0u) | (static_cast<std::uint32_t>(nd.source) << 1));
    // Byte edges as the union of ranges per target class (canonical whatever the split).
    edges.clear();
    for (const auto& e : nd.bytes) edges.push_back({cls[e.to], e.lo, e.hi});
    std::sort(edges.begin(), edges.end());
    std::size_t m = 0;
    for (const auto& e : edges) {
      if (m > 0 && edges[m - 1][0] == e[0] && edges[m - 1][2] + 1 >= e[1])
        edges[m - 1][2] = std::max(edges[m - 1][2], e[2]);
      else
        edges[m++] = e;
    }
    edges.resize(m);
    put(static_cast<std::uint32_t>(m));
    for (const auto& e : edges) { put(e[0]); put(e[1] << 8 | e[2]); }
    calls.clear();
    for (const auto& c : nd.calls) calls.push_back({c.rule, cls[c.ret]});
    std::sort(calls.begin(), calls.end());
    calls.erase(std::unique(calls.begin(), calls.end()), calls.end());
    for (const auto& [r, c] : calls) { put(r); put(c); }
    std::uint64_t h = 0x9E3779B97F4A7C15ull;
    for (std::uint32_t v : sig) h = (h ^ v) * 0x100000001B3ull, h ^= h >> 29;
    auto [it, inserted] = by_hash.emplace(h, UINT32_MAX);
    for (std::uint32_t c = it->second; c != UINT32_MAX; c = chain[c])
      if (sig_len[c] == sig.size() && std::equal(sig.begin(), sig.end(), pool.begin() + sig_off[c])) {
        cls[k] = c;
        return;
      }
    const auto off = static_cast<std::uint32_t>(pool.size());
    pool.insert(pool.end(), sig.begin(), sig.end());
    cls[k] = it->second = new_class(off, static_cast<std::uint32_t>(sig.size()), it->second);
  };
  // Iterative Tarjan.
  std::vector<std::uint32_t> index(n, UINT32_MAX), low(n, 0), stack, scc;
  std::vector<char> on_stack(n, 0);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> dfs;  // (node, next successor slot)
  std::uint32_t counter = 0;
  auto succ_count = [&](std::uint32_t k) {
    return static_cast<std::uint32_t>(g.nodes[k].bytes.size() + g.nodes[k].calls.size());
  };
  auto succ = [&](std::uint32_t k, std::uint32_t i) {
    const GNode& nd = g.nodes[k];
    return i < nd.bytes.size() ? nd.bytes[i].to : nd.calls[i - nd.bytes.size()].ret;
  };
  for (std::uint32_t r = 0; r < n; ++r) {
    if (index[r] != UINT32_MAX) continue;
    dfs.push_back({r, 0});
    index[r] = low[r] = counter++;
    stack.push_back(r);
    on_stack[r] = 1;
    while (!dfs.empty()) {
      auto& [v, i] = dfs.back();
      if (i < succ_count(v)) {
        std::uint32_t w = succ(v, i++);
        if (index[w] == UINT32_MAX) {
          index[w] = low[w] = counter++;
          stack.push_back(w);
          on_stack[w] = 1;
          dfs.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      const std::uint32_t vv = v;
      dfs.pop_back();
      if (!dfs.empty()) low[dfs.back().first] = std::min(low[dfs.back().first], low[vv]);
      if (low[vv] != index[vv]) continue;
      scc.clear();
      for (;;) {
        std::uint32_t w = stack.back();
        stack.pop_back();
        on_stack[w] = 0;
        scc.push_back(w);
        if (w == vv) break;
      }
      bool self_loop = false;
      if (scc.size() == 1)
        for (std::uint32_t j = 0; j < succ_count(vv); ++j) self_loop = self_loop || succ(vv, j) == vv;
      if (scc.size() == 1 && !self_loop) {
        classify(vv);
      } else {
        for (std::uint32_t w : scc) cls[w] = new_class(0, UINT32_MAX, UINT32_MAX);
      }
    }
  }
  if (num_classes == n) return;
  // Representative of each class: its smallest node; every reference goes to it.
  std::vector<std::uint32_t> rep(num_classes, UINT32_MAX);
  for (std::uint32_t k = 0; k < n; ++k)
    if (rep[cls[k]] == UINT32_MAX) rep[cls[k]] = k;
  auto to = [&](std::uint32_t k) { return rep[cls[k]]; };
  for (std::uint32_t k = 0; k < n; ++k) {
    GNode& nd = g.nodes[k];
    if (to(k) != k) {
      nd = GNode{};  // unreachable from now on
      continue;
    }
    for (auto& e : nd.bytes) e.to = to(e.to);
    for (auto& c : nd.calls) c.ret = to(c.ret);
    std::sort(nd.bytes.begin(), nd.bytes.end(), [](const ByteEdge& a, const ByteEdge& b) {
      return a.lo != b.lo ? a.lo < b.lo : (a.to != b.to ? a.to < b.to : a.hi < b.hi);
    });
    nd.bytes.erase(std::unique(nd.bytes.begin(), nd.bytes.end(),
                               [](const ByteEdge& a, const ByteEdge& b) { return a.lo == b.lo && a.hi == b.hi && a.to == b.to; }),
                   nd.bytes.end());
    std::sort(nd.calls.begin(), nd.calls.end(), [](const CallEdge& a, const CallEdge& b) {
      return a.rule != b.rule ? a.rule < b.rule : a.ret < b.ret;
    });
    nd.calls.erase(std::unique(nd.calls.begin(), nd.calls.end(),
                               [](const CallEdge& a, const CallEdge& b) { return a.rule == b.rule && a.ret == b.ret; }),
                   nd.calls.end());
  }
  for (auto& r : g.rules) r.start = to(r.start);
}

// ---------------------------------------------------------------------------------------------
// Runtime
// ---------------------------------------------------------------------------------------------

StackPool::StackPool() { e_.push_back({0, 0, 0, 0x9E3779B97F4A7C15ull}); }

std::uint32_t StackPool::push(std::uint32_t parent, std::uint32_t ret) {
  std::uint64_t key = (static_cast<std::uint64_t>(parent) << 32) | ret;
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  std::uint64_t h = e_[parent].hash ^ (ret + 0x9E3779B97F4A7C15ull + (e_[parent].hash << 6) + (e_[parent].hash >> 2));
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  e_.push_back({parent, ret, e_[parent].depth + 1, h});
  auto id = static_cast<std::uint32_t>(e_.size() - 1);
  index_.emplace(key, id);
  return id;
}

ParseState Parser::initial() {
  seeds_.assign(1, Thread{g_->rules[g_->root].start, 0});
  ParseState s;
  close(seeds_, s);
  return s;
}

void Parser::close(std::vector<Thread>& seeds, ParseState& out) {
  out.threads.clear();
  out.can_end = false;
  seen_.clear();
  work_.assign(seeds.begin(), seeds.end());
  const auto& nodes = g_->nodes;
  while (!work_.empty()) {
    Thread t = work_.back();
    work_.pop_back();
    if (std::find(seen_.begin(), seen_.end(), t) != seen_.end()) continue;
    seen_.push_back(t);
    const GNode& nd = nodes[t.node];
    if (!nd.bytes.empty()) out.threads.push_back(t);
    if (!nd.calls.empty() && pool_.depth(t.stack) < StackPool::kMaxDepth)
      for (const auto& c : nd.calls) work_.push_back({g_->rules[c.rule].start, pool_.push(t.stack, c.ret)});
    if (nd.final) {
      if (t.stack == 0) out.can_end = true;
      else work_.push_back({pool_.top(t.stack), pool_.parent(t.stack)});
    }
  }
  if (out.threads.size() > 1) {
    std::sort(out.threads.begin(), out.threads.end());
    out.threads.erase(std::unique(out.threads.begin(), out.threads.end()), out.threads.end());
  }
}

bool Parser::advance(const ParseState& in, std::uint8_t b, ParseState& out) {
  seeds_.clear();
  const auto& nodes = g_->nodes;
  for (const Thread& t : in.threads)
    for (const ByteEdge& e : nodes[t.node].bytes) {
      if (e.lo > b) break;
      if (b <= e.hi) seeds_.push_back({e.to, t.stack});
    }
  // Fast path (string bodies, literals): one thread landing on a node that neither calls nor ends a
  // rule needs no closure.
  if (seeds_.size() == 1) {
    const GNode& nd = nodes[seeds_[0].node];
    if (nd.calls.empty() && !nd.final) {
      out.threads.assign(1, seeds_[0]);
      out.can_end = false;
      return true;  // live: a node with neither calls nor final has byte edges after pruning
    }
  }
  close(seeds_, out);
  return !out.dead();
}

void Parser::next_bytes(const ParseState& s, std::uint32_t words[8]) const {
  for (int k = 0; k < 8; ++k) words[k] = 0;
  for (const Thread& t : s.threads)
    for (const ByteEdge& e : g_->nodes[t.node].bytes)
      for (unsigned c = e.lo; c <= e.hi; ++c) words[c >> 5] |= 1u << (c & 31);
}

}  // namespace quarry::engine::grammar
