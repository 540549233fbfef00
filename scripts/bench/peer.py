"""The Python peer of the Rust benchmarks: HF transformers / PyTorch eager on the same model folder.

The Rust benchmarks (host/benches/) start it as a subprocess and talk JSON lines over stdin/stdout,
so that each measurement of ours and of the peer can be interleaved in one run without reloading
the model. One request per line, one answer per line:

  {"cmd": "load", "model": DIR, "threads": 2, "dtype": "f32"}   (dtype f32 or bf16; f32 if absent)
  {"cmd": "generate", "prompts": [[ids...], ...], "max_new_tokens": 128, "seed": 1}
      -> {"seconds", "tokens", "longest"}: HF `generate`, sampled at temperature 1 with no top-k
         or top-p, left padding, tokens counted per row up to and including the first EOS
  {"cmd": "train_step", "ids": [[ids...], ...]}
      -> {"seconds", "loss"}: one causal-LM forward + backward (mean token cross-entropy)
  {"cmd": "matmul", "n": 2048, "reps": 8} -> {"gflops"}: best of `reps` f32 n x n products

Errors come back as {"error": "..."} and the peer goes on reading. Run it by hand with
`python scripts/bench/peer.py` and type requests, or see docs/benchmarks.md.
"""

import json
import sys
import time
import traceback

import torch
import transformers


class Peer:
    """The loaded model and the requests it answers."""

    def __init__(self):
        self.model = None
        self.eos = None

    def load(self, model, threads, dtype):
        torch.set_num_threads(threads)
        kinds = {"f32": torch.float32, "bf16": torch.bfloat16}
        if dtype not in kinds:
            raise ValueError(f"dtype {dtype!r}: expected one of {sorted(kinds)}")
        self.model = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=kinds[dtype])
        self.model.eval()
        self.eos = self.model.config.eos_token_id
        return {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "threads": torch.get_num_threads(),
            "dtype": dtype,
            "attention": self.model.config._attn_implementation,
        }

    def generate(self, prompts, max_new_tokens, seed):
        longest = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (longest - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts])
        torch.manual_seed(seed)
        start = time.perf_counter()
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                pad_token_id=self.eos,
                eos_token_id=self.eos,
            )
        seconds = time.perf_counter() - start
        lengths = []
        for row in out[:, longest:].tolist():
            lengths.append(row.index(self.eos) + 1 if self.eos in row else len(row))
        return {"seconds": seconds, "tokens": sum(lengths), "longest": max(lengths)}

    def train_step(self, ids):
        ids = torch.tensor(ids)
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        loss = self.model(input_ids=ids, labels=ids).loss
        loss.backward()
        seconds = time.perf_counter() - start
        self.model.eval()
        return {"seconds": seconds, "loss": loss.item()}

    @staticmethod
    def matmul(n, reps):
        a, b = torch.randn(n, n), torch.randn(n, n)
        _ = a @ b
        best = float("inf")
        for _ in range(reps):
            start = time.perf_counter()
            _ = a @ b
            best = min(best, time.perf_counter() - start)
        return {"gflops": 2 * n**3 / best / 1e9}


def main():
    peer = Peer()
    handlers = {
        "load": lambda r: peer.load(r["model"], r.get("threads", 2), r.get("dtype", "f32")),
        "generate": lambda r: peer.generate(r["prompts"], r["max_new_tokens"], r.get("seed", 0)),
        "train_step": lambda r: peer.train_step(r["ids"]),
        "matmul": lambda r: peer.matmul(r.get("n", 2048), r.get("reps", 8)),
    }
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            answer = handlers[request["cmd"]](request)
        except Exception as error:  # noqa: BLE001 - every failure goes back to the caller
            traceback.print_exc(file=sys.stderr)
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
