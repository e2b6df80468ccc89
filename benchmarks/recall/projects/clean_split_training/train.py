import torch

from trainkit.checkpoint import save_checkpoint, save_for_inference, save_training_state
from trainkit.loop import train_epoch


def main(model, loader, epochs, out):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        train_epoch(model, loader, optimizer, scaler)
        save_checkpoint(f"{out}/last.pt", model, optimizer, scaler, epoch=epoch)
        save_training_state(f"{out}/state.pt", model, optimizer, scaler)
    save_for_inference(f"{out}/final.pt", model)
