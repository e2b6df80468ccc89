"""A trainer loop in the style of detection frameworks: a step method on a trainer object."""
import torch

from .optim import clip_and_step


class AMPTrainer:
    def __init__(self, model, data_loader, optimizer, clip_value=None):
        self.model = model
        self.data_loader = data_loader
        self._data_loader_iter = iter(data_loader)
        self.optimizer = optimizer
        self.clip_value = clip_value
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def run_step(self):
        data = next(self._data_loader_iter)
        with torch.autocast("cuda", dtype=torch.float16):
            loss_dict = self.model(data)
            losses = sum(loss_dict.values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        clip_and_step(self.model.parameters(), self.optimizer, self.grad_scaler, self.clip_value)

    def train(self, start_iter, max_iter):
        for _ in range(start_iter, max_iter):
            self.run_step()
