"""Step functions decorated with autocast: the whole step, backward and update included, runs in
float16 autocast, and the forward helper of the second loop is decorated too. No scaler."""
import torch


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    @torch.autocast("cuda")  # expect: AMP210
    def train_step(self, batch):
        self.optimizer.zero_grad()
        loss = self.model(batch["x"], batch["y"])
        loss.backward()  # expect: AMP101
        self.optimizer.step()  # expect: AMP102
        return loss.detach()


@torch.autocast(device_type="cuda", dtype=torch.float16)  # expect: AMP210
def forward_loss(model, batch):
    return model(batch["x"], batch["y"])


def pretrain(model, optimizer, loader):
    for batch in loader:
        loss = forward_loss(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
