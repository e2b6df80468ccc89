"""A loss-spike guard sets a skip flag after unscale_; a skipped iteration runs neither step nor
update, and the next unscale_ raises."""
import torch


class SpikeGuardTrainer:
    def __init__(self, model, optimizer, spike_factor=10.0):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")
        self.spike_factor = spike_factor
        self.running_norm = None

    def fit(self, loader):
        for batch in loader:
            self.optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(**batch)
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)  # expect: AMP206
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), float("inf"))
            skip = False
            if self.running_norm is not None and norm > self.spike_factor * self.running_norm:
                skip = True
            if not skip:
                self.running_norm = norm if self.running_norm is None else 0.9 * self.running_norm + 0.1 * norm
                self.scaler.step(self.optimizer)
                self.scaler.update()
