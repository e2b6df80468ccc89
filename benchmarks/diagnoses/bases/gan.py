"""A small GAN trained with two optimizers and one GradScaler in float16 on the CPU.

    python gan.py --epochs 3 --batches 4

The pattern of PyTorch's AMP examples for several optimizers: the discriminator step and the
generator step each scale their own loss and call ``scaler.step`` on their own optimizer, and
``scaler.update()`` runs once per iteration after both. The discriminator returns logits and
both losses are ``BCEWithLogitsLoss``, which autocast runs in float32.
"""

import argparse

import torch
from torch import nn


def generator_net(latent: int, features: int) -> nn.Module:
    return nn.Sequential(nn.Linear(latent, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, features))


def discriminator_net(features: int) -> nn.Module:
    return nn.Sequential(nn.Linear(features, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=4)
    args = parser.parse_args()

    torch.manual_seed(0)
    latent, features, batch_size = 8, 16, 32
    real_data = torch.randn(args.batches * batch_size, features) * 0.5 + 1.0
    netG = generator_net(latent, features)
    netD = discriminator_net(features)
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    criterion = nn.BCEWithLogitsLoss()
    scaler = torch.amp.GradScaler("cpu")

    for epoch in range(args.epochs):
        for i in range(args.batches):
            real = real_data[i * batch_size:(i + 1) * batch_size]
            ones = torch.ones(batch_size, 1)
            zeros = torch.zeros(batch_size, 1)

            optimizerD.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.float16):
                fake = netG(torch.randn(batch_size, latent))
                lossD = criterion(netD(real), ones) + criterion(netD(fake.detach()), zeros)
            scaler.scale(lossD).backward()
            scaler.step(optimizerD)

            optimizerG.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.float16):
                lossG = criterion(netD(fake), ones)
            scaler.scale(lossG).backward()
            scaler.step(optimizerG)

            scaler.update()
            print(f"epoch {epoch} batch {i} lossD {lossD.item():.4f} lossG {lossG.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
