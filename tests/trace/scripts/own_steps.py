"""A script with its own --steps and --lr options (argparse), printing what it received."""

import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()
print(json.dumps({"argv": sys.argv[1:], "steps": args.steps, "lr": args.lr}))
