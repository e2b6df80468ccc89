"""Two exclusive precision modes: autocast, or a model converted to float16 by hand with its
inputs cast to match. The cast is guarded by the other mode's flag."""
import torch


def evaluate(model, loader, use_autocast=False, pure_fp16=False):
    if pure_fp16:
        model = model.half()
    results = []
    with torch.no_grad():
        for images, _ in loader:
            images = images.cuda()
            with torch.autocast("cuda", enabled=use_autocast):
                if pure_fp16:
                    images = images.half()
                results.append(model(images).float().cpu())
    return torch.cat(results)
