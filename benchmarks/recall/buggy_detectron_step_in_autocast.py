"""A detectron2-like run_step whose autocast block was widened around the whole step."""
import torch


class AMPTrainer:
    def __init__(self, model, data_loader, optimizer):
        self.model = model
        self._data_loader_iter = iter(data_loader)
        self.optimizer = optimizer
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def run_step(self):
        data = next(self._data_loader_iter)
        with torch.autocast("cuda", dtype=torch.float16):
            loss_dict = self.model(data)
            losses = sum(loss_dict.values())
            self.optimizer.zero_grad()
            self.grad_scaler.scale(losses).backward()  # expect: AMP101
            self.grad_scaler.step(self.optimizer)  # expect: AMP102
            self.grad_scaler.update()  # expect: AMP102
