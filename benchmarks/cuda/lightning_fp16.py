"""Train a Transformer-encoder sequence classifier with the Lightning ``Trainer(precision="16-mixed",
accelerator="gpu")`` on synthetic sequences.

    python lightning_fp16.py --max-steps 12                     # 4 layers, d_model 512, length 256
    python lightning_fp16.py --device cpu --size tiny

Lightning's ``MixedPrecision`` plugin enters ``torch.autocast("cuda", dtype=torch.float16)``
around the training step and drives a ``torch.amp.GradScaler``; ``gradient_clip_val`` unscales
before clipping, and two batches are accumulated per optimizer step. ``precision="16-mixed"`` on
the CPU would fall back to bfloat16, so ``--device cpu`` gives the plugin explicitly.

Each batch prints ``batch N loss REPR hex HEX``.
"""

import argparse

import lightning as L
import torch
from lightning.pytorch.plugins import MixedPrecision
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

SIZES = {
    "gpu": {"width": 512, "layers": 4, "heads": 8, "length": 256, "batch": 16},
    "tiny": {"width": 32, "layers": 2, "heads": 2, "length": 16, "batch": 8},
}
VOCAB = 8192
CLASSES = 16


class SequenceClassifier(L.LightningModule):
    def __init__(self, width: int, layers: int, heads: int, length: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Parameter(torch.randn(length, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.encoder(self.embed(tokens) + self.position)
        return self.head(self.norm(x).mean(dim=1))

    def training_step(self, batch, batch_idx):
        tokens, labels = batch
        loss = F.cross_entropy(self(tokens), labels)
        value = loss.item()
        print(f"batch {batch_idx} loss {value!r} hex {value.hex()}", flush=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-4, weight_decay=0.01)


def synthetic_data(samples: int, length: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (samples, length), generator=generator)
    return TensorDataset(tokens, tokens[:, 0] % CLASSES)


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
    if args.device == "cpu":
        placement = {"accelerator": "cpu", "plugins": [MixedPrecision(precision="16-mixed", device="cpu")]}
    else:
        placement = {"accelerator": "gpu", "precision": "16-mixed"}
    L.seed_everything(0, verbose=False)
    model = SequenceClassifier(size["width"], size["layers"], size["heads"], size["length"])
    trainer = L.Trainer(
        devices=1,
        **placement,
        max_steps=args.max_steps,
        accumulate_grad_batches=2,
        gradient_clip_val=1.0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    loader = DataLoader(
        synthetic_data(1024, size["length"]),
        batch_size=size["batch"],
        shuffle=True,
        generator=torch.Generator().manual_seed(2),
    )
    trainer.fit(model, loader)


if __name__ == "__main__":
    main()
