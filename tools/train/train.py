#!/usr/bin/env python3
"""Train quarry's default embedded model: tokenizer, Qwen3 decoder and an MTP module, on one CUDA GPU.

Input: a corpus built by tools/train/build_corpus.py (gzip JSON lines, one chat example per line:
{"kind": "kie"|"qa", "lang": "hu"|"en"|"de"|"fr", "split": "train"|"heldout", "system": str, "user": str,
"assistant": str}). Output: a Hugging Face format checkpoint (config.json, model.safetensors with the
main model and the `mtp.*` tensors, tokenizer.json, tokenizer_config.json, generation_config.json) plus
train_log.json (loss curve, tokens seen, timings) and eval.json (held-out field exact match computed with
transformers greedy decoding, MTP acceptance per draft position).

Steps:
1. Byte-level BPE tokenizer trained with Hugging Face tokenizers: NFC normaliser, Qwen2/Qwen3's Split
   pre-tokenizer regex followed by ByteLevel (no prefix space), ChatML special tokens.
2. Qwen3ForCausalLM (transformers) with tied embeddings, plus an MTP module in the Qwen3-Next / Qwen3.5
   layout (vLLM qwen3_next_mtp.py): for position i,
       x = fc(concat(pre_fc_norm_embedding(embed(t[i+1])), pre_fc_norm_hidden(h[i])))
       h'[i] = norm(layers.0(x))           -> lm_head -> predicts t[i+2]
   where h is the main model's final-norm hidden state ("post_norm", written to config.json as
   `mtp_hidden_state`). Depth d > 1 reuses the same module recursively: the hidden input is the previous
   depth's normed output h', the token input is t[i+d]. Training runs each depth as a full causal pass over
   the sequence with teacher-forced tokens (as DeepSeek-V3's MTP training does), loss
       L = CE(main) + sum_{d=1..D} w_d * CE(mtp depth d)
   on assistant tokens only.
3. Export and evaluation.

Usage (on the GPU machine): python3 tools/train/train.py --corpus corpus.jsonl.gz --out OUTDIR
"""
from __future__ import annotations

import argparse
import gzip
import json
import lzma
import math
import os
import random
import re
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat import render_prompt  # noqa: E402  (tools/train/chat.py: also used without torch)

# The Qwen2 / Qwen3 pre-tokenizer pattern (Split, behaviour "isolated").
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NON_SPECIAL_ADDED = ["<think>", "</think>"]

# ChatML, as the Qwen3 family renders it for system/user/assistant turns without tools. With
# enable_thinking false the assistant turn opens with an empty think block.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}")


def load_corpus(path: str):
    """A corpus file: gzip (.gz) or xz (.xz: smaller, where a corpus has to travel) JSON lines."""
    opener = lzma.open if path.endswith(".xz") else gzip.open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# ----------------------------------------------------------------------------------------------
# 1. tokenizer
# ----------------------------------------------------------------------------------------------

def train_tokenizer(texts, vocab_size: int, out: Path):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers import AddedToken

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL) - len(NON_SPECIAL_ADDED), min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False, special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL_ADDED])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "Qwen2TokenizerFast",
        "model_max_length": 8192,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "unk_token": None,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "errors": "replace",
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    return tok


# ----------------------------------------------------------------------------------------------
# 2. model
# ----------------------------------------------------------------------------------------------

class MTPModule(nn.Module):
    """Qwen3-Next / Qwen3.5 MTP layout: fc, pre_fc_norm_embedding, pre_fc_norm_hidden, layers.0, norm."""

    def __init__(self, config):
        super().__init__()
        from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RMSNorm
        h = config.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.pre_fc_norm_embedding = Qwen3RMSNorm(h, eps=config.rms_norm_eps)
        self.pre_fc_norm_hidden = Qwen3RMSNorm(h, eps=config.rms_norm_eps)
        import copy
        mcfg = copy.deepcopy(config)
        if getattr(mcfg, "layer_types", None) is not None:
            mcfg.layer_types = list(mcfg.layer_types) + ["full_attention"]
        self.layers = nn.ModuleList([Qwen3DecoderLayer(mcfg, layer_idx=config.num_hidden_layers)])
        self.norm = Qwen3RMSNorm(h, eps=config.rms_norm_eps)

    def forward(self, emb_next, hidden, position_embeddings, position_ids):
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(emb_next), self.pre_fc_norm_hidden(hidden)], -1))
        out = self.layers[0](x, attention_mask=None, position_ids=position_ids,
                             position_embeddings=position_embeddings)
        if isinstance(out, tuple):
            out = out[0]
        return self.norm(out)


def make_config(args, tok, vocab_size):
    from transformers import Qwen3Config
    eos = tok.token_to_id("<|im_end|>")
    pad = tok.token_to_id("<|endoftext|>")
    kw = dict(vocab_size=vocab_size, hidden_size=args.hidden, intermediate_size=args.intermediate,
              num_hidden_layers=args.layers, num_attention_heads=args.heads,
              num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
              max_position_embeddings=args.max_position, rms_norm_eps=1e-6, tie_word_embeddings=True,
              eos_token_id=eos, pad_token_id=pad, bos_token_id=None, attention_bias=False,
              hidden_act="silu", attention_dropout=0.0)
    try:
        cfg = Qwen3Config(**kw, rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta})
    except TypeError:
        cfg = Qwen3Config(**kw, rope_theta=args.rope_theta)
    cfg._attn_implementation = "sdpa"
    return cfg


def encode_example(tok, ex, max_len):
    prompt = render_prompt(ex["system"], ex["user"])
    p_ids = tok.encode(prompt, add_special_tokens=False).ids
    a_ids = tok.encode(ex["assistant"] + "<|im_end|>", add_special_tokens=False).ids
    ids = p_ids + a_ids
    if len(ids) > max_len:
        return None
    mask = [0] * len(p_ids) + [1] * len(a_ids)
    return ids, mask


def encode_all(tok, examples, max_len):
    """encode_example over a list, with the tokenizer's parallel batch encoder."""
    prompts = tok.encode_batch([render_prompt(e["system"], e["user"]) for e in examples], add_special_tokens=False)
    answers = tok.encode_batch([e["assistant"] + "<|im_end|>" for e in examples], add_special_tokens=False)
    out = []
    for p, a in zip(prompts, answers):
        ids = p.ids + a.ids
        if len(ids) <= max_len:
            out.append((ids, [0] * len(p.ids) + [1] * len(a.ids)))
    return out


def batches(examples, max_tokens, pad_id, shuffle_rng):
    """Length-bucketed batches of at most max_tokens (padded) tokens."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i][0]))
    groups, cur, cur_max = [], [], 0
    for i in order:
        n = len(examples[i][0])
        if cur and max(cur_max, n) * (len(cur) + 1) > max_tokens:
            groups.append(cur)
            cur, cur_max = [], 0
        cur.append(i)
        cur_max = max(cur_max, n)
    if cur:
        groups.append(cur)
    shuffle_rng.shuffle(groups)
    for g in groups:
        L = max(len(examples[i][0]) for i in g)
        ids = torch.full((len(g), L), pad_id, dtype=torch.long)
        mask = torch.zeros((len(g), L), dtype=torch.bool)
        for r, i in enumerate(g):
            t, m = examples[i]
            ids[r, :len(t)] = torch.tensor(t)
            mask[r, :len(m)] = torch.tensor(m, dtype=torch.bool)
        yield ids, mask


def forward_losses(model, mtp, ids, mask, depth, weights):
    """Main next-token loss and MTP depth-d losses on assistant tokens. Targets outside the assistant
    turn carry ignore_index, so no step needs a device-to-host sync."""
    out = model.model(input_ids=ids, use_cache=False)
    h = out.last_hidden_state                      # post final-norm, [B, L, H]
    labels = torch.where(mask, ids, torch.full_like(ids, -100))
    V = model.config.vocab_size
    main = F.cross_entropy(model.lm_head(h[:, :-1]).float().reshape(-1, V), labels[:, 1:].reshape(-1),
                           ignore_index=-100)
    losses = [main]
    B, L, _ = h.shape
    emb = model.model.embed_tokens
    hidden = h
    for d in range(1, depth + 1):
        # input at position i: hidden[i] and token t[i+d]; target t[i+d+1]; positions 0..L-d-2
        n = L - d - 1
        if n <= 0:
            break
        # row i of depth d drafts the token at i+d+1 and sits at position i+d-1, as in recursive
        # drafting at run time (each further draft one position later).
        pos = (torch.arange(n, device=ids.device) + (d - 1)).unsqueeze(0).expand(B, n)
        pe = model.model.rotary_emb(hidden[:, :n], pos)
        hidden = mtp(emb(ids[:, d:d + n]), hidden[:, :n], pe, pos)
        lg = model.lm_head(hidden).float().reshape(-1, V)
        losses.append(weights[d - 1] * F.cross_entropy(lg, labels[:, d + 1:d + 1 + n].reshape(-1),
                                                        ignore_index=-100))
    return losses


# ----------------------------------------------------------------------------------------------
# 3. export and evaluation
# ----------------------------------------------------------------------------------------------

def export(model, mtp, cfg, tok_dir: Path, out: Path, args, tokens_seen):
    """Hugging Face layout, sharded (each shard well under 16 MB so that it moves easily): the main
    model's shards as save_pretrained writes them, plus model-mtp.safetensors with the `mtp.*` tensors,
    all listed in model.safetensors.index.json."""
    from safetensors.torch import save_file
    out.mkdir(parents=True, exist_ok=True)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True, max_shard_size="12MB")
    index_path = out / "model.safetensors.index.json"
    if index_path.exists():
        index = json.loads(index_path.read_text())
    else:  # one shard: make it an index too, so the MTP shard can be listed
        index = {"metadata": {}, "weight_map": {}}
        from safetensors import safe_open
        with safe_open(str(out / "model.safetensors"), "pt") as f:
            for k in f.keys():
                index["weight_map"][k] = "model.safetensors"
    mtp_tensors = {"mtp." + k: v.detach().to(torch.bfloat16).cpu().contiguous()
                   for k, v in mtp.state_dict().items()}
    save_file(mtp_tensors, str(out / "model-mtp.safetensors"), metadata={"format": "pt"})
    for k in mtp_tensors:
        index["weight_map"][k] = "model-mtp.safetensors"
    total = sum(v.numel() * v.element_size() for v in model.state_dict().values())
    total += sum(v.numel() * v.element_size() for v in mtp_tensors.values())
    index["metadata"]["total_size"] = total
    if "total_parameters" in index["metadata"]:
        index["metadata"]["total_parameters"] += sum(v.numel() for v in mtp_tensors.values())
    index_path.write_text(json.dumps(index, indent=2) + "\n")
    conf = json.loads((out / "config.json").read_text())
    conf["mtp_num_hidden_layers"] = 1
    conf["mtp_use_dedicated_embeddings"] = False
    conf["mtp_hidden_state"] = "post_norm"
    conf["mtp_trained_depths"] = args.mtp_depth
    (out / "config.json").write_text(json.dumps(conf, indent=2) + "\n")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (out / f).write_text((tok_dir / f).read_text())
    (out / "generation_config.json").write_text(json.dumps({
        "eos_token_id": [cfg.eos_token_id, cfg.pad_token_id], "pad_token_id": cfg.pad_token_id,
        "do_sample": False}, indent=2) + "\n")


sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "eval"))
from kie_fields import CORE_FIELDS, get_field, same_value  # noqa: E402


@torch.no_grad()
def evaluate(model, mtp, tok, heldout, device, max_new, depth, limit, batch=32):
    """Field exact match of greedy outputs (transformers generate, batched with left padding) and MTP
    acceptance per draft position measured against the main model's own greedy output."""
    model.eval()
    mtp.eval()
    eos = tok.token_to_id("<|im_end|>")
    pad = tok.token_to_id("<|endoftext|>")
    exs = heldout[:limit]
    prompts = [tok.encode(render_prompt(e["system"], e["user"]), add_special_tokens=False).ids for e in exs]
    outputs = []
    for b in range(0, len(exs), batch):
        chunk = prompts[b:b + batch]
        L = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), L), pad, dtype=torch.long)
        att = torch.zeros((len(chunk), L), dtype=torch.long)
        for r, p in enumerate(chunk):
            ids[r, L - len(p):] = torch.tensor(p)
            att[r, L - len(p):] = 1
        gen = model.generate(ids.to(device), attention_mask=att.to(device), max_new_tokens=max_new,
                             do_sample=False, eos_token_id=eos, pad_token_id=pad)
        for r in range(len(chunk)):
            o = gen[r, L:].tolist()
            outputs.append(o[:o.index(eos)] if eos in o else o)
    per_lang = {}
    mismatches = []
    drafted = [0] * depth
    accepted = [0] * depth
    for ex, prompt, out_ids in zip(exs, prompts, outputs):
        text = tok.decode(out_ids, skip_special_tokens=False)
        if ex["kind"] == "kie":
            st = per_lang.setdefault(ex["lang"], {"fields": 0, "exact": 0, "docs": 0, "parsed": 0})
            st["docs"] += 1
            try:
                pred = json.loads(text)
                st["parsed"] += 1
            except json.JSONDecodeError:
                pred = {}
            truth = json.loads(ex["assistant"])
            for f in CORE_FIELDS:
                st["fields"] += 1
                ok = same_value(get_field(pred, f), get_field(truth, f))
                st["exact"] += int(ok)
                if not ok and len(mismatches) < 40:
                    mismatches.append({"lang": ex["lang"], "field": f, "expected": get_field(truth, f),
                                       "got": get_field(pred, f) if pred else text[:200]})
        # Lossless drafting accepts a draft iff it equals the main model's greedy token: count, for each
        # draft position d, how often drafts 1..d were all right (teacher-forced recursive drafts).
        seq = torch.tensor([prompt + out_ids + [eos]], device=device)
        P = len(prompt)
        hidden = model.model(input_ids=seq, use_cache=False).last_hidden_state
        L = seq.shape[1]
        ok_prefix = None
        for d in range(1, depth + 1):
            n = L - d - 1
            if n <= P - 1:
                break
            pos = (torch.arange(n, device=device) + (d - 1)).unsqueeze(0)
            pe = model.model.rotary_emb(hidden[:, :n], pos)
            hidden = mtp(model.model.embed_tokens(seq[:, d:d + n]), hidden[:, :n], pe, pos)
            pred = model.lm_head(hidden).argmax(-1)[0]
            hit = (pred == seq[0, d + 1:d + 1 + n])[P - 1:]
            ok_prefix = hit if ok_prefix is None else ok_prefix[:hit.shape[0]] & hit
            drafted[d - 1] += int(ok_prefix.numel())
            accepted[d - 1] += int(ok_prefix.sum())
    fields = {lang: {**st, "exact_match": st["exact"] / max(1, st["fields"])} for lang, st in per_lang.items()}
    acc = [{"position": d + 1, "drafted": drafted[d], "accepted_all_up_to_here": accepted[d],
            "acceptance": accepted[d] / max(1, drafted[d])} for d in range(depth)]
    model.train()
    mtp.train()
    return {"kie_fields": fields, "mtp_acceptance": acc, "examples": len(exs), "mismatches": mismatches}


def load_exported(model_dir, device):
    """The exported checkpoint through transformers, plus its MTP module from model-mtp.safetensors."""
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    from transformers import Qwen3ForCausalLM
    model = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    mtp = MTPModule(model.config).to(device)
    sd = {k[4:]: v.float() for k, v in load_file(str(Path(model_dir) / "model-mtp.safetensors")).items()}
    mtp.load_state_dict(sd)
    return model, mtp, Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))


def eval_only(args):
    model, mtp, tok = load_exported(args.eval_only, "cuda")
    heldout = [e for path in args.corpus for e in load_corpus(path) if e["split"] == "heldout"]
    depth = int(model.config.to_dict().get("mtp_trained_depths", args.mtp_depth))
    ev = {"heldout": evaluate(model, mtp, tok, heldout, "cuda", max_new=1024, depth=depth, limit=args.eval_limit)}
    for spec in args.extra_eval:
        name, path = spec.split("=", 1)
        ev[name] = evaluate(model, mtp, tok, load_corpus(path), "cuda", max_new=1024, depth=depth, limit=1000)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "eval.json").write_text(json.dumps(ev, indent=1) + "\n")
    print(json.dumps({k: {"kie_fields": v["kie_fields"], "mtp_acceptance": v["mtp_acceptance"]}
                      for k, v in ev.items()}, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, action="append", help="corpus file (repeatable)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=10240)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--max-position", type=int, default=8192)
    ap.add_argument("--rope-theta", type=float, default=1_000_000.0)
    ap.add_argument("--max-len", type=int, default=3072)
    ap.add_argument("--batch-tokens", type=int, default=262144)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--minutes", type=float, default=6.0, help="training time budget (wall clock)")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--mtp-depth", type=int, default=4)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--eval-limit", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--extra-eval", action="append", default=[],
                    help="NAME=FILE: another corpus-format file evaluated like the held-out split "
                         "(e.g. real documents; never trained on)")
    ap.add_argument("--init-from", metavar="MODEL_DIR",
                    help="continue from an exported model (its weights, MTP module and tokenizer) instead of "
                         "training a tokenizer and starting from random weights")
    ap.add_argument("--eval-only", metavar="MODEL_DIR",
                    help="evaluate an exported model (held-out split of --corpus, and --extra-eval) and exit")
    args = ap.parse_args()
    if args.eval_only:
        return eval_only(args)

    t_start = time.time()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cuda"

    corpus = [e for path in args.corpus for e in load_corpus(path)]
    train_ex = [e for e in corpus if e["split"] == "train"]
    heldout = [e for e in corpus if e["split"] == "heldout"]
    print(f"corpus: {len(train_ex)} train, {len(heldout)} held out", flush=True)

    if args.init_from:  # a second stage: the exported model's tokenizer and weights
        tok_dir = Path(args.init_from)
        model, mtp, tok = load_exported(args.init_from, device)
    else:
        tok_dir = out / "_tokenizer"
        tok = train_tokenizer((e["system"] + "\n" + e["user"] + "\n" + e["assistant"] for e in train_ex),
                              args.vocab, tok_dir)
    vocab_size = tok.get_vocab_size()
    print(f"tokenizer: {vocab_size} tokens ({time.time() - t_start:.1f}s)", flush=True)

    encoded = encode_all(tok, train_ex, args.max_len)
    n_tokens = sum(len(t) for t, _ in encoded)
    print(f"encoded {len(encoded)} examples, {n_tokens} tokens, dropped {len(train_ex) - len(encoded)}",
          flush=True)

    from transformers import Qwen3ForCausalLM
    if args.init_from:
        cfg = model.config
    else:
        cfg = make_config(args, tok, vocab_size)
        model = Qwen3ForCausalLM(cfg).to(device)
        mtp = MTPModule(cfg).to(device)
    n_main = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for p in mtp.parameters())
    print(f"params: main {n_main/1e6:.2f}M, mtp {n_mtp/1e6:.2f}M, bf16 size "
          f"{2*(n_main+n_mtp)/1e6:.1f} MB", flush=True)

    params = list(model.parameters()) + list(mtp.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), fused=True)
    weights = [args.mtp_weight] * args.mtp_depth
    pad_id = tok.token_to_id("<|endoftext|>")
    rng = random.Random(args.seed)
    log = []
    step, tokens_seen = 0, 0
    budget = args.minutes * 60
    t0 = time.time()
    done = False
    epoch = 0
    while not done:
        epoch += 1
        for ids, mask in batches(encoded, args.batch_tokens, pad_id, rng):
            ids, mask = ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)
            # Linear warm-up, then cosine decay over the wall-clock budget (the step rate is only
            # known once the run is going, so progress is measured in time, not steps).
            if step < args.warmup:
                lr = args.lr * (step + 1) / args.warmup
            else:
                prog = min(1.0, (time.time() - t0) / budget)
                lr = args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * prog))
            for g in opt.param_groups:
                g["lr"] = lr
            with torch.autocast("cuda", dtype=torch.bfloat16):
                losses = forward_losses(model, mtp, ids, mask, args.mtp_depth, weights)
            loss = sum(losses)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            tokens_seen += int(ids.numel())
            elapsed = time.time() - t0
            if step % 50 == 0 or step == 1:
                rec = {"step": step, "epoch": epoch, "seconds": round(elapsed, 1), "lr": lr,
                       "tokens": tokens_seen, "loss_main": float(losses[0]),
                       "loss_mtp": [float(x) / w for x, w in zip(losses[1:], weights)]}
                log.append(rec)
                print(json.dumps(rec), flush=True)
            if elapsed > budget or step >= args.max_steps:
                done = True
                break

    train_seconds = time.time() - t0
    export(model, mtp, cfg, tok_dir, out, args, tokens_seen)
    (out / "train_log.json").write_text(json.dumps({
        "args": vars(args), "steps": step, "epochs": epoch, "tokens_seen": tokens_seen,
        "train_seconds": train_seconds, "train_examples": len(encoded), "train_tokens_per_epoch": n_tokens,
        "params_main": n_main, "params_mtp": n_mtp, "log": log,
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}, indent=1) + "\n")

    # Reload through transformers to prove the export loads, then evaluate.
    from transformers import Qwen3ForCausalLM as Loader
    model2 = Loader.from_pretrained(out, dtype=torch.float32).to(device)
    mtp2 = MTPModule(model2.config).to(device)
    from safetensors.torch import load_file
    sd = {k[4:]: v for k, v in load_file(str(out / "model-mtp.safetensors")).items()}
    mtp2.load_state_dict({k: v.float() for k, v in sd.items()})
    ev = evaluate(model2, mtp2, tok, heldout, device, max_new=768, depth=args.mtp_depth,
                  limit=args.eval_limit)
    for spec in args.extra_eval:
        name, path = spec.split("=", 1)
        ev[name] = evaluate(model2, mtp2, tok, load_corpus(path), device, max_new=1024,
                            depth=args.mtp_depth, limit=1000)
    (out / "eval.json").write_text(json.dumps(ev, indent=1) + "\n")
    print(json.dumps(ev, indent=1), flush=True)
    if not args.init_from:  # the freshly trained tokenizer's scratch folder (never the model continued from)
        import shutil
        shutil.rmtree(tok_dir, ignore_errors=True)
    print(f"total {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
