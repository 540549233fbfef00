#!/usr/bin/env python3
"""Golden fixtures for host/tests/hf_golden.rs, computed by Hugging Face transformers.

Builds one tiny random model per supported architecture (Llama with GQA and llama3 RoPE
scaling, Qwen2 with q/k/v biases, Qwen3 with q/k norms and a sharded checkpoint), each with a
tiny byte-level BPE tokenizer (256 byte tokens, a few merges, ChatML special tokens) and a
ChatML chat template, saves them in HF layout under host/tests/fixtures/hf/<family>/, and
records in golden.json beside each:

  * logits for a fixed batch of token ids (the second row left-padded, with an attention mask
    and position ids that skip the padding),
  * a 32-token greedy continuation of a chat prompt (and the smallest top-1/top-2 logit gap
    along it, so a near-tie cannot make the test flaky),
  * the chat template's text and token ids for a conversation, and the ids of a plain text.

Run by hand, never by CI (it needs torch and transformers, a few GB):

    python3 -m venv /tmp/golden-venv
    /tmp/golden-venv/bin/pip install torch transformers safetensors tokenizers   # from PyPI
    /tmp/golden-venv/bin/python scripts/golden/make_fixtures.py

The fixtures are deterministic for a given torch/transformers/tokenizers version (fixed
seeds), and committed; rerun only when changing what they cover.

`make_fixtures.py check-converted DIR` loads a folder written by `drmas-host convert` with
transformers, prints the greedy answer to a chat prompt and writes the last-position logits
of that prompt to DIR/../check_converted.json (for comparing with drmas by hand).
"""

import json
import os
import shutil
import sys
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "host" / "tests" / "fixtures" / "hf"

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 384
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Reinforcement learning trains agents that act, observe rewards and improve.",
    "What is the capital of France? The capital of France is Paris.",
    "Two plus two is four, and three times three is nine.",
    "A solver writes an answer; a verifier checks it and asks for another try.",
    "Hello, world! This is a tiny tokenizer for tests, trained on a few sentences.",
    "system user assistant: you are a helpful assistant that answers briefly.",
]
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2+2? Answer briefly."},
]
PLAIN_TEXT = "Hello, world! The fox is quick: 123 + 45 = 168."
GREEDY_TOKENS = 32


def tokenizer() -> Tokenizer:
    """A byte-level BPE tokenizer: 3 special tokens, the 256 byte symbols, merges up to 384."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=SPECIALS,
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    assert tok.get_vocab_size() == VOCAB_SIZE, tok.get_vocab_size()
    return tok


def configs(vocab: int, bos: int, eos: int):
    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        bos_token_id=bos,
        eos_token_id=eos,
    )
    llama = LlamaConfig(
        **common,
        tie_word_embeddings=False,
        rope_theta=10000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    )
    qwen2 = Qwen2Config(**common, tie_word_embeddings=True, rope_theta=1000000.0)
    qwen3 = Qwen3Config(**common, tie_word_embeddings=True, head_dim=32, rope_theta=1000000.0)
    return [
        ("llama", llama, LlamaForCausalLM),
        ("qwen2", qwen2, Qwen2ForCausalLM),
        ("qwen3", qwen3, Qwen3ForCausalLM),
    ]


def randomize(model: torch.nn.Module) -> None:
    """Weights far from HF's tiny init, so logits are spread and greedy choices are clear."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)


def r(x: float) -> float:
    return float(f"{x:.7g}")


def greedy(model, prompt: list[int]) -> tuple[list[int], float]:
    """32 greedy tokens by full recompute (no KV cache), and the smallest top-2 gap."""
    ids = torch.tensor([prompt])
    out, gap = [], float("inf")
    for _ in range(GREEDY_TOKENS):
        logits = model(input_ids=ids).logits[0, -1]
        top = torch.topk(logits, 2).values
        gap = min(gap, float(top[0] - top[1]))
        nxt = int(torch.argmax(logits))
        out.append(nxt)
        ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return out, gap


def batch_logits(model, tok: PreTrainedTokenizerFast) -> dict:
    """Logits of two sequences, the shorter left-padded; only real positions are kept."""
    a = tok("The capital of France is Paris, and two plus two is four.")["input_ids"]
    b = tok("Hello, world!")["input_ids"]
    width = max(len(a), len(b))
    rows, masks = [], []
    for seq in (a, b):
        pad = width - len(seq)
        rows.append([0] * pad + seq)
        masks.append([0] * pad + [1] * len(seq))
    ids = torch.tensor(rows)
    mask = torch.tensor(masks)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    kept = []
    for i, m in enumerate(masks):
        start = m.index(1)
        kept.append([[r(v) for v in row] for row in logits[i, start:].tolist()])
    return {"input_ids": rows, "attention_mask": masks, "logits": kept}


def write_chat_template(folder: Path, family: str) -> None:
    """Three ways HF folders carry the template: a string in tokenizer_config.json (llama),
    a named list there (qwen2, with the BOS token as an object), chat_template.jinja (qwen3)."""
    if family == "qwen3":
        return  # transformers 5 already wrote chat_template.jinja
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    if family == "llama":
        config["chat_template"] = CHATML
    else:
        config["chat_template"] = [
            {"name": "default", "template": CHATML},
            {"name": "tool_use", "template": "{{ raise_exception('no tools here') }}"},
        ]
        config["bos_token"] = {"__type": "AddedToken", "content": "<|endoftext|>"}
    path.write_text(json.dumps(config, indent=2) + "\n")
    (folder / "chat_template.jinja").unlink()


def make(family, config, cls, raw_tok: Tokenizer) -> None:
    folder = OUT / family
    shutil.rmtree(folder, ignore_errors=True)
    torch.manual_seed({"llama": 1, "qwen2": 2, "qwen3": 3}[family])
    model = cls(config).eval()
    randomize(model)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw_tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        chat_template=CHATML,
    )
    # Qwen3's checkpoint is sharded, to cover model.safetensors.index.json.
    shard = "200KB" if family == "qwen3" else "50MB"
    model.save_pretrained(folder, max_shard_size=shard)
    tok.save_pretrained(folder)
    write_chat_template(folder, family)

    # Everything below comes from the folder as written, as drmas will read it.
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    chat_text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    chat_ids = tok(chat_text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = batch_logits(model, tok)
        new, gap = greedy(model, chat_ids)
    assert gap > 1e-3, f"{family}: greedy top-2 gap {gap} is too small; change the seed"
    golden = {
        "family": family,
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "batch": logits,
        "greedy": {"prompt_ids": chat_ids, "new_ids": new, "min_top2_gap": r(gap)},
        "chat": {"messages": MESSAGES, "text": chat_text, "ids": chat_ids},
        "plain": {"text": PLAIN_TEXT, "ids": tok(PLAIN_TEXT, add_special_tokens=False)["input_ids"]},
        "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>"),
    }
    (folder.parent / f"{family}.golden.json").write_text(json.dumps(golden) + "\n")
    size = sum(f.stat().st_size for f in folder.iterdir())
    print(f"{family}: {size / 1024:.0f} KiB in {sorted(os.listdir(folder))}, min gap {gap:.3f}")


def check_converted(folder: Path) -> None:
    """Loads a `drmas-host convert` output with transformers and reports what it computes."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=20, do_sample=False, pad_token_id=0
        )
    answer = tok.decode(out[0, len(ids):], skip_special_tokens=True)
    print(f"{type(model).__name__}, {model.dtype}; prompt {len(ids)} tokens; answer: {answer!r}")
    report = {
        "prompt_text": text,
        "prompt_ids": ids,
        "last_logits": [r(v) for v in logits.tolist()],
        "answer": answer,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    path = folder.resolve().parent / "check_converted.json"
    path.write_text(json.dumps(report) + "\n")
    print(f"wrote {path}")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "check-converted":
        check_converted(Path(sys.argv[2]))
        return
    torch.set_grad_enabled(False)
    raw_tok = tokenizer()
    vocab = raw_tok.get_vocab_size()
    bos = raw_tok.token_to_id("<|endoftext|>")
    eos = raw_tok.token_to_id("<|im_end|>")
    OUT.mkdir(parents=True, exist_ok=True)
    for family, config, cls in configs(vocab, bos, eos):
        make(family, config, cls, raw_tok)


if __name__ == "__main__":
    main()
