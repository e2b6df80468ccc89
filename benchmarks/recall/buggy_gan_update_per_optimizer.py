"""DCGAN on 64x64 images: discriminator then generator, each followed by its own update()."""
import torch
import torch.nn as nn
from torch.amp import GradScaler, autocast


def train(netG, netD, loader, epochs, nz=100, device="cuda"):
    criterion = nn.BCEWithLogitsLoss()
    optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    scaler = GradScaler("cuda")
    for epoch in range(epochs):
        for real, _ in loader:
            real = real.to(device, non_blocking=True)
            noise = torch.randn(real.size(0), nz, 1, 1, device=device)

            optD.zero_grad(set_to_none=True)
            with autocast("cuda"):
                fake = netG(noise)
                out_real = netD(real).view(-1)
                out_fake = netD(fake.detach()).view(-1)
                loss_d = criterion(out_real, torch.ones_like(out_real)) + criterion(out_fake, torch.zeros_like(out_fake))
            scaler.scale(loss_d).backward()
            scaler.step(optD)
            scaler.update()  # expect: AMP208

            optG.zero_grad(set_to_none=True)
            with autocast("cuda"):
                out = netD(fake).view(-1)
                loss_g = criterion(out, torch.ones_like(out))
            scaler.scale(loss_g).backward()
            scaler.step(optG)
            scaler.update()
