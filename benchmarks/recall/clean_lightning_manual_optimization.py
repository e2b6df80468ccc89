"""A LightningModule with manual optimization of a GAN: manual_backward does the scaling."""
import lightning.pytorch as pl
import torch


class GAN(pl.LightningModule):
    def __init__(self, generator, discriminator, latent_dim=100):
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator
        self.latent_dim = latent_dim
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        imgs, _ = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(imgs.shape[0], self.latent_dim, device=self.device)

        self.toggle_optimizer(opt_g)
        g_loss = -self.discriminator(self.generator(z)).mean()
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        d_loss = self.discriminator(self.generator(z).detach()).mean() - self.discriminator(imgs).mean()
        self.manual_backward(d_loss)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)

    def configure_optimizers(self):
        return [torch.optim.Adam(self.generator.parameters()), torch.optim.Adam(self.discriminator.parameters())]
