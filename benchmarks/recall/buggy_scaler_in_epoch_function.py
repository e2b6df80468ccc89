"""train_one_epoch builds its own GradScaler and is called once per epoch."""
import torch


def train_one_epoch(model, loader, optimizer, device):
    scaler = torch.amp.GradScaler("cuda")  # expect: AMP205
    model.train()
    for samples, targets in loader:
        samples, targets = samples.to(device), targets.to(device)
        with torch.autocast("cuda"):
            loss = torch.nn.functional.cross_entropy(model(samples), targets)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def main(args, model, loader, optimizer):
    for epoch in range(args.start_epoch, args.epochs):
        train_one_epoch(model, loader, optimizer, args.device)
        torch.save({"model": model.state_dict(), "epoch": epoch}, f"{args.output_dir}/checkpoint.pth")
