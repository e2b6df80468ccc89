"""The scaler is built once per training run and passed to the epoch function."""
import torch


def train_one_epoch(model, loader, optimizer, scaler):
    for samples, targets in loader:
        with torch.autocast("cuda"):
            loss = torch.nn.functional.cross_entropy(model(samples.cuda()), targets.cuda())
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def main(args, model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
    if args.resume:
        checkpoint = torch.load(args.resume, map_location="cpu")
        scaler.load_state_dict(checkpoint["scaler"])
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, scaler)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()},
                   "checkpoint.pth")
