import torch

from steps import backward_micro_step


def pretrain(model, batches, optimizer, accumulation_steps=8):
    scaler = torch.amp.GradScaler("cuda")
    for step, (x, y) in enumerate(batches):
        with torch.autocast("cuda", dtype=torch.float16):
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
            backward_micro_step(loss, scaler, accumulation_steps)  # expect: AMP101
        if (step + 1) % accumulation_steps == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
