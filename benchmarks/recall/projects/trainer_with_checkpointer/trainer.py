"""A Trainer in the style of transformer fine-tuning repositories."""
import torch
from torch.utils.data import DataLoader

from checkpointer import Checkpointer


class Trainer:
    def __init__(self, model, dataset, args):
        self.args = args
        self.model = model.to(args.device)
        self.loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: min(1.0, (s + 1) / 1000))
        self.scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)
        self.checkpointer = Checkpointer(args.output_dir)
        self.global_step = 0

    def training_step(self, batch):
        batch = {k: v.to(self.args.device) for k, v in batch.items()}
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.args.fp16):
            loss = self.model(**batch).loss
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def train(self):
        for epoch in range(self.args.epochs):
            for batch in self.loader:
                self.training_step(batch)
                self.global_step += 1
                if self.global_step % self.args.save_steps == 0:
                    self.checkpointer.save(self.model, self.optimizer, self.global_step)  # expect: AMP211
