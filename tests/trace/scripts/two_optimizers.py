"""A GAN-style loop: two optimizers stepped once each per iteration, no scaler."""

import torch
from torch import nn

torch.manual_seed(0)
generator, critic = nn.Linear(2, 4), nn.Linear(4, 1)
opt_g = torch.optim.SGD(generator.parameters(), lr=0.01)
opt_c = torch.optim.SGD(critic.parameters(), lr=0.01)
real = torch.randn(8, 4)
iterations = 0
for step in range(6):
    opt_c.zero_grad()
    fake = generator(torch.randn(8, 2)).detach()
    (critic(fake).mean() - critic(real).mean()).backward()
    opt_c.step()
    opt_g.zero_grad()
    (-critic(generator(torch.randn(8, 2))).mean()).backward()
    opt_g.step()
    iterations += 1
    print(f"iteration {iterations}")
