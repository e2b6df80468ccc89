"""A float16 training loop written the way timm's train.py writes it, with epochs, on the CPU.

    python timm_style.py --epochs 2 --batches-per-epoch 4 --accum-steps 2

As in timm: ``amp_autocast = partial(torch.autocast, device_type=..., dtype=torch.float16)``, a
``NativeScaler``-style loss scaler, made once, that wraps ``torch.amp.GradScaler`` and clips by
norm after ``unscale_``, a ``train_one_epoch`` function called per epoch, and gradient
accumulation that steps every ``--accum-steps`` batches. The model is a small ResNet.
"""

import argparse
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F


class NativeScaler:
    """Loss scaler in the manner of timm.utils.NativeScaler."""

    state_dict_key = "amp_scaler"

    def __init__(self, device: str = "cpu") -> None:
        self._scaler = torch.amp.GradScaler(device)

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, need_update=True):
        self._scaler.scale(loss).backward()
        if need_update:
            if clip_grad is not None:
                self._scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
            self._scaler.step(optimizer)
            self._scaler.update()

    def state_dict(self):
        return self._scaler.state_dict()


class BasicBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.bn2(self.conv2(x))
        return F.relu(x + shortcut)


class TinyResNet(nn.Module):
    def __init__(self, num_classes: int = 10, width: int = 8) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.stages = nn.Sequential(BasicBlock(width), BasicBlock(width))
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))


def train_one_epoch(epoch, model, images, targets, loss_fn, optimizer, amp_autocast, loss_scaler, args):
    model.train()
    for batch_idx in range(args.batches_per_epoch):
        need_update = (batch_idx + 1) % args.accum_steps == 0
        rows = slice((batch_idx * 8) % 32, (batch_idx * 8) % 32 + 8)
        with amp_autocast():
            output = model(images[rows])
            loss = loss_fn(output, targets[rows])
        loss = loss / args.accum_steps
        loss_scaler(loss, optimizer, clip_grad=args.clip_grad, parameters=model.parameters(), need_update=need_update)
        if need_update:
            optimizer.zero_grad()
        print(f"epoch {epoch} batch {batch_idx} loss {loss.item() * args.accum_steps:.4f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches-per-epoch", type=int, default=4)
    parser.add_argument("--accum-steps", type=int, default=2)
    parser.add_argument("--clip-grad", type=float, default=1.0)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cpu")
    model = TinyResNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    amp_autocast = partial(torch.autocast, device_type=device.type, dtype=torch.float16)
    loss_scaler = NativeScaler(device.type)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    images = torch.randn(32, 3, 8, 8)
    targets = torch.randint(0, 10, (32,))

    for epoch in range(args.epochs):
        train_one_epoch(epoch, model, images, targets, loss_fn, optimizer, amp_autocast, loss_scaler, args)


if __name__ == "__main__":
    main()
