"""A fairseq-like trainer: the FP16 optimizer wrapper keeps its own loss scaler and scales the
loss inside optimizer.backward(loss)."""
import torch

from mylib.optim.fp16 import FP16Optimizer


class Trainer:
    def __init__(self, cfg, model, criterion):
        self.cfg = cfg
        self.model = model
        self.criterion = criterion
        self.optimizer = FP16Optimizer.build_optimizer(cfg, list(model.parameters()))

    def train_step(self, samples):
        self.model.train()
        self.optimizer.zero_grad()
        logging_outputs = []
        for sample in samples:
            with torch.autocast("cuda", dtype=torch.float16):
                loss, sample_size, logging_output = self.criterion(self.model, sample)
            self.optimizer.backward(loss)
            logging_outputs.append(logging_output)
        grad_norm = self.optimizer.clip_grad_norm(self.cfg.clip_norm)
        self.optimizer.step()
        return grad_norm, logging_outputs
