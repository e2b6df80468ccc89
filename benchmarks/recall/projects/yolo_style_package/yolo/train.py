"""Detector training loop: accumulation to a nominal batch size, EMA-free for brevity."""
import math
from copy import deepcopy

import torch

from .utils import de_parallel, save_weights


def train(model, dataloader, hyp, opt, device):
    nbs = 64
    accumulate = max(round(nbs / opt.batch_size), 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=hyp["lr0"], momentum=hyp["momentum"], nesterov=True)
    scaler = torch.amp.GradScaler("cuda", enabled=device.type != "cpu")
    best_fitness, last_opt_step = 0.0, -1
    nb = len(dataloader)
    for epoch in range(opt.epochs):
        model.train()
        for i, (imgs, targets) in enumerate(dataloader):
            ni = i + nb * epoch
            imgs = imgs.to(device, non_blocking=True).float() / 255
            with torch.autocast(device.type, enabled=device.type != "cpu"):
                pred = model(imgs)
                loss = model.compute_loss(pred, targets.to(device))
            scaler.scale(loss).backward()
            if ni - last_opt_step >= accumulate:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
                last_opt_step = ni
        fitness = float(model.evaluate()) if hasattr(model, "evaluate") else 0.0
        best_fitness = max(best_fitness, fitness)
        ckpt = {
            "epoch": epoch,
            "best_fitness": best_fitness,
            "model": deepcopy(de_parallel(model)).half(),
            "optimizer": optimizer.state_dict(),
            "opt": vars(opt),
        }
        save_weights(ckpt, opt.save_dir, epoch, best=fitness == best_fitness)  # expect: AMP211
        del ckpt
    return math.nan
