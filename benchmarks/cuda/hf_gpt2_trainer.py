"""Train a GPT-2 built from a ``GPT2Config`` (random weights) with the Hugging Face ``Trainer`` and
``TrainingArguments(fp16=True)`` on synthetic token sequences.

    python hf_gpt2_trainer.py --max-steps 12                    # 6 layers, n_embd 768, length 256
    python hf_gpt2_trainer.py --device cpu --size tiny

On CUDA the Trainer hands float16 to Accelerate, which enters ``torch.autocast("cuda",
dtype=torch.float16)`` around the forward and drives a ``torch.amp.GradScaler``; clipping
(``max_grad_norm``) unscales first. On the CPU (``--device cpu``, ``use_cpu=True``) Accelerate
does neither, and the run is float32.

Each micro-batch prints ``micro N loss REPR hex HEX`` and each optimizer step ``step N weights hex
HEX`` (the float64 sum of all weights, which any change of any bit in training moves).
"""

import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments, set_seed

SIZES = {
    "gpu": {"config": {"n_embd": 768, "n_layer": 6, "n_head": 12, "n_positions": 256}, "length": 256, "batch": 8},
    "tiny": {
        "config": {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 32, "vocab_size": 128},
        "length": 32,
        "batch": 4,
    },
}


class RandomTokens(Dataset):
    def __init__(self, samples: int, length: int, vocab_size: int) -> None:
        generator = torch.Generator().manual_seed(1)
        self.tokens = torch.randint(0, vocab_size, (samples, length), generator=generator)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict:
        ids = self.tokens[index]
        return {"input_ids": ids, "labels": ids.clone()}


class LossPrintingTrainer(Trainer):
    micro_batches = 0

    def compute_loss(self, model, inputs, *args, **kwargs):
        result = super().compute_loss(model, inputs, *args, **kwargs)
        loss = result[0] if isinstance(result, tuple) else result
        value = loss.detach().float().item()
        print(f"micro {self.micro_batches} loss {value!r} hex {value.hex()}", flush=True)
        self.micro_batches += 1
        return result


class PrintWeights(TrainerCallback):
    def on_step_end(self, args, state, control, model=None, **kwargs):
        with torch.no_grad():
            total = float(sum(p.double().sum() for p in model.parameters()))
        print(f"step {state.global_step} weights hex {total.hex()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", choices=sorted(SIZES), default="gpu")
    parser.add_argument("--max-steps", type=int, default=12)
    parser.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms")
    args = parser.parse_args()

    if args.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    size = SIZES[args.size]
    set_seed(0)
    config = GPT2Config(**size["config"])
    model = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as output_dir:
        training_args = TrainingArguments(
            output_dir=output_dir,
            use_cpu=args.device == "cpu",
            fp16=True,
            max_steps=args.max_steps,
            per_device_train_batch_size=size["batch"],
            gradient_accumulation_steps=2,
            learning_rate=3e-4,
            warmup_steps=2,
            max_grad_norm=1.0,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            dataloader_num_workers=0,
            seed=0,
        )
        trainer = LossPrintingTrainer(
            model=model,
            args=training_args,
            train_dataset=RandomTokens(1024, size["length"], config.vocab_size),
            callbacks=[PrintWeights()],
        )
        trainer.train()


if __name__ == "__main__":
    main()
