"""A trainer class that steps through its scaler but never updates it: the scale stays at its
initial value, and after one overflow every step is skipped."""
import torch


class Trainer:
    def __init__(self, model, lr=1e-3):
        self.model = model.cuda()
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.scaler = torch.amp.GradScaler("cuda")

    def fit(self, loader, epochs):
        for epoch in range(epochs):
            for batch in loader:
                self.optimizer.zero_grad()
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = self.model(batch)
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)  # expect: AMP202
