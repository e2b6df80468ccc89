"""Helpers for the segmentation reference scripts."""
import torch
from torch import nn


def train_one_epoch(model, criterion, optimizer, data_loader, lr_scheduler, device, epoch, print_freq=10):
    model.train()
    scaler = torch.amp.GradScaler("cuda")  # expect: AMP205
    for i, (image, target) in enumerate(data_loader):
        image, target = image.to(device), target.to(device)
        with torch.autocast("cuda"):
            output = model(image)
            loss = criterion(output, target)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        lr_scheduler.step()
        if i % print_freq == 0:
            print(f"epoch {epoch} iter {i} loss {loss.item():.4f}")


def criterion(inputs, target):
    return nn.functional.cross_entropy(inputs["out"], target, ignore_index=255)
