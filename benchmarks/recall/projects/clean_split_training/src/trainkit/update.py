import torch


def clip_and_step(model, optimizer, scaler, max_norm):
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


def step_unscaled(model, optimizer, scaler, max_norm):
    """The caller unscales; this clips and steps."""
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
