"""A Lightning Fabric loop with 16-bit mixed precision: fabric.backward scales the loss."""
import lightning as L
import torch


def run(model, dataloader, epochs=3):
    fabric = L.Fabric(accelerator="cuda", precision="16-mixed")
    fabric.launch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model, optimizer = fabric.setup(model, optimizer)
    dataloader = fabric.setup_dataloaders(dataloader)
    for epoch in range(epochs):
        for batch in dataloader:
            optimizer.zero_grad()
            loss = model(batch).mean()
            fabric.backward(loss)
            fabric.clip_gradients(model, optimizer, max_norm=1.0)
            optimizer.step()
