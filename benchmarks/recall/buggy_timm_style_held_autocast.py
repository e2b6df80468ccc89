"""timm-style training script: the autocast context and the loss scaler are chosen in main() and
passed into train_one_epoch; the backward pass was left inside the held region."""
import argparse
from contextlib import suppress
from functools import partial

import torch
import torch.nn as nn


def train_one_epoch(epoch, model, loader, optimizer, loss_fn, amp_autocast=suppress, loss_scaler=None, clip_grad=None):
    model.train()
    for batch_idx, (input, target) in enumerate(loader):
        input, target = input.cuda(), target.cuda()
        with amp_autocast():
            output = model(input)
            loss = loss_fn(output, target)
            if loss_scaler is not None:
                loss_scaler.scale(loss).backward()  # expect: AMP101
            else:
                loss.backward()  # expect: AMP101
        optimizer.step()
        optimizer.zero_grad()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--amp-dtype", default="float16")
    args = parser.parse_args()
    model = nn.Linear(10, 10).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    amp_autocast = suppress
    loss_scaler = None
    if args.amp:
        amp_dtype = torch.bfloat16 if args.amp_dtype == "bfloat16" else torch.float16
        amp_autocast = partial(torch.autocast, device_type="cuda", dtype=amp_dtype)
        if amp_dtype == torch.float16:
            loss_scaler = torch.amp.GradScaler("cuda")
    for epoch in range(10):
        train_one_epoch(epoch, model, [], optimizer, nn.CrossEntropyLoss(), amp_autocast, loss_scaler)
