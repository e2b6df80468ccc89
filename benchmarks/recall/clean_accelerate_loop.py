"""An accelerate training loop: mixed precision and loss scaling belong to the Accelerator."""
import torch
from accelerate import Accelerator


def main(model, optimizer, train_dataloader, lr_scheduler, num_epochs, accum=4):
    accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=accum)
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(model, optimizer, train_dataloader, lr_scheduler)
    for epoch in range(num_epochs):
        model.train()
        for batch in train_dataloader:
            with accelerator.accumulate(model):
                with accelerator.autocast():
                    loss = model(**batch).loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
    accelerator.save_state("checkpoint")
