#!/usr/bin/env python3
"""PyTorch peer of bench_engine: a random-weight Qwen3 of one of bench_engine's preset shapes, built by
Hugging Face transformers in bf16 on one CUDA device, measured as bench_engine measures quarry:

  * tg: batch-1 decode of --tg tokens after a --depth-token prompt, with generate()'s static KV cache
    (cache_implementation="static"; transformers compiles the decoding forward with torch.compile for a
    static cache on CUDA). Decode time = time(generate of tg + 1 new tokens) - time(generate of 1), so
    the prompt's prefill cancels out; median of --runs after two warm-ups (the compilation).
  * pp: one forward of N prompt tokens (no cache, SDPA attention, logits of the last token only),
    median of --runs after one warm-up.

Prints one JSON object (torch / transformers versions, device, figures). Off the product path: a script
for the side-by-side in bench/engine/README.md.

usage: pytorch_qwen3.py [--preset qwen3-8b|qwen3-0.6b|qwen3-4b] [--layers N] [--tg 128] [--depth 16]
                        [--pp 512,2048] [--runs 3]
"""
import argparse
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM

# The shapes of bench_engine's presets (engine/models/random_checkpoint.cpp).
PRESETS = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, tie_word_embeddings=False),
}


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen3-8b", choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, default=0, help="layers (0: the preset's)")
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--pp", default="512,2048")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    shape = dict(PRESETS[a.preset])
    if a.layers:
        shape["num_hidden_layers"] = a.layers
    cfg = Qwen3Config(head_dim=128, vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
                      rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"}, **shape)
    torch.manual_seed(0)
    with torch.device("cuda"):
        torch.set_default_dtype(torch.bfloat16)
        model = Qwen3ForCausalLM(cfg).eval()
    torch.set_default_dtype(torch.float32)
    params = sum(p.numel() for p in model.parameters())
    out = {"preset": a.preset, "layers": cfg.num_hidden_layers, "parameters": params, "torch": torch.__version__,
           "transformers": transformers.__version__, "device": torch.cuda.get_device_name(),
           "attn_implementation": model.config._attn_implementation}
    V = cfg.vocab_size

    with torch.no_grad():
        for n in [int(x) for x in a.pp.split(",") if x]:
            ids = torch.randint(0, V, (1, n), device="cuda")
            run = lambda: model(ids, use_cache=False, logits_to_keep=1)
            timed(run)
            t = statistics.median(timed(run) for _ in range(a.runs))
            out[f"pp{n}_tok_s"] = n / t
            print(f"pp{n}: {n / t:.1f} tok/s", file=sys.stderr, flush=True)

        prompt = torch.randint(0, V, (1, a.depth), device="cuda")

        def generate(new_tokens):
            return model.generate(prompt, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  cache_implementation="static", pad_token_id=0)

        t_warm = time.perf_counter()
        for _ in range(2):  # compiles the decoding step
            generate(a.tg + 1)
            generate(1)
        out["warmup_s"] = time.perf_counter() - t_warm
        long = [timed(lambda: generate(a.tg + 1)) for _ in range(a.runs)]
        short = [timed(lambda: generate(1)) for _ in range(a.runs)]
        dt = statistics.median(long) - statistics.median(short)
        out[f"tg{a.tg}_tok_s"] = a.tg / dt
        print(f"tg{a.tg}: {a.tg / dt:.1f} tok/s (warm-up {out['warmup_s']:.0f} s)", file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
