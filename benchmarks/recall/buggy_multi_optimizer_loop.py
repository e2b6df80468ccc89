"""An encoder-decoder model with one optimizer per part, stepped in a loop that also updates the
shared scaler after each of them."""
import torch


def train(encoder, decoder, loader, epochs):
    optimizers = [torch.optim.Adam(encoder.parameters(), lr=1e-4), torch.optim.Adam(decoder.parameters(), lr=3e-4)]
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for src, tgt in loader:
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = decoder(encoder(src), tgt)
            scaler.scale(loss).backward()
            for opt in optimizers:
                scaler.step(opt)
                scaler.update()  # expect: AMP208
