"""A language-model fine-tuning loop that clips the gradients while they still carry the loss
scale, and zeroes them between the backward and the step."""
import torch


def finetune(model, loader, optimizer, lr_scheduler, max_norm=1.0):
    scaler = torch.amp.GradScaler("cuda")
    model.train()
    for step, batch in enumerate(loader):
        batch = {k: v.cuda() for k, v in batch.items()}
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(**batch).loss
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # expect: AMP201
        scaler.step(optimizer)
        scaler.update()
        lr_scheduler.step()
        optimizer.zero_grad()


def train_classifier(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for images, labels in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        optimizer.zero_grad()  # expect: AMP213
        scaler.step(optimizer)
        scaler.update()
