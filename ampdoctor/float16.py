"""float16's range, for both halves: lint (which never imports torch) and trace.

float16 holds magnitudes up to 65504; below 2**-14 it keeps fewer significant bits (the
subnormal band), and below 2**-24, its smallest subnormal, a nonzero value becomes zero.
"""

FLOAT16_MAX = 65504.0
FLOAT16_SMALLEST_SUBNORMAL = 2.0**-24
FLOAT16_SMALLEST_NORMAL = 2.0**-14
