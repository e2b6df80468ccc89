"""timm-style loop written correctly: the held context wraps only the forward and the loss."""
from contextlib import suppress
from functools import partial

import torch


class NativeScalerWithClip:
    state_dict_key = "amp_scaler"

    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None):
        self._scaler.scale(loss).backward()
        if clip_grad is not None:
            self._scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
        self._scaler.step(optimizer)
        self._scaler.update()

    def state_dict(self):
        return self._scaler.state_dict()


def train_one_epoch(model, loader, optimizer, loss_fn, amp_autocast=suppress, loss_scaler=None, clip_grad=None):
    for input, target in loader:
        with amp_autocast():
            loss = loss_fn(model(input), target)
        optimizer.zero_grad()
        if loss_scaler is not None:
            loss_scaler(loss, optimizer, clip_grad=clip_grad, parameters=model.parameters())
        else:
            loss.backward()
            optimizer.step()


def main(model, loader, optimizer, loss_fn, use_amp=True):
    amp_autocast = partial(torch.autocast, device_type="cuda", dtype=torch.float16) if use_amp else suppress
    loss_scaler = NativeScalerWithClip() if use_amp else None
    for epoch in range(100):
        train_one_epoch(model, loader, optimizer, loss_fn, amp_autocast=amp_autocast, loss_scaler=loss_scaler)
