"""WGAN-GP style loop: critic and generator share one scaler, updated once per iteration."""
import torch
from torch.amp import GradScaler, autocast


def gradient_penalty(critic, real, fake):
    alpha = torch.rand(real.size(0), 1, 1, 1, device=real.device)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    score = critic(mixed)
    grad = torch.autograd.grad(score.sum(), mixed, create_graph=True)[0]
    return ((grad.flatten(1).norm(dim=1) - 1) ** 2).mean()


def train(gen, critic, loader, z_dim=128, steps=10000):
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-4, betas=(0.0, 0.9))
    opt_c = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.0, 0.9))
    scaler = GradScaler("cuda")
    data = iter(loader)
    for step in range(steps):
        real = next(data).cuda()
        z = torch.randn(real.size(0), z_dim, device="cuda")
        with autocast("cuda"):
            fake = gen(z)
            loss_c = critic(fake.detach()).mean() - critic(real).mean()
        gp = gradient_penalty(critic, real.float(), fake.detach().float())
        opt_c.zero_grad()
        scaler.scale(loss_c + 10.0 * gp).backward()
        scaler.step(opt_c)

        with autocast("cuda"):
            loss_g = -critic(gen(z)).mean()
        opt_g.zero_grad()
        scaler.scale(loss_g).backward()
        scaler.step(opt_g)
        scaler.update()
