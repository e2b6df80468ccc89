"""A detectron2-style AMPTrainer: run_step computes the loss dict under autocast and steps the
optimizer through the grad scaler."""
import time

import torch


class SimpleTrainer:
    def __init__(self, model, data_loader, optimizer):
        self.model = model
        self.data_loader = data_loader
        self._data_loader_iter = iter(data_loader)
        self.optimizer = optimizer


class AMPTrainer(SimpleTrainer):
    def __init__(self, model, data_loader, optimizer, grad_scaler=None, precision=torch.float16):
        super().__init__(model, data_loader, optimizer)
        if grad_scaler is None:
            grad_scaler = torch.amp.GradScaler("cuda")
        self.grad_scaler = grad_scaler
        self.precision = precision

    def run_step(self):
        assert self.model.training, "[AMPTrainer] model was changed to eval mode!"
        start = time.perf_counter()
        data = next(self._data_loader_iter)
        data_time = time.perf_counter() - start
        with torch.autocast("cuda", dtype=self.precision):
            loss_dict = self.model(data)
            losses = sum(loss_dict.values())
        self.optimizer.zero_grad()
        self.grad_scaler.scale(losses).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
        return data_time

    def state_dict(self):
        return {"grad_scaler": self.grad_scaler.state_dict()}

    def load_state_dict(self, state):
        self.grad_scaler.load_state_dict(state["grad_scaler"])
