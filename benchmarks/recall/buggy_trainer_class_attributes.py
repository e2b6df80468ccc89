"""A trainer class holding its autocast context and scaler in attributes, with the optimizer
stepped directly after a scaled backward and the scaler update inside the region."""
from contextlib import nullcontext
from functools import partial

import torch


class Trainer:
    def __init__(self, model, optimizer, use_amp):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
        if use_amp:
            self.autocast = partial(torch.autocast, device_type="cuda", dtype=torch.float16)
        else:
            self.autocast = nullcontext

    def training_step(self, batch):
        with self.autocast():
            loss = self.model(batch["pixels"], batch["labels"])
        self.scaler.scale(loss).backward()
        self.optimizer.step()  # expect: AMP203
        self.optimizer.zero_grad()
        return loss.item()

    def finetune_step(self, batch):
        with self.autocast():
            loss = self.model(batch["pixels"], batch["labels"])
        self.scaler.scale(loss).backward()
        with self.autocast():
            self.scaler.step(self.optimizer)  # expect: AMP102
            self.scaler.update()  # expect: AMP102
        self.optimizer.zero_grad()
