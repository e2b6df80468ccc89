"""An optimizer wrapper whose backward() scales the loss with the trainer's GradScaler; the
trainer then steps and updates through the same scaler."""
import torch


class ScaledOptimizer:
    def __init__(self, optimizer, scaler):
        self.optimizer = optimizer
        self.scaler = scaler

    def backward(self, loss):
        self.scaler.scale(loss).backward()


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.scaler = torch.amp.GradScaler("cuda")
        self.optimizer = ScaledOptimizer(optimizer, self.scaler)

    def step(self, batch):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(batch)
        self.optimizer.backward(loss)
        self.scaler.unscale_(self.optimizer.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer.optimizer)
        self.scaler.update()
        self.optimizer.optimizer.zero_grad()
