"""A custom fine-tuning loop in the style of older transformers examples: the deprecated CUDA
autocast switched by --fp16, with the backward pass inside it."""
import torch
from torch.cuda.amp import GradScaler  # expect: AMP401


def train(args, model, train_dataloader, optimizer, scheduler):
    scaler = GradScaler(enabled=args.fp16)
    global_step = 0
    for epoch in range(int(args.num_train_epochs)):
        for step, batch in enumerate(train_dataloader):
            model.train()
            inputs = {k: v.to(args.device) for k, v in batch.items()}
            with torch.cuda.amp.autocast(enabled=args.fp16):  # expect: AMP401
                outputs = model(**inputs)
                loss = outputs[0]
                scaler.scale(loss).backward()  # expect: AMP101
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            model.zero_grad()
            global_step += 1
    return global_step
