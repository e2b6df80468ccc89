import torch


def make_scaler(precision):
    # float16 needs loss scaling; bfloat16 does not.
    return torch.amp.GradScaler("cuda", enabled=precision == "fp16")


def autocast_dtype(precision):
    return torch.float16 if precision == "fp16" else torch.bfloat16
