#include "pipeline/run/messages.hpp"

#include <stdexcept>

namespace quarry::run {

namespace {

using json = nlohmann::ordered_json;

// Each struct is a JSON array of its fields in declaration order (positional: no member names on the
// wire), MessagePack-encoded after a one-byte tag (the variant index).

json tokens_to(const std::optional<TokenCounts>& t) {
  if (!t) return nullptr;
  return json::array({t->prompt, t->prefill, t->cached, t->decode, t->draft, t->accepted});
}

std::optional<TokenCounts> tokens_from(const json& j) {
  if (j.is_null()) return std::nullopt;
  TokenCounts t;
  t.prompt = j.at(0).get<std::uint64_t>();
  t.prefill = j.at(1).get<std::uint64_t>();
  t.cached = j.at(2).get<std::uint64_t>();
  t.decode = j.at(3).get<std::uint64_t>();
  t.draft = j.at(4).get<std::uint64_t>();
  t.accepted = j.at(5).get<std::uint64_t>();
  return t;
}

/// Strings are carried as MessagePack binary: file names and paths need not be UTF-8.
json bin(const std::string& s) { return json::binary(std::vector<std::uint8_t>(s.begin(), s.end())); }

std::string str(const json& j) {
  if (j.is_binary()) {
    const auto& b = j.get_binary();
    return std::string(b.begin(), b.end());
  }
  return j.get<std::string>();
}

json subject_to(const Subject& s) {
  return json::array({s.key, s.source, s.source_b64, s.sha256, s.question_id, s.question, s.extract_ms});
}

Subject subject_from(const json& j) {
  Subject s;
  s.key = j.at(0).get<std::string>();
  s.source = j.at(1).get<std::string>();
  s.source_b64 = j.at(2).get<std::string>();
  s.sha256 = j.at(3).get<std::string>();
  s.question_id = j.at(4).get<std::string>();
  s.question = j.at(5).get<std::string>();
  s.extract_ms = j.at(6).get<double>();
  return s;
}

json batch_to(const std::optional<BatchSpec>& b) {
  if (!b) return nullptr;
  return json::array({b->custom_id, b->line, b->url, b->model, b->format, b->schema_text, b->temperature, b->top_p,
                      b->min_p, b->top_k, b->seed ? json(*b->seed) : json(nullptr), b->stop});
}

std::optional<BatchSpec> batch_from(const json& j) {
  if (j.is_null()) return std::nullopt;
  BatchSpec b;
  b.custom_id = j.at(0).get<std::string>();
  b.line = j.at(1).get<std::size_t>();
  b.url = j.at(2).get<std::string>();
  b.model = j.at(3).get<std::string>();
  b.format = j.at(4).get<int>();
  b.schema_text = j.at(5).get<std::string>();
  b.temperature = j.at(6).get<float>();
  b.top_p = j.at(7).get<float>();
  b.min_p = j.at(8).get<float>();
  b.top_k = j.at(9).get<std::size_t>();
  if (!j.at(10).is_null()) b.seed = j.at(10).get<std::uint64_t>();
  b.stop = j.at(11).get<std::vector<std::string>>();
  return b;
}

json chunks_to(const std::vector<ChunkPart>& cs) {
  json a = json::array();
  for (const auto& c : cs) a.push_back(json::array({c.prompt, c.text, c.first_page, c.first_offset}));
  return a;
}

std::vector<ChunkPart> chunks_from(const json& j) {
  std::vector<ChunkPart> out;
  for (const auto& c : j) {
    ChunkPart p;
    p.prompt = c.at(0).get<std::vector<std::int32_t>>();
    p.text = c.at(1).get<std::string>();
    p.first_page = c.at(2).get<std::size_t>();
    p.first_offset = c.at(3).get<std::size_t>();
    out.push_back(std::move(p));
  }
  return out;
}

json outputs_to(const std::vector<ChunkOutput>& os) {
  json a = json::array();
  for (const auto& o : os) a.push_back(json::array({o.text, o.finish, o.stats, o.error}));
  return a;
}

std::vector<ChunkOutput> outputs_from(const json& j) {
  std::vector<ChunkOutput> out;
  for (const auto& o : j) {
    ChunkOutput c;
    c.text = o.at(0).get<std::string>();
    c.finish = o.at(1).get<std::string>();
    c.stats = o.at(2);
    c.error = o.at(3).get<std::string>();
    out.push_back(std::move(c));
  }
  return out;
}

json task_to(const ModelTaskMsg& t) {
  return json::array({subject_to(t.subject), t.prompt, t.max_tokens, t.attempt, t.whole_document, t.document_text,
                      batch_to(t.batch), t.cross_check ? *t.cross_check : json(nullptr), t.cross_check_method,
                      chunks_to(t.chunks), t.output_splits, t.best_record ? *t.best_record : json(nullptr)});
}

ModelTaskMsg task_from(const json& j) {
  ModelTaskMsg t;
  t.subject = subject_from(j.at(0));
  t.prompt = j.at(1).get<std::vector<std::int32_t>>();
  t.max_tokens = j.at(2).get<std::size_t>();
  t.attempt = j.at(3).get<std::size_t>();
  t.whole_document = j.at(4).get<bool>();
  t.document_text = j.at(5).get<std::string>();
  t.batch = batch_from(j.at(6));
  if (!j.at(7).is_null()) t.cross_check = j.at(7);
  t.cross_check_method = j.at(8).get<std::string>();
  t.chunks = chunks_from(j.at(9));
  t.output_splits = j.at(10).get<std::size_t>();
  if (!j.at(11).is_null()) t.best_record = j.at(11);
  return t;
}

struct Encoder {
  json operator()(const InputMsg& m) const { return json::array({bin(m.path), m.source, m.source_b64, m.problem}); }
  json operator()(const ExtractedMsg& m) const {
    json done = json::array();
    for (bool d : m.done) done.push_back(d);
    return json::array({subject_to(m.doc), m.text, m.pages, m.einvoice ? *m.einvoice : json(nullptr),
                        m.einvoice_format, done, m.output_splits});
  }
  json operator()(const ModelTaskMsg& m) const { return task_to(m); }
  json operator()(const GeneratedMsg& m) const {
    return json::array(
        {task_to(m.task), m.text, m.finish, m.stats, m.error, m.bad_request, m.response, outputs_to(m.chunk_outputs)});
  }
  json operator()(const MappedMsg& m) const { return json::array({subject_to(m.subject), m.method, m.data}); }
  json operator()(const RecordMsg& m) const { return json::array({m.key, m.record, tokens_to(m.tokens)}); }
  json operator()(const NoticeMsg& m) const {
    return json::array({static_cast<int>(m.kind), m.count, tokens_to(m.tokens)});
  }
  json operator()(const BatchRequestMsg& m) const {
    return json::array({subject_to(m.subject), m.line, m.custom_id, m.url, m.body});
  }
};

Message decode_body(std::uint8_t tag, const json& j) {
  switch (tag) {
    case 0: {
      InputMsg m;
      m.path = str(j.at(0));
      m.source = j.at(1).get<std::string>();
      m.source_b64 = j.at(2).get<std::string>();
      m.problem = j.at(3).get<std::string>();
      return m;
    }
    case 1: {
      ExtractedMsg m;
      m.doc = subject_from(j.at(0));
      m.text = j.at(1).get<std::string>();
      m.pages = j.at(2).get<std::size_t>();
      if (!j.at(3).is_null()) m.einvoice = j.at(3);
      m.einvoice_format = j.at(4).get<std::string>();
      for (const auto& d : j.at(5)) m.done.push_back(d.get<bool>());
      m.output_splits = j.at(6).get<std::size_t>();
      return m;
    }
    case 2:
      return task_from(j);
    case 3: {
      GeneratedMsg m;
      m.task = task_from(j.at(0));
      m.text = j.at(1).get<std::string>();
      m.finish = j.at(2).get<std::string>();
      m.stats = j.at(3);
      m.error = j.at(4).get<std::string>();
      m.bad_request = j.at(5).get<bool>();
      m.response = j.at(6);
      m.chunk_outputs = outputs_from(j.at(7));
      return m;
    }
    case 4: {
      MappedMsg m;
      m.subject = subject_from(j.at(0));
      m.method = j.at(1).get<std::string>();
      m.data = j.at(2);
      return m;
    }
    case 5: {
      RecordMsg m;
      m.key = j.at(0).get<std::string>();
      m.record = j.at(1);
      m.tokens = tokens_from(j.at(2));
      return m;
    }
    case 6: {
      NoticeMsg m;
      const int k = j.at(0).get<int>();
      if (k < 0 || k > 3) throw std::runtime_error("message: unknown notice kind " + std::to_string(k));
      m.kind = static_cast<NoticeMsg::Kind>(k);
      m.count = j.at(1).get<std::size_t>();
      m.tokens = tokens_from(j.at(2));
      return m;
    }
    case 7: {
      BatchRequestMsg m;
      m.subject = subject_from(j.at(0));
      m.line = j.at(1).get<std::size_t>();
      m.custom_id = j.at(2).get<std::string>();
      m.url = j.at(3).get<std::string>();
      m.body = j.at(4).get<std::string>();
      return m;
    }
    default:
      throw std::runtime_error("message: unknown type tag " + std::to_string(tag));
  }
}

}  // namespace

std::vector<std::uint8_t> encode(const Message& m) {
  std::vector<std::uint8_t> out;
  out.push_back(static_cast<std::uint8_t>(m.index()));
  json::to_msgpack(std::visit(Encoder{}, m), out);
  return out;
}

Message decode(const void* data, std::size_t size) {
  if (size < 1) throw std::runtime_error("message: empty");
  const auto* p = static_cast<const std::uint8_t*>(data);
  try {
    return decode_body(p[0], json::from_msgpack(p + 1, p + size));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("message: malformed: ") + e.what());
  }
}

void send(zmq::socket_t& s, const Message& m) {
  const auto bytes = encode(m);
  s.send(zmq::buffer(bytes), zmq::send_flags::none);
}

std::optional<Message> recv(zmq::socket_t& s, zmq::recv_flags flags) {
  zmq::message_t m;
  if (!s.recv(m, flags)) return std::nullopt;
  return decode(m.data(), m.size());
}

}  // namespace quarry::run
