"""A critic updated every iteration and a generator every n_critic iterations, each half with its
own update(): on the iterations where both run, the scale is updated twice."""
import torch


def fit(generator, critic, loader, z_dim, n_critic=5, epochs=20):
    g_optimizer = torch.optim.RMSprop(generator.parameters(), lr=5e-5)
    c_optimizer = torch.optim.RMSprop(critic.parameters(), lr=5e-5)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for i, (images, _) in enumerate(loader):
            images = images.cuda()
            z = torch.randn(images.size(0), z_dim, device="cuda")
            with torch.autocast("cuda", dtype=torch.float16):
                c_loss = critic(generator(z).detach()).mean() - critic(images).mean()
            c_optimizer.zero_grad()
            scaler.scale(c_loss).backward()
            scaler.step(c_optimizer)
            scaler.update()  # expect: AMP208
            for p in critic.parameters():
                p.data.clamp_(-0.01, 0.01)

            if i % n_critic == 0:
                with torch.autocast("cuda", dtype=torch.float16):
                    g_loss = -critic(generator(z)).mean()
                g_optimizer.zero_grad()
                scaler.scale(g_loss).backward()
                scaler.step(g_optimizer)
                scaler.update()
