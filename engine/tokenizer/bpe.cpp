#include "engine/tokenizer/bpe.hpp"

#include <functional>
#include <queue>

#include "engine/tokenizer/unicode.hpp"

namespace quarry::engine {

ByteLevelAlphabet::ByteLevelAlphabet() {
  cp_to_byte.fill(-1);
  // Printable bytes map to themselves; the others to 256, 257, ... in byte order.
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    byte_to_cp[b] = printable ? static_cast<char32_t>(b) : next++;
    cp_to_byte[byte_to_cp[b]] = b;
  }
}

std::string ByteLevelAlphabet::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char ch : bytes) unicode::append_utf8(out, byte_to_cp[static_cast<unsigned char>(ch)]);
  return out;
}

bool ByteLevelAlphabet::decode(std::string_view token, std::string& bytes) const {
  bytes.clear();
  for (std::size_t i = 0; i < token.size();) {
    const char32_t cp = unicode::decode_utf8(token, i);
    if (cp >= cp_to_byte.size() || cp_to_byte[cp] < 0) return false;
    bytes.push_back(static_cast<char>(cp_to_byte[cp]));
  }
  return true;
}

BpeModel::BpeModel(std::array<Id, 256> byte_ids, const std::vector<std::array<Id, 3>>& merges, bool ignore_merges,
                   std::unordered_map<std::string, Id> raw_vocab)
    : byte_ids_(byte_ids), ignore_merges_(ignore_merges), raw_vocab_(std::move(raw_vocab)) {
  merges_.reserve(merges.size() * 2);
  for (std::size_t r = 0; r < merges.size(); ++r) {
    merges_[key(merges[r][0], merges[r][1])] = MergeValue{static_cast<std::uint32_t>(r), merges[r][2]};
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<Id>& out) const {
  struct Symbol {
    Id id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (const char ch : word) {
    const Id id = byte_ids_[static_cast<unsigned char>(ch)];
    if (id < 0) continue;
    const int i = static_cast<int>(sym.size());
    sym.push_back(Symbol{id, i - 1, i + 1, true});
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Candidate {
    std::uint32_t rank;
    int pos;
    Id new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push_pair = [&](int left) {
    if (left < 0 || sym[left].next < 0) return;
    const auto it = merges_.find(key(sym[left].id, sym[sym[left].next].id));
    if (it != merges_.end()) heap.push(Candidate{it->second.rank, left, it->second.new_id});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) push_pair(i);

  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    const int right_pos = left.next;
    const auto it = merges_.find(key(left.id, sym[right_pos].id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    sym[right_pos].alive = false;
    left.next = sym[right_pos].next;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

void BpeModel::encode_word(std::string_view word, std::vector<Id>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = raw_vocab_.find(std::string(word));
    if (it != raw_vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() == 1) {
    const Id id = byte_ids_[static_cast<unsigned char>(word[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (word.size() > kMaxCachedWord) {
    merge_word(word, out);
    return;
  }
  Shard& shard = cache_[std::hash<std::string_view>{}(word) % kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto it = shard.map.find(std::string(word));
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t start = out.size();
  merge_word(word, out);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kShardCapacity) shard.map.clear();
  shard.map.emplace(std::string(word), std::vector<Id>(out.begin() + static_cast<std::ptrdiff_t>(start), out.end()));
}

}  // namespace quarry::engine
