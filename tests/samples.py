"""Small training loops shared by the CLI-level tests."""

CLIP_BEFORE_UNSCALE = """\
import torch

scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""

# The same loop, corrected: unscale_ before clipping.
UNSCALE_THEN_CLIP = CLIP_BEFORE_UNSCALE.replace(
    "    torch.nn.utils.clip", "    scaler.unscale_(optimizer)\n    torch.nn.utils.clip"
)
