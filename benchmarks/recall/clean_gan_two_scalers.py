"""CycleGAN-like trainer with one GradScaler per optimizer: each may update after its own step."""
import itertools

import torch
import torch.nn.functional as F


class CycleTrainer:
    def __init__(self, g_ab, g_ba, d_a, d_b, lr=2e-4):
        self.g_ab, self.g_ba, self.d_a, self.d_b = g_ab, g_ba, d_a, d_b
        self.opt_g = torch.optim.Adam(itertools.chain(g_ab.parameters(), g_ba.parameters()), lr=lr)
        self.opt_d = torch.optim.Adam(itertools.chain(d_a.parameters(), d_b.parameters()), lr=lr)
        self.scaler_g = torch.amp.GradScaler("cuda")
        self.scaler_d = torch.amp.GradScaler("cuda")

    def step(self, real_a, real_b):
        with torch.autocast("cuda", dtype=torch.float16):
            fake_b, fake_a = self.g_ab(real_a), self.g_ba(real_b)
            cycle = F.l1_loss(self.g_ba(fake_b), real_a) + F.l1_loss(self.g_ab(fake_a), real_b)
            adv = F.mse_loss(self.d_b(fake_b), torch.ones_like(self.d_b(fake_b)))
            loss_g = adv + 10.0 * cycle
        self.opt_g.zero_grad()
        self.scaler_g.scale(loss_g).backward()
        self.scaler_g.step(self.opt_g)
        self.scaler_g.update()

        with torch.autocast("cuda", dtype=torch.float16):
            loss_d = F.mse_loss(self.d_b(fake_b.detach()), torch.zeros_like(self.d_b(fake_b.detach())))
            loss_d = loss_d + F.mse_loss(self.d_b(real_b), torch.ones_like(self.d_b(real_b)))
        self.opt_d.zero_grad()
        self.scaler_d.scale(loss_d).backward()
        self.scaler_d.step(self.opt_d)
        self.scaler_d.update()
        return loss_g.item(), loss_d.item()
