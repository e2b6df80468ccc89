"""Train a ResNet-style image classifier in an Accelerate loop with
``Accelerator(mixed_precision="fp16")`` on synthetic images.

    python accelerate_fp16.py --max-steps 12                    # width 64-256, 64x64 images, batch 64
    python accelerate_fp16.py --device cpu --size tiny

On CUDA the ``Accelerator`` wraps the model's forward in float16 autocast, ``accelerator.backward``
scales the loss with its GradScaler, ``accelerator.clip_grad_norm_`` unscales before clipping and
the ``AcceleratedOptimizer`` steps through the scaler; two batches are accumulated per optimizer
step with ``accelerator.accumulate``. The model runs in channels-last memory format, as image
models on tensor cores do. On the CPU (``cpu=True``) Accelerate neither enters autocast nor
makes a scaler: that run is float32.

Each batch prints ``batch N loss REPR hex HEX``.
"""

import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

SIZES = {
    "gpu": {"widths": (64, 128, 256), "image": 64, "batch": 64},
    "tiny": {"widths": (8, 16, 16), "image": 16, "batch": 8},
}
CLASSES = 100


class ResidualBlock(nn.Module):
    def __init__(self, channels_in: int, channels_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels_out)
        self.shortcut = nn.Identity()
        if stride != 1 or channels_in != channels_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels_in, channels_out, 1, stride=stride, bias=False), nn.BatchNorm2d(channels_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, widths: tuple[int, ...]) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        blocks = []
        channels = widths[0]
        for index, width in enumerate(widths):
            blocks += [ResidualBlock(channels, width, 1 if index == 0 else 2), ResidualBlock(width, width, 1)]
            channels = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(channels, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))


def synthetic_images(samples: int, image: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    images = torch.randn(samples, 3, image, image, generator=generator)
    labels = torch.randint(0, CLASSES, (samples,), generator=generator)
    return TensorDataset(images, labels)


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
    accelerator = Accelerator(mixed_precision="fp16", cpu=args.device == "cpu", gradient_accumulation_steps=2)
    set_seed(0)
    model = ResNet(size["widths"]).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    loader = DataLoader(
        synthetic_images(1024, size["image"]),
        batch_size=size["batch"],
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(2),
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    model.train()
    step = 0
    batch_index = 0
    while step < args.max_steps:
        for images, labels in loader:
            with accelerator.accumulate(model):
                outputs = model(images.contiguous(memory_format=torch.channels_last))
                loss = F.cross_entropy(outputs, labels, label_smoothing=0.1)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 5.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            value = loss.item()
            accelerator.print(f"batch {batch_index} loss {value!r} hex {value.hex()}")
            batch_index += 1
            if accelerator.sync_gradients:
                step += 1
                if step == args.max_steps:
                    break


if __name__ == "__main__":
    main()
