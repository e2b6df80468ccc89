"""bfloat16 autocast on the forward, applied by a decorator; no scaler is needed. The float16
decorated function only serves inference."""
import torch
import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self, backbone, num_classes):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(backbone.out_features, num_classes)

    @torch.autocast("cuda", dtype=torch.bfloat16)
    def forward(self, x):
        return self.head(self.backbone(x))


@torch.autocast("cuda")
@torch.inference_mode()
def predict(model, x):
    return model(x).softmax(-1)


def train(model, loader, optimizer):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x.cuda()).float(), y.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
