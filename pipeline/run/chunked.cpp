// Windows of a long document and the merge of their records (see chunked.hpp).
#include "pipeline/run/chunked.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "engine/grammar/grounding.hpp"
#include "pipeline/rag/rag.hpp"
#include "pipeline/run/records.hpp"

namespace quarry::run {

namespace {

using json = nlohmann::ordered_json;

/// A piece of the document: [start, end) bytes of page `page` (0-based), with its token count.
struct Piece {
  std::size_t page = 0, start = 0, end = 0, tokens = 0;
};

/// The document's text from (page pa, byte sa) to (page pb, byte eb), pages joined by '\f'.
std::string slice(const std::vector<std::string>& pages, std::size_t pa, std::size_t sa, std::size_t pb,
                  std::size_t eb) {
  std::string t;
  for (std::size_t p = pa; p <= pb; ++p) {
    if (p > pa) t.push_back('\f');
    const std::size_t s = p == pa ? std::min(sa, pages[p].size()) : 0;
    const std::size_t e = p == pb ? std::min(eb, pages[p].size()) : pages[p].size();
    if (e > s) t.append(pages[p], s, e - s);
  }
  return t;
}

/// RFC 6901 escaping of one reference token.
std::string escape_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out.push_back(c);
  }
  return out;
}

/// A value's comparison key for duplicates: strings upper-cased (ASCII) with white space runs made one
/// space and trimmed; objects by their members sorted by name; arrays element by element.
std::string norm(const json& v) {
  if (v.is_string()) {
    std::string out;
    bool space = false;
    for (unsigned char c : v.get_ref<const std::string&>()) {
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        space = !out.empty();
        continue;
      }
      if (space) out.push_back(' ');
      space = false;
      out.push_back(c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : static_cast<char>(c));
    }
    return "s" + out;
  }
  if (v.is_object()) {
    std::map<std::string, std::string> members;
    for (const auto& [k, x] : v.items()) members[k] = norm(x);
    std::string out = "{";
    for (const auto& [k, x] : members) out += json(k).dump() + ":" + x + ",";
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (const auto& x : v) out += norm(x) + ",";
    return out + "]";
  }
  return v.dump();
}

/// Copies the evidence entries of `ev` at `from` and below to `to` (same suffixes) in `out`.
void copy_evidence(const json& ev, const std::string& from, const std::string& to, json& out) {
  if (!ev.is_object()) return;
  for (const auto& [k, e] : ev.items()) {
    if (k == from || (k.size() > from.size() && k.compare(0, from.size(), from) == 0 && k[from.size()] == '/'))
      out[to + k.substr(from.size())] = e;
  }
}

/// Removes the entries of `ev` at `ptr` and below.
void erase_evidence(json& ev, const std::string& ptr) {
  std::vector<std::string> gone;
  for (const auto& [k, _] : ev.items())
    if (k == ptr || (k.size() > ptr.size() && k.compare(0, ptr.size(), ptr) == 0 && k[ptr.size()] == '/'))
      gone.push_back(k);
  for (const auto& k : gone) ev.erase(k);
}

struct Candidate {
  std::size_t window;
  const json* value;
  std::string pointer;  ///< in the window's record
};

class Merger {
 public:
  explicit Merger(const std::vector<WindowRecord>& w) : windows_(w) {}

  MergedRecord run() {
    std::vector<Candidate> roots;
    for (std::size_t i = 0; i < windows_.size(); ++i)
      if (!windows_[i].data.is_null()) roots.push_back({i, &windows_[i].data, ""});
    MergedRecord out;
    out.data = merge(roots, "", out.evidence);
    out.windows_used.assign(used_.begin(), used_.end());
    out.alternatives = std::move(alternatives_);
    return out;
  }

 private:
  const std::vector<WindowRecord>& windows_;
  std::set<std::size_t> used_;
  std::map<std::string, std::vector<Alternative>> alternatives_;

  /// Copies the evidence entries of window `w` at `from` and below to `to` (same suffixes).
  void take_evidence(std::size_t w, const std::string& from, const std::string& to, json& out) {
    used_.insert(w);
    copy_evidence(windows_[w].evidence, from, to, out);
  }

  bool supported(const Candidate& c) {
    const json& ev = windows_[c.window].evidence;
    if (ev.is_object() && ev.contains(c.pointer)) return true;
    if (!c.value->is_string()) return false;
    const auto& s = c.value->get_ref<const std::string&>();
    if (s.empty()) return false;
    return engine::grammar::find_copy_span(engine::grammar::split_pages(windows_[c.window].text), s).has_value();
  }

  json merge(const std::vector<Candidate>& cands, const std::string& ptr, json& evidence) {
    std::vector<Candidate> nn;
    for (const auto& c : cands)
      if (!c.value->is_null()) nn.push_back(c);
    if (nn.empty()) return nullptr;
    const bool all_arrays = std::all_of(nn.begin(), nn.end(), [](const Candidate& c) { return c.value->is_array(); });
    const bool all_objects = std::all_of(nn.begin(), nn.end(), [](const Candidate& c) { return c.value->is_object(); });
    if (all_arrays) {
      json out = json::array();
      std::set<std::string> scalars_taken;
      std::vector<std::string> prev_norms;
      std::size_t prev_window = static_cast<std::size_t>(-1);
      for (const auto& c : nn) {
        std::vector<std::string> norms;
        const bool after_neighbour = prev_window != static_cast<std::size_t>(-1) && c.window == prev_window + 1;
        std::size_t i = 0;
        for (const auto& item : *c.value) {
          const std::string n = norm(item);
          norms.push_back(n);
          const bool structured = item.is_object() || item.is_array();
          const bool dup = structured ? after_neighbour && std::find(prev_norms.begin(), prev_norms.end(), n) != prev_norms.end()
                                      : scalars_taken.count(n) > 0;
          if (!dup && !item.is_null()) {
            const std::string to = ptr + "/" + std::to_string(out.size());
            out.push_back(item);
            take_evidence(c.window, c.pointer + "/" + std::to_string(i), to, evidence);
            if (!structured) scalars_taken.insert(n);
          }
          ++i;
        }
        prev_norms = std::move(norms);
        prev_window = c.window;
      }
      return out;
    }
    if (all_objects) {
      json out = json::object();
      std::vector<std::string> keys;
      for (const auto& c : nn)
        for (const auto& [k, _] : c.value->items())
          if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
      for (const auto& k : keys) {
        std::vector<Candidate> sub;
        for (const auto& c : nn)
          if (auto it = c.value->find(k); it != c.value->end())
            sub.push_back({c.window, &*it, c.pointer + "/" + escape_token(k)});
        out[k] = merge(sub, ptr + "/" + escape_token(k), evidence);
      }
      return out;
    }
    // A scalar (or values of different kinds): the first supported value, else the first one.
    std::vector<const Candidate*> ranked_supported, ranked_other;
    for (const auto& c : nn) (supported(c) ? ranked_supported : ranked_other).push_back(&c);
    ranked_supported.insert(ranked_supported.end(), ranked_other.begin(), ranked_other.end());
    const Candidate* pick = ranked_supported.front();
    take_evidence(pick->window, pick->pointer, ptr, evidence);
    for (const Candidate* c : ranked_supported)
      if (c != pick && *c->value != *pick->value) alternatives_[ptr].push_back({c->window, *c->value, c->pointer});
    return *pick->value;
  }
};

}  // namespace

std::vector<TextWindow> plan_windows(const std::string& text, const TokenCounter& counter, const WindowOptions& opts) {
  if (opts.budget_tokens < 16)
    throw std::invalid_argument("plan_windows: a window budget of " + std::to_string(opts.budget_tokens) +
                                " tokens is too small (at least 16)");
  const auto pages = engine::grammar::split_pages(text);
  const Document doc = document_from_text("", text);
  ChunkOptions co;
  // Pieces small enough that the overlap can hold some (half of it), and a window several.
  const std::size_t piece = opts.overlap_tokens >= 16 ? std::min(opts.overlap_tokens / 2, opts.budget_tokens / 4)
                                                       : opts.budget_tokens / 4;
  co.max_tokens = std::max<std::size_t>(8, std::min<std::size_t>(256, piece));
  co.overlap_tokens = 0;
  std::vector<Piece> pieces;
  if (doc.pages.size() == pages.size()) {
    std::size_t cur_page = static_cast<std::size_t>(-1), cursor = 0;
    for (const auto& c : rag::page_chunks(doc, counter, co)) {
      const std::size_t page = static_cast<std::size_t>(c.first_page - 1);
      if (page >= pages.size() || c.text.empty()) continue;
      if (page != cur_page) {
        cur_page = page;
        cursor = 0;
      }
      const std::string& P = pages[page];
      std::size_t pos = P.find(c.text, cursor);
      // A piece cut out of an over-long line lost the white space at its cut: it is still a substring
      // (found above); anything else is placed at the cursor.
      if (pos == std::string::npos) pos = std::min(cursor, P.size());
      const std::size_t end = std::min(P.size(), pos + c.text.size());
      if (end <= pos) continue;
      pieces.push_back({page, pos, end, c.tokens});
      cursor = end;
    }
  }
  if (pieces.empty()) {
    TextWindow w;
    w.text = text;
    w.last_page = pages.size();
    w.tokens = counter.count(text);
    return {w};
  }
  std::vector<TextWindow> out;
  const std::size_t n = pieces.size();
  std::size_t i = 0;
  for (;;) {
    std::size_t j = i, used = 0;
    while (j < n && (j == i || used + pieces[j].tokens + 1 <= opts.budget_tokens)) used += pieces[j++].tokens + 1;
    // The first window starts at the document's start, the last ends at its end.
    const std::size_t pa = i == 0 ? 0 : pieces[i].page;
    const std::size_t sa = i == 0 ? 0 : pieces[i].start;
    const std::size_t pb = j == n ? pages.size() - 1 : pieces[j - 1].page;
    const std::size_t eb = j == n ? pages.back().size() : pieces[j - 1].end;
    TextWindow w;
    w.text = slice(pages, pa, sa, pb, eb);
    w.first_page = pa + 1;
    w.first_offset = sa;
    w.last_page = pb + 1;
    w.tokens = used;
    out.push_back(std::move(w));
    if (j == n) break;
    // Overlap: the last pieces of this window that fit overlap_tokens, but always past this start.
    std::size_t k = j, carried = 0;
    while (k - 1 > i && carried + pieces[k - 1].tokens + 1 <= opts.overlap_tokens) carried += pieces[--k].tokens + 1;
    i = k;
  }
  return out;
}

json shift_evidence(const json& evidence, std::size_t first_page, std::size_t first_offset) {
  json out = json::object();
  if (!evidence.is_object()) return out;
  for (const auto& [ptr, e] : evidence.items()) {
    json moved = e;
    if (e.is_object() && e.contains("page") && e["page"].is_number_integer()) {
      const auto p = e["page"].get<std::int64_t>();
      moved["page"] = static_cast<std::int64_t>(first_page) + p - 1;
      if (p == 1) {
        for (const char* k : {"start", "end"})
          if (e.contains(k) && e[k].is_number_integer())
            moved[k] = e[k].get<std::int64_t>() + static_cast<std::int64_t>(first_offset);
      }
    }
    out[ptr] = std::move(moved);
  }
  return out;
}

MergedRecord merge_window_records(const std::vector<WindowRecord>& windows) {
  try {
    return Merger(windows).run();
  } catch (const std::exception&) {
    return {};  // unreachable for JSON values; kept so that the merge never throws
  }
}

std::size_t refine_merge(MergedRecord& merged, const std::vector<WindowRecord>& windows,
                         const std::function<std::vector<std::string>(const json&)>& violations,
                         std::size_t max_checks) {
  if (merged.data.is_null() || merged.alternatives.empty() || max_checks == 0) return 0;
  std::size_t checks = 1, replaced = 0;
  auto current = violations(merged.data);
  std::set<std::string> tried;
  for (bool again = true; again && !current.empty();) {
    again = false;
    for (const auto& ptr : current) {
      auto alts = merged.alternatives.find(ptr);
      if (alts == merged.alternatives.end() || !tried.insert(ptr).second) continue;
      json::json_pointer where;
      try {
        where = json::json_pointer(ptr);
        if (!merged.data.contains(where)) continue;
      } catch (const json::exception&) {
        continue;
      }
      for (const auto& alt : alts->second) {
        if (checks >= max_checks) return replaced;
        json candidate = merged.data;
        candidate[where] = alt.value;
        auto after = violations(candidate);
        ++checks;
        if (after.size() < current.size()) {
          merged.data = std::move(candidate);
          erase_evidence(merged.evidence, ptr);
          if (alt.window < windows.size()) copy_evidence(windows[alt.window].evidence, alt.pointer, ptr, merged.evidence);
          current = std::move(after);
          ++replaced;
          again = true;  // the pointers reported now may differ
          break;
        }
      }
      if (again) break;
    }
  }
  return replaced;
}

json chunked_stats(const std::vector<json>& window_stats) {
  static const char* kSum[] = {"prompt_tokens", "prefill_tokens", "cached_tokens", "decode_tokens",
                               "forced_tokens", "draft_tokens",   "accepted_tokens", "verify_steps"};
  json out = json::object();
  for (const char* k : kSum) {
    std::uint64_t sum = 0;
    bool any = false;
    for (const auto& s : window_stats)
      if (s.is_object() && s.contains(k) && s[k].is_number()) {
        sum += s[k].get<std::uint64_t>();
        any = true;
      }
    const std::string key = k;
    // The speculative-decoding counts only when drafting ran (as EngineWorker::stats_json writes them).
    if (!any && (key == "draft_tokens" || key == "accepted_tokens" || key == "verify_steps")) continue;
    out[key] = sum;
  }
  out["ttft_ms"] = !window_stats.empty() && window_stats.front().is_object() && window_stats.front().contains("ttft_ms")
                       ? window_stats.front()["ttft_ms"]
                       : json(nullptr);
  double decode_s = 0;
  std::uint64_t decoded = 0;
  for (const auto& s : window_stats) {
    if (!s.is_object()) continue;
    const auto d = s.value("decode_tokens", std::uint64_t{0});
    const double rate = s.contains("decode_tok_s") && s["decode_tok_s"].is_number() ? s["decode_tok_s"].get<double>() : 0.0;
    if (d > 0 && rate > 0) {
      decode_s += static_cast<double>(d) / rate;
      decoded += d;
    }
  }
  out["decode_tok_s"] = decode_s > 0 ? static_cast<double>(decoded) / decode_s : 0.0;
  out["chunks"] = window_stats.size();
  return out;
}

}  // namespace quarry::run
