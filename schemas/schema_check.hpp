// Schemas checked before a run: limits on size and shape, $ref resolution and cycles, and patterns
// that run in linear time. Every refusal names the file, the JSON pointer and the reason.
//
// What is checked (the schema as draft 7 reads it, like the validator; see also the grammar
// compiler's own checks in engine/grammar/json_schema.hpp):
// - shape: JSON nesting depth, keys per object, values in the document (SchemaLimits);
// - $ref: each one reached from the root resolves inside the document (a JSON pointer, "#", a
//   "#name" fragment of a "$id", or the root's own "$id" with a fragment; remote documents are not
//   fetched) and its string is at most max_id_bytes long (also "$id" / "id");
// - cycles: a schema that reaches itself through in-place applicators only ($ref, allOf, anyOf,
//   oneOf, not, if / then / else, dependencies) never gets to a smaller value and would recurse
//   forever: refused with the pointers of the cycle; recursion through a part of the value
//   (properties, items, additionalProperties, ...) is fine;
// - work: schemas applied in place to one value (paths of in-place edges, with multiplicity) and
//   the nesting the validator's parser will reach (valijson recurses once per nested schema and
//   $ref hop; its parse is replayed without recursion to measure it);
// - patterns: every `pattern` and `patternProperties` key is translated to RE2 (ecma_regex.hpp);
//   what RE2 cannot run in linear time (backreferences, lookaround) is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace quarry::schemas {

/// Limits on a schema document. The defaults keep the validator (valijson, whose parser and
/// validator recurse once per nested schema) within a 256 MiB stack also under AddressSanitizer,
/// and loading near-linear in the schema's size.
struct SchemaLimits {
  std::size_t max_bytes = 32u << 20;          ///< bytes of schema text (load_schema_file)
  std::size_t max_depth = 512;                ///< JSON nesting levels
  std::size_t max_object_keys = 20000;        ///< keys of one JSON object (e.g. properties)
  std::size_t max_values = 4000000;           ///< JSON values in the document
  std::size_t max_id_bytes = 2048;            ///< length of a $ref, $id or id string
  std::size_t max_levels = 5000;              ///< nesting of the validator's parse (schemas and $ref hops)
  std::uint64_t max_in_place_paths = 100000;  ///< schemas applied in place to one value
};

/// A schema refused at load. `what()` = "<file>: <pointer>: <reason>" with "(root)" for "".
struct InvalidSchema : std::runtime_error {
  InvalidSchema(std::string file_, std::string pointer_, std::string reason_)
      : std::runtime_error(file_ + ": " + (pointer_.empty() ? std::string("(root)") : pointer_) + ": " + reason_),
        file(std::move(file_)), pointer(std::move(pointer_)), reason(std::move(reason_)) {}
  std::string file;     ///< the schema's file (or the name it was given)
  std::string pointer;  ///< JSON pointer (RFC 6901) of the offending location, "" = the root
  std::string reason;
};

/// Reads and parses a schema file: its size, JSON depth and keys per object are checked on the way
/// (SAX, linear time, before any tree is built). Throws InvalidSchema naming `path` when the file
/// cannot be read, is not JSON, or is past the limits. The schema itself is checked by Validator.
nlohmann::json load_schema_file(const std::filesystem::path& path, const SchemaLimits& limits = {});

/// Checks text already in memory the same way (`file` names it in errors).
nlohmann::json parse_schema_text(const std::string& text, const std::string& file, const SchemaLimits& limits = {});

}  // namespace quarry::schemas
