"""Gradient accumulation with optional clipping: unscale_ runs on every micro-step, while step and
update run only at the accumulation boundary, so the second micro-step unscales again."""
import torch
from torch.nn.utils import clip_grad_norm_


def train_epoch(model, loader, optimizer, scheduler, scaler, accum_steps=4, clip_grad=1.0):
    model.train()
    for i, (inputs, labels) in enumerate(loader):
        inputs, labels = inputs.cuda(), labels.cuda()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(inputs), labels) / accum_steps
        scaler.scale(loss).backward()
        if clip_grad:
            scaler.unscale_(optimizer)  # expect: AMP206
            clip_grad_norm_(model.parameters(), clip_grad)
        if (i + 1) % accum_steps == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
