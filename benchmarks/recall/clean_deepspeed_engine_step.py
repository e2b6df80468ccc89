"""A DeepSpeed training step written against the engine passed in by the launcher: the engine's
backward() applies its own loss scaling, so there is no GradScaler in this file."""
import torch


def train(model_engine, loader, log_interval=100):
    model_engine.train()
    for step, batch in enumerate(loader):
        inputs = batch["input_ids"].to(model_engine.local_rank)
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = model_engine(inputs, labels=inputs).loss
        model_engine.backward(loss)
        model_engine.step()
        if step % log_interval == 0 and model_engine.global_rank == 0:
            print(step, loss.item())


def evaluate_and_train(model, loader):
    # ``model`` is the engine deepspeed.initialize returned.
    for batch in loader:
        with torch.autocast(device_type="cuda"):
            loss = model(batch)
        model.backward(loss)
        model.step()
