"""A ViT fine-tuning script that turned on autocast with CUDA's default dtype (float16) and kept
its plain backward pass: nothing scales the loss."""
import torch
import torch.nn.functional as F


def train(model, loader, epochs, lr=1e-4, warmup=500):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    model.cuda().train()
    for epoch in range(epochs):
        for images, labels in loader:
            images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
            with torch.autocast(device_type="cuda"):  # expect: AMP210
                logits = model(images)
                loss = F.cross_entropy(logits, labels, label_smoothing=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
