"""A trainer with an optional scaler on self, chosen by configuration, used in another method."""
import torch


class Engine:
    def __init__(self, model, optimizer, fp16):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda") if fp16 else None
        self.autocast_dtype = torch.float16 if fp16 else torch.float32

    def step(self, batch):
        with torch.autocast("cuda", dtype=self.autocast_dtype, enabled=self.scaler is not None):
            loss = self.model(batch)
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        return loss.detach()
