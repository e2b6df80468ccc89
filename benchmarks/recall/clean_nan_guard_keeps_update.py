"""A gradient-norm guard that skips only the optimizer step and still updates the scaler."""
import torch


class Learner:
    def __init__(self, model, optimizer, max_norm=1.0, skip_threshold=1e3):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")
        self.max_norm = max_norm
        self.skip_threshold = skip_threshold
        self.skipped = 0

    def train_step(self, batch):
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(**batch)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
        if torch.isfinite(norm) and norm < self.skip_threshold:
            self.scaler.step(self.optimizer)
        else:
            self.skipped += 1
        self.scaler.update()
        return loss.detach()
