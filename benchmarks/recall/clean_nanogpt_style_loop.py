"""A compact GPT training loop in the nanoGPT manner: a context chosen by device type, a scaler
enabled only for float16, accumulation over micro-steps and clipping at the boundary."""
from contextlib import nullcontext

import torch

dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float16"
device = "cuda"
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
gradient_accumulation_steps = 40
grad_clip = 1.0


def train(model, optimizer, get_batch, max_iters):
    scaler = torch.amp.GradScaler("cuda", enabled=(dtype == "float16"))
    X, Y = get_batch("train")
    for iter_num in range(max_iters):
        for micro_step in range(gradient_accumulation_steps):
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch("train")
            scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
