"""Mixed precision switched by one flag, with a hand-made half cast under the same flag inside
the region: autocast is on whenever the cast runs."""
import torch
import torch.nn.functional as F


class SegmentationTrainer:
    def __init__(self, model, optimizer, cfg):
        self.model = model
        self.optimizer = optimizer
        self.use_amp = cfg.amp
        self.scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp)

    def step(self, images, masks):
        with torch.autocast("cuda", enabled=self.use_amp):
            features = self.model.backbone(images)
            if self.use_amp:
                features = features.half()  # expect: AMP103
            logits = self.model.decode_head(features)
            loss = F.cross_entropy(logits, masks, ignore_index=255)
        self.optimizer.zero_grad()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
