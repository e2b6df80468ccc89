"""Gradient clipping and the optimizer update, configurable per model."""
import torch


def clip_and_step(params, optimizer, scaler, clip_value=None):
    if clip_value is not None:
        torch.nn.utils.clip_grad_value_(params, clip_value)  # expect: AMP201
    scaler.step(optimizer)
    scaler.update()
