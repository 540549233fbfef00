#!/usr/bin/env python3
"""Golden LoRA adapter for host/tests/lora.rs, made by Hugging Face PEFT.

Puts a PEFT LoRA adapter (rank 4, alpha 8, dropout 0.1, all seven projections) on the tiny
Llama fixture host/tests/fixtures/hf/llama (made by make_fixtures.py), gives its B matrices
random non-zero values (PEFT initialises them to zero, which would test nothing), saves it with
`save_pretrained` into host/tests/fixtures/hf/llama_lora/ (adapter_config.json and
adapter_model.safetensors, PEFT's layout and names), and records in llama_lora.golden.json the
logits of the adapted model for the batch of llama.golden.json (the second row left-padded,
position ids that skip the padding): what drmas must compute after loading the folder.

Run by hand, never by CI:

    /tmp/golden-venv/bin/pip install peft          # beside torch and transformers, from PyPI
    /tmp/golden-venv/bin/python scripts/golden/make_lora_fixture.py

Deterministic for a given torch/transformers/peft version (fixed seed).
"""

import json
import shutil
from pathlib import Path

import peft
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "host" / "tests" / "fixtures" / "hf"
BASE = FIXTURES / "llama"
OUT = FIXTURES / "llama_lora"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def r(x: float) -> float:
    return float(f"{x:.7g}")


def main() -> None:
    torch.manual_seed(10)
    model = AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32)
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=0.1,
        target_modules=TARGETS,
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.5)
    shutil.rmtree(OUT, ignore_errors=True)
    model.save_pretrained(OUT)
    # The base model's path as the fixture folder's neighbour, not this machine's.
    config_path = OUT / "adapter_config.json"
    saved = json.loads(config_path.read_text())
    saved["base_model_name_or_path"] = "host/tests/fixtures/hf/llama"
    config_path.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    readme = OUT / "README.md"
    if readme.exists():
        readme.unlink()

    # Everything below comes from the folders as written, as drmas will read them.
    base = AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, OUT).eval()
    batch = json.loads((FIXTURES / "llama.golden.json").read_text())["batch"]
    ids = torch.tensor(batch["input_ids"])
    mask = torch.tensor(batch["attention_mask"])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = adapted(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    kept = []
    for i, m in enumerate(batch["attention_mask"]):
        start = m.index(1)
        kept.append([[r(v) for v in row] for row in logits[i, start:].tolist()])
    golden = {
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
        },
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "logits": kept,
    }
    (FIXTURES / "llama_lora.golden.json").write_text(json.dumps(golden) + "\n")
    size = sum(f.stat().st_size for f in OUT.iterdir())
    print(f"llama_lora: {size / 1024:.0f} KiB in {sorted(p.name for p in OUT.iterdir())}")


if __name__ == "__main__":
    main()
