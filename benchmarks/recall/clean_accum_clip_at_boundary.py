"""Gradient accumulation done right: unscale_ and clipping only at the accumulation boundary."""
import torch


def train_epoch(model, loader, optimizer, scaler, accum_steps=8, max_norm=1.0, log_every=50):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for step, batch in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(input_ids=batch["input_ids"].cuda(), labels=batch["labels"].cuda())
            loss = out.loss / accum_steps
        scaler.scale(loss).backward()
        if (step + 1) % accum_steps != 0:
            continue
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if step % log_every == 0:
            print(f"step {step} loss {loss.item() * accum_steps:.4f} grad_norm {grad_norm:.3f}")
