// `quarry quantize --method int8|int4-gptq|int4-ct|fp8 IN OUT`: a float checkpoint rewritten in a published
// quantized layout (engine/models/quantize.hpp), loadable by `quarry run --model OUT` and by other engines.
//
// Exit codes: 0 written; 1 anything else (a missing or already quantized input, an unknown method, I/O).
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/models/quantize.hpp"
#include "pipeline/cli/commands.hpp"

namespace quarry::cli {

void add_quantize_command(CLI::App& app, Context& ctx) {
  struct Args {
    std::string method, input, output, dequantized;
    std::size_t group_size = 128, bits = 4, threads = 0;
    bool asym = false, desc_act = false, gptq_v2 = false, auto_round = false, lm_head = false, group_given = false;
    std::vector<std::string> keep;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "quantize",
      "Quantize a float checkpoint by round-to-nearest into a published layout: int8 (compressed-tensors "
      "int-quantized, symmetric, per output channel or per group), int4-gptq (GPTQ packing, 4 or 8 bits, per-group "
      "scales and zero points; AutoRound's with --auto-round) or fp8 (fine-grained e4m3, 128x128 blocks)");
  sub->add_option("--method", a->method, "int8, int4-gptq, int4-ct (compressed-tensors pack-quantized) or fp8")
      ->required()
      ->check(CLI::IsMember({"int8", "int4-gptq", "int4-ct", "fp8"}));
  sub->add_option("input", a->input, "Model folder (config.json, model.safetensors or a sharded index)")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("output", a->output, "Folder to write config.json and model.safetensors to (created)")->required();
  auto* gs = sub->add_option("--group-size", a->group_size,
                             "Input columns per scale (int4-gptq and int4-ct default 128; int8 default 0 = one scale per "
                             "output channel; fp8 ignores it)");
  sub->add_option("--bits", a->bits, "int4-gptq: 4, or 8 for GPTQ 8-bit")->check(CLI::IsMember({4, 8}))->capture_default_str();
  sub->add_flag("--asym", a->asym, "int4-gptq: asymmetric (min/max) groups with zero points");
  sub->add_flag("--desc-act", a->desc_act, "int4-gptq: assign groups in activation order (g_idx), as desc_act checkpoints");
  sub->add_flag("--gptq-v2", a->gptq_v2, "int4-gptq: zero points without the GPTQ v1 offset (checkpoint_format gptq_v2)");
  sub->add_flag("--auto-round", a->auto_round, "int4-gptq: declare quant_method auto-round (GPTQ packing)");
  sub->add_flag("--quantize-lm-head", a->lm_head, "Quantize lm_head too (kept in its dtype by default)");
  sub->add_option("--keep", a->keep, "Also keep this module (name or suffix such as mlp.down_proj) unquantized; repeatable");
  sub->add_option("--threads", a->threads, "Modules quantized at once (0: all hardware threads)")->capture_default_str();
  sub->add_option("--dequantized", a->dequantized,
                  "Also write the same model with the quantized weights dequantized to f32 here (a reference)");
  sub->callback([a, gs, &ctx] {
    try {
      engine::QuantizeOptions o;
      o.method = a->method;
      o.group_size = gs->count() ? a->group_size : (a->method.rfind("int4", 0) == 0 ? 128 : 0);
      o.bits = a->bits;
      o.sym = !a->asym;
      o.desc_act = a->desc_act;
      o.gptq_v2 = a->gptq_v2;
      o.auto_round = a->auto_round;
      o.keep = a->keep;
      if (!a->lm_head) o.keep.push_back("lm_head");
      o.dequantized_dir = a->dequantized;
      o.threads = a->threads;
      const auto r = engine::quantize_checkpoint(a->input, a->output, o);
      spdlog::info("quantize: {} linear layers quantized ({}), {} tensors kept; {:.1f} MB -> {:.1f} MB in {}",
                   r.quantized, a->method, r.kept, r.bytes_in / 1e6, r.bytes_out / 1e6, a->output);
      ctx.exit_code = 0;
    } catch (const std::exception& e) {
      spdlog::error("quantize: {}", e.what());
      ctx.exit_code = 1;
    }
  });
}

}  // namespace quarry::cli
