"""Dies before its first optimizer step, as a script moving its model to a missing GPU does."""
import torch

model = torch.nn.Linear(4, 2)
raise RuntimeError("Found no NVIDIA driver on your system")
