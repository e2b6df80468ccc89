"""The scaler is rebuilt at the top of every epoch, so its learned scale starts over each time."""
import torch
from torch.amp import GradScaler


def main(model, train_loader, val_loader, optimizer, epochs):
    for epoch in range(epochs):
        scaler = GradScaler("cuda")  # expect: AMP205
        model.train()
        for images, target in train_loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(images.cuda()), target.cuda())
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        evaluate(model, val_loader)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    return sum((model(x.cuda()).argmax(1) == y.cuda()).sum().item() for x, y in loader)
