"""A GAN that alternates: even iterations train the discriminator, odd ones the generator. The
halves are exclusive, so each iteration runs exactly one step and one update."""
import torch


def train(gen, disc, loader, z_dim=64):
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4)
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4)
    scaler = torch.amp.GradScaler("cuda")
    for i, real in enumerate(loader):
        z = torch.randn(real.size(0), z_dim, device="cuda")
        if i % 2 == 0:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.softplus(disc(gen(z).detach())).mean() + torch.nn.functional.softplus(-disc(real)).mean()
            opt_d.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt_d)
            scaler.update()
        else:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.softplus(-disc(gen(z))).mean()
            opt_g.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt_g)
            scaler.update()
