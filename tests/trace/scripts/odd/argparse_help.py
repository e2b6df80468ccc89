"""A script with an argparse command line; `--help` exits before any training."""

import argparse

from _tiny import amp_step, batch, make

parser = argparse.ArgumentParser(description="tiny trainer")
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()
model, optimizer, scaler = make()
for step in range(1000):
    amp_step(model, optimizer, scaler, *batch(step))
