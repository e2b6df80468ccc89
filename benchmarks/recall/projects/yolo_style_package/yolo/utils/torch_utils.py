import os

import torch
from torch import nn


def de_parallel(model):
    return model.module if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)) else model


def save_weights(ckpt, save_dir, epoch, best=False):
    last = os.path.join(save_dir, "last.pt")
    torch.save(ckpt, last)
    if best:
        torch.save(ckpt, os.path.join(save_dir, "best.pt"))
    return last
