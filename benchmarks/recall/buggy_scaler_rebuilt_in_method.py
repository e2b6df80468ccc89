"""A trainer whose per-epoch method builds a fresh scaler on self; fit() calls it every epoch."""
import torch


class Trainer:
    def __init__(self, model, optimizer, loader):
        self.model = model
        self.optimizer = optimizer
        self.loader = loader

    def train_epoch(self):
        self.scaler = torch.amp.GradScaler("cuda")  # expect: AMP205
        for x, y in self.loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x, y)
            self.optimizer.zero_grad()
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()

    def fit(self, epochs):
        for epoch in range(epochs):
            self.train_epoch()
