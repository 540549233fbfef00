#!/usr/bin/env python3
"""Writes a random-initialised model of a real architecture as a Hugging Face folder.

The GPU machine has no pretrained weights and no network, and the SmolLM2 GGUF (94 MB) does not
fit in a transfer, so scripts/gpu/check.sh compares drmas on the GPU against drmas on the CPU on
a model of SmolLM2-135M's exact shape (30 layers, GQA 9/3 heads, tied embeddings) with weights
drawn by transformers from a fixed seed. Its tokenizer and chat template are the tiny ChatML
ones of a test fixture (their ids are a subset of the model's vocabulary); the comparison never
decodes generated text.

check.sh also trains a Qwen2.5-0.5B-shaped model (with the tiny Qwen2 fixture's tokenizer)
beside the SmolLM2-shaped one: worker groups of two model families sharing the device.

scripts/gpu/speed.sh does the same for the real Qwen2.5-1.5B and Qwen2.5-7B architectures,
saved in bf16 and initialised on the GPU (7B in f32 would take minutes on its CPU), so that
drmas and the device's own transformers are timed on the same weights.

Usage: make_model.py OUT_DIR --tokenizer FIXTURE_DIR [--arch smollm2-135m] [--seed 0]
                     [--dtype f32|bf16] [--device cpu|cuda]
Needs torch, transformers and safetensors (the GPU machine's PyTorch has them).
"""

import argparse
import json
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

# Each architecture: its transformers model type and the shape fields of its config.json.
ARCHITECTURES = {
    # HuggingFaceTB/SmolLM2-135M-Instruct.
    "smollm2-135m": ("llama", dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        hidden_act="silu",
    )),
    # Qwen/Qwen2.5-0.5B-Instruct.
    "qwen2.5-0.5b": ("qwen2", dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        hidden_act="silu",
    )),
    # Qwen/Qwen2.5-1.5B-Instruct.
    "qwen2.5-1.5b": ("qwen2", dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        hidden_act="silu",
    )),
    # Qwen/Qwen2.5-7B-Instruct.
    "qwen2.5-7b": ("qwen2", dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        hidden_act="silu",
    )),
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tokenizer", type=Path, required=True,
                        help="an HF folder whose tokenizer and chat template to copy")
    parser.add_argument("--arch", choices=sorted(ARCHITECTURES), default="smollm2-135m")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32",
                        help="the dtype the weights are saved in")
    parser.add_argument("--device", default="cpu", help="where the weights are drawn")
    args = parser.parse_args()

    special = json.loads((args.tokenizer / "config.json").read_text())
    model_type, shape = ARCHITECTURES[args.arch]
    config = AutoConfig.for_model(
        model_type,
        **shape,
        bos_token_id=special.get("bos_token_id"),
        eos_token_id=special.get("eos_token_id"),
    )
    torch.manual_seed(args.seed)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model = model.to(DTYPES[args.dtype])
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (args.tokenizer / name).exists():
            shutil.copy(args.tokenizer / name, args.out / name)
    parameters = sum(p.numel() for p in model.parameters())
    print(json.dumps({"arch": args.arch, "parameters": parameters, "dtype": args.dtype,
                      "folder": str(args.out)}))


if __name__ == "__main__":
    main()
