"""Accumulation where clipping (with its unscale_) lives in a helper called on every micro-step,
while the step runs only at the boundary. Reported at the call, where the fix goes (under the
step's condition), with the helper's unscale_ as the related location."""
import torch


class Trainer:
    def __init__(self, model, optimizer, accum=4, clip=1.0):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")
        self.accum = accum
        self.clip = clip

    def clip_gradients(self):
        self.scaler.unscale_(self.optimizer)
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)

    def train(self, loader):
        for i, batch in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(batch) / self.accum
            self.scaler.scale(loss).backward()
            self.clip_gradients()  # expect: AMP206
            if (i + 1) % self.accum == 0:
                self.scaler.step(self.optimizer)
                self.scaler.update()
                self.optimizer.zero_grad()
